"""Whether a story sits behind a paywall, as the publisher declares it to search engines.

schema.org's markup for paywalled content: the article's `isAccessibleForFree` false, and
`hasPart` naming the paywalled part (`isAccessibleForFree` false with a `cssSelector`). The value
is a JSON boolean or, as many CMSs write it, the strings "False"/"false"; microdata
(`itemprop="isAccessibleForFree"`) says the same. No declaration: None (unknown), not False.
"""

from __future__ import annotations

from typing import Any

from lxml import etree
from lxml.html import HtmlElement

_FALSE = frozenset({"false", "no", "0"})
_TRUE = frozenset({"true", "yes", "1"})
_MICRODATA = etree.XPath("//*[@itemprop='isAccessibleForFree']/@content", smart_strings=False)


def _free(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower().rsplit("/", 1)[-1]  # "https://schema.org/False"
        return False if word in _FALSE else True if word in _TRUE else None
    return None


def _paywalled_part(node: Any) -> bool:
    parts = node if isinstance(node, list) else [node]
    return any(isinstance(part, dict) and _free(part.get("isAccessibleForFree")) is False for part in parts[:50])


def paywalled(article: dict[str, Any] | None, root: HtmlElement) -> tuple[bool | None, str | None]:
    """(paywalled, signal): from the JSON-LD article node, else from microdata; (None, None) unknown."""
    if article is not None:
        free = _free(article.get("isAccessibleForFree"))
        if _paywalled_part(article.get("hasPart")):
            return True, "json-ld-haspart"
        if free is not None:
            return (not free), "json-ld"
    for value in _MICRODATA(root)[:1]:
        free = _free(str(value))
        if free is not None:
            return (not free), "microdata"
    return None, None
