"""Downloader middleware: send each request through a healthy proxy of the shared pool.

Sits at 700, before Scrapy's HttpProxyMiddleware (750), which turns the credentials of
`meta["proxy"]` into a `Proxy-Authorization` header. Per request it picks a proxy (weighted by
health, see proxies.py), and records the outcome in Redis for every node:

* success: a response that is not a ban and not a 5xx (a 404 is the site's answer);
* failure: a connection error, timeout or tunnel error (`process_exception`, which then returns
  None so the retry middleware retries), HTTP 407, a status in `PROXY_BAN_STATUSES`, or a body
  matching `PROXY_BAN_BODY_REGEX`. A ban response is returned unchanged with
  `meta["_dc_proxy_ban"]` set: the retry middleware (retry.py) retries it, through any node, and
  the next attempt picks again.

A failure is the proxy's, not the page's: the attempt is marked (`meta["_dc_proxy_failure"]`, with
PROXY_RETRY_TIMES resolved against the pool size this node last read; proxies/retries.py) and
retry.py sends it again through another proxy without spending the request's RETRY_TIMES.

`meta["_dc_proxy"]` holds the masked proxy of the attempt; it also marks the proxy as the pool's,
so codec.py never writes it, `meta["proxy"]` or the auth header into Redis. A request whose
`meta["proxy"]` the spider set (even to None) keeps it and bypasses the pool.

A request the browser renders (`meta["playwright"]`, set by RenderingMiddleware at 650, before this
one) gets its pool proxy in `meta["_dc_browser_proxy"]` instead of `meta["proxy"]` (the browser
ignores the latter): rendering/handler.py opens a browser context per proxy, so the page and every
frame and XHR of it go through that proxy. Its outcome is recorded like a plain request's; of the
errors of a render only the browser's network errors (`net::ERR_...`) count against the proxy (a
script error or a selector that never appears is the page's doing). Meta keys: distributed_crawler/meta.py.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError
from scrapy import signals
from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    IgnoreRequest,
    NotConfigured,
    ResponseDataLossError,
)
from scrapy.http import TextResponse
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet import error as tx_errors
from twisted.web.client import ResponseFailed, ResponseNeverReceived

from distributed_crawler.bounded import BoundedDict
from distributed_crawler.connection.clients import RedisConfig, refused_for_good
from distributed_crawler.connection.policy import NodeStopping, Purpose, RedisPolicy
from distributed_crawler.connection.types import AsyncRedis
from distributed_crawler.connection.untrusted import EpisodeLog, OnceLog, WrongTypeLog, is_wrong_type
from distributed_crawler.core.context import RedisContext
from distributed_crawler.internals import node_stopping
from distributed_crawler.meta import (
    AUTH_PROXY_META,
    BROWSER_PROXY_META,
    FAILED_PROXIES_META,
    LEASE_META,
    MAX_FAILED_PROXIES,
    PLAYWRIGHT_META,
    POOL_PROXY_META,
    PROXY_BAN_META,
    PROXY_FAILURE_META,
    PROXY_META,
    PROXY_RETRY_LIMIT_META,
)
from distributed_crawler.proxies.pool import (
    DIGEST_LENGTH,
    Outcome,
    ProxyConfig,
    ProxyPool,
    ProxyURLError,
    parse_proxy,
    proxy_digest,
)
from distributed_crawler.proxies.retries import mark_failure, retry_limit
from distributed_crawler.redact import mask_url, scrub

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

EMPTY_POLL_SECONDS = 1.0  # how often a node looks for a proxy while the pool is empty
REVIVE_CHECK_SECONDS = 5.0  # how often a node runs the revive script (cheap; any node may)
KNOWN_CHECK_SECONDS = 5.0  # how often a proxy failure also re-reads the pool size (PROXY_RETRY_TIMES auto)
PICK_TRIES = 5  # picks that may land on pool members that are not proxy URLs before "no proxy"
STICKY_DOMAINS_MAX = 10_000  # domains whose proxy a node keeps (PROXY_STICKY_DOMAINS); least recently used pick again
# Download errors that count against the proxy (a cancelled download, e.g. DOWNLOAD_MAXSIZE, does not).
PROXY_ERRORS: tuple[type[BaseException], ...] = (
    DownloadConnectionRefusedError,
    DownloadTimeoutError,
    DownloadFailedError,
    ResponseDataLossError,
    CannotResolveHostError,
    TunnelError,
    tx_errors.ConnectError,
    tx_errors.ConnectionLost,
    tx_errors.ConnectionDone,
    tx_errors.TimeoutError,
    ResponseFailed,
    ResponseNeverReceived,
    OSError,
)
# Meta and header a pool proxy leaves on a request (HttpProxyMiddleware adds the last two).
_STALE_META = (
    POOL_PROXY_META,
    PROXY_BAN_META,
    PROXY_FAILURE_META,
    PROXY_RETRY_LIMIT_META,
    PROXY_META,
    AUTH_PROXY_META,
    BROWSER_PROXY_META,
)
# How Chromium names its network errors in a failed navigation: a rendered request's proxy failed.
BROWSER_NETWORK_ERROR = "net::ERR_"


def failed_proxies(meta: dict[str, Any]) -> tuple[str, ...]:
    """FAILED_PROXIES_META as digests; anything else in it (it came through Redis) is ignored."""
    value = meta.get(FAILED_PROXIES_META)
    if not isinstance(value, list | tuple):
        return ()
    return tuple(
        d
        for d in value[-MAX_FAILED_PROXIES:]
        if isinstance(d, str) and len(d) == DIGEST_LENGTH and all(c in "0123456789abcdef" for c in d)
    )


def failure_reason(exc: BaseException) -> str:
    """A short reason for the dead list: `connection refused`, `timeout`, `tunnel error: ...`."""
    name = type(exc).__name__
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    if "ConnectionRefused" in name:
        kind = "connection refused"
    elif "Timeout" in name or "TimedOut" in name:
        kind = "timeout"
    elif name == "TunnelError":
        kind = "tunnel error"
    elif "ConnectionLost" in name or "ConnectionDone" in name or "DataLoss" in name or "ResponseNeverReceived" in name:
        kind = "connection lost"
    else:
        kind = name
    return f"{kind} ({name}: {text})" if text else f"{kind} ({name})"


class ProxyPoolMiddleware:
    def __init__(
        self,
        crawler: Crawler,
        config: ProxyConfig,
        redis_config: RedisConfig,
        policy: RedisPolicy,
    ) -> None:
        self.crawler = crawler
        self.config = config
        self.redis_config = redis_config
        self.policy = policy
        self.stats = crawler.stats
        self.active = False
        self.client: AsyncRedis | None = None
        self.pool: ProxyPool | None = None
        self._members: dict[str, str] = {}  # masked -> proxy URL (the pool member)
        self._sticky: BoundedDict[str, str] = BoundedDict(
            STICKY_DOMAINS_MAX
        )  # domain -> proxy URL (PROXY_STICKY_DOMAINS)
        self._next_revive = 0.0
        self._known = len(config.proxies)  # proxies in the pool, dead ones included, as last read
        self._next_known = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._empty_warned = False
        self._wrong_types = WrongTypeLog("the proxy pool", logger)
        self._data_errors = EpisodeLog(logger)
        self._bad_members = OnceLog(logger)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ProxyPoolMiddleware:
        config = ProxyConfig.from_settings(crawler.settings)
        if config.enabled is False:
            raise NotConfigured("PROXY_ENABLED is False")
        context = RedisContext.of(crawler)
        mw = cls(crawler, config, context.config, context.policy)
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    # -- lifecycle ----------------------------------------------------------------------------
    async def spider_opened(self, spider: Spider) -> None:
        self.client = RedisContext.of(self.crawler).acquire().client
        self.pool = ProxyPool.from_config(self.client, self.config)
        try:
            loaded = await self.pool.load(self.config.proxies)
            pooled, dead = await self.pool.counts()
            self._note_known(pooled, dead)
        except ResponseError as exc:  # a pool key of the wrong type: requests follow PROXY_EMPTY_POLICY
            await self._refused("loading the proxy pool", exc)
            self.active = bool(self.config.enabled or self.config.proxies)
            return
        self.active = bool(self.config.enabled or self.config.proxies or pooled or dead)
        if not self.active:
            logger.info(
                "Proxy pool off: PROXY_LIST, PROXY_FILE and %s are empty (PROXY_ENABLED=True turns it on anyway)",
                self.config.pool_key,
            )
            return
        configured = (
            f"; {loaded} of the {len(self.config.proxies)} in PROXY_LIST/PROXY_FILE were new"
            if self.config.proxies
            else ""
        )
        logger.info(
            "Proxy pool %s: %d proxies, %d dead%s; empty pool policy: %s",
            self.config.pool_key,
            pooled,
            dead,
            configured,
            self.config.empty_policy,
        )

    async def spider_closed(self, spider: Spider) -> None:
        if self.client is not None:
            self.client = None
            await RedisContext.of(self.crawler).release()

    def _stopping(self) -> bool:
        return self.client is None or node_stopping(self.crawler)

    # -- Scrapy hooks ---------------------------------------------------------------------------
    async def process_request(self, request: Request, spider: Spider | None = None) -> Request | None:
        if not self.active or self.pool is None:
            return None
        meta = request.meta
        rendered = bool(meta.get(PLAYWRIGHT_META))  # set by RenderingMiddleware (650), before this one
        if PROXY_META in meta and POOL_PROXY_META not in meta:
            if rendered and meta[PROXY_META]:
                meta[BROWSER_PROXY_META] = meta[PROXY_META]  # the spider's own proxy, for the browser too
            return None  # the spider chose (or refused, with None) a proxy itself
        for key in _STALE_META:  # an earlier attempt's proxy (a local retry or redirect)
            meta.pop(key, None)
        request.headers.pop(b"Proxy-Authorization", None)
        proxy = await self._choose(request)
        if proxy is None:
            if self._stopping():
                self.stats.inc_value("proxy/handed_back")
                if LEASE_META not in meta:  # e.g. robots.txt (engine.download): nothing to hand back
                    raise IgnoreRequest("no proxy while the node is stopping")
                again = request.copy()  # keeps the lease: the scheduler hands it back to the queue
                again.dont_filter = True
                return again
            self.stats.inc_value("proxy/direct")
            return None
        masked = mask_url(proxy)
        self._members[masked] = proxy
        meta[BROWSER_PROXY_META if rendered else PROXY_META] = proxy
        meta[POOL_PROXY_META] = masked
        self.stats.inc_value("proxy/used")
        return None

    async def process_response(self, request: Request, response: Response, spider: Spider | None = None) -> Response:
        proxy = self._proxy_of(request)
        if proxy is None:
            return response
        reason = self._ban_reason(response)
        if reason is None:
            if response.status < 500:  # a 5xx may be the site's or the proxy's: no score change
                await self._record(request, proxy, None)
            return response
        request.meta[PROXY_BAN_META] = reason
        await self._record(request, proxy, reason)
        self._blame(request, proxy, f"proxy ban: {reason}")
        return response

    async def process_exception(self, request: Request, exception: Exception, spider: Spider | None = None) -> None:
        proxy = self._proxy_of(request)
        if proxy is None or not isinstance(exception, PROXY_ERRORS):
            return None
        if request.meta.get(PLAYWRIGHT_META) and BROWSER_NETWORK_ERROR not in str(exception):
            return None  # the page failed (a script, a selector, a slow page), not the proxy
        reason = self._unmask(failure_reason(exception), proxy)
        await self._record(request, proxy, reason)
        self._blame(request, proxy, reason)
        return None

    # -- picking ----------------------------------------------------------------------------------
    async def _choose(self, request: Request) -> str | None:
        assert self.pool is not None
        domain = urlparse_cached(request).hostname or ""
        avoid = failed_proxies(request.meta)
        sticky = self._sticky.get(domain) if self.config.sticky_domains else None
        if sticky is not None and not (avoid and proxy_digest(sticky) in avoid):
            return sticky
        while True:
            try:  # PERMIT: the request is held until Redis is back (or the node stops)
                proxy = await self.policy.run(Purpose.PERMIT, partial(self._pick, avoid), stopped=self._stopping)
            except NodeStopping:
                return None
            if proxy is not None:
                if self._empty_warned:
                    self._empty_warned = False
                    logger.warning("Proxy pool %s has proxies again; held requests go on", self.config.pool_key)
                if self.config.sticky_domains:
                    self._sticky[domain] = proxy
                return proxy
            if not self._empty_warned:
                self._empty_warned = True
                held = "requests are held until one is added (dcrawl proxies add URL) or revived"
                direct = "requests go without a proxy"
                logger.warning(
                    "Proxy pool %s is empty: %s (PROXY_EMPTY_POLICY=%s)",
                    self.config.pool_key,
                    held if self.config.empty_policy == "wait" else direct,
                    self.config.empty_policy,
                )
            if self.config.empty_policy == "direct" or self._stopping():
                return None
            self.stats.inc_value("proxy/held")
            await self._wait_for_proxies()
            if self._stopping():
                return None

    async def _pick(self, avoid: tuple[str, ...] = ()) -> str | None:
        """A pooled proxy that is a valid proxy URL, not one of `avoid` while there is another;
        members that are not proxy URLs are skipped (logged once). Unusable pool keys: as if the
        pool were empty."""
        try:
            await self._maybe_revive()
            proxy = await self._pick_member(avoid)
        except ResponseError as exc:
            await self._refused("picking a proxy", exc)
            return None
        await self._pool_ok("picking a proxy")
        return proxy

    async def _pick_member(self, avoid: tuple[str, ...]) -> str | None:
        assert self.pool is not None
        for _ in range(PICK_TRIES):
            member = await self.pool.pick(random.random(), avoid)
            if member is None:
                return None
            try:
                parse_proxy(member)
            except ProxyURLError as exc:
                self.stats.inc_value("proxy/invalid_member")
                self._bad_members.skipped(
                    "member",
                    "Proxy pool %s has a member that is not a proxy URL (%s); "
                    "skipped: remove it with `dcrawl proxies remove`",
                    self.config.pool_key,
                    exc,
                )
                continue
            return member
        return None

    async def _refused(self, what: str, exc: ResponseError) -> None:
        """A pool key of the wrong type or a failing script: one ERROR line, then PROXY_EMPTY_POLICY.
        (Redis gone meanwhile raises: the caller's purpose decides.)"""
        if not is_wrong_type(exc):
            self._data_errors.failed(
                what,
                "Redis refused %s (%s); requests follow PROXY_EMPTY_POLICY=%s until it works",
                what,
                str(exc)[:300],
                self.config.empty_policy,
                exc_info=exc,
            )
            return
        expected = {self.config.pool_key: ("zset",), self.config.dead_key: ("hash",)}
        assert self.client is not None  # set at open: this follows a call on it
        try:
            await self._wrong_types.check(self.client, expected, exc=exc)
        except ResponseError as lost:  # TYPE refused (an ACL): the ERROR line names no key, the wait goes on
            logger.debug("Checking the proxy pool's key types failed: %r", lost)

    async def _pool_ok(self, what: str) -> None:
        self._data_errors.ok(what)
        if self._wrong_types.reported:
            expected = {self.config.pool_key: ("zset",), self.config.dead_key: ("hash",)}
            assert self.client is not None  # set at open: this follows a call on it
            await self._wrong_types.resolved(self.client, expected)

    async def _wait_for_proxies(self) -> None:
        """One poll loop per node, whatever the number of held requests; never blocks the reactor."""
        if self._waiter is None or self._waiter.done():
            self._waiter = asyncio.ensure_future(self._poll_until_pooled())
        await asyncio.shield(self._waiter)

    async def _poll_until_pooled(self) -> None:
        assert self.pool is not None
        while not self._stopping():
            await asyncio.sleep(EMPTY_POLL_SECONDS)
            try:
                if await self.policy.run(Purpose.PERMIT, self._pooled, stopped=self._stopping):
                    return
            except NodeStopping:
                return

    async def _pooled(self) -> int:
        """How many proxies the pool holds now (0 while its keys are unusable)."""
        assert self.pool is not None
        try:
            await self._maybe_revive()
            pooled, dead = await self.pool.counts()
        except ResponseError as exc:
            await self._refused("waiting for proxies", exc)
            return 0
        self._note_known(pooled, dead)
        return pooled

    def _note_known(self, pooled: int, dead: int) -> None:
        self._known = pooled + dead
        self._next_known = time.monotonic() + KNOWN_CHECK_SECONDS

    async def _maybe_revive(self) -> None:
        if not self.config.revive_seconds or time.monotonic() < self._next_revive or self.pool is None:
            return
        self._next_revive = time.monotonic() + REVIVE_CHECK_SECONDS
        for proxy, error in await self.pool.revive(self.config.revive_seconds):
            self.stats.inc_value("proxy/revived")
            logger.info(
                "Proxy %s revived after PROXY_REVIVE_SECONDS=%g (it had failed: %s)",
                mask_url(proxy),
                self.config.revive_seconds,
                error,
            )

    # -- recording ------------------------------------------------------------------------------
    def _proxy_of(self, request: Request) -> str | None:
        masked = request.meta.get(POOL_PROXY_META)
        if not masked or self.pool is None or self.client is None:
            return None
        return self._members.get(masked)

    def _ban_reason(self, response: Response) -> str | None:
        if response.status == 407:
            return "status 407 (proxy authentication required)"
        if response.status in self.config.ban_statuses:
            return f"status {response.status}"
        regex = self.config.ban_body_regex
        if regex is not None and isinstance(response, TextResponse) and regex.search(response.text):
            return "body matches PROXY_BAN_BODY_REGEX"
        return None

    @staticmethod
    def _unmask(reason: str, proxy: str) -> str:
        """Error texts may quote the proxy URL or its password: never the password."""
        return scrub(reason.replace(proxy, mask_url(proxy)), proxy)

    async def _record(self, request: Request, proxy: str, failure: str | None) -> None:
        pool = self.pool
        assert pool is not None

        async def record() -> Outcome | None:
            try:
                if failure is None:
                    await pool.success(proxy)
                    return None
                outcome = await pool.failure(proxy, failure)
                if time.monotonic() >= self._next_known:  # the pool size PROXY_RETRY_TIMES auto follows
                    self._note_known(*await pool.counts())
                return outcome
            except ResponseError as exc:  # a pool key of the wrong type: the outcome is lost, logged once
                if not refused_for_good(exc):
                    raise  # a full Redis: the policy's line and degraded count, not "wrong type"
                await self._refused("recording a proxy outcome", exc)
                return None

        # STATS: Redis away, the outcome is lost (counted in redis/stats/degraded); the crawl goes on
        outcome = await self.policy.run(Purpose.STATS, record)
        if outcome is None:
            return
        self.stats.inc_value("proxy/failed")
        self._forget_if_gone(proxy, outcome)
        masked = mask_url(proxy)
        if outcome.state == "evicted":
            self.stats.inc_value("proxy/evicted")
            revive = (
                f"another chance in {self.config.revive_seconds:g}s (PROXY_REVIVE_SECONDS)"
                if self.config.revive_seconds
                else "no revival (PROXY_REVIVE_SECONDS=0)"
            )
            logger.warning(
                "Proxy %s evicted to %s: score %g < PROXY_MIN_SCORE %g, last error: %s; %s",
                masked,
                self.config.dead_key,
                outcome.score or 0,
                self.config.min_score,
                failure,
                revive,
            )
        else:
            logger.debug("Proxy %s failed on %s: %s (%s)", masked, request.url, failure, outcome.state)

    def _blame(self, request: Request, proxy: str, reason: str) -> None:
        """This attempt failed because of `proxy`, whether or not Redis took the outcome: retry.py
        retries it on another proxy (the pick passes over this one while there is another) without
        spending RETRY_TIMES."""
        digest = proxy_digest(proxy)
        earlier = [d for d in failed_proxies(request.meta) if d != digest]
        request.meta[FAILED_PROXIES_META] = [*earlier, digest][-MAX_FAILED_PROXIES:]
        mark_failure(request.meta, mask_url(proxy), reason, retry_limit(self.config.retry_times, self._known))

    def _forget_if_gone(self, proxy: str, outcome: Outcome) -> None:
        if outcome.state in ("evicted", "gone") and self._sticky:
            for domain, sticky in self._sticky.items():
                if sticky == proxy:
                    self._sticky.pop(domain)
