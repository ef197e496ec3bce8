"""What a page's schema.org microdata (`itemscope itemtype=...`) says about the page's type.

Many CMSs mark a story with microdata rather than JSON-LD (`<section itemscope
itemtype="http://schema.org/Article">` around the headline, date and body). List pages mark their
teasers the same way, one item per teaser, usually inside a `Blog` or `ItemList` item: so only a
page with exactly one article item, and no list item, says it is a story.
"""

from __future__ import annotations

from lxml import etree
from lxml.html import HtmlElement

from distributed_crawler.news.jsonld import ARTICLE_TYPES, LIST_TYPES

MAX_ITEMS = 200  # itemtype elements read: a page with more is a catalogue, not one story
_ITEMTYPES = etree.XPath("//*[@itemscope][@itemtype]/@itemtype", smart_strings=False)


def item_types(root: HtmlElement) -> list[frozenset[str]]:
    """Each microdata item's types, lower case without the vocabulary's prefix (an `itemtype` may
    name several: `"https://schema.org/NewsArticle https://schema.org/Report"`)."""
    return [
        frozenset(word.rstrip("/").rsplit("/", 1)[-1].rsplit("#", 1)[-1].lower() for word in str(value).split())
        for value in _ITEMTYPES(root)[:MAX_ITEMS]
    ]


def one_article(root: HtmlElement) -> bool:
    """Exactly one article-typed item (NewsArticle, BlogPosting, ...) and no list-typed item."""
    items = item_types(root)
    return sum(bool(t & ARTICLE_TYPES) for t in items) == 1 and not any(t & LIST_TYPES for t in items)
