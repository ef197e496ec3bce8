"""Browser rendering for the pages that need it (scrapy-playwright on Debian's Chromium).

`RenderingMiddleware` marks a request for the browser when its URL matches
`PLAYWRIGHT_URL_PATTERNS` or its meta has `render: True` (`dont_render: True` always wins);
everything else is downloaded by Scrapy's plain HTTP handler (and, with PLAYWRIGHT_AUTO, rendered
afterwards through this handler when it looks script-built: auto_render.py). `RenderingDownloadHandler` is
scrapy-playwright's handler plus what a long-running node needs:

- it starts Playwright and Chromium only when the first marked request arrives (a node that never
  renders never starts a browser), and uses one browser for both http and https;
- after navigation it waits for `PLAYWRIGHT_WAIT_FOR`, then for the page and every frame to be
  quiet for `PLAYWRIGHT_SETTLE_MS` (settle.py), then puts every frame of the page in
  `response.meta["frames"]` (see frames.py), all within `PLAYWRIGHT_RENDER_TIMEOUT`;
- a request with a pool proxy (`meta["_dc_browser_proxy"]`, set by the proxy middleware) renders in
  a browser context of that proxy (proxied.py);
- every page is closed on every path (error, timeout, cancelled download, shutdown) or, after a
  clean render, parked for the next render (opening a page costs a renderer process, ~200 ms);
  a page parked for `IDLE_PAGE_SECONDS` is closed;
- pages per node are bounded (`PLAYWRIGHT_MAX_PAGES`), and so are contexts (one per
  `playwright_context` name; an idle one is closed to make room), images/media/fonts are not downloaded
  (`PLAYWRIGHT_ABORT_RESOURCE_TYPES`), and the browser is restarted after
  `PLAYWRIGHT_RESTART_AFTER_PAGES` pages to cap its memory;
- failures are `RenderError` / `RenderTimeoutError`, subclasses of Scrapy's download errors, so
  RetryMiddleware retries them like any other failed download; the message says what failed and
  which setting governs it. A render cut short because the node is stopping
  (`RenderInterruptedError`) goes back to the queue without spending a retry. A document the
  private-address rule refused (its URL, by the page route; a redirect hop inside the browser, by
  the browser's proxy, egress.py) is not a failure: `AddressRefused`, dead-lettered once.

Layout: config.py (settings, errors), middleware.py (which requests render), auto_render.py
(PLAYWRIGHT_AUTO, with auto.py and verdicts.py), pages.py (the page pool), settle.py (waiting for a
quiet page), proxied.py (a context per proxy), this module (the download handler). The
scrapy-playwright internals it relies on are listed in distributed_crawler/internals.py.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import weakref
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from typing import TYPE_CHECKING, Any

from playwright._impl._errors import TargetClosedError
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError
from scrapy import signals
from scrapy_playwright.handler import DEFAULT_CONTEXT_NAME, ScrapyPlaywrightDownloadHandler

from distributed_crawler.core.admission import Refusal, host_of
from distributed_crawler.core.guard import REASON as PRIVATE_ADDRESS
from distributed_crawler.core.guard import AddressRefused, record_refusal, rule_of
from distributed_crawler.internals import PLAYWRIGHT_OVERRIDES, node_stopping, scheduler_of
from distributed_crawler.meta import (
    FRAMES_META,
    PLAYWRIGHT_CONTEXT_META,
    PLAYWRIGHT_INCLUDE_PAGE_META,
    PLAYWRIGHT_META,
    PLAYWRIGHT_PAGE_GOTO_KWARGS_META,
    PLAYWRIGHT_PAGE_META,
)
from distributed_crawler.rendering.config import (
    DEFAULT_CHROMIUM,
    FRAMES_RESERVE_SECONDS,
    SHARED_HANDLER_ATTR,
    BrowserUnavailableError,
    RenderConfig,
    RenderError,
    RenderInterruptedError,
    RenderTimeoutError,
    first_line,
    is_load_state,
    warn_no_sandbox,
)
from distributed_crawler.rendering.egress import EgressProxy
from distributed_crawler.rendering.frames import collect_frames
from distributed_crawler.rendering.guard import BrowserGuard
from distributed_crawler.rendering.middleware import RenderingMiddleware
from distributed_crawler.rendering.pages import PagePool, poolable
from distributed_crawler.rendering.proxied import through_proxy
from distributed_crawler.rendering.settle import prepare, settle, watch_of

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, Page, WebSocketRoute
    from playwright.async_api import Request as PlaywrightRequest
    from playwright.async_api import Response as PlaywrightResponse
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy_playwright.handler import BrowserContextWrapper, Download

__all__ = [  # the public names of rendering/ (older imports name this module)
    "DEFAULT_CHROMIUM",
    "BrowserUnavailableError",
    "RenderConfig",
    "RenderError",
    "RenderInterruptedError",
    "RenderTimeoutError",
    "RenderingDownloadHandler",
    "RenderingMiddleware",
]

logger = logging.getLogger(__name__)

HARD_TIMEOUT_GRACE = 2.0  # beyond PLAYWRIGHT_RENDER_TIMEOUT, for calls without a timeout of their own


class RenderingDownloadHandler(ScrapyPlaywrightDownloadHandler):
    """`DOWNLOAD_HANDLERS` for http and https: plain HTTP unless the request is marked.

    Overrides the private scrapy-playwright methods listed in internals.PLAYWRIGHT_OVERRIDES (and
    only those; tests/test_internals.py checks both ways).
    """

    OVERRIDES = tuple(PLAYWRIGHT_OVERRIDES)

    abort_request: Callable[[Any], Any] | None  # scrapy-playwright's PLAYWRIGHT_ABORT_REQUEST predicate

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self.render_config = cfg = RenderConfig.from_settings(crawler.settings)
        if not (self.config.cdp_url or self.config.connect_url):
            self.config.launch_options = cfg.launch_options()
        if self.config.navigation_timeout_ms is None:
            self.config.navigation_timeout_ms = cfg.render_timeout * 1000
        # Every request a page makes passes _abort: the private-address rule (guard.py), then
        # PLAYWRIGHT_ABORT_RESOURCE_TYPES, then the project's own PLAYWRIGHT_ABORT_REQUEST.
        rule = rule_of(crawler)
        self.guard = BrowserGuard(rule) if rule is not None else None
        # The operator's proxy for the whole browser (PLAYWRIGHT_LAUNCH_OPTIONS): exempt, as all proxies.
        self._operator_proxy = bool((self.config.launch_options or {}).get("proxy"))
        local = not (self.config.cdp_url or self.config.connect_url)  # a remote browser cannot reach it
        self.egress = (
            EgressProxy(rule, self._note_refusal) if rule is not None and local and not self._operator_proxy else None
        )
        self._project_abort = self.abort_request
        self.abort_request = self._abort
        # page -> (url, detail, counted): its document was refused, by the route or the browser's proxy
        self._refused_documents: weakref.WeakKeyDictionary[Page, tuple[str, str, bool]] = weakref.WeakKeyDictionary()
        self._proxied_contexts: weakref.WeakSet[BrowserContext] = weakref.WeakSet()
        # scrapy-playwright's own per-context bound must not be the tighter one (idle pages hold it).
        self.config.max_pages_per_context = max(self.config.max_pages_per_context, cfg.max_pages)
        self._page_slots = asyncio.Semaphore(cfg.max_pages)
        self._start_lock = asyncio.Lock()
        self._context_gate = asyncio.Lock()
        self._started = False
        self._closed = False
        self._changed = asyncio.Event()  # an in-flight render ended or a restart finished
        self._inflight = 0
        self._restarting = False
        self._pages_since_launch = 0
        self.pages = PagePool(self.stats, cfg.max_pages)  # reuse, parking, idle close (pages.py)
        self._request_pages: dict[int, list[Page]] = {}
        self._deadlines: dict[int, float] = {}
        self.pages_rendered = 0
        self.browser_restarts = 0
        crawler.signals.connect(self._spider_closed, signal=signals.spider_closed)
        if cfg.unavailable_reason:
            logger.warning(
                "Rendering unavailable on this node: %s. Requests marked for rendering will fail; "
                "all other requests are unaffected.",
                cfg.unavailable_reason,
            )

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RenderingDownloadHandler:
        # One instance (one browser) for http and https: Scrapy builds a handler per scheme.
        shared = getattr(crawler, SHARED_HANDLER_ATTR, None)
        if shared is None:
            shared = cls(crawler)
            setattr(crawler, SHARED_HANDLER_ATTR, shared)
        return shared

    # -- lazy start: no Playwright driver, no browser until a marked request arrives -------
    async def _maybe_launch_in_thread(self) -> None:  # engine_started (scrapy-playwright)
        return None

    def _engine_started(self) -> None:  # older Scrapy versions
        return None

    async def _ensure_started(self) -> None:
        if self._started:
            return
        async with self._start_lock:
            if not self._started:
                if self.egress is not None:  # every browser connection through the rule (egress.py)
                    await self.egress.start()
                    self.config.launch_options = {**self.config.launch_options, "proxy": {"server": self.egress.server}}
                if "--no-sandbox" in (self.config.launch_options or {}).get("args", []):
                    warn_no_sandbox()  # when a browser starts, not on every node that might start one
                await self._launch()
                self._started = True

    # -- counts (leak checks, status) -------------------------------------------------------
    def open_page_count(self) -> int:
        return len(self.pages.open)

    def open_context_count(self) -> int:
        browser = getattr(self, "browser", None)
        in_browser = len(browser.contexts) if browser is not None and browser.is_connected() else 0
        return max(len(self.context_wrappers), in_browser)

    # -- downloads --------------------------------------------------------------------------
    async def download_request(self, request: Request) -> Response:
        if not request.meta.get(PLAYWRIGHT_META):  # RenderingMiddleware decided
            return await super().download_request(request)
        return await self._render(request)

    async def _render(self, request: Request) -> Response:
        request.headers.pop(b"Proxy-Authorization", None)  # the browser context authenticates itself
        with through_proxy(request.meta, self.config.startup_context_kwargs or {}) as proxied:
            response = await self._render_page(request)
        if proxied:
            self.stats.inc_value("render/proxied")
        return response

    async def _render_page(self, request: Request) -> Response:
        cfg = self.render_config
        if cfg.unavailable_reason:
            self.stats.inc_value("render/failed/no_browser")
            raise BrowserUnavailableError(f"cannot render {request.url}: {cfg.unavailable_reason}")
        if self._closed:
            raise RenderInterruptedError(f"cannot render {request.url}: the node is shutting down")
        try:
            await self._ensure_started()
        except PlaywrightError as exc:
            raise RenderError(f"cannot start Playwright for {request.url}: {first_line(exc)}") from None
        async with self._page_slots:  # PLAYWRIGHT_MAX_PAGES pages at most, across contexts
            await self._enter()
            key = id(request)
            self._request_pages[key] = []
            user_keeps_page = bool(request.meta.get(PLAYWRIGHT_INCLUDE_PAGE_META))
            reusable = False
            try:
                response = await self._download_request(request)
                reusable = poolable(request)
            except AddressRefused:
                raise  # refused, not failed: dead-lettered already (never retried, never requeued)
            except Exception as exc:
                if self._stopping() and not isinstance(exc, BrowserUnavailableError):
                    raise RenderInterruptedError(
                        f"render of {request.url} interrupted: the node is stopping ({first_line(exc)})"
                    ) from None
                self.stats.inc_value("render/failed")
                if isinstance(exc, RenderTimeoutError):
                    self.stats.inc_value("render/failed/timeout")
                elif isinstance(exc, PlaywrightError):  # e.g. the browser died three times in a row
                    raise RenderError(f"render of {request.url} failed: {first_line(exc)}") from None
                raise
            finally:
                pages = self._request_pages.pop(key, [])
                self._deadlines.pop(key, None)
                try:
                    if pages and not user_keeps_page:
                        # Shielded: a cancelled download still closes (or parks) its page.
                        context = request.meta.get(PLAYWRIGHT_CONTEXT_META) or DEFAULT_CONTEXT_NAME
                        await asyncio.shield(self._finish_pages(pages, reusable, context))
                finally:
                    self._leave()
            self.pages_rendered += 1
            self.stats.inc_value("render/pages")
            return response

    def _stopping(self) -> bool:
        """The node is shutting down (a stop signal, or the handler is closing)."""
        return self._closed or node_stopping(self._crawler)

    async def _create_page(self, request: Request, spider: Spider) -> Page:
        """An idle page of the request's context if there is one, else a new page."""
        name = request.meta.setdefault(PLAYWRIGHT_CONTEXT_META, DEFAULT_CONTEXT_NAME)
        page = self.pages.take(name)
        if page is None:
            if self._stopping() and not hasattr(self, "browser"):
                # The browser went down with the node (stop signal): do not launch another one.
                raise RenderInterruptedError(f"cannot render {request.url}: the node is stopping")
            await self.pages.make_room()
            if name in self.context_wrappers:
                page = await super()._create_page(request, spider)
            else:  # a new context: bounding and creating it must not interleave with another
                async with self._context_gate:
                    await self._bound_contexts(name)
                    page = await super()._create_page(request, spider)
            await prepare(page)  # settle: DOM observer in every frame, network watch
            self.pages.track(page)
        else:
            self.stats.inc_value("render/pages_reused")
        self._pages_since_launch += 1
        self.pages.used(page)
        self._request_pages.setdefault(id(request), []).append(page)
        return page

    async def _bound_contexts(self, name: str) -> None:
        """Before opening a context: close contexts with no page in use beyond PLAYWRIGHT_MAX_PAGES.

        Renders hold at most PLAYWRIGHT_MAX_PAGES pages, so at most that many contexts are busy:
        an idle one is always there to close, and nobody waits for a context slot.
        """
        if name in self.context_wrappers:
            return
        while len(self.context_wrappers) >= self.render_config.max_pages:
            victim = next(
                (n for n, w in self.context_wrappers.items() if not set(w.context.pages) - set(self.pages.idle_of(n))),
                None,
            )
            if victim is None:
                return
            wrapper = self.context_wrappers.pop(victim)
            self.pages.drop_context(victim)
            with suppress(Exception):
                await wrapper.context.close()
            self.stats.inc_value("render/contexts_closed")

    async def _finish_pages(self, pages: list[Page], reusable: bool, context: str) -> None:
        *spent, last = pages
        for page in spent:
            await self.pages.close(page)
        if (
            reusable
            and not self._closed
            and not self._restart_due()
            and not self.pages.worn_out(last)
            and await self.pages.reset(last)
        ):
            self.pages.park(last, context)
        else:
            await self.pages.close(last)

    async def _download_request_with_page(self, request: Request, page: Page, spider: Spider) -> Response:
        timeout = self.render_config.timeout_of(request)
        self._deadlines[id(request)] = time.monotonic() + timeout
        user_keeps_page = bool(request.meta.get(PLAYWRIGHT_INCLUDE_PAGE_META))
        # scrapy-playwright closes the page after a render unless told to hand it over: we keep it
        # (to close it or reuse it in _render), and take it out of the meta again afterwards.
        request.meta[PLAYWRIGHT_INCLUDE_PAGE_META] = True
        self._count_late_refusal(page)
        try:
            response = await asyncio.wait_for(
                super()._download_request_with_page(request, page, spider), timeout + HARD_TIMEOUT_GRACE
            )
        except (RenderError, RenderTimeoutError) as exc:
            error: Exception = exc
        except PlaywrightTimeoutError as exc:
            error = RenderTimeoutError(f"render of {request.url} timed out: {first_line(exc)}")
        except TimeoutError:
            error = RenderTimeoutError(f"render of {request.url} did not finish in {timeout:g}s")
        except TargetClosedError:
            raise  # the page or browser went away: scrapy-playwright retries with a new page
        except PlaywrightError as exc:
            error = RenderError(f"render of {request.url} failed: {first_line(exc)}")
        else:
            self._count_late_refusal(page)
            return response
        finally:
            if not user_keeps_page:
                request.meta.pop(PLAYWRIGHT_INCLUDE_PAGE_META, None)
                request.meta.pop(PLAYWRIGHT_PAGE_META, None)
        # Close it here, before scrapy-playwright would (with a warning and a traceback).
        errors = self.pages.errors_of(page)
        refused = self._refused_documents.pop(page, None)
        if not user_keeps_page:
            await self.pages.close(page)
        if refused is not None:  # the document itself: dead-lettered once, never retried
            url, why, counted = refused
            record_refusal(self._crawler, request, Refusal(PRIVATE_ADDRESS, why), "render", counted)
            raise AddressRefused(host_of(url), "", why)
        detail = f" (PLAYWRIGHT_RENDER_TIMEOUT={timeout:g}s)"
        if errors:
            detail += "; page errors: " + " | ".join(errors)
        raise type(error)(f"{error}{detail}") from None

    def _remaining(self, request: Request) -> float:
        deadline = self._deadlines.get(id(request))
        if deadline is None:
            return self.render_config.timeout_of(request)
        return deadline - time.monotonic()

    async def _get_response_and_download(
        self, request: Request, page: Page, spider: Spider
    ) -> tuple[PlaywrightResponse | None, Download | None]:
        wait_for = self.render_config.wait_for_of(request)
        wait_until = wait_for if is_load_state(wait_for) else "load"
        original = request.meta.get(PLAYWRIGHT_PAGE_GOTO_KWARGS_META)
        goto = dict(original or {})
        goto.setdefault("wait_until", wait_until)
        goto.setdefault("timeout", max(1.0, self._remaining(request) * 1000))
        request.meta[PLAYWRIGHT_PAGE_GOTO_KWARGS_META] = goto
        watch = watch_of(page)
        if watch is not None:
            watch.reset()
        hops: list[str] = []  # the document's requests, redirects inside the browser included
        listener = partial(_document_hops, page, hops)
        page.on("request", listener)
        try:
            result = await super()._get_response_and_download(request, page, spider)
        except PlaywrightTimeoutError:
            raise RenderTimeoutError(
                f"render of {request.url} timed out: the page did not reach '{goto['wait_until']}'"
            ) from None
        except PlaywrightError:
            if hops:  # a refused CONNECT (https, wss) fails the navigation at the hop refused
                self._refused_by_proxy(page, request.url, hops[-1])
            raise
        finally:
            page.remove_listener("request", listener)
            if original is None:
                request.meta.pop(PLAYWRIGHT_PAGE_GOTO_KWARGS_META, None)
            else:
                request.meta[PLAYWRIGHT_PAGE_GOTO_KWARGS_META] = original
        response = result[0]
        if response is not None and response.status == 403 and self._refused_by_proxy(page, request.url, response.url):
            # plain http: the proxy's 403 is the document
            raise RenderError(f"render of {request.url}: the browser's proxy refused {response.url}")
        return result

    def _refused_by_proxy(self, page: Page, document: str, url: str) -> bool:
        """Whether the browser's proxy just refused the connection for `url`, a hop of the page's
        document (page routes never see redirect hops): if so the render fails with it."""
        if self.egress is None or page.context in self._proxied_contexts:
            return False  # that context's connections do not go through our proxy
        why = self.egress.refusal_of(url)
        if why is None:
            return False
        # counted and logged by the proxy already (_note_refusal): the dead letter only
        hop = "it" if url == document else f"the redirect to {url[:300]}"
        self._refused_documents[page] = (url, f"the browser's proxy refused {hop}: {why}", True)
        return True

    def _count_late_refusal(self, page: Page) -> None:
        """A main-frame navigation refused by the route after the document loaded (a script's
        `location = ...`): the page stays as it was, the refusal is counted like a subresource's."""
        left = self._refused_documents.pop(page, None)
        if left is not None and not left[2]:
            self._note_refusal(left[0], left[1])

    async def _apply_page_methods(self, page: Page, request: Request, spider: Spider) -> None:
        wait_for = self.render_config.wait_for_of(request)
        if not is_load_state(wait_for):
            remaining = self._remaining(request)
            try:
                if remaining <= 0:
                    raise PlaywrightTimeoutError("no time left")
                await page.wait_for_selector(wait_for, state="attached", timeout=remaining * 1000)
            except PlaywrightTimeoutError:
                raise RenderTimeoutError(
                    f"render of {request.url} timed out: {wait_for!r} (PLAYWRIGHT_WAIT_FOR) never appeared"
                ) from None
        await super()._apply_page_methods(page, request, spider)
        await self._settle(page, request)
        try:
            frames = await asyncio.wait_for(
                collect_frames(page, self._crawler.settings.getint("DOWNLOAD_MAXSIZE")),
                max(0.5, self._remaining(request)),
            )
        except TimeoutError:
            raise RenderTimeoutError(f"render of {request.url} timed out while reading its frames") from None
        request.meta[FRAMES_META] = frames
        self.stats.inc_value("render/frames", len(frames))

    async def _settle(self, page: Page, request: Request) -> None:
        """PLAYWRIGHT_SETTLE_MS: wait for a quiet page, leaving time to read the frames."""
        quiet, limit = self.render_config.settle_of(request)
        if quiet <= 0:
            return
        reserve = min(FRAMES_RESERVE_SECONDS, self.render_config.timeout_of(request) / 4)
        limit = min(limit, self._remaining(request) - reserve)
        if limit <= 0:
            self.stats.inc_value("render/settle/no_time")
            return
        result = await settle(page, quiet, limit)
        self.stats.inc_value("render/settle/settled" if result.settled else "render/settle/capped")
        self.stats.inc_value("render/settle/ms", round(result.waited * 1000))

    async def _abort(self, playwright_request: PlaywrightRequest) -> bool:
        if self.guard is not None:
            try:
                frame: Any = playwright_request.frame
                proxied = self._all_proxied or frame.page.context in self._proxied_contexts
            except PlaywrightError:  # no frame (a worker's request): judged as not proxied
                frame, proxied = None, self._all_proxied
            why = await self.guard.refusal(playwright_request.url, proxied)
            if why is not None:
                if frame is not None and playwright_request.is_navigation_request() and frame.parent_frame is None:
                    # the render fails with it (dead letter), counted then
                    self._refused_documents[frame.page] = (playwright_request.url, why, False)
                else:
                    self._note_refusal(playwright_request.url, why)
                return True
        if playwright_request.resource_type in self.render_config.abort_resource_types:
            return True
        if self._project_abort is not None:
            verdict = self._project_abort(playwright_request)
            return bool(await verdict if inspect.isawaitable(verdict) else verdict)
        return False

    @property
    def _all_proxied(self) -> bool:
        """A proxy for the whole browser (PLAYWRIGHT_LAUNCH_OPTIONS): every context goes through it."""
        return self._operator_proxy

    def _note_refusal(self, url: str, why: str) -> None:
        """A subresource, iframe, fetch or websocket refused: counted and logged, the page goes on."""
        scheduler = scheduler_of(self._crawler)
        if hasattr(scheduler, "refusals"):
            scheduler.refusals.note(url, Refusal(PRIVATE_ADDRESS, why), "render")
        else:
            self.stats.inc_value(f"dc/refused/{PRIVATE_ADDRESS}")

    async def _guard_websocket(self, proxied: bool, ws: WebSocketRoute) -> None:
        why = await self.guard.refusal(ws.url, proxied) if self.guard is not None else None
        if why is None:
            ws.connect_to_server()
            return
        self._note_refusal(ws.url, why)
        await ws.close(code=1008, reason="refused by the crawler")

    async def _create_browser_context(
        self, name: str, context_kwargs: dict | None, spider: Spider | None = None
    ) -> BrowserContextWrapper:
        """Every context blocks service workers (their requests would bypass the page's route) and
        routes its WebSockets through the private-address rule."""
        kwargs = {**(context_kwargs or {}), "service_workers": "block"}
        wrapper = await super()._create_browser_context(name, kwargs, spider)
        if self.guard is not None:
            proxied = bool(kwargs.get("proxy"))
            if proxied:
                self._proxied_contexts.add(wrapper.context)
            await wrapper.context.route_web_socket("**", partial(self._guard_websocket, proxied or self._all_proxied))
        return wrapper

    # -- browser restarts (PLAYWRIGHT_RESTART_AFTER_PAGES) -----------------------------------
    def _restart_due(self) -> bool:
        limit = self.render_config.restart_after_pages
        return bool(limit) and self._pages_since_launch >= limit and hasattr(self, "browser")

    async def _enter(self) -> None:
        """Wait while a restart is due or running; the last render to finish does the restart."""
        while self._restarting or self._restart_due():
            if not self._restarting and self._inflight == 0:
                self._restarting = True
                try:
                    await self._restart_browser()
                finally:
                    self._restarting = False
                    self._changed.set()
            else:
                self._changed.clear()
                await self._changed.wait()
        self._inflight += 1

    def _leave(self) -> None:
        self._inflight -= 1
        self._changed.set()

    async def _restart_browser(self) -> None:
        browser = getattr(self, "browser", None)
        self._pages_since_launch = 0
        if browser is None:
            return
        del self.browser  # the next page launches a fresh one
        self.pages.forget_idle()  # their pages close with their contexts
        with suppress(Exception):
            await asyncio.gather(*[w.context.close() for w in list(self.context_wrappers.values())])
        self.context_wrappers.clear()
        with suppress(Exception):
            await browser.close()
        self.browser_restarts += 1
        self.stats.inc_value("render/browser_restarts")
        logger.info(
            "Restarted the browser after %d pages (PLAYWRIGHT_RESTART_AFTER_PAGES); %d restarts so far",
            self.render_config.restart_after_pages,
            self.browser_restarts,
        )

    async def _browser_disconnected_callback(self, browser: Any = None) -> None:
        if browser is not None and browser is not getattr(self, "browser", None):
            return  # a browser we retired ourselves
        await super()._browser_disconnected_callback()

    # -- shutdown -----------------------------------------------------------------------------
    async def _spider_closed(self, spider: Spider) -> None:
        self.pages.stop()
        for page in self.pages.forget_idle():  # the crawl is over: nothing to reuse them for
            await self.pages.close(page)
        self.stats.set_value("render/pages_open", self.open_page_count())
        self.stats.set_value("render/contexts_open", self.open_context_count() if self._started else 0)

    async def close(self) -> None:
        if self._closed:  # the same instance serves http and https
            return
        self._closed = True
        self.pages.stop()
        open_before = self.open_page_count()
        for page in list(self.pages.open):
            await self.pages.close(page)
        if self._started:
            await super().close()
            if self.egress is not None:
                await self.egress.close()
        else:
            await super(ScrapyPlaywrightDownloadHandler, self).close()  # plain HTTP only
        logger.info(
            "Rendering closed: %d pages rendered, %d browser restarts; %d pages were open at close, "
            "now %d pages and %d contexts open",
            self.pages_rendered,
            self.browser_restarts,
            open_before,
            self.open_page_count(),
            len(self.context_wrappers),
        )


def _document_hops(page: Page, hops: list[str], request: PlaywrightRequest) -> None:
    """Page "request" listener: note the main frame's navigation requests (each redirect hop is one)."""
    with suppress(PlaywrightError):
        if request.is_navigation_request() and request.frame is page.main_frame:
            hops.append(request.url)
