"""Per-domain politeness across the cluster: at most DOMAIN_RATE_LIMIT requests per second to a
domain from all nodes together, enforced on Redis server time (lua/rate.lua).

Each request reserves the next free slot of its domain in one round trip, then sleeps
(`asyncio.sleep`, never blocking the reactor) until that slot. Reservations are spaced one
interval apart cluster-wide, so nodes waiting on the same domain never race for a slot. A request
woken more than half an interval late (a busy event loop) gives its slot up and reserves again,
so lateness never turns into a burst at the site.

`DOMAIN_RATE_LIMITS = {"example.com": 0.5}` overrides the rate for a domain and its subdomains
(which then share one budget); 0 there exempts the domain. With DOMAIN_RATE_LIMIT_PER_PROXY each
proxy (`request.meta["_dc_proxy"]`, set by the proxy middleware, which runs before this one) has
its own budget per domain. robots.txt requests count like any other request to the site.

In the single-queue modes this middleware also caps a domain's requests in flight for all nodes
together (DOMAIN_MAX_IN_FLIGHT, lua/in_flight.lua: a token per request, taken before the rate slot
and given back when the download ends; a dead node's tokens expire). That costs two round trips per
request; host mode caps at lease time instead, at no extra cost, and turns this middleware off.
An operator's override of the host (`dcrawl host ... set --delay/--concurrency`, `block`; read from
core/overrides.py, read every 1.5 s) wins over the settings here, in the single-queue modes; a request
of a blocked host goes back to the delayed queue without counting a retry. A request's `_dc_min_interval` meta (AdaptiveDelayMiddleware, DOMAIN_DELAY_FACTOR) widens its
domain's interval.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from redis.exceptions import ResponseError
from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.httpobj import urlparse_cached

from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.policy import NodeStopping, Purpose, RedisPolicy
from distributed_crawler.connection.types import AsyncRedis
from distributed_crawler.connection.untrusted import EpisodeLog, OnceLog, WrongTypeLog, finite, is_wrong_type
from distributed_crawler.core.context import RedisContext
from distributed_crawler.core.overrides import OverrideCache
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.frontier.config import closest, per_host_count
from distributed_crawler.internals import node_stopping
from distributed_crawler.keyspace import default
from distributed_crawler.meta import (
    DONT_RATE_LIMIT_META,
    IN_FLIGHT_TOKEN_META,
    LEASE_META,
    MIN_INTERVAL_META,
    POOL_PROXY_META,
    RETRY_DELAY_META,
)
from distributed_crawler.urlhost import normalize_host

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

MAX_RESERVATIONS = 3  # a request that keeps waking up late goes after its third slot anyway
LATE_FLOOR = 0.05  # seconds of wake-up lateness always tolerated (high rates, tiny intervals)
STOP_CHECK_SECONDS = 0.5  # a waiting request notices a graceful stop within this
BLOCK_RECHECK = 60.0  # a request of a host an operator blocked waits in delayed at most this long, then looks again
CAP_RECHECK = 0.05  # a domain at its in-flight cap is looked at again this much later (doubling to 0.5 s)


def _rate(name: str, value: Any) -> float:
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} ({value!r}) must be a number of requests per second (0 = no limit)") from None
    if rate < 0:
        raise ValueError(f"{name} ({rate}) must be >= 0 requests per second (0 = no limit)")
    return rate


@dataclass(frozen=True)
class PolitenessConfig:
    rate: float = 0.0  # requests per second per domain, 0 = no limit
    overrides: dict[str, float] = field(default_factory=dict)  # domain -> rate (0 = no limit)
    per_proxy: bool = False
    key_template: str = default("DOMAIN_RATE_KEY")
    max_in_flight: int = 0  # DOMAIN_MAX_IN_FLIGHT as an int (0 = no cap)
    max_in_flight_by_domain: dict[str, int] = field(default_factory=dict)  # ... as a dict
    in_flight_template: str = default("DOMAIN_IN_FLIGHT_KEY")
    delay_factor: float = 0.0  # DOMAIN_DELAY_FACTOR: the middleware is needed for the adaptive delay too
    token_seconds: float = 300.0  # an in-flight token outlives the slowest download (DOWNLOAD_TIMEOUT)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> PolitenessConfig:
        read = SettingsReader(settings)
        rate = _rate("DOMAIN_RATE_LIMIT", read.raw("DOMAIN_RATE_LIMIT") or 0)
        raw = read.raw("DOMAIN_RATE_LIMITS") or {}
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except ValueError:
                raw = None
        if not isinstance(raw, dict):
            raise ValueError(
                f"DOMAIN_RATE_LIMITS ({read.raw('DOMAIN_RATE_LIMITS')!r}) must be a dict "
                """of domain -> requests per second, e.g. -s 'DOMAIN_RATE_LIMITS={"example.com": 0.5}'"""
            )
        overrides = {str(d).lower().strip("."): _rate(f"DOMAIN_RATE_LIMITS[{d!r}]", r) for d, r in raw.items()}
        template = _domain_template(read, "DOMAIN_RATE_KEY")
        in_flight, by_domain = per_host_count(
            read.raw("DOMAIN_MAX_IN_FLIGHT"), "DOMAIN_MAX_IN_FLIGHT", "requests in flight", 2
        )
        return cls(
            rate,
            overrides,
            read.bool("DOMAIN_RATE_LIMIT_PER_PROXY"),
            template,
            in_flight,
            by_domain,
            _domain_template(read, "DOMAIN_IN_FLIGHT_KEY"),
            read.float("DOMAIN_DELAY_FACTOR", min=0),
            2 * read.float("DOWNLOAD_TIMEOUT", above=0) + 60,
        )

    @property
    def enabled(self) -> bool:
        return self.rate > 0 or any(r > 0 for r in self.overrides.values()) or self.capped or self.delay_factor > 0

    @property
    def capped(self) -> bool:
        return self.max_in_flight > 0 or any(n > 0 for n in self.max_in_flight_by_domain.values())

    def in_flight_for(self, host: str) -> tuple[str, int]:
        """(budget name, cap) of a host's requests in flight: the closest DOMAIN_MAX_IN_FLIGHT domain, else the host."""
        host = host.lower().rstrip(".")
        if self.max_in_flight_by_domain:
            domain = closest(host, self.max_in_flight_by_domain)
            return (domain, self.max_in_flight_by_domain[domain]) if domain is not None else (host, 0)
        return host, self.max_in_flight

    def in_flight_key(self, domain: str) -> str:
        return self.in_flight_template % {"domain": domain}

    def limit_for(self, host: str) -> tuple[str, float]:
        """(budget name, requests per second) of a host: the closest override, else the host."""
        host = host.lower().rstrip(".")
        labels = host.split(".")
        for i in range(len(labels)):
            domain = ".".join(labels[i:])
            if domain in self.overrides:
                return domain, self.overrides[domain]
        return host, self.rate

    def key(self, domain: str, proxy: str | None) -> str:
        if self.per_proxy and proxy:
            # the proxy's host:port plus a hash of the whole URL: readable, no credentials in keys
            parts = urlsplit(proxy)
            digest = hashlib.sha1(proxy.encode("utf-8")).hexdigest()[:8]
            domain = f"{domain}@{parts.hostname}:{parts.port or ''}#{digest}"
        return self.key_template % {"domain": domain}


async def _ignore(exc: BaseException) -> None:
    return None


def _domain_template(read: SettingsReader, name: str) -> str:
    template = read.str(name)
    try:
        template % {"domain": "example.com"}
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{name} ({template}) must contain %(domain)s and no other placeholder") from None
    if "%(domain)s" not in template:
        raise ValueError(f"{name} ({template}) must contain %(domain)s")
    return template


class DomainRateLimitMiddleware:
    """Downloader middleware (720, after the proxy middleware): waits for the domain's slot."""

    def __init__(
        self, crawler: Crawler, config: PolitenessConfig, redis_config: RedisConfig, policy: RedisPolicy
    ) -> None:
        self.crawler = crawler
        self.policy = policy
        self.stats = crawler.stats
        self.config = config
        self.redis_config = redis_config
        self.client: AsyncRedis | None = None
        self.script: Any = None
        self.in_flight: Any = None  # lua/in_flight.lua, single-queue modes with a cap only
        self.overrides: OverrideCache | None = None  # the operator's per-host overrides (single-queue modes)
        self._tokens = 0
        self._wrong_types = WrongTypeLog("politeness", logger)
        self._data_errors = EpisodeLog(logger)
        self._odd_waits = OnceLog(logger)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DomainRateLimitMiddleware:
        config = PolitenessConfig.from_settings(crawler.settings)
        if not config.enabled:
            raise NotConfigured  # off by default: no "Disabled" warning on every start
        if RedisContext.of(crawler).frontier_class.per_host and not config.per_proxy:
            # a per-host frontier enforces DOMAIN_RATE_LIMIT(S) at pop time (lua/host_pop.lua);
            # no reason given: Scrapy would log a WARNING on every start for the normal case
            raise NotConfigured
        context = RedisContext.of(crawler)
        mw = cls(crawler, config, context.config, context.policy)
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    def spider_opened(self, spider: Spider) -> None:
        context = RedisContext.of(self.crawler)
        self.client = context.acquire().client
        self.script = self.client.register_script(lua_source("rate"))
        if not context.frontier_class.per_host:
            self.overrides = OverrideCache.of(self.crawler)
        if self.config.capped and not context.frontier_class.per_host:
            self.in_flight = self.client.register_script(lua_source("in_flight"))
        self.node = context.node_id
        logger.info(
            "Politeness: %s requests/s per domain cluster-wide, overrides %s%s%s",
            self.config.rate or "no limit",
            self.config.overrides or "none",
            ", per proxy" if self.config.per_proxy else "",
            f", at most {self.config.max_in_flight_by_domain or self.config.max_in_flight} in flight per domain"
            if self.in_flight is not None
            else "",
        )

    async def spider_closed(self, spider: Spider) -> None:
        if self.client is not None:
            self.client = None
            await RedisContext.of(self.crawler).release()

    async def process_request(self, request: Request, spider: Spider | None = None) -> Request | None:
        if request.meta.get(DONT_RATE_LIMIT_META) or self.script is None:
            return None
        url = urlparse_cached(request)
        host = normalize_host(url.hostname or "")
        if not host:
            return None
        override = self.overrides.get(url.netloc.rsplit("@", 1)[-1]) if self.overrides is not None else None
        blocked = finite(override.get("until"), 0.0) - time.time() if override else 0.0
        if blocked > 0 and LEASE_META in request.meta:  # the operator's block: back to delayed, not a retry
            self.stats.inc_value("politeness/blocked_by_operator")
            again = self._hand_back(request)
            again.meta[RETRY_DELAY_META] = min(blocked, BLOCK_RECHECK)
            return again
        if self.in_flight is not None and IN_FLIGHT_TOKEN_META not in request.meta:
            if not await self._take_token(request, host, override):
                return self._hand_back(request)
        domain, rate = self.config.limit_for(host)
        interval = 1.0 / rate if rate > 0 else 0.0
        delay = finite(override.get("delay"), -1.0) if override else -1.0
        if delay >= 0:  # the operator's delay wins over the settings
            interval = delay
        interval = max(interval, finite(request.meta.get(MIN_INTERVAL_META), 0.0))
        if interval <= 0:
            return None
        key = self.config.key(domain, request.meta.get(POOL_PROXY_META))
        self.stats.inc_value("politeness/requests")
        for _ in range(MAX_RESERVATIONS):
            wait = await self._reserve(key, interval)
            if wait <= 0:
                return None
            self.stats.inc_value("politeness/delayed")
            # Scrapy's stats add any number; its annotation says int
            self.stats.inc_value("politeness/wait_seconds", round(wait, 3))  # type: ignore[arg-type]
            due = time.monotonic() + wait
            if not await self._sleep_until(due) and LEASE_META in request.meta:
                # Stopping: a graceful stop would wait for every slot; hand the request back to
                # the queue instead (its lease goes over to the copy, see scheduler.py).
                await self._give_token(request)
                return self._hand_back(request)
            # A busy event loop wakes us late, right before the next node's slot: starting now
            # would be a burst at the site. Give the slot up and queue again (bounded).
            if time.monotonic() - due <= max(interval / 2, LATE_FLOOR):
                return None
            self.stats.inc_value("politeness/late")
        return None

    def _hand_back(self, request: Request) -> Request:
        self.stats.inc_value("politeness/handed_back")
        again = request.copy()
        again.meta.pop(IN_FLIGHT_TOKEN_META, None)
        again.dont_filter = True
        return again

    # -- the in-flight cap (single-queue modes) ----------------------------------------------------
    async def _take_token(self, request: Request, host: str, override: dict[str, Any] | None = None) -> bool:
        """Wait for one of the domain's in-flight tokens; False when the node stops meanwhile (and
        the request has a lease to hand back). Redis away or refusing: the request goes uncapped."""
        domain, cap = self.config.in_flight_for(host)
        wanted = finite(override.get("concurrency"), 0.0) if override else 0.0
        if wanted >= 1:  # the operator's concurrency wins over the settings
            cap = int(wanted)
        if cap <= 0:
            return True
        key = self.config.in_flight_key(domain)
        self._tokens += 1
        token = f"{self.node}:{self._tokens}"
        pause = CAP_RECHECK
        args = ["take", token, cap, f"{self.config.token_seconds:.0f}"]
        while True:
            # a hint the node can do without: Redis away or the key refused -> the request goes
            # uncapped (the rate slot's reservation below waits out an outage and says so)
            taken = await self.policy.run(
                Purpose.CACHE,
                partial(self.in_flight, keys=[key], args=args),
                default=1,
                on_error=partial(self._token_refused, key),
            )
            if int(taken or 0) == 1:
                request.meta[IN_FLIGHT_TOKEN_META] = [key, token]
                return True
            self.stats.inc_value("politeness/at_cap")
            if node_stopping(self.crawler) and LEASE_META in request.meta:
                return False
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    async def _give_token(self, request: Request) -> None:
        held = request.meta.pop(IN_FLIGHT_TOKEN_META, None)
        if self.in_flight is None or not isinstance(held, list) or len(held) != 2:
            return
        # not given back (Redis away, key refused): it expires after token_seconds
        await self.policy.run(
            Purpose.CACHE, partial(self.in_flight, keys=[held[0]], args=["give", held[1]]), on_error=_ignore
        )

    async def process_response(self, request: Request, response: Response, spider: Spider | None = None) -> Response:
        await self._give_token(request)
        return response

    async def process_exception(self, request: Request, exception: Exception, spider: Spider | None = None) -> None:
        await self._give_token(request)

    async def _sleep_until(self, due: float) -> bool:
        """Sleep until `due` (monotonic); False as soon as the node starts stopping."""
        while (left := due - time.monotonic()) > 0:
            if node_stopping(self.crawler):
                return False
            await asyncio.sleep(min(left, STOP_CHECK_SECONDS))
        return True

    async def _reserve(self, key: str, interval: float) -> float:
        """The wait before this request's slot. PERMIT: while Redis is away (or the rate key is
        corrupt: one ERROR line) the request waits; once the node stops it goes at once, rather
        than hang the close."""

        async def reserve() -> float:
            return self._wait(await self.script(keys=[key], args=[f"{interval:.6f}"]), key)

        async def fixed() -> None:
            self._data_errors.ok(f"politeness ({key})")
            if self._wrong_types.reported:
                assert self.client is not None  # set at open: this follows a call on it
                await self._wrong_types.resolved(self.client, {key: ("string",)})

        try:
            raw = await self.policy.run(
                Purpose.PERMIT,
                reserve,
                stopped=lambda: node_stopping(self.crawler),
                on_error=partial(self._refused, key),
                on_ok=fixed,
            )
        except NodeStopping:
            return 0.0
        return self._wait(raw, key)

    def _wait(self, raw: Any, key: str) -> float:
        """rate.lua's answer as seconds; NaN, infinite or negative (a corrupt key) counts as no wait."""
        wait = finite(raw, -1.0)
        if wait < 0:
            self._odd_waits.skipped(
                "wait",
                "rate.lua answered %r for %s (a corrupt key?); the request goes now. Fix: `redis-cli del '%s'`",
                raw,
                key,
                key,
            )
            return 0.0
        return wait

    async def _token_refused(self, key: str, exc: BaseException) -> None:
        """The in-flight key is of the wrong type or corrupt: one line, requests to it go uncapped."""
        if not isinstance(exc, ResponseError):
            raise exc  # a bug
        self._odd_waits.skipped(
            "in_flight",
            "Redis refused the in-flight tokens of %s (%s); requests to that domain go uncapped. Fix: `redis-cli del '%s'`",
            key,
            str(exc)[:300],
            key,
        )

    async def _refused(self, key: str, exc: BaseException) -> None:
        """The rate key is of the wrong type or corrupt: one ERROR line, requests to it wait."""
        if not isinstance(exc, ResponseError):
            raise exc  # a bug
        if not is_wrong_type(exc):
            self._data_errors.failed(
                f"politeness ({key})",
                "Redis refused the rate limit of %s (%s); requests to that domain wait. Fix: `redis-cli del '%s'`",
                key,
                str(exc)[:300],
                key,
                exc_info=exc,
            )
            return
        assert self.client is not None  # set at open: this follows a call on it
        try:
            await self._wrong_types.check(self.client, {key: ("string",)}, exc=exc)
        except ResponseError as lost:  # TYPE refused (an ACL): the wait goes on
            logger.debug("Checking the type of %s failed: %r", key, lost)
