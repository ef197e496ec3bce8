"""The language of a story, detected from its text; `<html lang>` only breaks ties."""

from __future__ import annotations

import re

from lxml.html import HtmlElement

_LANG = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*")


def html_lang(root: HtmlElement) -> str | None:
    """The page's declared language (`<html lang>`, else Content-Language meta), e.g. `en-gb`."""
    top = root.getroottree().getroot()
    declared = top.get("lang") or top.get("{http://www.w3.org/XML/1998/namespace}lang")
    if not declared:
        metas = top.xpath(
            "//meta[translate(@http-equiv,'CONTENT-LANGUAGE','content-language')='content-language']/@content"
        )
        declared = metas[0] if metas else None
    declared = str(declared).strip().split(",")[0].strip() if declared else ""
    return declared.replace("_", "-").lower() if _LANG.fullmatch(declared) else None
