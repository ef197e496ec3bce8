"""The fields news users reach for after the text: the top image, the section, the tags and the
site's name, from signals the page already gave (JSON-LD nodes, metas), each with its signal.

- image: JSON-LD `image` of the article (a URL, an ImageObject's `url`/`contentUrl`, a list:
  the first) ("json-ld"); `og:image`, `twitter:image` ("meta"). Made absolute; http(s) only.
- section: JSON-LD `articleSection` ("json-ld"); `article:section` ("meta"); the last crumb of a
  JSON-LD BreadcrumbList that is not the page itself and not its first crumb (the home page)
  ("breadcrumb").
- tags: JSON-LD `keywords` (a list, or text split at commas) ("json-ld"); every `article:tag`
  meta, else `keywords` / `news_keywords` meta split at commas ("meta"). At most MAX_TAGS.
- site_name: `og:site_name` ("meta"); the JSON-LD publisher's `name` ("json-ld").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

from lxml import etree
from lxml.html import HtmlElement

from distributed_crawler.news import jsonld

T = TypeVar("T")

MAX_TAGS = 30
MAX_TAG = 100  # characters of one tag
MAX_VALUE = 1000  # characters of a section or site name
MAX_URL = 2048
_TAG_METAS = etree.XPath(
    "//meta[@property='article:tag' or @name='article:tag'][@content]/@content", smart_strings=False
)


@dataclass(frozen=True)
class MoreFields:
    image: str | None = None
    section: str | None = None
    tags: tuple[str, ...] = ()
    site_name: str | None = None
    signals: Mapping[str, str] = field(default_factory=dict)

    def columns(self) -> dict[str, Any]:
        """The fields as Article's keyword arguments (the signals go to Article.signals)."""
        return {"image": self.image, "section": self.section, "tags": self.tags, "site_name": self.site_name}


def _clip(value: Any, limit: int = MAX_VALUE) -> str | None:
    text = " ".join(value.split()) if isinstance(value, str) else ""
    return text[:limit] or None


def _url(value: Any, base: str) -> str | None:
    if isinstance(value, dict):
        value = value.get("url") or value.get("contentUrl")
    if isinstance(value, list):
        return next((u for u in (_url(v, base) for v in value[:5]) if u), None)
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_URL:
        return None
    try:
        url = urljoin(base, value.strip())
        return url if urlsplit(url).scheme in ("http", "https") else None
    except ValueError:
        return None


def _tags(values: list[str]) -> tuple[str, ...]:
    found: dict[str, str] = {}
    for value in values:
        for part in value.split(","):
            tag = _clip(part, MAX_TAG)
            if tag and tag.lower() not in found:
                found[tag.lower()] = tag
    return tuple(found.values())[:MAX_TAGS]


def _position(crumb: dict[str, Any]) -> int:
    position = crumb.get("position")
    return position if isinstance(position, int) else 0


def _crumb(nodes: list[dict[str, Any]], url: str) -> str | None:
    for node in nodes:
        if "breadcrumblist" not in jsonld.types(node) or not isinstance(node.get("itemListElement"), list):
            continue
        crumbs = [c for c in node["itemListElement"][:20] if isinstance(c, dict)]
        crumbs.sort(key=_position)
        for crumb in reversed(crumbs[1:]):
            item = crumb.get("item")
            target = item.get("@id") or item.get("url") if isinstance(item, dict) else item
            name = crumb.get("name") or (item.get("name") if isinstance(item, dict) else None)
            if _clip(name) and not (isinstance(target, str) and target.rstrip("/") == url.rstrip("/")):
                return _clip(name)
    return None


def more_fields(
    root: HtmlElement, url: str, nodes: list[dict[str, Any]], article: dict[str, Any] | None, metas: Mapping[str, str]
) -> MoreFields:
    """The four fields and their signals (module docstring); None / () where the page says nothing."""
    node = article or {}
    signals: dict[str, str] = {}

    def first(name: str, candidates: list[tuple[str, T | None]]) -> T | None:
        for source, value in candidates:
            if value:
                signals[name] = source
                return value
        return None

    publisher = node.get("publisher")
    image = first("image", [("json-ld", _url(node.get("image"), url)), ("meta", _url(metas.get("og:image"), url)),
                            ("meta", _url(metas.get("twitter:image"), url))])  # fmt: skip
    section = first(
        "section",
        [
            ("json-ld", _clip(next(iter(jsonld.text_values(node.get("articleSection"))), None))),
            ("meta", _clip(metas.get("article:section"))),
            ("breadcrumb", _crumb(nodes, url)),
        ],
    )
    keywords = jsonld.text_values(node.get("keywords"))
    tags = first(
        "tags",
        [
            ("json-ld", _tags(keywords)),
            ("meta", _tags(_TAG_METAS(root)[:MAX_TAGS])),
            ("meta", _tags([metas.get("keywords") or metas.get("news_keywords") or ""])),
        ],
    )
    site_name = first(
        "site_name",
        [("meta", _clip(metas.get("og:site_name"))), ("json-ld", _clip(publisher.get("name")) if isinstance(publisher, dict) else None)],
    )  # fmt: skip
    return MoreFields(image=image, section=section, tags=tags or (), site_name=site_name, signals=signals)
