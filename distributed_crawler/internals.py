"""Every touch of Scrapy's or scrapy-playwright's internals: one home, checked on upgrade.

Each function below relies on something private (or undocumented) and says where it lives in the
versions it was checked against (CHECKED_SCRAPY, CHECKED_SCRAPY_PLAYWRIGHT). The private
scrapy-playwright methods our rendering handler overrides are listed in PLAYWRIGHT_OVERRIDES (the
overrides themselves stay methods of rendering/handler.py, which checks itself against this list).
tests/test_internals.py fails on an upgrade that changes any of it: re-check this module then.

Nothing of ours is imported here: every layer may use it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from http.cookiejar import Cookie

    from scrapy import Request
    from scrapy.commands import BaseRunSpiderCommand
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.http.cookies import CookieJar
    from twisted.internet.defer import Deferred
    from twisted.python.failure import Failure
    from twisted.web.client import Agent

CHECKED_SCRAPY = "2.19.0"
CHECKED_SCRAPY_PLAYWRIGHT = "0.0.48"

# -- Scrapy (2.19.0) ---------------------------------------------------------------------------
# scrapy/extensions/memusage.py MemoryUsage._check_limit logs this line at INFO every
# MEMUSAGE_CHECK_INTERVAL_SECONDS while under the limit, args {"virtualsize": MiB}
# (monitoring/memory_log.py lowers it to DEBUG unless the node is near its limit).
MEMUSAGE_LOGGER = "scrapy.extensions.memusage"
MEMUSAGE_PEAK_MESSAGE = "Peak memory usage is %(virtualsize)dMiB"
# (owner, attribute, parameter names or None for a plain attribute): what the functions below read.
SCRAPY_CONTRACT: tuple[tuple[str, str, tuple[str, ...] | None], ...] = (
    ("scrapy.core.engine.ExecutionEngine", "_slot", None),  # set in open_spider
    ("scrapy.core.engine._Slot", "nextcall", None),
    ("scrapy.core.engine._Slot", "closing", None),
    ("scrapy.core.engine._Slot", "scheduler", None),
    ("scrapy.core.engine._Slot", "inprogress", None),
    ("scrapy.utils.reactor.CallLaterOnce", "schedule", ("self", "delay")),
    ("scrapy.core.scraper.Scraper", "enqueue_scrape", ("self", "result", "request")),
    ("scrapy.core.scraper.Scraper", "slot", None),
    ("scrapy.core.scraper.Slot", "closing", None),
    ("scrapy.core.downloader.Downloader", "active", None),
    ("scrapy.core.downloader.Downloader", "slots", None),  # bound_downloader_slots
    ("scrapy.core.downloader.Slot", "active", None),
    ("scrapy.core.downloader.Slot", "lastseen", None),
    ("scrapy.core.downloader.Slot", "delay", None),
    ("scrapy.core.downloader.Slot", "jitter", None),
    ("scrapy.core.downloader.Slot", "latercall", None),
    ("scrapy.core.downloader.Slot", "close", ("self",)),
    ("scrapy.crawler.Crawler", "crawling", None),
    ("scrapy.commands.BaseRunSpiderCommand", "_create_crawler", ("self", "spidercls")),
    ("scrapy.utils._compression._DecompressionMaxSizeExceeded", "max_size", None),  # sizecap.py reads it
    # Twisted (checked with 25.5): cap_response_headers wraps the client parser's line handler
    ("twisted.web._newclient.HTTPClientParser", "lineReceived", ("self", "line")),
    ("twisted.web._newclient.HTTPClientParser", "state", None),
    ("scrapy.core.downloader.handlers.http11._LenientHTTPClientParser", "lineReceived", ("self", "line")),
    ("scrapy.http.cookies.CookieJar", "_cookies", None),  # cookies_by_domain
    ("scrapy.core.downloader.handlers.http11._ScrapyAgent", "_get_agent", ("self", "request", "timeout")),
    ("scrapy.core.downloader.handlers.http11._ScrapyAgent", "_crawler", None),  # set in __init__
    ("scrapy.core.downloader.handlers.http11._ScrapyAgent", "_contextFactory", None),
    ("scrapy.core.downloader.handlers.http11._ScrapyAgent", "_bindAddress", None),
    ("scrapy.core.downloader.handlers.http11._ScrapyAgent", "_pool", None),
    # bound_connection_pool (Twisted, checked with 26.10): the pool's idle connections per host key
    ("twisted.web.client.HTTPConnectionPool", "_connections", None),
    ("twisted.web.client.HTTPConnectionPool", "cachedConnectionTimeout", None),
)


def wake_engine(crawler: Crawler) -> None:
    """Ask the engine to call `next_request` now instead of on its 5-second heartbeat.

    Scrapy 2.19.0, scrapy/core/engine.py: `ExecutionEngine._slot` (a `_Slot`, None until the spider
    opens) and `_Slot.nextcall` (scrapy/utils/reactor.py `CallLaterOnce.schedule()`).
    """
    slot = getattr(getattr(crawler, "engine", None), "_slot", None)
    if slot is not None:
        slot.nextcall.schedule()


def scheduler_of(crawler: Crawler) -> Any:  # SCHEDULER, of any class: callers look our methods up by name
    """The scheduler of the open spider (None before it opens): how a spider reaches ours.

    Scrapy 2.19.0, scrapy/core/engine.py: `ExecutionEngine._slot.scheduler` (set in open_spider).
    """
    try:
        engine = crawler.engine
    except RuntimeError:  # Scrapy 2.19: "Crawler.engine is not set yet" before the crawl starts
        return None
    return getattr(getattr(engine, "_slot", None), "scheduler", None)


def watch_scrapes(crawler: Crawler, on_scrape: Callable[[Request], Callable[[], None] | None]) -> None:
    """Call `on_scrape(request)` when the scraper takes a response (or failure) of `request`; the
    callable it returns (if any) runs once every item went through the pipelines and every child
    request reached the scheduler.

    Scrapy 2.19.0, scrapy/core/scraper.py: the engine calls `engine.scraper.enqueue_scrape(result,
    request)` (an instance attribute we replace) and awaits the Deferred it returns.
    """
    scraper = crawler.engine.scraper
    original = scraper.enqueue_scrape

    def enqueue_scrape(result: Response | Failure, request: Request) -> Deferred[None]:
        done = on_scrape(request)
        d = original(result, request)
        if done is not None:

            def finished(value: None | Failure) -> None | Failure:
                done()
                return value

            d.addBoth(finished)
        return d

    scraper.enqueue_scrape = enqueue_scrape  # type: ignore[method-assign]


def downloads_in_flight(crawler: Crawler) -> int:
    """Requests the downloader is fetching now.

    Scrapy 2.19.0, scrapy/core/downloader/__init__.py: `Downloader.active` (a set of requests).
    """
    downloader = getattr(getattr(crawler, "engine", None), "downloader", None)
    return len(downloader.active) if downloader is not None else 0


def requests_in_progress(crawler: Crawler) -> list[Request]:
    """Requests the engine works on now: from the start of their download until their response
    (or failure) has gone through the scraper (items processed, child requests scheduled).

    Scrapy 2.19.0, scrapy/core/engine.py: `ExecutionEngine._slot.inprogress` (a set of requests,
    added in `_download`, removed after `_handle_downloader_output`).
    """
    try:
        slot = getattr(getattr(crawler, "engine", None), "_slot", None)
    except RuntimeError:  # Scrapy 2.19: "Crawler.engine is not set yet" before the crawl starts
        return []
    return list(getattr(slot, "inprogress", ()))


def spider_closing(crawler: Crawler) -> bool:
    """The engine has started closing the spider (it now waits for the requests and items in
    progress). Scrapy calls `close_spider` of pipelines only after that, so this is the only way to
    see a close coming.

    Scrapy 2.19.0: scrapy/core/engine.py `ExecutionEngine._slot.closing` (set first) and
    scrapy/core/scraper.py `Scraper.slot.closing` (a Deferred once closing, else None).
    """
    try:
        engine = getattr(crawler, "engine", None)
    except (AttributeError, RuntimeError):  # crawl not started
        return False
    slots = (getattr(engine, "_slot", None), getattr(getattr(engine, "scraper", None), "slot", None))
    return any(getattr(slot, "closing", None) is not None for slot in slots)


def node_stopping(crawler: Crawler) -> bool:
    """The node is stopping: a stop signal (`Crawler.stop()` clears `crawling`) or the spider is
    closing (`spider_closing`). A crawler without `crawling` (a test double) is running.

    Scrapy 2.19.0, scrapy/crawler.py: `Crawler.crawling` (public, but its meaning is not
    documented: False before `crawl()` and from the first line of `stop()`).
    """
    return not getattr(crawler, "crawling", True) or spider_closing(crawler)


class HeadersTooLarge(Exception):
    """A response whose header section passed RESPONSE_MAX_HEADERS / RESPONSE_MAX_HEADER_BYTES."""


_HEADER_CAPS: dict[str, int] = {}


def cap_response_headers(max_lines: int, max_bytes: int) -> None:
    """Cap the status line + header lines of every HTTP/1.x response while they are parsed.

    Twisted's client parser (twisted/web/_newclient.py `HTTPClientParser`) and Scrapy 2.19's
    subclass of it, which its HTTP/1.1 handler swaps in (scrapy/core/downloader/handlers/http11.py
    `_LenientHTTPClientParser`, its own `lineReceived`), cap each line at 16 KiB
    (LineReceiver.MAX_LENGTH) but neither their number nor the continuation lines of one header: a
    site could send headers until the download timeout. Over a cap the parser raises
    HeadersTooLarge, which Twisted turns into the request's failure (`ResponseFailed`, reasons) and
    closes the connection. Installed once per process; the last caps set win (one node = one crawler).
    """
    from scrapy.core.downloader.handlers import http11
    from twisted.web import _newclient

    _HEADER_CAPS.update(lines=max_lines, bytes=max_bytes)
    for parser in (_newclient.HTTPClientParser, http11._LenientHTTPClientParser):
        if "_dc_capped" not in parser.__dict__:
            _cap_lines(parser, parser.__dict__.get("lineReceived") or parser.lineReceived)


def _cap_lines(parser: type, original: Callable[[Any, bytes], None]) -> None:
    from twisted.web import _newclient

    def lineReceived(self: Any, line: bytes) -> None:
        if self.state in (_newclient.STATUS, _newclient.HEADER):
            lines = getattr(self, "_dc_header_lines", 0) + 1
            size = getattr(self, "_dc_header_bytes", 0) + len(line) + 2
            self._dc_header_lines, self._dc_header_bytes = lines, size
            if lines > _HEADER_CAPS["lines"] + 1 or size > _HEADER_CAPS["bytes"]:
                raise HeadersTooLarge(
                    f"more than {_HEADER_CAPS['lines']} header lines or {_HEADER_CAPS['bytes']} bytes of headers "
                    "(RESPONSE_MAX_HEADERS, RESPONSE_MAX_HEADER_BYTES)"
                )
        original(self, line)

    parser.lineReceived = lineReceived  # type: ignore[attr-defined]
    parser._dc_capped = True  # type: ignore[attr-defined]


AgentHook = Callable[["Crawler", "Request", float, Any, Any, Any], Any]


def guard_http11_agents(hook: AgentHook) -> None:
    """Let `hook(crawler, request, timeout, context_factory, bind_address, pool)` build the Twisted
    agent of every HTTP/1.1 download (None = Scrapy's own agent). Installed once per process;
    the last hook given wins.

    Scrapy 2.19.0, scrapy/core/downloader/handlers/http11.py: `HTTP11DownloadHandler.download_request`
    builds a `_ScrapyAgent` per request, whose `_get_agent(request, timeout)` returns the Twisted
    agent (direct, proxy or tunnel); `_ScrapyAgent` keeps `_crawler`, `_contextFactory`,
    `_bindAddress` and `_pool` from its constructor.
    """
    from scrapy.core.downloader.handlers.http11 import _ScrapyAgent

    original = getattr(_ScrapyAgent, "_dc_original_get_agent", _ScrapyAgent._get_agent)

    def _get_agent(self: _ScrapyAgent, request: Request, timeout: float) -> Agent:
        agent = hook(self._crawler, request, timeout, self._contextFactory, self._bindAddress, self._pool)
        return agent if agent is not None else original(self, request, timeout)

    _ScrapyAgent._dc_original_get_agent = original  # type: ignore[attr-defined]
    _ScrapyAgent._get_agent = _get_agent  # type: ignore[method-assign]


POOL_PRUNE_SECONDS = 30.0  # how often bound_connection_pool drops a pool's empty host keys


def bound_connection_pool(pool: Any, idle_seconds: float) -> None:
    """Keep an HTTP/1.1 connection pool bounded by the hosts of the last `idle_seconds`, not by
    every host the node ever fetched from: idle connections close after `idle_seconds`, and the
    keys of hosts with no idle connection left are dropped (at most every POOL_PRUNE_SECONDS).

    Twisted 26.10, twisted/web/client.py: `HTTPConnectionPool` keeps idle persistent connections in
    `_connections` ((scheme, host, port) -> list) and closes each after `cachedConnectionTimeout`
    (240 s, read when the connection is put back); neither `_removeConnection` nor `getConnection`
    deletes a key whose list is empty. Scrapy 2.19's HTTP11DownloadHandler owns one such pool.
    """
    pool.cachedConnectionTimeout = idle_seconds
    now = time.monotonic()
    if now - getattr(pool, "_dc_pruned_at", 0.0) < POOL_PRUNE_SECONDS:
        return
    pool._dc_pruned_at = now
    connections = pool._connections
    for key in [key for key, idle in connections.items() if not idle]:
        del connections[key]


SLOT_PRUNE_SECONDS = 5.0  # how often bound_downloader_slots looks for idle slots


def bound_downloader_slots(crawler: Crawler, idle_seconds: float) -> int:
    """Drop the downloader slots idle for `idle_seconds` past their delay (at most every
    SLOT_PRUNE_SECONDS); return how many were dropped.

    A slot holds its host's delay state (`lastseen`), so only a slot whose longest delay has
    passed is dropped: its host's next request may go at once, as it would through the slot. A
    slot with requests (active, queued or transferring: all in `active`) or a delayed queue run
    (`latercall`) stays.

    Scrapy 2.19.0, scrapy/core/downloader/__init__.py: `Downloader.slots` (key -> `Slot`); `Slot`
    keeps `active`, `lastseen` (monotonic), `delay`, `jitter` (the delay varies by +-jitter) and
    `latercall`, and `close()` cancels the latter. Scrapy's own `_slot_gc` drops the same slots
    only every 60 s and 60 s after their delay, so a worker meeting many new hosts a second keeps
    thousands.
    """
    try:
        downloader = getattr(getattr(crawler, "engine", None), "downloader", None)
    except RuntimeError:  # Scrapy 2.19: "Crawler.engine is not set yet" before the crawl starts
        return 0
    slots = getattr(downloader, "slots", None) if downloader is not None else None
    if downloader is None or not slots:
        return 0
    now = time.monotonic()
    if now - getattr(downloader, "_dc_slots_pruned_at", 0.0) < SLOT_PRUNE_SECONDS:
        return 0
    downloader._dc_slots_pruned_at = now
    idle = [
        key
        for key, slot in slots.items()
        if not slot.active
        and slot.latercall is None
        and slot.lastseen + slot.delay * (1 + max(slot.jitter, 0.0)) + idle_seconds <= now
    ]
    for key in idle:
        slots.pop(key).close()
    return len(idle)


def cookies_by_domain(jar: CookieJar) -> dict[str, dict[str, dict[str, Cookie]]]:
    """A Scrapy cookie jar's cookies: domain -> path -> name -> Cookie, in the order they were stored.

    Scrapy 2.19.0, scrapy/http/cookies.py: `CookieJar._cookies` (a property over the standard
    library's `http.cookiejar.CookieJar._cookies`). Read only; removals go through `jar.clear`.
    """
    return jar._cookies


def command_crawler(command: BaseRunSpiderCommand, spider: str) -> Crawler:
    """The crawler `scrapy crawl` would run (BaseRunSpiderCommand._create_crawler: its signals too)."""
    return command._create_crawler(spider)


# -- scrapy-playwright (0.0.48) ------------------------------------------------------------------
# Private methods of scrapy_playwright/handler.py `ScrapyPlaywrightDownloadHandler` that
# rendering/handler.py overrides: name -> parameter names (async unless listed in _SYNC).
PLAYWRIGHT_OVERRIDES: dict[str, tuple[str, ...]] = {
    "_maybe_launch_in_thread": ("self",),  # engine_started: we launch lazily instead
    "_engine_started": ("self",),  # older versions' engine_started hook
    "_create_page": ("self", "request", "spider"),  # pooled pages
    "_download_request_with_page": ("self", "request", "page", "spider"),  # hard timeout, page errors
    "_get_response_and_download": ("self", "request", "page", "spider"),  # goto wait_until / timeout
    "_apply_page_methods": ("self", "page", "request", "spider"),  # PLAYWRIGHT_WAIT_FOR, frames
    "_browser_disconnected_callback": ("self",),  # ours takes the browser (ignores retired ones)
    "_create_browser_context": ("self", "name", "context_kwargs", "spider"),  # service workers, websockets
}
PLAYWRIGHT_SYNC_OVERRIDES = frozenset({"_engine_started"})
# Private methods and attributes of ScrapyPlaywrightDownloadHandler rendering/handler.py calls or reads.
PLAYWRIGHT_CALLED: dict[str, tuple[str, ...]] = {
    "_launch": ("self",),
    "_download_request": ("self", "request", "spider"),
}
PLAYWRIGHT_ATTRIBUTES = ("browser", "context_wrappers", "config", "abort_request", "stats", "_crawler")
# Fields of scrapy_playwright.handler.Config that rendering/handler.py reads or sets.
PLAYWRIGHT_CONFIG_FIELDS = (
    "cdp_url",
    "connect_url",
    "launch_options",
    "navigation_timeout_ms",
    "max_pages_per_context",
    "startup_context_kwargs",  # PLAYWRIGHT_CONTEXTS: a proxied context starts from its base's options
)
