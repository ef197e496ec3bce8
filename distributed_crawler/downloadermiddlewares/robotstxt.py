"""robots.txt once per host for the whole cluster (ROBOTSTXT_OBEY), cached in Redis.

`RobotsTxtMiddleware` (at 100, in place of Scrapy's) reads a host's robots.txt from
ROBOTS_CACHE_KEY (JSON {"status", "body", "fetched_at"}, TTL ROBOTS_CACHE_SECONDS; tagged with the
host's frontier shard, so with FRONTIER_SHARDS > 1 it lives on the host's master). When it is
absent, exactly one node fetches it: the one that wins `SET <key>:lock NX EX ROBOTS_LOCK_SECONDS`,
in a background task, through the downloader middlewares like any page (proxy pool and its ban
logic, retries). No request waits for it holding a concurrency slot: a leased request of a host
without robots.txt yet is handed back (its lease handed over, as a retry's is, without counting a
retry). In host mode the node blocks the host for up to ROBOTS_WAIT_SECONDS (lua/host_block.lua,
reason "robots.txt pending") and hands the request back to its host's queue at once; the fetching
node lifts that block as soon as the file is cached, so a new host's first pages wait only for the
fetch. In the single-queue modes the request waits in `{spider}:delayed` for ROBOTS_WAIT_SECONDS.

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
from scrapy.utils.misc import build_from_crawler
from twisted.internet.defer import Deferred

from distributed_crawler.connection.policy import Purpose
from distributed_crawler.connection.untrusted import EpisodeLog, finite, text
from distributed_crawler.core.context import RedisContext
from distributed_crawler.core.guard import AddressRefused
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.downloadermiddlewares.retry import RetryLater, slot_of_request
from distributed_crawler.keyspace import fill
from distributed_crawler.meta import DOWNLOAD_STOP_AT_META, LEASE_META, PROXY_BAN_META, RETRY_DELAY_META
from distributed_crawler.queue.base import Frontier, HostControl

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
#: Reason of the host block set while robots.txt is fetched; only a block with this reason is lifted.
ROBOTS_PENDING = "robots.txt pending"


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


def cache_key(template: str, tag: str, netloc: str) -> str:
    """ROBOTS_CACHE_KEY of a host (`netloc`: host[:port], lower case); `tag`: the host's shard tag
    (`Frontier.host_tag`), the spider's name with one shard."""
    return fill(template, tag, host=netloc.lower())


def lock_key(cache: str) -> str:
    """The lock the node fetching a host's robots.txt holds (`SET NX EX`), beside its cache key."""
    return f"{cache}:lock"


async def cached_robots_body(client: Any, key: str) -> bytes | None:
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
        self.client: Any = None
        self.frontier: Frontier | None = None  # the spider's: where a host's robots.txt entry lives
        self.hosts: HostControl | None = None  # the frontier's per-host state, if it keeps one
        self.spider_name = ""
        # netloc -> (parser, expiry, usable, why not)
        self._cached: dict[str, tuple[RobotParser, float, bool, str]] = {}
        self._fetching: dict[str, asyncio.Task[RobotParser]] = {}
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
        self.hosts = self.frontier.host_control()

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
        tag = self.frontier.host_tag(f"http://{netloc}/") if self.frontier is not None else self.spider_name
        return cache_key(self.key_template, tag, netloc)

    async def process_request(self, request: Request, spider: Spider | None = None) -> Request | None:  # type: ignore[override]
        if self.client is None:
            await super().process_request(request)
            return None
        if request.meta.get("dont_obey_robotstxt") or request.url.startswith(("data:", "file:")):
            return None
        url = urlparse_cached(request)
        netloc = url.netloc.lower()
        parser = self._local(netloc) or await self._from_cache(netloc)
        cached = self._cached.get(netloc)
        if parser is not None and cached is not None and not cached[2] and LEASE_META in request.meta:
            # robots.txt unavailable: disallowed for now, not for good (RFC 9309): a retry through
            # delayed (the retry middleware's backoff; dead-lettered after the last, requeue-able)
            raise RetryLater(f"robots.txt unavailable: {cached[3]}", max(0.0, cached[1] - time.monotonic()))
        if parser is None:
            if LEASE_META not in request.meta:  # not from our queue: nothing to hand back, wait here
                parser = await asyncio.shield(self._fetch_task(url.scheme, netloc, request))
            else:
                blocked = await self._fetch_elsewhere_or_here(url.scheme, netloc, request)
                # host blocked until robots.txt is cached: wait in its queue, not for a fixed time
                return self._hand_back(request, 0.0 if blocked else self.wait_seconds)
        self.process_request_2(parser, request)
        return None

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

    async def _from_cache(self, netloc: str) -> RobotParser | None:
        # CACHE: Redis away (or refusing the key) -> as if not cached: fetched here
        raw = await self.policy.run(
            Purpose.CACHE,
            partial(self.client.get, self.cache_key(netloc)),
            on_error=self._refused("reading robots.txt", "robots.txt cache unreadable (%s); fetching here"),
        )
        if raw is None:
            return None
        try:
            entry = json.loads(text(raw))
        except ValueError:
            entry = None
        if not isinstance(entry, dict):  # garbage: as if absent (the next fetch overwrites it)
            self._errors.failed("robots.txt entry", "robots.txt cache %s is not JSON; fetching again", netloc)
            return None
        self.crawler.stats.inc_value("robotstxt/cache_hit")
        return self._remember(netloc, entry)

    async def _fetch_elsewhere_or_here(self, scheme: str, netloc: str, request: Request) -> bool:
        """Start the fetch here when this node wins the lock (another node's lock: it fetches), and
        in host mode block the host until the fetching node lifts it. True: the host is blocked."""
        if netloc in self._fetching:
            return self.hosts is not None  # we fetch it, and blocked the host when we started
        lock = partial(self.client.set, lock_key(self.cache_key(netloc)), "1", nx=True, ex=self.lock_seconds)
        # Redis away or refusing: fetch here rather than never
        won = await self.policy.run(Purpose.CACHE, lock, default=True, on_error=_ignored)
        if won:
            self._fetch_task(scheme, netloc, request)
        return await self._block_host(request, ROBOTS_PENDING)

    def _hand_back(self, request: Request, wait: float) -> Request:
        again = request.copy()  # keeps the lease: the scheduler hands it over (queue or delayed)
        again.dont_filter = True
        again.meta[RETRY_DELAY_META] = wait
        self.crawler.stats.inc_value("robotstxt/handed_back")
        return again

    def _fetch_task(self, scheme: str, netloc: str, request: Request) -> asyncio.Task[RobotParser]:
        task = self._fetching.get(netloc)
        if task is None:
            task = asyncio.ensure_future(self._fetch(scheme, netloc, request))
            self._fetching[netloc] = task
            task.add_done_callback(lambda _: self._fetching.pop(netloc, None))
        return task

    async def _fetch(self, scheme: str, netloc: str, request: Request) -> RobotParser:
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
        if not entry_ok(entry):
            self.crawler.stats.inc_value("robotstxt/unavailable")
            logger.warning(
                "robots.txt of %s unavailable (%s): the host is disallowed for %s s, then fetched again",
                netloc,
                entry.get("error") or f"status {entry.get('status')}",
                self.error_seconds,
            )
        parser = self._remember(netloc, entry)
        key = self.cache_key(netloc)

        async def share() -> None:
            ttl = self.cache_seconds if entry_ok(entry) else self.error_seconds
            await self.client.set(key, json.dumps(entry), ex=ttl)
            await self.client.delete(lock_key(key))
            await self._crawl_delay(parser, request)
            if self.hosts is not None and entry_ok(entry):
                await self.hosts.unblock_host(slot_of_request(request), ROBOTS_PENDING)

        # CACHE: Redis away -> kept in this node only; the host's block and the lock expire by themselves
        await self.policy.run(
            Purpose.CACHE,
            share,
            on_error=self._refused("storing robots.txt", f"robots.txt of {netloc} not cached in Redis (%s)"),
        )
        return parser

    async def _unblock(self, request: Request) -> None:
        if self.hosts is None:
            return
        unblock = partial(self.hosts.unblock_host, slot_of_request(request), ROBOTS_PENDING)
        # not done: the block ends by itself after ROBOTS_WAIT_SECONDS
        await self.policy.run(Purpose.CACHE, unblock, on_error=_ignored)

    async def _unlock(self, netloc: str) -> None:
        unlock = partial(self.client.delete, lock_key(self.cache_key(netloc)))
        # not done: it expires after ROBOTS_LOCK_SECONDS
        await self.policy.run(Purpose.CACHE, unlock, on_error=_ignored)

    async def _crawl_delay(self, parser: RobotParser, request: Request) -> None:
        """Host mode: the Crawl-delay for our user agent -> host hash `cd` (absent: field removed)."""
        if self.hosts is None:
            return
        agent = self._robotstxt_useragent or request.headers.get(b"User-Agent", self._default_useragent)
        try:
            delay = parser.crawl_delay(agent or "")
        except (AttributeError, NotImplementedError, TypeError, ValueError):
            delay = None
        host_key = self.hosts.host_state_key(slot_of_request(request))
        if delay is not None and 0 < delay:
            await self.client.hset(host_key, "cd", f"{min(float(delay), self.crawl_delay_max):.3f}")
            self.crawler.stats.set_value("robotstxt/crawl_delay", float(delay))
        else:
            await self.client.hdel(host_key, "cd")

    async def _block_host(self, request: Request, reason: str) -> bool:
        """Host mode: block the request's host for ROBOTS_WAIT_SECONDS at most. True when blocked."""
        if self.hosts is None:
            return False
        block = partial(self.hosts.block_host, slot_of_request(request), self.wait_seconds, reason, 1.0, 60.0, 0.5)

        async def blocked() -> bool:
            await block()
            return True

        # not blocked: the requests go back to delayed for ROBOTS_WAIT_SECONDS instead
        return bool(await self.policy.run(Purpose.CACHE, blocked, default=False, on_error=_ignored))
