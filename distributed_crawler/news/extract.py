"""The article in a page: main text (trafilatura) and metadata from the signals the page gives.

Parsing is trafilatura's own (`load_html`: comments and processing instructions removed, so a
React page's `<!-- -->` between text runs keeps its paragraphs; its MAX_FILE_SIZE honoured: a
larger page is cut there and marked `truncated`). The tree is parsed once and read by every
signal module; trafilatura works on its own copy. Which signal gave each field is in
`Article.signals` (docs/news.md "Signals"). Extraction is CPU work (ms a page,
docs/benchmarks.md): `OffReactor` runs it on a small thread pool so the reactor keeps downloading
meanwhile (EXTRACT_THREADS; 0 = on the reactor thread; the news spider reads a small page's
visible text inline, cheaper than the handoff). A page trafilatura finds no main text in
(a list page, a tiny page) keeps its visible text, flagged `main_text=False`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import unicodedata
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from copy import deepcopy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import htmldate
import lxml.html
import trafilatura
from lxml import etree
from trafilatura.settings import DEFAULT_CONFIG, Document
from trafilatura.utils import HTML_PARSER, load_html

from distributed_crawler.news import dates, jsonld, microdata
from distributed_crawler.news.authors import jsonld_authors, normalize
from distributed_crawler.news.blocks import block_chars
from distributed_crawler.news.language import detect, html_lang
from distributed_crawler.news.more_fields import MoreFields, more_fields
from distributed_crawler.news.page_types import BLOCK_TEXT, PageSignals, classify, prose_chars, text_size
from distributed_crawler.news.paywall import paywalled
from distributed_crawler.news.rules import SiteRules, remove_excluded, rule_date_values, rule_text, rules_for

logger = logging.getLogger(__name__)
T = TypeVar("T")

_SPACES = re.compile(r"[ \t\r\f\v]+")
_BLANK_LINES = re.compile(r"\n\s*\n+")
VISIBLE_TEXT = "//body//text()[not(ancestor::script or ancestor::style or ancestor::noscript or ancestor::template)]"
LINK_TEXT = "//body//a//text()"
# compiled once: an element's .xpath() compiles its expression again on every call
_VISIBLE_TEXT = etree.XPath(VISIBLE_TEXT, smart_strings=False)
_LINK_TEXT = etree.XPath(LINK_TEXT, smart_strings=False)
_ARTICLES = etree.XPath("//article")
_ARTICLE_TEXT = etree.XPath(
    ".//text()[not(ancestor::script or ancestor::style or ancestor::noscript or ancestor::template)]",
    smart_strings=False,
)
MAX_ARTICLES = 20  # <article> elements read for their text: a list of hundreds of teasers is a list anyway
_METAS = etree.XPath("//meta[@content] | //*[@itemprop][@datetime]")
MAX_FIELD = 1000  # title, description: longer is not metadata
MAX_FILE_SIZE = DEFAULT_CONFIG.getint("DEFAULT", "MAX_FILE_SIZE")  # trafilatura's own input cap
# trafilatura's options, chosen by measurement on its own evaluation pages (docs/benchmarks.md).
TRAFILATURA_OPTIONS: dict[str, Any] = {
    "include_comments": False,
    "include_tables": True,
    "favor_precision": False,
    "favor_recall": False,
    "deduplicate": False,
}
HTMLDATE_PARAMS: dict[str, Any] = {"original_date": True, "extensive_search": True, "outputformat": "%Y-%m-%d"}


@dataclass(frozen=True)
class Article:
    """What a page says, as the `news` item stores it; None = the page does not say."""

    text: str
    title: str | None = None
    authors: tuple[str, ...] = ()  # people only; organisations: author_organizations
    published_at: str | None = None  # ISO 8601: with an offset, or a local date-time, or a date
    modified_at: str | None = None  # ISO 8601, as published_at
    lang: str | None = None  # ISO 639-1 (lower case)
    description: str | None = None
    page_type: str = "other"  # "article" | "list" | "other"
    paywalled: bool | None = None  # None: the page does not say
    main_text: bool = False  # False: trafilatura found no main text, `text` is the visible text
    truncated: bool = False  # the page was cut to the extraction cap before extraction
    signals: Mapping[str, str] = field(default_factory=dict)  # field -> where its value came from
    author_organizations: tuple[str, ...] = ()  # JSON-LD authors that are an Organization
    image: str | None = None  # the top image's absolute URL
    section: str | None = None
    tags: tuple[str, ...] = ()
    site_name: str | None = None


def parse_html(html: str | bytes) -> lxml.html.HtmlElement | None:
    """The page's tree as trafilatura parses it (no comments, no processing instructions); a
    fragment trafilatura refuses as "not HTML" is parsed with the same parser; garbage: None."""
    try:
        root = load_html(html)
        if root is None:
            root = lxml.html.fromstring(html, parser=HTML_PARSER)
    except (ValueError, TypeError, lxml.etree.ParserError):
        return None
    return root if isinstance(root, lxml.html.HtmlElement) else None


def visible_text(html: str | bytes | lxml.html.HtmlElement) -> str:
    """Every visible text node of the body, whitespace collapsed (the pre-extraction `text`)."""
    root = html if isinstance(html, lxml.html.HtmlElement) else parse_html(html)
    if root is None:
        return ""
    return _joined(_VISIBLE_TEXT(root))


def _joined(nodes: list[str]) -> str:
    return unicodedata.normalize("NFC", " ".join(" ".join(nodes).split()))


def _clip(value: str | None) -> str | None:
    value = unicodedata.normalize("NFC", " ".join(value.split())) if value else ""
    return value[:MAX_FIELD] or None


def _metas(root: lxml.html.HtmlElement) -> dict[str, str]:
    """Meta `property` / `name` / `itemprop` (lower case) -> its first content; itemprop elements
    with a `datetime` (`<time itemprop="datePublished">`) too."""
    found: dict[str, str] = {}
    for element in _METAS(root):
        value = element.get("content") or element.get("datetime")
        if not value:
            continue
        for attribute in ("property", "name", "itemprop"):
            name = (element.get(attribute) or "").strip().lower()
            if name:
                found.setdefault(name, value)
    return found


def _cap(html: str | bytes) -> tuple[str | bytes, bool]:
    if len(html) <= MAX_FILE_SIZE:
        return html, False
    return html[:MAX_FILE_SIZE], True


def _trafilatura(root: lxml.html.HtmlElement, url: str) -> Document | None:
    try:
        doc = trafilatura.bare_extraction(
            root,  # trafilatura works on a copy: `root` stays whole for the other signals
            url=url,
            with_metadata=True,
            date_extraction_params=dict(HTMLDATE_PARAMS),
            **TRAFILATURA_OPTIONS,
        )
    except Exception as exc:  # noqa: BLE001 - a page is data: an extractor bug never stops the crawl
        logger.debug("trafilatura failed on %s: %r", url, exc)
        return None
    return doc if isinstance(doc, Document) else None  # a dict only when asked for one (as_dict)


def _htmldate(root: lxml.html.HtmlElement, url: str) -> str | None:
    """htmldate on its own, for a page trafilatura gave up on (too little text: no metadata either)."""
    try:
        return htmldate.find_date(
            deepcopy(root),
            url=url or None,
            original_date=HTMLDATE_PARAMS["original_date"],
            extensive_search=HTMLDATE_PARAMS["extensive_search"],
            outputformat=HTMLDATE_PARAMS["outputformat"],
        )
    except Exception as exc:  # noqa: BLE001 - a page is data: a date finder's bug never stops the crawl
        logger.debug("htmldate failed on %s: %r", url, exc)
        return None


def _main_text(doc: Any) -> str:
    """trafilatura's text, paragraphs kept (one blank-free line each), runs of spaces collapsed,
    NFC-normalized as trafilatura's own `extract` returns it (decomposed accents and Indic vowel
    signs otherwise fail every comparison with the text a user types)."""
    text = unicodedata.normalize("NFC", _SPACES.sub(" ", doc.text or "")) if doc is not None else ""
    return "\n".join(line.strip() for line in _BLANK_LINES.sub("\n", text).split("\n") if line.strip())


def _link_density(root: lxml.html.HtmlElement, visible_nodes: list[str] | None = None) -> float:
    """Link text / visible text (characters); `visible_nodes`: the VISIBLE_TEXT nodes, when read already."""
    nodes = _VISIBLE_TEXT(root) if visible_nodes is None else visible_nodes
    visible = sum(len(t.strip()) for t in nodes)
    links = sum(len(t.strip()) for t in _LINK_TEXT(root))
    return min(1.0, links / visible) if visible else 1.0


@dataclass(frozen=True)
class _Parsed:
    """A parsed page and the metadata every signal reads of it (read once)."""

    root: lxml.html.HtmlElement
    url: str
    nodes: list[dict[str, Any]]  # JSON-LD
    article: dict[str, Any] | None  # the JSON-LD article node
    metas: Mapping[str, str]

    @classmethod
    def read(cls, root: lxml.html.HtmlElement, url: str) -> _Parsed:
        nodes = jsonld.nodes(root)
        return cls(root, url, nodes, jsonld.article_node(nodes), _metas(root))

    def more_fields(self) -> MoreFields:
        return more_fields(self.root, self.url, self.nodes, self.article, self.metas)


def _page_signals(
    page: _Parsed,
    *,
    listed: bool,
    dated: bool,
    main_text_chars: int,
    visible: list[str] | None = None,
    prose_chars: int = 0,
) -> PageSignals:
    """What news/page_types.py reads of a page; the link density is only computed when asked, the
    largest prose block only when the main text holds enough prose for it to matter."""
    root = page.root
    elements = _ARTICLES(root)
    return PageSignals(
        url=page.url,
        jsonld_types=frozenset(t for node in page.nodes for t in jsonld.types(node)),
        jsonld_article=page.article is not None,
        microdata_article=microdata.one_article(root),
        og_type=(page.metas.get("og:type") or "").strip().lower() or None,
        listed=listed,
        dated=dated,
        main_text_chars=main_text_chars,
        article_chars=max(
            (sum(text_size(t.strip()) for t in _ARTICLE_TEXT(e)) for e in elements[:MAX_ARTICLES]), default=0
        ),
        articles=len(elements),
        link_density=lambda: _link_density(root, visible),
        prose_chars=prose_chars,
        block_chars=block_chars(root) if prose_chars >= BLOCK_TEXT else 0,
    )


def _first(signals: list[tuple[str, Callable[[], str | None]]]) -> tuple[str | None, str | None]:
    """The first (value, source) whose getter gives a value: later getters never run."""
    for source, getter in signals:
        value = getter()
        if value:
            return value, source
    return None, None


def extract_article(
    html: str | bytes,
    url: str,
    *,
    listed: bool = False,
    rules: Mapping[str, SiteRules] | None = None,
    now: datetime | None = None,
) -> Article:
    """Main text and metadata of one page (blocking: seconds on a pathological page).

    Keyword arguments:
    - `listed`: the URL came from a news sitemap or a feed (a page-type signal: they list stories).
    - `rules`: EXTRACTION_RULES as news/rules.py parses them (registered domain -> SiteRules); the
      URL's site's rules win: `exclude` removes elements first, `text` and `published_at`
      ("rule") come before every other signal.
    - `now`: the clock dates are checked against (after now + 1 day = implausible); default: now.

    Signals, best first (the one used is in `signals[field]`):
    - published_at: the rule ("rule"), JSON-LD `datePublished` ("json-ld"), date meta ("meta"),
      `<time datetime>` ("time"), htmldate's original date ("htmldate"), the URL ("url"); a day
      in the URL more than a day away from the chosen date wins over it ("url").
    - modified_at: JSON-LD `dateModified`, then modification meta.
    - authors: JSON-LD Person authors, then author meta, then trafilatura's byline; JSON-LD
      Organization authors go to `author_organizations`.
    - text: the rule ("rule"), trafilatura's main text ("trafilatura"), else the visible text
      ("visible").
    - lang: detected from `text` ("text"); `<html lang>` ("html-lang") when the text cannot say.
    - page_type: the order in news/page_types.py: "url", "json-ld-type", "listed",
      "og-type", "date", "microdata-type", "text".
    - paywalled: "json-ld-haspart", "json-ld", "microdata"; None when the page does not say.
    - image, section, tags, site_name: news/more_fields.py.
    """
    html, truncated = _cap(html)
    root = parse_html(html)
    if root is None:
        return Article(text="", truncated=truncated, signals={"text": "visible"})
    site_rules = rules_for(rules, url) if rules else None
    if site_rules is not None:
        remove_excluded(root, site_rules)
    page = _Parsed.read(root, url)
    doc = _trafilatura(root, url)
    main = _main_text(doc)
    ruled = rule_text(root, site_rules) if site_rules is not None else ""
    text = ruled or main or visible_text(root)
    signals: dict[str, str] = {"text": "rule" if ruled else "trafilatura" if main else "visible"}

    published, source, modified, modified_source = _dates(page, doc, site_rules, now)
    authors, organisations, author_source = _authors(page.article, page.metas, doc)
    page_type, type_source = classify(
        _page_signals(
            page,
            listed=listed,
            dated=source in ("rule", "json-ld", "meta", "time", "url") or bool(dates.url_date(url, now)),
            main_text_chars=text_size(ruled or main),
            prose_chars=prose_chars(ruled or main),
        )
    )
    signals["page_type"] = type_source
    is_paywalled, paywall_source = paywalled(page.article, root)
    lang, lang_source = detect(text, html_lang(root))
    more = page.more_fields()
    signals.update(more.signals)
    for name, value, origin in (
        ("published_at", published, source),
        ("modified_at", modified, modified_source),
        ("authors", authors, author_source),
        ("paywalled", is_paywalled, paywall_source),
        ("lang", lang, lang_source),
    ):
        if value is not None and value != () and origin:
            signals[name] = origin
    return Article(
        text=text,
        title=_clip(doc.title) if doc is not None else None,
        authors=authors,
        published_at=published,
        modified_at=modified,
        lang=lang,
        description=_clip(doc.description) if doc is not None else None,
        page_type=page_type,
        paywalled=is_paywalled,
        main_text=bool(ruled or main),
        truncated=truncated,
        signals=signals,
        author_organizations=organisations,
        **more.columns(),
    )


def _dates(
    page: _Parsed, doc: Any, site_rules: SiteRules | None, now: datetime | None
) -> tuple[str | None, str | None, str | None, str | None]:
    """(published_at, its signal, modified_at, its signal), in extract_article's order."""
    root, url, nodes, article, metas = page.root, page.url, page.nodes, page.article, page.metas
    published, source = _first(
        [
            ("rule", lambda: dates.first_date(rule_date_values(root, site_rules), now) if site_rules else None),
            ("json-ld", lambda: dates.first_date(jsonld.text_values((article or {}).get("datePublished")), now)),
            ("json-ld", lambda: dates.first_date(_all(nodes, "datePublished"), now)),
            ("meta", lambda: dates.first_date((metas.get(n) for n in dates.PUBLISHED_META), now)),
            ("time", lambda: dates.time_element_date(root, now)),
            ("htmldate", lambda: dates.parse_date(doc.date if doc is not None else _htmldate(root, url), now)),
            ("url", lambda: dates.url_date(url, now)),
        ]
    )
    if published and source in ("json-ld", "meta"):
        published = dates.same_instant_local(published, _local_candidates(metas, root, now))
    in_url = dates.url_date(url, now)
    if published and source != "rule" and dates.contradicts(published, in_url):
        published, source = in_url, "url"
    modified, modified_source = _first(
        [
            ("json-ld", lambda: dates.first_date(jsonld.text_values((article or {}).get("dateModified")), now)),
            ("meta", lambda: dates.first_date((metas.get(n) for n in dates.MODIFIED_META), now)),
        ]
    )
    return published, source, modified, modified_source


def _authors(
    article: dict[str, Any] | None, metas: Mapping[str, str], doc: Any
) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """(people, organisations, signal): JSON-LD, else author meta, else trafilatura's byline."""
    people, organisations = (normalize(names) for names in jsonld_authors(article))
    if people or organisations:
        return people, organisations, "json-ld"
    names = [metas[n] for n in ("author", "article:author", "parsely-author", "sailthru.author") if n in metas]
    authors = normalize(m for m in names if "://" not in m)
    if authors:
        return authors, (), "meta"
    return (normalize(doc.author.split(";")) if doc is not None and doc.author else ()), (), "byline"


def _local_candidates(metas: Mapping[str, str], root: lxml.html.HtmlElement, now: datetime | None) -> list[str | None]:
    """The page's other statements of its publication time (meta, marked `<time>`)."""
    return [dates.parse_date(metas.get(n), now) for n in dates.PUBLISHED_META if n in metas] + [
        dates.time_element_date(root, now)
    ]


def _all(nodes: list[dict[str, Any]], key: str) -> list[str]:
    return [value for node in nodes for value in jsonld.text_values(node.get(key))]


def page_basics(html: str | bytes, url: str = "", *, listed: bool = False) -> Article:
    """EXTRACT_MAIN_TEXT off: the visible text, its language and the page type from the cheap
    signals (URL, JSON-LD type, `listed`, `og:type`, link density; no extraction, no htmldate)."""
    root = parse_html(_cap(html)[0])
    if root is None:
        return Article(text="", signals={"text": "visible"})
    visible = _VISIBLE_TEXT(root)  # read once: the text and the link density
    text = _joined(visible)
    lang, lang_source = detect(text, html_lang(root))
    page = _Parsed.read(root, url)
    dated = bool(
        dates.first_date(_all(page.nodes, "datePublished"))
        or dates.first_date(page.metas.get(n) for n in dates.PUBLISHED_META)
        or dates.time_element_date(root)
        or dates.url_date(url)
    )
    page_type, type_source = classify(
        _page_signals(page, listed=listed, dated=dated, main_text_chars=text_size(text), visible=visible)
    )
    is_paywalled, paywall_source = paywalled(page.article, root)
    signals = {"text": "visible", "page_type": type_source}
    signals.update({k: v for k, v in (("lang", lang_source), ("paywalled", paywall_source)) if v})
    more = page.more_fields()
    signals.update(more.signals)
    return Article(
        text=text,
        lang=lang,
        page_type=page_type,
        paywalled=is_paywalled,
        signals=signals,
        **more.columns(),
    )


class OffReactor:
    """Runs CPU-bound page work (extraction, fingerprints, big sitemaps) on `threads` threads so the
    reactor keeps downloading meanwhile; `threads` = 0 runs it inline, on the reactor thread."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="news") if threads else None

    async def run(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._pool is None:
            return func(*args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, lambda: func(*args, **kwargs))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
