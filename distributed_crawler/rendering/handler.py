"""Browser rendering for the pages that need it (scrapy-playwright on Debian's Chromium).

Rendering is opt-in per request. `RenderingMiddleware` marks a request for the browser when its URL
matches `PLAYWRIGHT_URL_PATTERNS` or its meta has `render: True` (`dont_render: True` always wins);
everything else is downloaded by Scrapy's plain HTTP handler. `RenderingDownloadHandler` is
scrapy-playwright's handler plus what a long-running node needs:

- it starts Playwright and Chromium only when the first marked request arrives (a node that never
  renders never starts a browser), and uses one browser for both http and https;
- after navigation it waits for `PLAYWRIGHT_WAIT_FOR`, then puts every frame of the page in
  `response.meta["frames"]` (see frames.py), all within `PLAYWRIGHT_RENDER_TIMEOUT`;
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
  (`RenderInterruptedError`) goes back to the queue without spending a retry.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from playwright._impl._errors import TargetClosedError
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError
from scrapy import signals
from scrapy.exceptions import DownloadFailedError, DownloadTimeoutError
from scrapy.http.request import NO_CALLBACK
from scrapy_playwright.handler import DEFAULT_CONTEXT_NAME, ScrapyPlaywrightDownloadHandler
from scrapy_playwright.page import PageMethod

from distributed_crawler.defaults import get_setting
from distributed_crawler.rendering.frames import collect_frames

if TYPE_CHECKING:
    from playwright.async_api import Page
    from playwright.async_api import Request as PlaywrightRequest
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

DEFAULT_CHROMIUM = "/usr/bin/chromium"
# Headless flags for a closed network: no update checks, no sync, no GPU, no QUIC probing.
CHROMIUM_ARGS = (
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm
)
LOAD_STATES = frozenset({"load", "domcontentloaded", "networkidle", "commit"})
RESOURCE_TYPES = frozenset(
    {
        "document",
        "stylesheet",
        "image",
        "media",
        "font",
        "script",
        "texttrack",
        "xhr",
        "fetch",
        "eventsource",
        "websocket",
        "manifest",
        "other",
    }
)
# A page is reused by later renders (opening one costs ~200 ms: a renderer process) unless a render
# failed on it or may have changed its settings. Its renderer's memory grows with every document it
# shows, so after about PAGE_MAX_USES renders (each page draws its own number, see _track) it is
# replaced: at 8 pages, 10 keeps the node within about ±9% of its mean (docs/benchmarks.md).
PAGE_MAX_USES = 10
IDLE_PAGE_SECONDS = 10.0  # a parked page unused this long is closed (its scripts stop, memory goes)
# Page methods that only act on the current document: a page that ran them can be reused.
DOCUMENT_PAGE_METHODS = frozenset(
    {
        "wait_for_selector",
        "wait_for_load_state",
        "wait_for_timeout",
        "wait_for_function",
        "wait_for_url",
        "evaluate",
        "click",
        "dblclick",
        "fill",
        "type",
        "press",
        "hover",
        "focus",
        "check",
        "uncheck",
        "select_option",
        "dispatch_event",
        "screenshot",
        "pdf",
        "content",
        "title",
        "reload",
    }
)
# Meta keys that hand the page to user code or change it beyond one document.
_UNPOOLABLE_META = ("playwright_include_page", "playwright_page_event_handlers", "playwright_page_init_callback")
HARD_TIMEOUT_GRACE = 2.0  # beyond PLAYWRIGHT_RENDER_TIMEOUT, for calls without a timeout of their own
PAGE_CLOSE_TIMEOUT = 10.0
INSTALL_HINT = "install it with `apt-get install chromium` or set PLAYWRIGHT_EXECUTABLE_PATH"


class RenderError(DownloadFailedError):
    """A page marked for rendering could not be rendered (retried like a failed download)."""


class RenderTimeoutError(DownloadTimeoutError):
    """A render did not finish within PLAYWRIGHT_RENDER_TIMEOUT (retried like a timeout)."""


class BrowserUnavailableError(RenderError):
    """No browser on this node: pages marked for rendering cannot be fetched here."""


class RenderInterruptedError(RenderError):
    """The node is stopping and its browser went away mid-render (a stop signal sent to the whole
    process group or cgroup reaches the Playwright driver too). RenderingMiddleware puts the request
    back in the queue without counting a retry."""


def _as_list(value: Any) -> list[str]:
    """A list setting, or a comma-separated string as `-s NAME=a,b` gives it."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


@dataclass(frozen=True)
class RenderConfig:
    url_patterns: tuple[re.Pattern[str], ...] = ()
    executable_path: str | None = None
    unavailable_reason: str | None = None  # set when no local browser can be launched
    remote_browser: bool = False
    wait_for: str = "load"
    render_timeout: float = 30.0
    abort_resource_types: frozenset[str] = frozenset({"image", "media", "font"})
    max_pages: int = 8
    restart_after_pages: int = 1000
    extra_launch_options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RenderConfig:
        patterns = []
        for raw in _as_list(get_setting(settings, "PLAYWRIGHT_URL_PATTERNS")):
            try:
                patterns.append(re.compile(raw))
            except re.error as exc:
                raise ValueError(
                    f"PLAYWRIGHT_URL_PATTERNS: {raw!r} is not a valid regular expression ({exc}); "
                    "on the command line separate patterns with commas, in settings.py use a list"
                ) from None
        wait_for = str(get_setting(settings, "PLAYWRIGHT_WAIT_FOR") or "").strip()
        if not wait_for:
            raise ValueError(
                "PLAYWRIGHT_WAIT_FOR is empty: use a load state (load, domcontentloaded, networkidle) or a CSS selector"
            )
        timeout = float(get_setting(settings, "PLAYWRIGHT_RENDER_TIMEOUT"))
        if not timeout > 0:
            raise ValueError(f"PLAYWRIGHT_RENDER_TIMEOUT ({timeout}) must be > 0 seconds")
        abort = frozenset(t.lower() for t in _as_list(get_setting(settings, "PLAYWRIGHT_ABORT_RESOURCE_TYPES")))
        unknown = sorted(abort - RESOURCE_TYPES)
        if unknown:
            raise ValueError(
                f"PLAYWRIGHT_ABORT_RESOURCE_TYPES ({', '.join(unknown)}) must be Playwright resource "
                f"types: {', '.join(sorted(RESOURCE_TYPES - {'document'}))}"
            )
        if "document" in abort:
            raise ValueError("PLAYWRIGHT_ABORT_RESOURCE_TYPES must not contain 'document': no page would load")
        max_pages = int(get_setting(settings, "PLAYWRIGHT_MAX_PAGES"))
        if max_pages < 1:
            raise ValueError(f"PLAYWRIGHT_MAX_PAGES ({max_pages}) must be >= 1")
        restart = int(get_setting(settings, "PLAYWRIGHT_RESTART_AFTER_PAGES"))
        if restart < 0:
            raise ValueError(f"PLAYWRIGHT_RESTART_AFTER_PAGES ({restart}) must be >= 0 (0 = never)")

        launch = dict(settings.getdict("PLAYWRIGHT_LAUNCH_OPTIONS") or {})
        remote = bool(settings.get("PLAYWRIGHT_CDP_URL") or settings.get("PLAYWRIGHT_CONNECT_URL"))
        chosen = str(get_setting(settings, "PLAYWRIGHT_EXECUTABLE_PATH") or "").strip()
        path: str | None
        reason = None
        if chosen:
            path = chosen
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                reason = f"PLAYWRIGHT_EXECUTABLE_PATH ({path}) is not an executable file; {INSTALL_HINT}"
        elif launch.get("executable_path"):
            path = str(launch["executable_path"])
            if not os.path.isfile(path):
                reason = f"PLAYWRIGHT_LAUNCH_OPTIONS executable_path ({path}) does not exist; {INSTALL_HINT}"
        elif os.path.isfile(DEFAULT_CHROMIUM):
            path = DEFAULT_CHROMIUM
        else:
            path = None
            reason = f"no Chromium at {DEFAULT_CHROMIUM} and PLAYWRIGHT_EXECUTABLE_PATH is not set; {INSTALL_HINT}"
        if remote:
            reason = None  # PLAYWRIGHT_CDP_URL / PLAYWRIGHT_CONNECT_URL: the browser runs elsewhere
        return cls(
            url_patterns=tuple(patterns),
            executable_path=path,
            unavailable_reason=reason,
            remote_browser=remote,
            wait_for=wait_for,
            render_timeout=timeout,
            abort_resource_types=abort,
            max_pages=max_pages,
            restart_after_pages=restart,
            extra_launch_options=launch,
        )

    # -- decisions ------------------------------------------------------------------------
    def should_render(self, request: Request) -> bool:
        meta = request.meta
        if meta.get("dont_render"):
            return False
        if meta.get("render") or meta.get("playwright"):
            return True
        if request.callback is NO_CALLBACK:  # robots.txt and other internal downloads
            return False
        return any(p.search(request.url) for p in self.url_patterns)

    def wait_for_of(self, request: Request) -> str:
        return str(request.meta.get("render_wait_for") or self.wait_for)

    def timeout_of(self, request: Request) -> float:
        value = request.meta.get("render_timeout")
        return float(value) if value else self.render_timeout

    def launch_options(self) -> dict[str, Any]:
        """Options for `chromium.launch`: ours, then PLAYWRIGHT_LAUNCH_OPTIONS (its args appended)."""
        # The browser outlives Ctrl-C and hangups, so Scrapy's graceful stop can finish its renders.
        options: dict[str, Any] = {"headless": True, "handle_sigint": False, "handle_sighup": False}
        options.update({k: v for k, v in self.extra_launch_options.items() if k != "args"})
        if self.executable_path:
            options["executable_path"] = self.executable_path
        args = list(CHROMIUM_ARGS)
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium refuses to start its sandbox as root
        options["args"] = args + [a for a in self.extra_launch_options.get("args") or [] if a not in args]
        return options


def is_load_state(wait_for: str) -> bool:
    return wait_for in LOAD_STATES


class RenderingMiddleware:
    """Downloader middleware: marks the requests the browser downloads (`meta["playwright"]`)."""

    def __init__(self, config: RenderConfig, stats: Any) -> None:
        self.config = config
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RenderingMiddleware:
        return cls(RenderConfig.from_settings(crawler.settings), crawler.stats)

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        if self.config.should_render(request):
            request.meta["playwright"] = True
            self.stats.inc_value("render/requests")
        elif request.meta.get("playwright"):
            request.meta["playwright"] = False  # dont_render
        return None

    def process_exception(self, request: Request, exception: Exception, spider: Spider | None = None) -> Request | None:
        if not isinstance(exception, RenderInterruptedError):
            return None
        self.stats.inc_value("render/interrupted")
        logger.info("Requeued %s: %s", request, exception)
        again = request.copy()  # keeps the lease: the scheduler hands it over, as for a retry
        again.dont_filter = True
        return again


class RenderingDownloadHandler(ScrapyPlaywrightDownloadHandler):
    """`DOWNLOAD_HANDLERS` for http and https: plain HTTP unless the request is marked."""

    abort_request: Callable[[Any], Any] | None  # scrapy-playwright's PLAYWRIGHT_ABORT_REQUEST predicate

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self.render_config = cfg = RenderConfig.from_settings(crawler.settings)
        if not (self.config.cdp_url or self.config.connect_url):
            self.config.launch_options = cfg.launch_options()
        if self.config.navigation_timeout_ms is None:
            self.config.navigation_timeout_ms = cfg.render_timeout * 1000
        if self.abort_request is None and cfg.abort_resource_types:
            self.abort_request = self._abort_resource
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
        self._open_pages: set[Page] = set()
        self._page_errors: dict[Page, list[str]] = {}
        self._request_pages: dict[int, list[Page]] = {}
        self._idle: dict[str, list[Page]] = {}  # context name -> pages ready for reuse
        self._uses: dict[Page, int] = {}
        self._max_uses: dict[Page, int] = {}
        self._parked_at: dict[Page, float] = {}
        self._sweep: asyncio.TimerHandle | None = None
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
        shared = getattr(crawler, "_dc_rendering_handler", None)
        if shared is None:
            shared = cls(crawler)
            crawler._dc_rendering_handler = shared  # type: ignore[attr-defined]
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
                await self._launch()
                self._started = True

    # -- counts (leak checks, status) -------------------------------------------------------
    def open_page_count(self) -> int:
        return len(self._open_pages)

    def open_context_count(self) -> int:
        browser = getattr(self, "browser", None)
        in_browser = len(browser.contexts) if browser is not None and browser.is_connected() else 0
        return max(len(self.context_wrappers), in_browser)

    # -- downloads --------------------------------------------------------------------------
    async def download_request(self, request: Request) -> Response:
        if not request.meta.get("playwright"):
            return await super().download_request(request)
        return await self._render(request)

    async def _render(self, request: Request) -> Response:
        cfg = self.render_config
        if cfg.unavailable_reason:
            self.stats.inc_value("render/failed/no_browser")
            raise BrowserUnavailableError(f"cannot render {request.url}: {cfg.unavailable_reason}")
        if self._closed:
            raise RenderInterruptedError(f"cannot render {request.url}: the node is shutting down")
        try:
            await self._ensure_started()
        except PlaywrightError as exc:
            raise RenderError(f"cannot start Playwright for {request.url}: {_first_line(exc)}") from None
        async with self._page_slots:  # PLAYWRIGHT_MAX_PAGES pages at most, across contexts
            await self._enter()
            key = id(request)
            self._request_pages[key] = []
            user_keeps_page = bool(request.meta.get("playwright_include_page"))
            reusable = False
            try:
                response = await self._download_request(request)
                reusable = self._poolable(request)
            except Exception as exc:
                if self._stopping() and not isinstance(exc, BrowserUnavailableError):
                    raise RenderInterruptedError(
                        f"render of {request.url} interrupted: the node is stopping ({_first_line(exc)})"
                    ) from None
                self.stats.inc_value("render/failed")
                if isinstance(exc, RenderTimeoutError):
                    self.stats.inc_value("render/failed/timeout")
                elif isinstance(exc, PlaywrightError):  # e.g. the browser died three times in a row
                    raise RenderError(f"render of {request.url} failed: {_first_line(exc)}") from None
                raise
            finally:
                pages = self._request_pages.pop(key, [])
                self._deadlines.pop(key, None)
                try:
                    if pages and not user_keeps_page:
                        # Shielded: a cancelled download still closes (or parks) its page.
                        context = request.meta.get("playwright_context") or DEFAULT_CONTEXT_NAME
                        await asyncio.shield(self._finish_pages(pages, reusable, context))
                finally:
                    self._leave()
            self.pages_rendered += 1
            self.stats.inc_value("render/pages")
            return response

    def _stopping(self) -> bool:
        """The node is shutting down (a stop signal, or the handler is closing)."""
        return self._closed or not getattr(self._crawler, "crawling", True)

    @staticmethod
    def _poolable(request: Request) -> bool:
        meta = request.meta
        if any(meta.get(k) for k in _UNPOOLABLE_META):
            return False
        methods = meta.get("playwright_page_methods") or ()
        if isinstance(methods, dict):
            methods = methods.values()
        return all(isinstance(m, PageMethod) and m.method in DOCUMENT_PAGE_METHODS for m in methods)

    async def _create_page(self, request: Request, spider: Spider) -> Page:
        """An idle page of the request's context if there is one, else a new page."""
        name = request.meta.setdefault("playwright_context", DEFAULT_CONTEXT_NAME)
        page = self._take_idle(name)
        if page is None:
            if self._stopping() and not hasattr(self, "browser"):
                # The browser went down with the node (stop signal): do not launch another one.
                raise RenderInterruptedError(f"cannot render {request.url}: the node is stopping")
            await self._make_room()
            if name in self.context_wrappers:
                page = await super()._create_page(request, spider)
            else:  # a new context: bounding and creating it must not interleave with another
                async with self._context_gate:
                    await self._bound_contexts(name)
                    page = await super()._create_page(request, spider)
            self._track(page)
        else:
            self.stats.inc_value("render/pages_reused")
        self._pages_since_launch += 1
        self._uses[page] = self._uses.get(page, 0) + 1
        self._page_errors.get(page, []).clear()
        self._request_pages.setdefault(id(request), []).append(page)
        return page

    def _track(self, page: Page) -> None:
        self._open_pages.add(page)
        # Each page gets its own number of renders (mean PAGE_MAX_USES): pages opened together are
        # not all replaced together, so the node's memory does not swing in step.
        self._max_uses[page] = random.randint(max(1, PAGE_MAX_USES // 2), max(1, PAGE_MAX_USES * 3 // 2))
        errors: list[str] = []
        self._page_errors[page] = errors

        def on_close(*_: Any) -> None:
            self._open_pages.discard(page)
            self._page_errors.pop(page, None)
            self._uses.pop(page, None)
            self._max_uses.pop(page, None)
            self._parked_at.pop(page, None)

        def on_error(error: Any) -> None:
            if len(errors) < 5:
                errors.append(_first_line(error)[:200])

        page.on("close", on_close)
        page.on("pageerror", on_error)

    def _take_idle(self, context: str) -> Page | None:
        idle = self._idle.get(context)
        while idle:
            page = idle.pop()  # the most recently parked: its renderer is warm
            self._parked_at.pop(page, None)
            if not page.is_closed():
                return page
        return None

    def _park(self, page: Page, context: str) -> None:
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
                asyncio.ensure_future(self._close_page(page))
        if any(self._idle.values()) and not self._closed:
            self._sweep = asyncio.get_running_loop().call_later(IDLE_PAGE_SECONDS / 2, self._close_stale)

    async def _bound_contexts(self, name: str) -> None:
        """Before opening a context: close contexts with no page in use beyond PLAYWRIGHT_MAX_PAGES.

        Renders hold at most PLAYWRIGHT_MAX_PAGES pages, so at most that many contexts are busy:
        an idle one is always there to close, and nobody waits for a context slot.
        """
        if name in self.context_wrappers:
            return
        while len(self.context_wrappers) >= self.render_config.max_pages:
            victim = next(
                (n for n, w in self.context_wrappers.items() if not set(w.context.pages) - set(self._idle.get(n, ()))),
                None,
            )
            if victim is None:
                return
            wrapper = self.context_wrappers.pop(victim)
            for page in self._idle.pop(victim, []):
                self._parked_at.pop(page, None)
            with suppress(Exception):
                await wrapper.context.close()
            self.stats.inc_value("render/contexts_closed")

    async def _make_room(self) -> None:
        """Before opening a page: close idle pages (of other contexts) beyond PLAYWRIGHT_MAX_PAGES."""
        while len(self._open_pages) >= self.render_config.max_pages:
            victim = next((pages.pop(0) for pages in self._idle.values() if pages), None)
            if victim is None:
                return
            await self._close_page(victim)

    async def _finish_pages(self, pages: list[Page], reusable: bool, context: str) -> None:
        *spent, last = pages
        for page in spent:
            await self._close_page(page)
        if (
            reusable
            and not self._closed
            and not self._restart_due()
            and self._uses.get(last, 0) < self._max_uses.get(last, 0)
            and await self._reset(last)
        ):
            self._park(last, context)
        else:
            await self._close_page(last)

    async def _reset(self, page: Page) -> bool:
        """Drop this render's route handler. The document stays until the next navigation: going
        through about:blank instead would cost the next render a new renderer process."""
        if page.is_closed():
            return False
        try:
            await asyncio.wait_for(page.unroute("**"), PAGE_CLOSE_TIMEOUT)
        except Exception:  # noqa: BLE001 - not reusable: the caller closes it
            return False
        return True

    async def _download_request_with_page(self, request: Request, page: Page, spider: Spider) -> Response:
        timeout = self.render_config.timeout_of(request)
        self._deadlines[id(request)] = time.monotonic() + timeout
        user_keeps_page = bool(request.meta.get("playwright_include_page"))
        # scrapy-playwright closes the page after a render unless told to hand it over: we keep it
        # (to close it or reuse it in _render), and take it out of the meta again afterwards.
        request.meta["playwright_include_page"] = True
        try:
            return await asyncio.wait_for(
                super()._download_request_with_page(request, page, spider), timeout + HARD_TIMEOUT_GRACE
            )
        except (RenderError, RenderTimeoutError) as exc:
            error: Exception = exc
        except PlaywrightTimeoutError as exc:
            error = RenderTimeoutError(f"render of {request.url} timed out: {_first_line(exc)}")
        except TimeoutError:
            error = RenderTimeoutError(f"render of {request.url} did not finish in {timeout:g}s")
        except TargetClosedError:
            raise  # the page or browser went away: scrapy-playwright retries with a new page
        except PlaywrightError as exc:
            error = RenderError(f"render of {request.url} failed: {_first_line(exc)}")
        finally:
            if not user_keeps_page:
                request.meta.pop("playwright_include_page", None)
                request.meta.pop("playwright_page", None)
        # Close it here, before scrapy-playwright would (with a warning and a traceback).
        errors = list(self._page_errors.get(page, ()))
        if not user_keeps_page:
            await self._close_page(page)
        detail = f" (PLAYWRIGHT_RENDER_TIMEOUT={timeout:g}s)"
        if errors:
            detail += "; page errors: " + " | ".join(errors)
        raise type(error)(f"{error}{detail}") from None

    def _remaining(self, request: Request) -> float:
        deadline = self._deadlines.get(id(request))
        if deadline is None:
            return self.render_config.timeout_of(request)
        return deadline - time.monotonic()

    async def _get_response_and_download(self, request: Request, page: Page, spider: Spider) -> Any:
        wait_for = self.render_config.wait_for_of(request)
        wait_until = wait_for if is_load_state(wait_for) else "load"
        original = request.meta.get("playwright_page_goto_kwargs")
        goto = dict(original or {})
        goto.setdefault("wait_until", wait_until)
        goto.setdefault("timeout", max(1.0, self._remaining(request) * 1000))
        request.meta["playwright_page_goto_kwargs"] = goto
        try:
            return await super()._get_response_and_download(request, page, spider)
        except PlaywrightTimeoutError:
            raise RenderTimeoutError(
                f"render of {request.url} timed out: the page did not reach '{goto['wait_until']}'"
            ) from None
        finally:
            if original is None:
                request.meta.pop("playwright_page_goto_kwargs", None)
            else:
                request.meta["playwright_page_goto_kwargs"] = original

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
        try:
            frames = await asyncio.wait_for(collect_frames(page), max(0.5, self._remaining(request)))
        except TimeoutError:
            raise RenderTimeoutError(f"render of {request.url} timed out while reading its frames") from None
        request.meta["frames"] = frames
        self.stats.inc_value("render/frames", len(frames))

    async def _abort_resource(self, playwright_request: PlaywrightRequest) -> bool:
        return playwright_request.resource_type in self.render_config.abort_resource_types

    # -- pages ------------------------------------------------------------------------------
    async def _close_page(self, page: Page) -> None:
        """Close a page; survives the caller's cancellation (the close runs to its end)."""
        if page.is_closed():
            return
        await asyncio.shield(self._close_page_now(page))

    async def _close_page_now(self, page: Page) -> None:
        try:
            await asyncio.wait_for(page.close(), PAGE_CLOSE_TIMEOUT)
            self.stats.inc_value("playwright/page_count/closed")
        except Exception as exc:  # noqa: BLE001 - the browser restart or shutdown reaps it
            logger.warning("Could not close a page of %s: %s; it goes with the browser", page.url, exc)

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
        self._idle.clear()  # their pages close with their contexts
        self._parked_at.clear()
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
        idle = [page for pages in self._idle.values() for page in pages]
        self._idle.clear()
        self._parked_at.clear()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for page in idle:  # the crawl is over: nothing to reuse them for
            await self._close_page(page)
        self.stats.set_value("render/pages_open", self.open_page_count())
        self.stats.set_value("render/contexts_open", self.open_context_count() if self._started else 0)

    async def close(self) -> None:
        if self._closed:  # the same instance serves http and https
            return
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
        open_before = self.open_page_count()
        for page in list(self._open_pages):
            await self._close_page(page)
        if self._started:
            await super().close()
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


def _first_line(exc: Any) -> str:
    text = str(getattr(exc, "message", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
