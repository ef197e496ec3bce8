"""What a page asks of robots in its own markup and headers: not to be indexed, its links not to be
followed (ROBOTS_META_OBEY, docs/news.md "Robots meta").

Read from `<meta name="robots" content="...">`, from `<meta name="BOT_NAME">` (our own agent), and
from every `X-Robots-Tag` header, whose value may name an agent first (`otherbot: noindex` is not
for us; `unavailable_after: <date>` is a directive, not an agent). `none` means both `noindex`
and `nofollow`. A directive for another agent is ignored; an unknown one too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lxml import etree
from lxml.html import HtmlElement

_NAMED_METAS = etree.XPath("//meta[@name][@content]")
# directives that take a value after a colon (so "unavailable_after: ..." names no agent)
_VALUED = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})
MAX_VALUES = 20  # headers / metas read: a page that repeats them more is not telling us more


@dataclass(frozen=True)
class RobotsMeta:
    noindex: bool = False
    nofollow: bool = False
    source: str = ""  # "meta", "meta:<bot>" or "header" of the first directive that said no

    def __bool__(self) -> bool:
        return self.noindex or self.nofollow


def _directives(content: str) -> set[str]:
    words = {part.strip().lower() for part in content.split(",")}
    if "none" in words:
        words |= {"noindex", "nofollow"}
    return words


def _header_directives(value: str, bot: str) -> set[str]:
    """An X-Robots-Tag value: `noindex, nofollow` (every agent) or `agent: noindex` (that agent)."""
    head, colon, rest = value.partition(":")
    agent = head.strip().lower()
    if colon and agent not in _VALUED and "," not in head and " " not in agent:
        return _directives(rest) if agent == bot else set()
    return _directives(value)


def robots_meta(root: HtmlElement | None, headers: Iterable[str], bot_name: str) -> RobotsMeta:
    """The page's `noindex` / `nofollow`, from its metas (`root`, may be None) and `X-Robots-Tag` values."""
    bot = bot_name.strip().lower()
    found: list[tuple[str, set[str]]] = []
    for element in (_NAMED_METAS(root) if root is not None else [])[:200]:
        name = (element.get("name") or "").strip().lower()
        if name == "robots" or (bot and name == bot):
            found.append(("meta" if name == "robots" else f"meta:{name}", _directives(element.get("content") or "")))
    for value in list(headers)[:MAX_VALUES]:
        found.append(("header", _header_directives(value, bot)))
    noindex = next((source for source, words in found if "noindex" in words), "")
    nofollow = next((source for source, words in found if "nofollow" in words), "")
    return RobotsMeta(bool(noindex), bool(nofollow), noindex or nofollow)


def header_values(raw: Iterable[bytes | str]) -> list[str]:
    """Scrapy's `response.headers.getlist("X-Robots-Tag")` as text (undecodable bytes replaced)."""
    return [v.decode("latin-1") if isinstance(v, bytes) else str(v) for v in list(raw)[:MAX_VALUES]]
