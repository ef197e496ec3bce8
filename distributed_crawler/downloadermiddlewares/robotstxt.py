"""robots.txt once per host for the whole cluster (ROBOTSTXT_OBEY), cached in Redis.

`RobotsTxtMiddleware` (at 100, in place of Scrapy's) keeps a host's robots.txt in
ROBOTS_CACHE_KEY (JSON {"status", "body", "fetched_at"}, TTL ROBOTS_CACHE_SECONDS; tagged with the
host's frontier shard, so with FRONTIER_SHARDS > 1 it lives on the host's master). A node that has
no copy of its own asks once (lua/robots_claim.lua, downloadermiddlewares/robots_cache.py): the
cluster's copy, or the lock `<key>:lock` (SET NX EX ROBOTS_LOCK_SECONDS: this node fetches), or
word that another node holds it; on a miss in host mode the same call blocks the host for up to
ROBOTS_WAIT_SECONDS (reason "robots.txt pending"), so no node leases its requests meanwhile. The
fetching node fetches it in a background task, through the downloader middlewares like any page
(proxy pool and its ban logic, retries), and stores it in one more call (lua/robots_store.lua:
entry, lock released, Crawl-delay, block lifted so the host is due one interval after the
robots.txt request): two round trips per new host for the cluster.
No request waits for robots.txt holding a concurrency slot. The leased request that claimed the
fetch goes back to the scheduler, which holds it on this node with its lease (HOLD_META) and serves
it one interval after the robots.txt request (the host is due again one interval later still); other
leased requests of a host without robots.txt yet are handed back to its queue (their leases handed
over, as a retry's are, without counting a retry), or in the single-queue modes to `{spider}:delayed`
for ROBOTS_WAIT_SECONDS. A request robots.txt disallows is counted as a refusal of its host and
source (reason `robots_txt`, core/refusals.py), never as an error, in the node's next batch of counts.

What the answer means (RFC 9309): 2xx = the rules of its body; 4xx from the site = allow all;
5xx, 429, unreachable, or a proxy's ban answer after the last retry (`_dc_proxy_ban`: never the
site's robots.txt) = disallow all for ROBOTS_ERROR_CACHE_SECONDS, then one node fetches again;
meanwhile that host's leased requests are retried through `delayed` (RetryLater: disallowed for
now, not dropped; after RETRY_TIMES they are dead-lettered with the reason, `dcrawl failed --requeue`).
In host mode the Crawl-delay for our user agent, capped at ROBOTS_CRAWL_DELAY_MAX (30 s: a site
asking for an hour between pages would never be crawled), goes to the host hash field `cd`, which
the frontier's pop uses to space the host (the effective interval is max(iv, cd, ad)).

Without a Redis client (a unit test that never opens the spider) it behaves as Scrapy's, with the
waiter fix below.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError
from scrapy import signals
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware as ScrapyRobotsTxtMiddleware
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Request
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import build_from_crawler, load_object
from twisted.internet.defer import Deferred

from distributed_crawler.bounded import BoundedDict
from distributed_crawler.connection.policy import Purpose
from distributed_crawler.connection.types import AsyncRedis
from distributed_crawler.connection.untrusted import EpisodeLog, finite, text
from distributed_crawler.core.checks import ForbiddenByRobots
from distributed_crawler.core.context import RedisContext
from distributed_crawler.core.guard import AddressRefused
from distributed_crawler.core.refusals import RefusalLog
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.downloadermiddlewares.retry import RetryLater, slot_of_request
from distributed_crawler.downloadermiddlewares.robots_cache import CLAIMED, Claim, RobotsCache, cache_key, lock_key
from distributed_crawler.frontier.base import Frontier, HostControl
from distributed_crawler.internals import scheduler_of
from distributed_crawler.meta import (
    DOWNLOAD_STOP_AT_META,
    HOLD_META,
    LEASE_META,
    PROXY_BAN_META,
    RETRY_DELAY_META,
)

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.robotstxt import RobotParser

logger = logging.getLogger(__name__)

ALLOW_ALL = b""
DISALLOW_ALL = b"User-agent: *\nDisallow: /\n"
MAX_BODY = 512 * 1024  # RFC 9309: parse at least 500 KiB
LOCAL_SECONDS = 300.0  # a node re-reads the cache at least this often (another node may refresh it)
PARSERS_MAX = 1000  # hosts whose parsed robots.txt a node keeps (least recently used forgotten: read again)
#: Reason of the host block set while robots.txt is fetched; only a block with this reason is lifted.
ROBOTS_PENDING = "robots.txt pending"
#: The reason a request robots.txt disallows is counted under (`dcrawl hosts`, `dcrawl sources`).
ROBOTS_REFUSAL = "robots_txt"
__all__ = ["RobotsTxtMiddleware", "cache_key", "cached_robots_body", "entry_of", "lock_key", "rules_of"]


async def _ignored(exc: BaseException) -> None:
    """`on_error` for a cache write Redis refuses: the same fallback as when Redis is away."""
    if not isinstance(exc, ResponseError):
        raise exc


def rules_of(entry: dict[str, Any]) -> bytes:
    """The robots.txt to obey for a cache entry (RFC 9309, see the module docstring)."""
    status = entry.get("status")
    if isinstance(status, int) and not isinstance(status, bool):
        if 200 <= status < 400:
            body = entry.get("body")
            return body.encode("utf-8") if isinstance(body, str) else ALLOW_ALL
        if 400 <= status < 500 and status != 429:
            return ALLOW_ALL
    return DISALLOW_ALL


def entry_of(response: Response | None, error: str = "") -> dict[str, Any]:
    """The cache entry for a robots.txt answer (None = unreachable: `error` says why)."""
    now = time.time()
    if response is None:
        return {"status": None, "body": "", "fetched_at": now, "error": error[:200]}
    ban = response.meta.get(PROXY_BAN_META) if response.request is not None else None
    if ban:  # the proxy's answer, not the site's
        return {"status": None, "body": "", "fetched_at": now, "error": f"proxy ban: {ban}"[:200]}
    body = response.body[:MAX_BODY].decode("utf-8", "replace") if 200 <= response.status < 300 else ""
    return {"status": response.status, "body": body, "fetched_at": now}


async def cached_robots_body(client: AsyncRedis, key: str) -> bytes | None:
    """The body of a robots.txt the cluster fetched (2xx entries only), or None: absent, an error
    or 4xx entry, or garbage. For readers of its other lines (`Sitemap:`) that must not fetch it again."""
    try:
        entry = json.loads(text(await client.get(key)) or "null")
    except ValueError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("body"), str):
        return None
    status = entry.get("status")
    ok = isinstance(status, int) and not isinstance(status, bool) and 200 <= status < 300
    return entry["body"].encode("utf-8") if ok else None


def entry_ok(entry: dict[str, Any]) -> bool:
    """Cache entries are untrusted: an entry that means "disallow all" is an error entry."""
    return rules_of(entry) is not DISALLOW_ALL


class RobotsTxtMiddleware(ScrapyRobotsTxtMiddleware):
    """Once per cluster (module docstring); locally Scrapy's, minus a bypass: every request waiting
    for robots.txt gets the parser.

    Scrapy 2.19 lets all requests that arrive while robots.txt is downloading await the same
    Deferred through `asFuture()`, which consumes its result: from the second waiter on, the
    parser is None and the request is allowed whatever robots.txt says. A crawler that starts
    many requests at once on a new site (every node of a cluster) hits this on its first pages.
    Each waiter here awaits its own Deferred, fed from the shared one.
    """

    async def robot_parser(self, request: Request) -> RobotParser | None:
        pending = self._parsers.get(urlparse_cached(request).netloc)
        if not isinstance(pending, Deferred):
            return await super().robot_parser(request)
        mine: Deferred = Deferred()

        def relay(result: object) -> object:
            mine.callback(result)
            return result  # leave the result in place for the next waiter

        pending.addBoth(relay)
        return await maybe_deferred_to_future(mine)

    # -- once per cluster -------------------------------------------------------------------
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)  # NotConfigured unless ROBOTSTXT_OBEY
        read = SettingsReader(crawler.settings)
        self.policy = RedisContext.of(crawler).policy
        self.key_template = read.str("ROBOTS_CACHE_KEY")
        self.cache_seconds = read.int("ROBOTS_CACHE_SECONDS", min=1)
        self.error_seconds = read.int("ROBOTS_ERROR_CACHE_SECONDS", min=1)
        self.lock_seconds = read.int("ROBOTS_LOCK_SECONDS", min=1)
        self.wait_seconds = read.float("ROBOTS_WAIT_SECONDS", above=0)
        self.crawl_delay_max = read.float("ROBOTS_CRAWL_DELAY_MAX", min=0)
        self.client: AsyncRedis | None = None
        self.cache: RobotsCache | None = None  # the cluster's copies (set at open)
        self.frontier: Frontier | None = None  # the spider's: where a host's robots.txt entry lives
        self.hosts: HostControl | None = None  # the frontier's per-host state, if it keeps one
        self.spider_name = ""
        # netloc -> (parser, expiry, usable, why not); Scrapy's own `_parsers` stays empty once the
        # spider is open (process_request falls back to it only before)
        self._cached: BoundedDict[str, tuple[RobotParser, float, bool, str]] = BoundedDict(PARSERS_MAX, LOCAL_SECONDS)
        self._fetching: dict[str, asyncio.Task[RobotParser]] = {}
        self._holding: set[str] = set()  # netlocs whose first request this node holds
        self._due: dict[str, float] = {}  # netloc -> when the request held for it may go (monotonic)
        self._errors = EpisodeLog(logger)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RobotsTxtMiddleware:
        mw = cls(crawler)
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    def spider_opened(self, spider: Spider) -> None:
        context = RedisContext.of(self.crawler)
        self.context = context
        self.client = context.acquire().client
        self.spider_name = spider.name
        self.frontier = context.frontier_for(spider.name)
        # the host is blocked while its robots.txt is fetched only where our scheduler leases from the
        # host frontier; elsewhere (`dcrawl extract`, Scrapy's scheduler) the crawl's hosts are not ours
        self.hosts = self.frontier.host_control() if self._leases_from_frontier() else None
        self.cache = RobotsCache(
            self.client,
            self.key_template,
            spider.name,
            self.frontier,
            self.hosts,
            self.lock_seconds,
            self.wait_seconds,
            ROBOTS_PENDING,
        )

    def _leases_from_frontier(self) -> bool:
        from distributed_crawler.core.scheduler import RedisScheduler  # the scheduler imports the node's parts

        scheduler = self.crawler.settings.get("SCHEDULER")
        try:
            cls = load_object(scheduler) if isinstance(scheduler, str) else scheduler
        except (ImportError, ValueError, NameError):
            return False
        return isinstance(cls, type) and issubclass(cls, RedisScheduler)

    async def spider_closed(self, spider: Spider) -> None:
        for task in list(self._fetching.values()):
            task.cancel()
        if self.client is not None:
            self.client = None
            await self.context.release()

    def _refused(self, what: str, message: str) -> Callable[[BaseException], Awaitable[None]]:
        """`on_error` for a cache call Redis refuses (a key of another type): logged once an episode."""

        async def refused(exc: BaseException) -> None:
            if not isinstance(exc, ResponseError):
                raise exc
            self._errors.failed(what, message, exc)

        return refused

    def cache_key(self, netloc: str) -> str:
        """On the host's frontier shard (its master), as the rest of what is kept per host."""
        if self.cache is not None:
            return self.cache.key(netloc)
        return cache_key(self.key_template, self.spider_name, netloc)

    async def process_request(self, request: Request, spider: Spider | None = None) -> Request | None:  # type: ignore[override]
        if self.client is None:
            await super().process_request(request)
            return None
        if request.meta.get("dont_obey_robotstxt") or request.url.startswith(("data:", "file:")):
            return None
        url = urlparse_cached(request)
        netloc = url.netloc.lower()
        leased = LEASE_META in request.meta
        parser = self._local(netloc)
        if parser is None:
            fetching = self._fetching.get(netloc)
            if fetching is not None and not leased:  # not from our queue: nothing to hand back, wait here
                parser = await asyncio.shield(fetching)
            elif fetching is not None:  # fetched here: its first request is held here, this one waits in Redis
                return self._hand_back(request, 0.0 if self.hosts is not None else self.wait_seconds)
            else:
                claim = await self._claim(netloc, request)
                if claim.entry is not None:
                    self.crawler.stats.inc_value("robotstxt/cache_hit")
                    parser = self._remember(netloc, claim.entry)
                elif not leased:
                    parser = await asyncio.shield(self._fetch_task(url.scheme, netloc, request, holding=False))
                elif claim.verdict == CLAIMED:
                    return self._hold(request, netloc, self._fetch_task(url.scheme, netloc, request, holding=True))
                else:  # another node fetches it: wait in the host's queue (blocked until it is cached)
                    return self._hand_back(request, 0.0 if claim.blocked else self.wait_seconds)
        cached = self._cached.get(netloc)
        if cached is not None and not cached[2] and leased:
            # robots.txt unavailable: disallowed for now, not for good (RFC 9309): a retry through
            # delayed (the retry middleware's backoff; dead-lettered after the last, requeue-able)
            raise RetryLater(f"robots.txt unavailable: {cached[3]}", max(0.0, cached[1] - time.monotonic()))
        self.process_request_2(parser, request)
        return None

    def process_request_2(self, rp: RobotParser | None, request: Request) -> None:
        """Scrapy's check; a refusal is also counted for its host and source (core/refusals.py:
        counted here, written with the node's next refusal counts, never a round trip of its own)."""
        try:
            super().process_request_2(rp, request)
        except IgnoreRequest as exc:
            refusals = getattr(scheduler_of(self.crawler), "refusals", None)
            if isinstance(refusals, RefusalLog):
                refusals.count(request.url, ROBOTS_REFUSAL)
            if isinstance(exc, ForbiddenByRobots):  # coverage tells it from other drops
                raise
            raise ForbiddenByRobots(*exc.args) from None

    def _allows(self, parser: RobotParser, request: Request) -> bool:
        """`request` may go under `parser` (Scrapy's check, nothing counted)."""
        agent = self._robotstxt_useragent or request.headers.get(b"User-Agent", self._default_useragent)
        try:
            return bool(parser.allowed(request.url, agent or ""))
        except Exception:  # noqa: BLE001 - a parser's failure: the request is not held, it is checked again
            return False

    def _local(self, netloc: str) -> RobotParser | None:
        cached = self._cached.get(netloc)
        if cached is None or cached[1] < time.monotonic():
            return None
        return cached[0]

    def _remember(self, netloc: str, entry: dict[str, Any]) -> RobotParser:
        parser = build_from_crawler(self._parserimpl, self.crawler, rules_of(entry))
        ttl = self.cache_seconds if entry_ok(entry) else self.error_seconds
        left = finite(entry.get("fetched_at"), 0.0) + ttl - time.time()
        why = str(entry.get("error") or f"status {entry.get('status')}")[:200]
        self._cached[netloc] = (parser, time.monotonic() + max(1.0, min(left, LOCAL_SECONDS)), entry_ok(entry), why)
        return parser

    async def _claim(self, netloc: str, request: Request) -> Claim:
        """The cluster's copy, or the fetch for this node, or another node's fetch: one round trip
        (lua/robots_claim.lua). CACHE: Redis away (or refusing) -> fetched here."""
        assert self.cache is not None
        claim = partial(self.cache.claim, netloc, slot_of_request(request))
        return await self.policy.run(
            Purpose.CACHE,
            claim,
            default=Claim(CLAIMED),
            on_error=self._refused("reading robots.txt", "robots.txt cache unreadable (%s); fetching here"),
        )

    def _hold(self, request: Request, netloc: str, fetch: asyncio.Task[RobotParser]) -> Request:
        """The request goes back to the scheduler, which holds it on this node with its lease until
        robots.txt is cached and one interval of its host passed (HOLD_META): no trip through Redis.
        A scheduler that cannot hold it hands it back as any other (RETRY_DELAY_META)."""
        again = self._hand_back(request, 0.0 if self.hosts is not None else self.wait_seconds, counted=False)
        self._holding.add(netloc)
        again.meta[HOLD_META] = asyncio.ensure_future(self._held_until_due(netloc, fetch))
        self.crawler.stats.inc_value("robotstxt/held")
        return again

    async def _held_until_due(self, netloc: str, fetch: asyncio.Task[RobotParser]) -> None:
        try:
            await asyncio.shield(fetch)
            due = self._due.pop(netloc, None)
            if due is not None:
                await asyncio.sleep(max(0.0, due - time.monotonic()))
        except Exception:  # noqa: BLE001 - the fetch logged it; the request then meets what was remembered
            return
        finally:  # nothing kept per host once the request goes (or is dropped)
            self._holding.discard(netloc)
            self._due.pop(netloc, None)

    def _hand_back(self, request: Request, wait: float, counted: bool = True) -> Request:
        again = request.copy()  # keeps the lease: the scheduler hands it over (queue or delayed)
        again.dont_filter = True
        again.meta[RETRY_DELAY_META] = wait
        if counted:
            self.crawler.stats.inc_value("robotstxt/handed_back")
        return again

    def _fetch_task(self, scheme: str, netloc: str, request: Request, holding: bool) -> asyncio.Task[RobotParser]:
        task = self._fetching.get(netloc)
        if task is None:
            task = asyncio.ensure_future(self._fetch(scheme, netloc, request, holding))
            self._fetching[netloc] = task
            task.add_done_callback(lambda _: self._fetching.pop(netloc, None))
        return task

    async def _fetch(self, scheme: str, netloc: str, request: Request, holding: bool = False) -> RobotParser:
        robots = Request(
            f"{scheme}://{netloc}/robots.txt",
            priority=self.DOWNLOAD_PRIORITY,
            meta={"dont_obey_robotstxt": True, DOWNLOAD_STOP_AT_META: MAX_BODY},
            callback=NO_CALLBACK,
        )
        self.crawler.stats.inc_value("robotstxt/request_count")
        try:
            response = await self.crawler.engine.download_async(robots)
            entry = entry_of(response)
            self.crawler.stats.inc_value(f"robotstxt/response_status_count/{response.status}")
        except asyncio.CancelledError:
            raise
        except AddressRefused:
            # The host is at an address the private-address guard refuses: its pages will be refused
            # (and dead-lettered) the same way, so robots.txt must not hold them back (nor be cached).
            await self._unlock(netloc)
            await self._unblock(request)
            return self._remember(netloc, {"status": 404, "body": "", "fetched_at": time.time()})
        except IgnoreRequest:  # dropped here (e.g. the node is stopping): says nothing about the site
            await self._unlock(netloc)
            return build_from_crawler(self._parserimpl, self.crawler, DISALLOW_ALL)  # nothing remembered
        except Exception as exc:  # noqa: BLE001 - as Scrapy's: unreachable after the retries = disallow for now
            entry = entry_of(None, f"{type(exc).__name__}: {exc}")
        ok = entry_ok(entry)
        if not ok:
            self.crawler.stats.inc_value("robotstxt/unavailable")
            logger.warning(
                "robots.txt of %s unavailable (%s): the host is disallowed for %s s, then fetched again",
                netloc,
                entry.get("error") or f"status {entry.get('status')}",
                self.error_seconds,
            )
        parser = self._remember(netloc, entry)
        # the held request (if the scheduler holds it) goes one interval after robots.txt
        holds = holding and netloc in self._holding and ok and self._allows(parser, request)
        delay = self._crawl_delay(parser, request)
        if self.cache is None:  # not opened (a unit test of the fetch alone): nothing to share
            return parser
        store = partial(
            self.cache.store,
            netloc,
            slot_of_request(request),
            entry,
            self.cache_seconds if ok else self.error_seconds,
            delay,
            ok,
            holds,
        )
        sent = time.monotonic()
        # CACHE: Redis away -> kept in this node only; the host's block and the lock expire by themselves
        gap = await self.policy.run(
            Purpose.CACHE,
            store,
            on_error=self._refused("storing robots.txt", f"robots.txt of {netloc} not cached in Redis (%s)"),
        )
        if holds:  # Redis away: the held request waits as long as the host's block would have
            self._due[netloc] = sent + (gap if isinstance(gap, float) else self.wait_seconds)
        return parser

    async def _unblock(self, request: Request) -> None:
        if self.hosts is None:
            return
        unblock = partial(self.hosts.unblock_host, slot_of_request(request), ROBOTS_PENDING)
        # not done: the block ends by itself after ROBOTS_WAIT_SECONDS
        await self.policy.run(Purpose.CACHE, unblock, on_error=_ignored)

    async def _unlock(self, netloc: str) -> None:
        assert self.client is not None  # only a fetch that took the lock unlocks it
        unlock = partial(self.client.delete, lock_key(self.cache_key(netloc)))
        # not done: it expires after ROBOTS_LOCK_SECONDS
        await self.policy.run(Purpose.CACHE, unlock, on_error=_ignored)

    def _crawl_delay(self, parser: RobotParser, request: Request) -> float | None:
        """Host mode: the Crawl-delay for our user agent, capped at ROBOTS_CRAWL_DELAY_MAX (None: none),
        for the host hash field `cd` (robots_store.lua)."""
        if self.hosts is None:
            return None
        agent = self._robotstxt_useragent or request.headers.get(b"User-Agent", self._default_useragent)
        try:
            delay = parser.crawl_delay(agent or "")
        except (AttributeError, NotImplementedError, TypeError, ValueError):
            delay = None
        if delay is None or not 0 < delay:
            return None
        self.crawler.stats.set_value("robotstxt/crawl_delay", float(delay))
        return min(float(delay), self.crawl_delay_max)
