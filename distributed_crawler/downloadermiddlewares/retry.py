"""Cluster-wide retries: a failed attempt waits in `{spider}:delayed`, any node takes it when due.

Replaces Scrapy's RetryMiddleware (same settings and meta keys: RETRY_ENABLED, RETRY_TIMES,
RETRY_HTTP_CODES, RETRY_EXCEPTIONS, RETRY_PRIORITY_ADJUST; `dont_retry`, `max_retry_times`).
Instead of retrying at once in this process, the retry copy carries a delay (exponential backoff
with jitter, or the site's `Retry-After`, capped by RETRY_BACKOFF_MAX); the scheduler stores it in
`{spider}:delayed` in the same Lua call that removes the failed attempt's lease (enqueue.lua), and
pop.lua moves it back to the queue when due on Redis server time.

After the last retry the request goes to `{spider}:failed` with url, reason, status, attempts, the
last proxy (masked), node, time and its payload, so `dcrawl failed SPIDER --requeue` can send it
back.

Two budgets. The site's failures (RETRY_HTTP_CODES, RETRY_EXCEPTIONS of a direct fetch, a 5xx through
a proxy) spend RETRY_TIMES, as in Scrapy. An attempt the proxy middleware blamed on its pool proxy
(`meta["_dc_proxy_failure"]`: a ban whatever its status, 407, a connection refused or reset by the
proxy, a timeout through it) spends PROXY_RETRY_TIMES instead and goes again at once through another
proxy; past that bound the dead letter's reason is `proxy_failed`, naming the proxies that failed it
(proxies/retries.py). Stats `retry/count` and `proxy/retry_count`, `retry/max_reached` and
`proxy/retry_max_reached` tell them apart.

Host mode (SCHEDULER_QUEUE_CLASS "host", docs/retries-and-politeness.md): an answer in
HOST_BLOCK_HTTP_CODES (429, 503), or any retryable answer with `Retry-After`, also blocks the
request's HOST for every node (lua/host_block.lua): until the Retry-After (capped by
RETRY_BACKOFF_MAX), else for an adaptive backoff (the host's level `bo` + 1, same formula as a
retry's delay, capped); the next success from a host leased with bo > 0 resets it to 0. Requests
of that host this node already holds are given back to `delayed` until the block ends instead of
being sent. A proxy's ban is the proxy's problem, not the host's: it blocks nothing.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError
from scrapy import signals
from scrapy.downloadermiddlewares.retry import RetryMiddleware
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.python import global_object_name
from scrapy.utils.response import response_status_message

from distributed_crawler.bounded import BoundedDict
from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.policy import NodeStopping, Purpose
from distributed_crawler.connection.types import AsyncRedis
from distributed_crawler.connection.untrusted import EpisodeLog, WrongTypeLog, finite, is_wrong_type
from distributed_crawler.core.context import RedisContext
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.frontier.base import HostControl
from distributed_crawler.frontier.codec import RequestCodec, allowed_classes
from distributed_crawler.frontier.deadletters import DeadLetters, failure_entry
from distributed_crawler.internals import node_stopping
from distributed_crawler.meta import (
    AUTH_PROXY_META,
    DONT_RETRY_META,
    HOST_BACKOFF_META,
    HOST_SLOT_META,
    LEASE_META,
    POOL_PROXY_META,
    PROXY_BAN_META,
    PROXY_FAILURE_META,
    PROXY_FAILURES_META,
    PROXY_META,
    PROXY_RETRY_LIMIT_META,
    PROXY_RETRY_TIMES_META,
    RETRY_DELAY_META,
    RETRY_TIMES_META,
)
from distributed_crawler.proxies.retries import (
    PROXY_FAILED,
    attempt_failure,
    failures_detail,
    proxy_failures,
    proxy_retry_times,
)
from distributed_crawler.redact import mask_url
from distributed_crawler.urlhost import normalize_host

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

RESET_EVERY = 1.0  # seconds: a node resets one host's backoff level at most this often
BLOCKED_HOSTS_MAX = 10_000  # host blocks (and backoff resets) a node remembers, least recently used forgotten
DEFAULT_PORTS = {"http": 80, "https": 443}
# Meta one attempt leaves behind that its retry copy must not carry (the next attempt picks again).
_ATTEMPT_META = (
    PROXY_BAN_META,
    PROXY_FAILURE_META,
    PROXY_RETRY_LIMIT_META,
    RETRY_DELAY_META,
)
# Counts a dead letter's payload drops, so `dcrawl failed --requeue` starts the request afresh.
_COUNT_META = (RETRY_TIMES_META, PROXY_RETRY_TIMES_META, PROXY_FAILURES_META)


async def _refused_into(refused: list[BaseException], exc: BaseException) -> None:
    """`on_error` for a host-politeness write: Redis refusing it is noted, like an outage it is not done."""
    if not isinstance(exc, ResponseError):
        raise exc
    refused.append(exc)


class RetryLater(Exception):
    """Raised by a downloader middleware's process_request: retry this request through `delayed`
    (counted as a retry, dead-lettered after the last), waiting at least `delay` seconds (capped by
    RETRY_BACKOFF_MAX). robotstxt.py raises it while a host's robots.txt is unavailable."""

    def __init__(self, reason: str, delay: float | None = None) -> None:
        super().__init__(reason)
        self.delay = delay


@dataclass(frozen=True)
class RetryConfig:
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    failed_max: int = 100_000
    allowed_classes: tuple[str, ...] = ()
    block_codes: frozenset[int] = frozenset({429, 503})

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RetryConfig:
        read = SettingsReader(settings)
        base = read.float("RETRY_BACKOFF_BASE", above=0, hint="seconds")
        cap = read.float("RETRY_BACKOFF_MAX")
        if cap < base:
            raise ValueError(f"RETRY_BACKOFF_MAX ({cap}) must be >= RETRY_BACKOFF_BASE ({base})")
        times = settings.getint("RETRY_TIMES")
        if times < 0:
            raise ValueError(f"RETRY_TIMES ({times}) must be >= 0")
        return cls(
            backoff_base=base,
            backoff_max=cap,
            failed_max=read.int("SCHEDULER_FAILED_MAX", min=0),
            allowed_classes=allowed_classes(settings),
            block_codes=frozenset(_status_codes(read.list("HOST_BLOCK_HTTP_CODES"))),
        )


def _status_codes(values: list[str]) -> list[int]:
    codes = []
    for value in values:
        if not value.isdigit() or not 100 <= int(value) <= 599:
            raise ValueError(f"HOST_BLOCK_HTTP_CODES ({value}) must be HTTP status codes, e.g. [429, 503]")
        codes.append(int(value))
    return codes


def slot_of_request(request: Request) -> str:
    """The politeness slot a request was leased under (HOST_SLOT_META, set by the host-mode
    scheduler), else its lowercased host, plus `:port` when not the scheme's default."""
    slot = request.meta.get(HOST_SLOT_META)
    if isinstance(slot, str) and slot:
        return slot
    url = urlparse_cached(request)
    host = normalize_host(url.hostname or "")
    try:
        port = url.port
    except ValueError:
        port = None
    return f"{host}:{port}" if port and port != DEFAULT_PORTS.get(url.scheme) else host


def backoff_delay(retry: int, base: float, cap: float, rand: Callable[[], float] = random.random) -> float:
    """Seconds before retry number `retry` (1 = first retry): base * 2^(retry-1), capped.

    "Equal jitter": a uniform pick in the upper half of that, so nodes that failed together do not
    come back together, yet no retry comes back sooner than half its step.
    """
    step = min(cap, base * 2 ** max(0, retry - 1))
    return step / 2 + step / 2 * rand()


def _level(value: Any) -> int:
    """A backoff level from meta: an int >= 0, anything else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def parse_retry_after(
    value: bytes | str | None, date: bytes | str | None = None, now: float | None = None
) -> float | None:
    """`Retry-After` in seconds: delta-seconds or an HTTP date; None if absent or unreadable.

    An HTTP date is measured against the response's own `Date` header when it has one (the site's
    clock against itself), else against this node's clock.
    """
    if value is None:
        return None
    text = (value.decode("latin-1") if isinstance(value, bytes) else value).strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    reference = now if now is not None else time.time()
    if date is not None:
        try:
            reference = email.utils.parsedate_to_datetime(
                date.decode("latin-1") if isinstance(date, bytes) else date
            ).timestamp()
        except (TypeError, ValueError, IndexError):
            pass
    return max(0.0, when - reference)


def retry_delay(
    retry: int, config: RetryConfig, retry_after: float | None = None, rand: Callable[[], float] = random.random
) -> float:
    """The backoff, or the site's Retry-After when it asks for longer; never above the cap."""
    delay = backoff_delay(retry, config.backoff_base, config.backoff_max, rand)
    if retry_after is not None:
        delay = max(delay, retry_after)
    return min(delay, config.backoff_max)


class DistributedRetryMiddleware(RetryMiddleware):
    """Retries through `{spider}:delayed` (see the module docstring)."""

    context: RedisContext  # the node's Redis context, set by from_crawler

    def __init__(self, settings: BaseSettings, config: RetryConfig, redis_config: RedisConfig, node_id: str) -> None:
        super().__init__(settings)  # NotConfigured when RETRY_ENABLED is off
        self.config = config
        self.redis_config = redis_config
        self.node_id = node_id
        self.client: AsyncRedis | None = None
        self.dead_letters: DeadLetters | None = None
        self.codec: RequestCodec | None = None
        self.failed_key = ""
        self._wrong_types = WrongTypeLog("writing dead letters", logger)
        self._data_errors = EpisodeLog(logger)
        self.hosts: HostControl | None = None  # a per-host frontier: 429/503/Retry-After block the host
        # slot -> time.monotonic() its block ends (as this node heard); forgotten: the lease script
        # still holds the host back, this only saves sending requests already leased
        self._blocked: BoundedDict[str, float] = BoundedDict(BLOCKED_HOSTS_MAX)
        # slot -> time.monotonic() of this node's last reset, needed for RESET_EVERY only
        self._reset_at: BoundedDict[str, float] = BoundedDict(BLOCKED_HOSTS_MAX, RESET_EVERY)
        self._block_errors = EpisodeLog(logger)
        self.rand: Callable[[], float] = random.random

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DistributedRetryMiddleware:
        settings = crawler.settings
        context = RedisContext.of(crawler)
        mw = cls(settings, RetryConfig.from_settings(settings), context.config, context.node_id)
        mw.crawler = crawler
        mw.context = context
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    def spider_opened(self, spider: Spider) -> None:
        self.client = self.context.acquire().client
        frontier = self.context.frontier_for(spider.name)
        self.dead_letters = frontier.dead_letters(self.node_id, self.config.failed_max)
        self.failed_key = self.dead_letters.key
        self.codec = RequestCodec(spider, self.config.allowed_classes)
        self.hosts = frontier.host_control()

    async def spider_closed(self, spider: Spider) -> None:
        if self.client is not None:
            self.client = None
            await self.context.release()

    # -- Scrapy hooks ---------------------------------------------------------------------
    def process_request(self, request: Request, spider: Spider | None = None) -> Request | None:
        """Host mode: a leased request of a host this node knows is blocked goes back to `delayed`."""
        if not self._blocked or LEASE_META not in request.meta:
            return None
        slot = slot_of_request(request)
        left = self._blocked.get(slot, 0.0) - time.monotonic()
        if left <= 0:
            self._blocked.pop(slot, None)
            return None
        again = request.copy()  # keeps the lease: the scheduler hands it over to delayed
        again.dont_filter = True
        again.meta[RETRY_DELAY_META] = left
        self.crawler.stats.inc_value("retry/host_deferred")
        return again

    # Scrapy awaits a middleware's coroutine methods; RetryMiddleware's annotations are the sync ones
    async def process_response(  # type: ignore[override]
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Request | Response:
        ban = request.meta.get(PROXY_BAN_META)
        retry_after = parse_retry_after(response.headers.get("Retry-After"), response.headers.get("Date"))
        if self.hosts is not None and not ban:
            await self._host_politeness(request, response, retry_after)
        if request.meta.get(DONT_RETRY_META, False):
            return response
        proxy_failure = attempt_failure(request.meta)
        if proxy_failure is not None:
            return await self._retry_on_another_proxy(request, *proxy_failure, response.status) or response
        if response.status not in self.retry_http_codes:
            return response
        reason = response_status_message(response.status)
        return await self._retry_later(request, reason, response.status, retry_after) or response

    async def process_exception(  # type: ignore[override]
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> Request | None:
        if isinstance(exception, RetryLater) and LEASE_META in request.meta:
            return await self._retry_later(request, str(exception), None, exception.delay)
        if request.meta.get(DONT_RETRY_META, False):
            return None
        proxy_failure = attempt_failure(request.meta)  # set by the proxy middleware (700), which ran first
        if proxy_failure is not None:
            return await self._retry_on_another_proxy(request, *proxy_failure, None)
        if isinstance(exception, self.exceptions_to_retry):
            return await self._retry_later(request, exception, None, None)
        return None

    # -- host mode: block the host, reset its backoff ---------------------------------------
    async def _host_politeness(self, request: Request, response: Response, retry_after: float | None) -> None:
        status = response.status
        blocks = status in self.config.block_codes or (retry_after is not None and status >= 400)
        if blocks:
            await self.block_host(slot_of_request(request), retry_after, response_status_message(status))
        elif 200 <= status < 300 and _level(request.meta.get(HOST_BACKOFF_META)) > 0:
            await self._reset(slot_of_request(request))

    async def block_host(self, slot: str, retry_after: float | None, reason: str) -> float | None:
        """Block `slot` for every node (lua/host_block.lua); returns the seconds it stays blocked."""
        hosts = self.hosts
        assert hosts is not None
        refused: list[BaseException] = []

        async def block() -> float:
            return finite(
                await hosts.block_host(
                    slot, retry_after, reason, self.config.backoff_base, self.config.backoff_max, self.rand()
                )
            )

        # CACHE: Redis away -> not blocked (the node's outage line says why)
        left = await self.context.policy.run(Purpose.CACHE, block, on_error=partial(_refused_into, refused))
        if refused:
            self._block_errors.failed(
                "blocking hosts",
                "Host %s not blocked (Redis: %s); its other requests go on at their usual pace",
                slot,
                str(refused[0])[:200],
            )
        if left is None:
            return None
        self._block_errors.ok("blocking hosts")
        self.crawler.stats.inc_value("retry/host_blocked")
        if left > 0:
            self._blocked[slot] = max(self._blocked.get(slot, 0.0), time.monotonic() + left)
            logger.info("Host %s blocked for %.1f s for every node (%s)", slot, left, reason)
        return left

    async def _reset(self, slot: str) -> None:
        hosts = self.hosts
        assert hosts is not None
        clock = time.monotonic()
        if clock - self._reset_at.get(slot, -RESET_EVERY) < RESET_EVERY:
            return
        self._reset_at[slot] = clock

        async def reset() -> bool:
            await hosts.reset_host_backoff(slot)
            return True

        if await self.context.policy.run(Purpose.CACHE, reset, default=False, on_error=partial(_refused_into, [])):
            self.crawler.stats.inc_value("retry/host_backoff_reset")
        else:
            self._reset_at.pop(slot, None)  # the next success tries again

    # -- retry or dead-letter -------------------------------------------------------------
    async def _retry_later(
        self, request: Request, reason: str | Exception, status: int | None, retry_after: float | None
    ) -> Request | None:
        """The site failed this attempt: a retry from RETRY_TIMES after a backoff, else a dead letter."""
        new = self._retry(request, reason)
        if new is None:
            return await self._give_up(request, reason, status)
        return await self._send_again(request, new, retry_delay(new.meta[RETRY_TIMES_META], self.config, retry_after))

    async def _retry_on_another_proxy(
        self, request: Request, reason: str, limit: int, status: int | None
    ) -> Request | None:
        """Its pool proxy failed this attempt: a retry from PROXY_RETRY_TIMES at once (the pick passes
        over the proxies that failed it), RETRY_TIMES untouched; else a `proxy_failed` dead letter."""
        failed = proxy_retry_times(request.meta) + 1
        stats = self.crawler.stats
        if failed > limit:
            stats.inc_value("proxy/retry_max_reached")
            detail = failures_detail(failed, limit, proxy_failures(request.meta))
            logger.warning("Gave up on proxies for %s: %s", request.url[:300], detail)
            return await self._give_up(request, PROXY_FAILED, status, detail=detail)
        logger.debug(
            "Retrying %s on another proxy (proxy failure %d, PROXY_RETRY_TIMES %d): %s", request, failed, limit, reason
        )
        new = request.copy()
        new.meta[PROXY_RETRY_TIMES_META] = failed
        new.dont_filter = True
        stats.inc_value("proxy/retry_count")
        return await self._send_again(request, new, 0.0)

    async def _send_again(self, request: Request, new: Request, delay: float) -> Request:
        for key in _ATTEMPT_META:
            new.meta.pop(key, None)
        if POOL_PROXY_META in new.meta:  # the proxy middleware picks again (maybe another proxy)
            for key in (POOL_PROXY_META, PROXY_META, AUTH_PROXY_META):
                new.meta.pop(key, None)
            new.headers.pop(b"Proxy-Authorization", None)
        if LEASE_META in request.meta:  # from our scheduler: it parks the copy in delayed (0: queued now)
            new.meta[RETRY_DELAY_META] = delay
            self.crawler.stats.inc_value("retry/delayed")
        elif delay > 0:  # e.g. robots.txt, fetched by engine.download(): wait here, without blocking
            await asyncio.sleep(delay)
        return new

    async def _give_up(
        self, request: Request, reason: str | Exception, status: int | None, detail: str | None = None
    ) -> Request | None:
        if await self._dead_letter(request, reason, status, detail):
            return None
        # the node stops before the dead letter is written: the request goes back with its
        # lease (nothing lost; a later delivery dead-letters it)
        self.crawler.stats.inc_value("retry/handed_back")
        again = request.copy()
        again.dont_filter = True
        return again

    async def _dead_letter(
        self, request: Request, reason: str | Exception, status: int | None, detail: str | None = None
    ) -> bool:
        """Write the request's dead letter (DEADLETTER: retried until Redis takes it); False when
        the node stops first."""
        if isinstance(reason, Exception):
            reason = f"{global_object_name(reason.__class__)}: {reason}"
        dead_letters = self.dead_letters
        if dead_letters is None or LEASE_META not in request.meta:
            return True  # not a scheduled request (robots.txt): nothing to requeue
        self.crawler.stats.inc_value("retry/failed")
        site_failures = request.meta.get(RETRY_TIMES_META, 0)
        site_failures = site_failures if isinstance(site_failures, int) and site_failures > 0 else 0
        proxy_failed = proxy_retry_times(request.meta) + (1 if PROXY_FAILURE_META in request.meta else 0)
        extra: dict[str, Any] = {
            "status": status,
            "attempts": site_failures + proxy_retry_times(request.meta) + 1,
            "proxy_failures": proxy_failed,  # attempts of those a proxy failed (RETRY_TIMES not spent)
            "proxy": mask_url(str(request.meta[POOL_PROXY_META])) if request.meta.get(POOL_PROXY_META) else None,
            "source": "retry",
            "priority": request.priority,
        }
        if detail is not None:
            extra["detail"] = detail
            extra["proxies"] = [{"proxy": proxy, "error": error} for proxy, error in proxy_failures(request.meta)]
        try:
            clean = request.replace(meta={k: v for k, v in request.meta.items() if k not in _COUNT_META})
            assert self.codec is not None  # set in spider_opened
            extra["payload"] = self.codec.encode(clean)
        except (TypeError, ValueError) as exc:  # UnserializableRequestError is a TypeError
            extra["payload_error"] = str(exc)
        entry = failure_entry(request.url, str(reason), self.node_id, **extra)
        try:
            await self.context.policy.run(
                Purpose.DEADLETTER,
                partial(dead_letters.push, [entry]),
                stopped=lambda: node_stopping(self.crawler),
                on_error=self._refused,
                on_ok=self._failed_key_ok,
            )
        except NodeStopping:
            return False
        return True

    async def _refused(self, exc: BaseException) -> None:
        """The failed list is of the wrong type (or Redis refuses the entry): one ERROR line, then
        the dead letter waits until it is fixed."""
        if not isinstance(exc, ResponseError):
            raise exc
        if not is_wrong_type(exc):
            self._data_errors.failed(
                "writing dead letters",
                "Redis refused a dead letter for %s (%s); retrying with backoff",
                self.failed_key,
                str(exc)[:300],
                exc_info=exc,
            )
            return
        assert self.client is not None  # set at open: this follows a call on it
        try:
            await self._wrong_types.check(self.client, {self.failed_key: ("list",)}, exc=exc)
        except ResponseError as lost:  # TYPE refused (an ACL): the wait goes on
            logger.debug("Checking the type of %s failed: %r", self.failed_key, lost)

    async def _failed_key_ok(self) -> None:
        self._data_errors.ok("writing dead letters")
        if self._wrong_types.reported:
            assert self.client is not None  # set at open: this follows a call on it
            await self._wrong_types.resolved(self.client, {self.failed_key: ("list",)})
