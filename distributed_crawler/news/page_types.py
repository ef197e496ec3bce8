"""Article, list (home, section, tag, archive, search) or other (about, contact, legal) page.

A lost story is the worst error (STORE_PAGE_TYPES=article stores only articles), a list page
stored costs one row: so the URL decides alone only where it cannot name a story, every other
page is judged by what it says about itself, and mixed evidence stores.

1. URL alone ("url"), only where unambiguous: the home page or a folder's index page, pagination
   (`/page/2`, `?page=2`, not `news_view.html?idx=8576&page=1`: a story's link that carries the
   list's page), search (`/search`, `?q=` on a path that names no story: not `/p/<slug>?s=r`, a
   share link), a section hub (`/news/`, `/blog/`), a date archive
   (`/2024/05/`) and a tag / category / section / author index (`/tag/x`, `/category/x/y`) whose
   name has no story id (a long number) and is no story slug (list); these two unless the page
   calls itself a story (JSON-LD article type, or `og:type=article` with a date, and is no page of
   teasers; or its one `<article>` element holds a long text): `/themen/<name>` is a topic index
   or a story, `/1927` a year or a post's number; legal and service pages (`/about`, `/contact`,
   `/privacy`, `/impressum`, ...) (other). `/news/5`, `/archive/story-5.html`, `/blog/<slug>` are
   leaf pages: the page decides.
2. The page says it is a story: JSON-LD NewsArticle, BlogPosting, ... ("json-ld-type"); the URL
   came from a news sitemap or a feed ("listed"); `og:type=article` with a publication date
   ("og-type"); a publication date in JSON-LD, meta or a marked `<time>` next to some main text
   ("date"); one microdata Article item (and no microdata list item) next to some main text
   ("microdata-type").
3. The page says it is something else: JSON-LD CollectionPage, ItemList, SearchResultsPage (list),
   AboutPage, ContactPage, ... (other) ("json-ld-type").
4. Structure ("text"): an `<article>` element holding a long text, a main text that is mostly
   prose standing in one block whatever the links around it (a press release inside a CMS's
   menus: news/blocks.py), or a long main text with few links, is a story; several teaser
   `<article>`s, links outweighing text or little main text make a list, unless the page calls
   itself `og:type=article` (or is dated) or has a long main text, and its URL names a story (an
   id, a dated path, a long slug): a story page with a rail of related teasers or links, or a
   short news item of a paragraph's length among menus (under a story's URL only teasers or next
   to no text make a list); a long undated text on a page that calls itself `og:type=website` is
   other, unless most of it is prose (an essay, a guide, a press release with no article mark at
   all: see `prose_chars`); anything left (mixed) is stored as an article.

Every size is in Latin-script characters (`text_size`): a Japanese story is not judged by a third
of its length.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from distributed_crawler.news.jsonld import LIST_TYPES, OTHER_TYPES

_LANG = r"(?:/[a-z]{2}(?:[-_][a-z]{2})?)?"
_HOME = re.compile(_LANG + r"/?(?:(?:index|default|home|start)\.(?:html?|php|aspx?|jsp))?")
_FOLDER_INDEX = re.compile(r"(?:/[^/]+)*/(?:index|default)\.(?:html?|php|aspx?|jsp)")
_PAGE_N = re.compile(r"/(?:page|seite|pagina|strona)/\d+/?$|[?&](?:page|paged|pg|start|offset)=\d+")
_SEARCH = re.compile(r"(?:^|/)(?:search|suche|recherche|busca|buscar|zoeken)(?:/|$|\.)")
_SEARCH_PARAM = re.compile(r"(?:^|&)(?:s|q|query|search)=")
_DATE_ARCHIVE = re.compile(
    _LANG + r"(?:/[a-z-]+)?/(?:19|20)\d\d(?:/(?:0?[1-9]|1[0-2]))?(?:/(?:0?[1-9]|[12]\d|3[01]))?/?"
)
_HUBS = (
    "news|blog|blogs|latest|archive|archives|archiv|articles|stories|posts|nachrichten|aktuelles|"
    "noticias|actualites|actualite|notizie|nieuws|uutiset|nyheter|nyheder|wiadomosci|novosti"
)
_HUB = re.compile(_LANG + rf"/(?:{_HUBS})/?")
_TAXONOMIES = (
    "tags?|category|categories|kategorie|kategorien|rubrik|rubriken|section|sections|topics?|themen?|"
    "schlagwort|schlagworte|authors?|autor|autoren|author-archive|label|labels|categoria|categorie|"
    "etiqueta|tema|temas"
)
_TAXONOMY = re.compile(_LANG + rf"/(?:{_TAXONOMIES})(?:/[^/.]+){{1,2}}/?")
_STORY_ID = re.compile(r"\d{5,}")
_QUERY_ID = re.compile(r"(?:^|&)[^=&]+=\d{5,}(?:&|$)")
_ITEM_PARAM = re.compile(r"(?:^|&)(?:[a-z_]*id|idx[a-z]*|[a-z_]*no|seq|num|p)=\d{3,}(?:&|$)")  # one item's number
_OTHER = re.compile(
    r"/(?:about(?:-us)?|contact(?:-us)?|kontakt|impressum|imprint|legal|privacy(?:-policy)?|datenschutz|"
    r"terms(?:-of-(?:use|service))?|cookies?(?:-policy)?|agb|disclaimer|faq|help|jobs|careers|advertise|"
    r"subscribe|newsletter|login|register|account)(?:\.html?|\.php|/)?$"
)
_DATED = re.compile(r"/(?:19|20)\d\d/(?:0?[1-9]|1[0-2])/(?:(?:0?[1-9]|[12]\d|3[01])/)?[^/]{6,}")
_SLUG_WORDS = re.compile(r"[^\W_]+(?:[-_][^\W_]+){3,}")
LONG_TEXT = 1500  # characters of main text a story has and a teaser list rarely does
SHORT_TEXT = 400
TEASERS = 4  # <article> elements: a list of teasers (a story page has one, or one and a few related)
PROSE_LINE = 150  # characters of a main-text paragraph that can be prose (a teaser's blurb is shorter)
PROSE_SHARE = 0.5  # of the main text in prose paragraphs: a story; tables, member and forum lists have little
BLOCK_TEXT = 600  # characters of prose in one block (news/blocks.py): a short press release or news item has more
_THREE_LATIN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")  # kana, CJK ideographs
_TWO_LATIN = re.compile(r"[\uac00-\ud7af]")  # Hangul syllables
SENTENCE_END = re.compile(r"[^\W\d_][.!?\u2026][\"'\u00bb\u00ab\u201d\u2019)]*(?:\s|$)|[\u3002\uff01\uff1f]")


@dataclass(frozen=True)
class PageSignals:
    """What the classifier reads of a page (filled by extract_article and page_basics)."""

    url: str
    jsonld_types: frozenset[str] = frozenset()
    jsonld_article: bool = False  # a JSON-LD node (or a node's mainEntity) of an article type
    microdata_article: bool = False  # exactly one microdata item of an article type, no list item
    og_type: str | None = None
    listed: bool = False
    dated: bool = False  # the page states its publication date (JSON-LD, meta, marked <time>, dated URL)
    main_text_chars: int = 0  # sizes in Latin-script characters (`text_size`)
    article_chars: int = 0  # visible text of the page's longest <article> element
    articles: int = 0  # <article> elements on the page
    link_density: Callable[[], float] = lambda: 0.0  # link text / visible text, computed when asked
    prose_chars: int = 0  # main text in prose paragraphs (`prose_chars`)
    block_chars: int = 0  # the largest block of prose paragraphs side by side (news/blocks.py)


def url_kind(url: str) -> str | None:
    """ "list" or "other" when the URL alone says so (never for a page that may be a story), else None."""
    return _url_kind(url)[0]


def _url_kind(url: str) -> tuple[str | None, bool]:
    """(url_kind, whether a page that calls itself a story overrules it): a tag / category / topic /
    author name (`/themen/<name>` is a topic index or a story) and a date archive (`/1927` is a year
    or a post's number) are the two list shapes a story's URL can also have."""
    try:
        parts = urlsplit(url)
        path = unquote(parts.path).lower()
    except ValueError:
        return None, False
    query = parts.query.lower()
    if _OTHER.search(path):
        return "other", False
    address = path + ("?" + query if query else "")
    if _SEARCH.search(path):  # `/search`, `/search?updated-max=...`
        return "list", False
    if _SEARCH_PARAM.search(query) and not _story_folder(path):
        return "list", False  # `/?s=term`, not a story's share link `/p/<long-slug>?s=r`
    if _PAGE_N.search(address) and not _ITEM_PARAM.search(query):
        return "list", False  # not `news_view.html?idx=8576&page=1`: the list's page to go back to
    if query:
        return None, False  # `?p=123`, `?id=5`, `story.asp?guid=`: a story as often as not
    if _HOME.fullmatch(path) or _HUB.fullmatch(path):
        return "list", False
    if _DATE_ARCHIVE.fullmatch(path):
        return "list", True  # `/2024/05/`, but also a post numbered `/1927`
    if _FOLDER_INDEX.fullmatch(path) and not _story_folder(path.rsplit("/", 1)[0]):
        return "list", False  # `/news/index.html`, not `/2018/story-of-the-day/index.html`
    if _TAXONOMY.fullmatch(path) and not _story_folder(path):
        return "list", True
    return None, False


def story_url(url: str) -> bool:
    """A dated path, a story id (five or more digits, in the path or as a query value:
    `dettaglio.php?id=58354`) or a slug of four or more words: how CMSs name stories. Weak: it
    only decides a page that says little else about itself."""
    try:
        parts = urlsplit(url)
        path = unquote(parts.path).lower()
    except ValueError:
        return False
    return bool(_story_folder(path) or _DATED.search(path) or _QUERY_ID.search(parts.query))


def _story_folder(path: str) -> bool:
    """A story id anywhere in the path, or a story slug as its last segment."""
    return bool(_STORY_ID.search(path) or story_slug(path))


def story_slug(path: str) -> bool:
    """The last segment is a slug of four or more words."""
    last = path.rstrip("/").rsplit("/", 1)[-1]
    return bool(_SLUG_WORDS.fullmatch(re.sub(r"\.\w{2,5}$", "", last)))


def text_size(text: str) -> int:
    """The length of `text` in Latin-script characters: a CJK ideograph or a kana says about as much
    as three (a word and its space), a Hangul syllable two. Every size threshold here is in these
    units, so a Japanese or Chinese story is not judged by a third of its length."""
    return len(text) + 2 * len(_THREE_LATIN.findall(text)) + len(_TWO_LATIN.findall(text))


def prose_chars(text: str) -> int:
    """Characters of `text` (one paragraph a line) in paragraphs of PROSE_LINE or more characters
    that end a sentence (a wire story's paragraph is often one long sentence). Story text is mostly
    such paragraphs; a ranking table, a member list, a forum index or a service page's main text is
    short lines (cells, items, link labels)."""
    sizes = ((text_size(line), line) for line in text.split("\n"))
    return sum(size for size, line in sizes if size >= PROSE_LINE and SENTENCE_END.search(line))


def classify(page: PageSignals) -> tuple[str, str]:
    """(page type, the signal that decided it), in the module docstring's order."""
    kind, overruled_by_page = _url_kind(page.url)
    if kind and not (overruled_by_page and _calls_itself_a_story(page)):
        return kind, "url"
    if page.jsonld_article:
        return "article", "json-ld-type"
    if page.listed:
        return "article", "listed"
    if page.og_type == "article" and page.dated:
        return "article", "og-type"
    if page.dated and page.main_text_chars >= SHORT_TEXT:
        return "article", "date"
    if page.microdata_article and page.main_text_chars >= SHORT_TEXT:
        return "article", "microdata-type"
    if page.jsonld_types & LIST_TYPES:
        return "list", "json-ld-type"
    if page.jsonld_types & OTHER_TYPES:
        return "other", "json-ld-type"
    return _structure(page), "text"


def _calls_itself_a_story(page: PageSignals) -> bool:
    """A JSON-LD article type, or `og:type=article` with a publication date, on a page that is no
    page of teasers, or its one `<article>` element holding a long text: what a story under a
    topic's URL says and a tag index does not."""
    claims = page.jsonld_article or (page.og_type == "article" and page.dated)
    return (claims and page.articles < TEASERS) or (page.articles == 1 and page.article_chars >= LONG_TEXT)


def _structure(page: PageSignals) -> str:
    """The page's own weaker evidence against its structure; mixed evidence stores."""
    if page.article_chars >= LONG_TEXT:
        return "article"
    if _one_block_of_prose(page):
        return "article"  # a press release inside a CMS's menus: the links are around it, not in it
    density = page.link_density() if page.main_text_chars else 0.0  # no text: no evidence either way
    listing = (page.articles >= TEASERS) or density >= 0.5
    if page.articles == 1 and page.article_chars >= 2 * SHORT_TEXT and not listing:
        return "article"  # the page's one <article> holds a story-length text
    teasers = page.articles >= TEASERS and page.main_text_chars < LONG_TEXT
    if page.og_type == "article" or page.dated:
        return "list" if teasers and not story_url(page.url) else "article"
    if story_url(page.url) and (not listing or page.main_text_chars >= LONG_TEXT or _some_text(page)):
        return "article"  # under a story's URL, a rail of links is no list: teasers or next to no text are
    if listing or page.main_text_chars < SHORT_TEXT:
        return "list"
    if density >= 0.3:
        return "list"
    prose = page.prose_chars >= LONG_TEXT and page.prose_chars >= PROSE_SHARE * page.main_text_chars
    return "article" if prose else "other"  # an undated essay, guide or press release is still a story


def _some_text(page: PageSignals) -> bool:
    """A paragraph's worth of main text (a short news item, a post of a few lines) on a page that is
    no list of teasers."""
    return page.main_text_chars >= PROSE_LINE and page.articles < TEASERS


def _one_block_of_prose(page: PageSignals) -> bool:
    """Most of the main text is prose, and most of it stands in one block (news/blocks.py): a story,
    however many links surround it. A list's blurbs are split between its teasers; a shop's or
    forum's text is short lines."""
    main = page.main_text_chars
    return (
        min(page.prose_chars, page.block_chars) >= BLOCK_TEXT
        and page.prose_chars >= PROSE_SHARE * main
        and page.block_chars >= PROSE_SHARE * main
    )
