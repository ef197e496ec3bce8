"""The article in a page: main text and metadata, by trafilatura (dates by htmldate).

Extraction is CPU work (a few ms to tens of ms a page, docs/benchmarks.md): `OffReactor`
runs it on a small thread pool so the reactor keeps downloading meanwhile (EXTRACT_THREADS; 0 =
on the reactor thread). A page trafilatura finds no main text in (a list page, a tiny page) keeps
its visible text, so nothing a page says is lost.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import lxml.html
import trafilatura
from lxml.etree import ParserError

logger = logging.getLogger(__name__)
T = TypeVar("T")

_SPACES = re.compile(r"[ \t\r\f\v]+")
_LANG = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*")
VISIBLE_TEXT = "//body//text()[not(ancestor::script or ancestor::style or ancestor::noscript or ancestor::template)]"
DATE_FORMAT = "%Y-%m-%dT%H:%M:%S%z"
MAX_FIELD = 1000  # title, description, authors: longer is not metadata


@dataclass(frozen=True)
class Article:
    """What a page says, as the `news` item stores it; None = the page does not say."""

    text: str
    title: str | None = None
    authors: tuple[str, ...] = ()
    published_at: str | None = None  # ISO 8601: with an offset, or a local date-time, or a date
    modified_at: str | None = None  # ISO 8601, as published_at
    lang: str | None = None  # ISO 639-1 (lower case)
    description: str | None = None
    page_type: str = "other"  # "article" | "list" | "other"
    paywalled: bool | None = None  # None: the page does not say
    main_text: bool = False  # False: trafilatura found no main text, `text` is the visible text
    truncated: bool = False  # the page was cut to the extraction cap before extraction
    signals: Mapping[str, str] = field(default_factory=dict)  # field -> where its value came from


def visible_text(html: str | bytes) -> str:
    """Every visible text node of the body, whitespace collapsed (the pre-extraction `text`)."""
    root = _parse(html)
    return " ".join(" ".join(str(t) for t in root.xpath(VISIBLE_TEXT)).split()) if root is not None else ""


def _clip(value: str | None) -> str | None:
    value = " ".join(value.split()) if value else ""
    return value[:MAX_FIELD] or None


def iso_date(value: str | None) -> str | None:
    """htmldate's `DATE_FORMAT` (or a plain day) as ISO 8601; anything else: None."""
    if not value:
        return None
    for fmt in (DATE_FORMAT, "%Y-%m-%d"):
        try:
            return datetime.strptime(value, fmt).isoformat()
        except ValueError:
            continue
    return None


def _parse(html: str | bytes) -> lxml.html.HtmlElement | None:
    try:
        return lxml.html.fromstring(html)
    except ValueError:  # a str with an XML encoding declaration (XHTML): parse its UTF-8
        if isinstance(html, str):
            return _parse(html.encode("utf-8"))
        return None
    except ParserError:
        return None


def html_lang(root: lxml.html.HtmlElement) -> str | None:
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


def _authors(value: str | None) -> tuple[str, ...]:
    """trafilatura joins several authors with "; "."""
    if not value:
        return ()
    names = (" ".join(name.split()) for name in value.split(";"))
    return tuple(dict.fromkeys(name[:200] for name in names if name))[:20]


def extract_article(html: str | bytes, url: str) -> Article:
    """Main text and metadata of one page (blocking: seconds on a pathological page)."""
    root = _parse(html)
    if root is None:
        return Article(text="")
    lang = html_lang(root)
    doc: Any
    try:
        doc = trafilatura.bare_extraction(
            root,  # parsed once (trafilatura cleans this tree in place)
            url=url,
            with_metadata=True,
            include_comments=False,
            include_tables=True,
            date_extraction_params={"outputformat": DATE_FORMAT, "original_date": True, "extensive_search": False},
        )
    except Exception as exc:  # noqa: BLE001 - a page is data: an extractor bug never stops the crawl
        logger.debug("trafilatura failed on %s: %r", url, exc)
        doc = None
    main = _SPACES.sub(" ", doc.text or "").strip() if doc is not None else ""
    text = main or visible_text(html)
    if doc is None:
        return Article(text=text, lang=lang)
    return Article(
        text=text,
        title=_clip(doc.title),
        authors=_authors(doc.author),
        published_at=iso_date(doc.date),
        lang=lang,
        description=_clip(doc.description),
        main_text=bool(main),
    )


def page_basics(html: str | bytes) -> Article:
    """EXTRACT_MAIN_TEXT off: the visible text and declared language, no extraction."""
    root = _parse(html)
    return Article(text=visible_text(html), lang=html_lang(root) if root is not None else None)


class OffReactor:
    """Runs CPU-bound page work (extraction, fingerprints, big sitemaps) on `threads` threads so the
    reactor keeps downloading meanwhile; `threads` = 0 runs it inline, on the reactor thread."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="news") if threads else None

    async def run(self, func: Callable[..., T], *args: Any) -> T:
        if self._pool is None:
            return func(*args)
        return await asyncio.get_running_loop().run_in_executor(self._pool, func, *args)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
