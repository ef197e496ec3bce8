"""Every frame of a rendered page as plain data, and static `<iframe src>` links.

`collect_frames(page)` walks the frame tree of a Playwright page (nested and cross-origin frames
included; Chromium runs cross-site frames in other processes, Playwright reaches them all) and
returns one dict a frame: `{url, name, parent_url, html, text}`. The main frame is not in the list:
it is the response itself. `text` is the frame's visible text (`innerText`: what a reader sees,
without scripts, styles or hidden elements), whitespace collapsed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from playwright.async_api import Frame, Page
    from scrapy.http import TextResponse

logger = logging.getLogger(__name__)

_SPACES = re.compile(r"\s+")
_VISIBLE_TEXT_JS = "() => (document.body ? document.body.innerText : '')"


class FrameData(TypedDict):
    url: str
    name: str
    parent_url: str | None
    html: str
    text: str


def iter_subframes(frame: Frame) -> Iterator[Frame]:
    """Descendants of `frame`, depth first, in document order."""
    for child in frame.child_frames:
        yield child
        yield from iter_subframes(child)


def clean_text(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


MAX_FRAMES = 100  # frames read from one page (a hostile page can nest thousands)


async def collect_frames(page: Page, max_bytes: int = 0) -> list[FrameData]:
    """Snapshot the frames below the main frame. A frame that goes away meanwhile is skipped.

    The caller bounds the time (PLAYWRIGHT_RENDER_TIMEOUT); frames are read one after the other,
    which keeps a page with many ad frames from flooding the browser with calls. Memory is bounded
    too: at most MAX_FRAMES frames, and no more once their HTML and text reach `max_bytes`
    characters (DOWNLOAD_MAXSIZE; 0 = no limit): the page keeps the frames read so far.
    """
    from playwright.async_api import Error as PlaywrightError

    frames: list[FrameData] = []
    size = 0
    for frame in list(iter_subframes(page.main_frame))[:MAX_FRAMES]:
        if max_bytes and size >= max_bytes:
            logger.info("Frames of %s: only the first %d read (DOWNLOAD_MAXSIZE)", page.url, len(frames))
            break
        if frame.is_detached():
            continue
        try:
            html = await frame.content()
            text = await frame.evaluate(_VISIBLE_TEXT_JS)
        except PlaywrightError as exc:  # detached or navigated while we read it
            logger.debug("Skipped frame %s of %s: %s", frame.url, page.url, exc)
            continue
        parent = frame.parent_frame
        html, text = html[: max_bytes or None], str(text or "")[: max_bytes or None]
        size += len(html) + len(text)
        frames.append(
            FrameData(
                url=frame.url,
                name=frame.name,
                parent_url=parent.url if parent is not None else None,
                html=html,
                text=clean_text(text),
            )
        )
    return frames


def frames_text(frames: Any) -> str:
    """The visible text of every frame in `response.meta["frames"]`, joined with spaces."""
    if not isinstance(frames, list):
        return ""
    return " ".join(f["text"] for f in frames if isinstance(f, dict) and f.get("text"))


def static_iframe_urls(response: TextResponse, same_host_only: bool = True) -> list[str]:
    """Absolute http(s) URLs of the `<iframe src>` in a page's static HTML, in order, no repeats."""
    host = urlsplit(response.url).hostname
    seen: dict[str, None] = {}
    for src in response.css("iframe::attr(src)").getall():
        url = response.urljoin(src.strip())
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            continue
        if same_host_only and parts.hostname != host:
            continue
        seen.setdefault(url, None)
    return list(seen)
