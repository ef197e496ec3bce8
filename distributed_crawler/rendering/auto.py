"""PLAYWRIGHT_AUTO's judgement of one page: does its plain HTML look script-built, which page
shape is it, and did rendering add content? Pure functions of a response (unit-tested).

A plain page looks script-built when it has an iframe (its content is another document, often
filled by script), a `<noscript>` asking for JavaScript, almost no text next to its scripts, or
inline scripts far longer than its text. Pages that look fine are never rendered. Pages that look
script-built are rendered until the verdict of their host and URL shape (verdicts.py) says
rendering adds nothing there.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

if TYPE_CHECKING:
    from scrapy.http import TextResponse

LITTLE_TEXT_CHARS = 200  # less visible text than this next to a script: the script builds the page
SCRIPT_TEXT_RATIO = 3  # inline script characters per character of text beyond which scripts dominate
MIN_GAIN_CHARS = 10  # characters of new words (each +1) rendering must add to count as "adds content"
MAX_SHAPE_SEGMENTS = 6
MAX_FIELD_CHARS = 200
_VISIBLE_TEXT = (
    "//body//text()[not(ancestor::script) and not(ancestor::style) and not(ancestor::noscript)"
    " and not(ancestor::template)]"
)
_SPACES = re.compile(r"\s+")
_WORDS = re.compile(r"\w+")
_ASKS_FOR_JS = re.compile(r"javascript|\benable js\b|\bturn on js\b", re.IGNORECASE)
_SLUG = re.compile(r"^[\w.~%+]+(?:-[\w.~%+]+){2,}$")


def visible_text(response: TextResponse) -> str:
    """The text a reader sees in the HTML as sent (no scripts, styles, noscript or templates)."""
    return _SPACES.sub(" ", " ".join(response.xpath(_VISIBLE_TEXT).getall())).strip()


def looks_script_built(response: TextResponse) -> str | None:
    """Why this plain page probably needs a browser (a short reason), or None if it looks complete."""
    if response.xpath("//body//iframe"):
        return "iframe"
    if _ASKS_FOR_JS.search(" ".join(response.xpath("//noscript//text()").getall())):
        return "noscript asks for JavaScript"
    inline = sum(len(t) for t in response.xpath("//script[not(@src)]/text()").getall())
    external = len(response.xpath("//script[@src]"))
    if not (inline or external):
        return None
    text = len(visible_text(response))
    if text < LITTLE_TEXT_CHARS:
        return "scripts and little text"
    if inline > SCRIPT_TEXT_RATIO * text:
        return "scripts outweigh text"
    return None


def text_gain(plain: str, rendered: str) -> int:
    """Characters of words the rendered text has and the plain one lacks (order and spacing ignored)."""
    known = {w.lower() for w in _WORDS.findall(plain)}
    new = {w.lower() for w in _WORDS.findall(rendered)} - known
    return sum(len(w) + 1 for w in new)


def adds_content(plain: str, rendered: str) -> bool:
    return text_gain(plain, rendered) >= MIN_GAIN_CHARS


def _segment_shape(segment: str) -> str:
    if any(c.isdigit() for c in segment):
        return "#"  # ids, dates, page numbers
    if len(segment) > 40 or _SLUG.match(segment):
        return "*"  # article slugs
    return segment.lower()


def url_shape(url: str) -> str:
    """`host|/path/shape?params`: pages of one kind on one host share a shape.

    Path segments with a digit become `#`, slugs (three or more dash-separated words) `*`; query
    values are dropped (names kept, sorted). `https://news.example/2024/05/some-long-title?page=2`
    -> `news.example|/#/#/*?page`.
    """
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    shape = "/" + "/".join(_segment_shape(s) for s in segments[:MAX_SHAPE_SEGMENTS])
    if len(segments) > MAX_SHAPE_SEGMENTS:
        shape += "/..."
    names = sorted({name for name, _ in parse_qsl(parts.query, keep_blank_values=True)})
    if names:
        shape += "?" + "&".join(names)
    return f"{(parts.hostname or '').lower()}|{shape}"[:MAX_FIELD_CHARS]


def host_of(field: str) -> str:
    return field.split("|", 1)[0]
