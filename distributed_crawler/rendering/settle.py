"""Wait until a rendered page is quiet: no request in flight and no DOM change for a short window.

Real pages fill prices, scores, comments and embeds by timers or XHR after `load`; a selector to
wait for differs per site. Instead, after navigation the handler waits until the page *and every
frame* have had no pending network request and no DOM mutation for PLAYWRIGHT_SETTLE_MS, and gives
up waiting (keeping what is there) after PLAYWRIGHT_SETTLE_MAX_MS: a page that never stops changing
(a ticker, a clock) is stored as it is then.

Two sources, both Playwright's public API:
- network: the page's `request` / `requestfinished` / `requestfailed` events, which cover every
  frame (cross-origin ones too). Long-lived streams (`eventsource`) are not waited for.
- DOM: `SETTLE_INIT_SCRIPT`, added with `page.add_init_script` once per page, runs in every
  document of every frame before its own scripts and keeps the time of its last content mutation
  (child nodes or text; attribute flips such as CSS classes of a carousel do not count). Each frame
  reports "milliseconds since my last mutation" in its own clock, so a remote browser's clock does
  not matter.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from distributed_crawler.rendering.frames import iter_subframes

if TYPE_CHECKING:
    from playwright.async_api import Frame, Page
    from playwright.async_api import Request as PlaywrightRequest

logger = logging.getLogger(__name__)

SETTLE_INIT_SCRIPT = """(() => {
  if (window.__dcSettle) return;
  const state = window.__dcSettle = {last: Date.now()};
  const observer = new MutationObserver(() => { state.last = Date.now(); });
  observer.observe(document, {subtree: true, childList: true, characterData: true});
})();"""
# Milliseconds since the frame's last mutation; -1 where the script did not run (nothing to wait for).
_DOM_QUIET_JS = "() => (window.__dcSettle ? Date.now() - window.__dcSettle.last : -1)"
IGNORED_RESOURCE_TYPES = frozenset({"eventsource", "websocket"})  # open for the page's lifetime
MIN_POLL_SECONDS = 0.05  # shortest sleep between two looks at the frames


class NetworkWatch:
    """Requests in flight on one page (all its frames) and when the last one started or ended."""

    def __init__(self) -> None:
        self.pending: set[PlaywrightRequest] = set()
        self.last_activity = time.monotonic()

    def attach(self, page: Page) -> None:
        page.on("request", self._started)
        page.on("requestfinished", self._ended)
        page.on("requestfailed", self._ended)

    def reset(self) -> None:
        """A new render on this (reused) page: what the last document left pending is forgotten."""
        self.pending.clear()
        self.last_activity = time.monotonic()

    def _started(self, request: PlaywrightRequest) -> None:
        if request.resource_type in IGNORED_RESOURCE_TYPES:
            return
        self.pending.add(request)
        self.last_activity = time.monotonic()

    def _ended(self, request: PlaywrightRequest) -> None:
        if request in self.pending:
            self.pending.discard(request)
            self.last_activity = time.monotonic()

    def quiet_for(self) -> float:
        """Seconds without network activity (0 while a request is in flight)."""
        if self.pending:
            return 0.0
        return time.monotonic() - self.last_activity


_WATCHES: weakref.WeakKeyDictionary[Page, NetworkWatch] = weakref.WeakKeyDictionary()


async def prepare(page: Page) -> None:
    """Once per new page, before its first navigation: the DOM observer and the network watch."""
    await page.add_init_script(SETTLE_INIT_SCRIPT)
    watch = NetworkWatch()
    watch.attach(page)
    _WATCHES[page] = watch


def watch_of(page: Page) -> NetworkWatch | None:
    return _WATCHES.get(page)


@dataclass(frozen=True)
class SettleResult:
    settled: bool  # False: PLAYWRIGHT_SETTLE_MAX_MS (or the render deadline) ended the wait
    waited: float  # seconds spent waiting


async def _dom_quiet_for(page: Page, timeout: float) -> float:
    """Seconds since the last DOM mutation in any frame of the page (the smallest of all frames)."""
    frames: list[Frame] = [page.main_frame, *iter_subframes(page.main_frame)]

    async def one(frame: Frame) -> float:
        if frame.is_detached():
            return float("inf")
        try:
            ms = await frame.evaluate(_DOM_QUIET_JS)
        except Exception:  # noqa: BLE001 - a frame navigating or gone: the next look sees its successor
            return 0.0
        return float("inf") if not isinstance(ms, (int, float)) or ms < 0 else ms / 1000

    try:
        values = await asyncio.wait_for(asyncio.gather(*(one(f) for f in frames)), max(timeout, MIN_POLL_SECONDS))
    except TimeoutError:  # a frame busy with a long script: not quiet
        return 0.0
    return min(values, default=float("inf"))


async def settle(page: Page, quiet: float, limit: float) -> SettleResult:
    """Wait until the page and every frame were quiet for `quiet` seconds, at most `limit` seconds."""
    start = time.monotonic()
    deadline = start + limit
    watch = watch_of(page)
    while True:
        now = time.monotonic()
        net = watch.quiet_for() if watch is not None else float("inf")
        still = net
        if net >= quiet:
            still = min(net, await _dom_quiet_for(page, deadline - time.monotonic()))
            if still >= quiet:
                return SettleResult(True, time.monotonic() - start)
        now = time.monotonic()
        if now >= deadline:
            return SettleResult(False, now - start)
        await asyncio.sleep(min(max(quiet - still, MIN_POLL_SECONDS), deadline - now))
