"""The browser pages of one node: reused between renders, parked when idle, closed on every path.

Opening a page costs a renderer process (~200 ms), so after a clean render its page is parked
(per `playwright_context`) for the next render. A parked page unused for IDLE_PAGE_SECONDS is
closed; a page is replaced after about PAGE_MAX_USES renders; a page that a render failed on, or
that user code may have changed (meta.UNPOOLABLE_META, page methods beyond one document), is
closed instead of parked. rendering/handler.py decides when; PagePool keeps the books.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import TYPE_CHECKING, Any

from scrapy_playwright.page import PageMethod

from distributed_crawler.meta import DOCUMENT_PAGE_METHODS, PLAYWRIGHT_PAGE_METHODS_META, UNPOOLABLE_META
from distributed_crawler.rendering.config import first_line

if TYPE_CHECKING:
    from playwright.async_api import Page
    from scrapy import Request

logger = logging.getLogger(__name__)

# A page is reused by later renders (opening one costs ~200 ms: a renderer process) unless a render
# failed on it or may have changed its settings. Its renderer's memory grows with every document it
# shows, so after about PAGE_MAX_USES renders (each page draws its own number, see track) it is
# replaced: at 8 pages, 10 keeps the node within about ±9% of its mean (docs/benchmarks.md).
PAGE_MAX_USES = 10
IDLE_PAGE_SECONDS = 10.0  # a parked page unused this long is closed (its scripts stop, memory goes)
PAGE_CLOSE_TIMEOUT = 10.0


def poolable(request: Request) -> bool:
    """The page of this request may serve a later render (nothing beyond one document changed it)."""
    meta = request.meta
    if any(meta.get(k) for k in UNPOOLABLE_META):
        return False
    methods = meta.get(PLAYWRIGHT_PAGE_METHODS_META) or ()
    if isinstance(methods, dict):
        methods = methods.values()
    return all(isinstance(m, PageMethod) and m.method in DOCUMENT_PAGE_METHODS for m in methods)


class PagePool:
    """Open pages, their use counts and page errors, and the idle pages per context."""

    def __init__(self, stats: Any, max_pages: int) -> None:
        self.stats = stats
        self.max_pages = max_pages
        self.open: set[Page] = set()
        self._page_errors: dict[Page, list[str]] = {}
        self._idle: dict[str, list[Page]] = {}  # context name -> pages ready for reuse
        self._uses: dict[Page, int] = {}
        self._max_uses: dict[Page, int] = {}
        self._parked_at: dict[Page, float] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self._stopped = False

    # -- books ----------------------------------------------------------------------------------
    def track(self, page: Page) -> None:
        """A new page: count it, collect its page errors, forget it when it closes."""
        self.open.add(page)
        # Each page gets its own number of renders (mean PAGE_MAX_USES): pages opened together are
        # not all replaced together, so the node's memory does not swing in step.
        self._max_uses[page] = random.randint(max(1, PAGE_MAX_USES // 2), max(1, PAGE_MAX_USES * 3 // 2))
        errors: list[str] = []
        self._page_errors[page] = errors

        def on_close(*_: Any) -> None:
            self.open.discard(page)
            self._page_errors.pop(page, None)
            self._uses.pop(page, None)
            self._max_uses.pop(page, None)
            self._parked_at.pop(page, None)

        def on_error(error: Any) -> None:
            if len(errors) < 5:
                errors.append(first_line(error)[:200])

        page.on("close", on_close)
        page.on("pageerror", on_error)

    def used(self, page: Page) -> None:
        """A render starts on `page`: one more use, a clean page-error list."""
        self._uses[page] = self._uses.get(page, 0) + 1
        self._page_errors.get(page, []).clear()

    def errors_of(self, page: Page) -> list[str]:
        return list(self._page_errors.get(page, ()))

    def worn_out(self, page: Page) -> bool:
        return self._uses.get(page, 0) >= self._max_uses.get(page, 0)

    def idle_of(self, context: str) -> list[Page]:
        return self._idle.get(context, [])

    # -- parking ------------------------------------------------------------------------------------
    def take(self, context: str) -> Page | None:
        """The most recently parked open page of `context` (its renderer is warm), or None."""
        idle = self._idle.get(context)
        while idle:
            page = idle.pop()
            self._parked_at.pop(page, None)
            if not page.is_closed():
                return page
        return None

    def park(self, page: Page, context: str) -> None:
        self._idle.setdefault(context, []).append(page)
        self._parked_at[page] = time.monotonic()
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(IDLE_PAGE_SECONDS, self._close_stale)

    def _close_stale(self) -> None:
        """Close pages parked for IDLE_PAGE_SECONDS; check again while some stay parked."""
        self._sweep = None
        cutoff = time.monotonic() - IDLE_PAGE_SECONDS
        for _context, pages in self._idle.items():
            stale = [p for p in pages if self._parked_at.get(p, 0) <= cutoff]
            for page in stale:
                pages.remove(page)
                self._parked_at.pop(page, None)
                self.stats.inc_value("render/pages_expired")
                asyncio.ensure_future(self.close(page))
        if any(self._idle.values()) and not self._stopped:
            self._sweep = asyncio.get_running_loop().call_later(IDLE_PAGE_SECONDS / 2, self._close_stale)

    def drop_context(self, context: str) -> list[Page]:
        """Forget the idle pages of a context about to close (they close with it)."""
        pages = self._idle.pop(context, [])
        for page in pages:
            self._parked_at.pop(page, None)
        return pages

    def forget_idle(self) -> list[Page]:
        """Forget every idle page (a browser restart or the end of the crawl); returns them."""
        pages = [page for idle in self._idle.values() for page in idle]
        self._idle.clear()
        self._parked_at.clear()
        return pages

    def stop(self) -> None:
        """No more idle sweeps (the handler is closing)."""
        self._stopped = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    async def make_room(self) -> None:
        """Before opening a page: close idle pages (of any context) beyond PLAYWRIGHT_MAX_PAGES."""
        while len(self.open) >= self.max_pages:
            victim = next((pages.pop(0) for pages in self._idle.values() if pages), None)
            if victim is None:
                return
            self._parked_at.pop(victim, None)
            await self.close(victim)

    # -- reset and close ------------------------------------------------------------------------
    async def reset(self, page: Page) -> bool:
        """Drop this render's route handler. The document stays until the next navigation: going
        through about:blank instead would cost the next render a new renderer process."""
        if page.is_closed():
            return False
        try:
            await asyncio.wait_for(page.unroute("**"), PAGE_CLOSE_TIMEOUT)
        except Exception:  # noqa: BLE001 - not reusable: the caller closes it
            return False
        return True

    async def close(self, page: Page) -> None:
        """Close a page; survives the caller's cancellation (the close runs to its end)."""
        if page.is_closed():
            return
        await asyncio.shield(self._close_now(page))

    async def _close_now(self, page: Page) -> None:
        try:
            await asyncio.wait_for(page.close(), PAGE_CLOSE_TIMEOUT)
            self.stats.inc_value("playwright/page_count/closed")
        except Exception as exc:  # noqa: BLE001 - the browser restart or shutdown reaps it
            logger.warning("Could not close a page of %s: %s; it goes with the browser", page.url, exc)
