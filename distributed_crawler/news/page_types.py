"""Article, list (home, section, tag, archive, search) or other (about, contact, legal) page.

Signals, strongest first (the first that decides names `signals["page_type"]`):
1. URL shape of a non-article: the home page, `/tag/x`, `/category/x`, `/page/2`, `/search`,
   `?s=` (list); `/about`, `/contact`, `/privacy`, `/terms`, `/impressum` (other). A CMS marks
   these pages `og:type=article` too, so the URL wins over metadata.
2. JSON-LD `@type` of the page's top-level nodes: NewsArticle, BlogPosting, ... (article);
   CollectionPage, ItemList, SearchResultsPage (list); AboutPage, ContactPage (other).
3. `listed`: the URL came from a news sitemap or a feed, which list stories.
4. `og:type` article on a page that states its publication date (CMSs mark every page so).
5. URL shape of an article: a dated path (`/2024/05/01/slug`) or a long hyphenated slug.
6. Structure: links outweighing text, or little main text (list); else a dated page is an
   article and an undated one (an about or history page) other.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from distributed_crawler.news.jsonld import ARTICLE_TYPES, LIST_TYPES, OTHER_TYPES

_LISTING = re.compile(
    r"^(?:/[a-z]{2}(?:-[a-z]{2})?)?/(?:tags?|category|categories|kategorie|rubrik|section|sections|topics?|themen?|"
    r"authors?|autor|archives?|archiv|search|suche|page|latest|news|blog)(?:/[^/]+)?(?:/(?:page|seite)/\d+)?/?$"
)
_PAGE_N = re.compile(r"/(?:page|seite)/\d+/?$|[?&](?:page|paged)=\d+")
_SEARCH = re.compile(r"[?&](?:s|q|query|search)=")
_OTHER = re.compile(
    r"/(?:about(?:-us)?|contact(?:-us)?|kontakt|impressum|imprint|legal|privacy(?:-policy)?|datenschutz|"
    r"terms(?:-of-(?:use|service))?|cookies?(?:-policy)?|agb|disclaimer|faq|help|jobs|careers|advertise|"
    r"subscribe|newsletter|login|register|account)(?:\.html?|\.php|/)?$"
)
_DATED = re.compile(r"/(?:19|20)\d\d/(?:0?[1-9]|1[0-2])/(?:(?:0?[1-9]|[12]\d|3[01])/)?[^/]{6,}")
_SLUG_WORDS = re.compile(r"[^\W_]+(?:[-_][^\W_]+){3,}")
LONG_TEXT = 1500  # characters of main text a story has and a teaser list rarely does
SHORT_TEXT = 400


@dataclass(frozen=True)
class PageSignals:
    """What the classifier reads of a page (filled by extract_article)."""

    url: str
    jsonld_types: frozenset[str] = frozenset()
    og_type: str | None = None
    listed: bool = False
    dated: bool = False  # the page states its publication date (JSON-LD, meta, <time>, URL)
    main_text_chars: int = 0
    link_density: Callable[[], float] = lambda: 0.0  # link text / visible text, computed when asked


def url_kind(url: str) -> str | None:
    """ "list" or "other" when the URL alone says so, else None."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    path = parts.path.lower()
    full = path + ("?" + parts.query.lower() if parts.query else "")
    if (path in ("", "/") and not parts.query) or re.fullmatch(r"/(?:index\.\w+|[a-z]{2}(?:-[a-z]{2})?/?)", path):
        return "list"
    if _OTHER.search(path):
        return "other"
    if _PAGE_N.search(full) or _SEARCH.search(full):
        return "list"
    if _LISTING.match(path) and not article_url(url) and not re.search(r"\d{4,}", path):
        return "list"
    return None


def article_url(url: str) -> bool:
    """A dated path or a slug of four or more words: how CMSs name stories."""
    try:
        path = unquote(urlsplit(url).path).lower()
    except ValueError:
        return False
    last = path.rstrip("/").rsplit("/", 1)[-1]
    return bool(_DATED.search(path) or _SLUG_WORDS.fullmatch(re.sub(r"\.\w{2,5}$", "", last)))


def classify(page: PageSignals) -> tuple[str, str]:
    """(page type, the signal that decided it)."""
    kind = url_kind(page.url)
    if kind:
        return kind, "url"
    if page.jsonld_types & ARTICLE_TYPES:
        return "article", "json-ld-type"
    if page.jsonld_types & LIST_TYPES:
        return "list", "json-ld-type"
    if page.jsonld_types & OTHER_TYPES:
        return "other", "json-ld-type"
    if page.listed:
        return "article", "listed"
    if page.og_type == "article" and page.dated:
        return "article", "og-type"
    if article_url(page.url):
        return "article", "url"
    density = page.link_density()
    if page.main_text_chars >= LONG_TEXT and density < 0.3:
        return ("article" if page.dated else "other"), "text"
    if page.main_text_chars < SHORT_TEXT or density >= 0.5:
        return "list", "text"
    return ("article" if page.dated else "other"), "text"
