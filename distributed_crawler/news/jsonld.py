"""schema.org JSON-LD blocks of a page: its top-level nodes and the article node among them.

A page's JSON-LD is untrusted data: a block that is not JSON (a template left a trailing comma, a
CMS wrote two objects in one script) is skipped, never fatal, and bounded in size and count.
Top-level nodes are a block's object, the items of its array, and the items of its `@graph`;
nodes nested deeper (an ItemList's articles on a section page) are not the page's own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from lxml import etree
from lxml.html import HtmlElement

MAX_BLOCK = 1_000_000  # characters of one script: more is not metadata
MAX_BLOCKS = 20
MAX_NODES = 200

ARTICLE_TYPES = frozenset(
    {
        "article",
        "newsarticle",
        "reportagenewsarticle",
        "analysisnewsarticle",
        "opinionnewsarticle",
        "reviewnewsarticle",
        "backgroundnewsarticle",
        "askpublicnewsarticle",
        "satiricalarticle",
        "scholarlyarticle",
        "techarticle",
        "report",
        "blogposting",
        "liveblogposting",
        "socialmediaposting",
        "review",
        "recipe",
        "howto",
    }
)
LIST_TYPES = frozenset({"collectionpage", "itemlist", "searchresultspage", "mediagallery", "blog"})
OTHER_TYPES = frozenset({"aboutpage", "contactpage", "profilepage", "faqpage", "checkoutpage", "qapage"})
_SCRIPTS = etree.XPath("//script[contains(translate(@type, 'LDJSON', 'ldjson'), 'ld+json')]")


def nodes(root: HtmlElement) -> list[dict[str, Any]]:
    """The page's top-level JSON-LD nodes (dicts), in page order."""
    found: list[dict[str, Any]] = []
    scripts = _SCRIPTS(root)
    for script in scripts[:MAX_BLOCKS]:
        text = (script.text or "").strip()
        if not text or len(text) > MAX_BLOCK:
            continue
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):  # not JSON; or nested deeper than the parser goes
            continue
        found.extend(_top(data))
        if len(found) >= MAX_NODES:
            break
    return found[:MAX_NODES]


def _top(data: Any) -> Iterator[dict[str, Any]]:
    items = data if isinstance(data, list) else [data]
    for item in items:
        if not isinstance(item, dict):
            continue
        graph = item.get("@graph")
        if isinstance(graph, list):
            yield from (node for node in graph if isinstance(node, dict))
        elif isinstance(graph, dict):
            yield graph
        if "@type" in item:
            yield item


def types(node: dict[str, Any]) -> set[str]:
    """A node's @type values, lower case without a schema.org prefix (`["NewsArticle"]` -> {"newsarticle"})."""
    value = node.get("@type")
    values = value if isinstance(value, list) else [value]
    return {v.rsplit("/", 1)[-1].rsplit(":", 1)[-1].strip().lower() for v in values if isinstance(v, str)}


def article_node(found: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first node whose type is an article type, else a WebPage whose mainEntity is one."""
    for node in found:
        if types(node) & ARTICLE_TYPES:
            return node
    for node in found:
        entity = node.get("mainEntity")
        if isinstance(entity, dict) and types(entity) & ARTICLE_TYPES:
            return entity
    return None


def text_values(value: Any) -> list[str]:
    """A property's string values: a string, the strings of a list, `@value` of value objects."""
    values = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in values[:20]:
        if isinstance(item, dict):
            item = item.get("@value")
        if isinstance(item, str | int | float) and not isinstance(item, bool):
            out.append(str(item))
    return out
