"""`RedisSpider` and `RedisCrawlSpider`: Scrapy 2.19 spiders fed from `<name>:start_urls`, idle
only when the cluster is.

`start()` is a long-lived async generator: it reads seeds at once, keeps polling while the cluster
works, and returns (letting the node close) only after the whole cluster has had no seed, pending,
leased or delayed request for `MAX_IDLE_TIME_BEFORE_CLOSE` seconds. The spider contract is
scrapy-redis's (`RedisMixin`): `redis_key`, `redis_batch_size`, `max_idle_time` (also as `-a`
arguments), `redis_encoding`, `setup_redis()`, `spider.server`, `make_request_from_data` (which
may return one request, several, or none).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from functools import partial
from typing import Any, Self, TypeVar

from redis.exceptions import ResponseError
from scrapy import Request, Spider, signals
from scrapy.spiders import CrawlSpider

from distributed_crawler.compat.server import server_from_settings
from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.policy import Purpose
from distributed_crawler.connection.types import AsyncRedis
from distributed_crawler.connection.untrusted import EpisodeLog, WrongTypeLog, is_wrong_type
from distributed_crawler.connection.untrusted import preview as raw_preview
from distributed_crawler.core.context import RedisContext
from distributed_crawler.core.crawl_control import CrawlControl
from distributed_crawler.core.node import node_id_from_settings
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.deadletters import DeadLetters, failure_entry
from distributed_crawler.frontier.factory import frontier_from_settings
from distributed_crawler.frontier.seedkey import SeedKey, Taken
from distributed_crawler.frontier.seeds import SeedError, parse_seed, preview
from distributed_crawler.internals import scheduler_of, wake_engine
from distributed_crawler.keyspace import fill

logger = logging.getLogger(__name__)

T = TypeVar("T")

POLL_MIN, POLL_MAX = 0.05, 1.0


def _coerce(value: object, kind: Callable[[Any], T], name: str, rule: str) -> T:
    """An attribute that may come from `-a NAME=value` (a string) as `kind`, or scrapy-redis's error."""
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {rule}, not {value!r}") from None


class RedisMixin:
    """Reads start URLs from Redis (scrapy-redis's mixin, on a long-lived `start()`)."""

    redis_key: str | None = None
    redis_batch_size: int | None = None
    redis_encoding: str | None = None
    max_idle_time: float | None = None
    server: Any = None  # the project's sync client (compat/server.py), set by setup_redis
    # provided by the Spider this is mixed into
    name: str
    crawler: Any
    logger: Any

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> Self:
        spider = super().from_crawler(crawler, *args, **kwargs)  # type: ignore[misc]
        spider.setup_redis(crawler)
        return spider

    def setup_redis(self, crawler: Any = None) -> None:
        """Resolve the seed key, batch size, idle time and `server`; once (a second call does nothing).

        Validates like scrapy-redis: no crawler, an empty `redis_key`, a `redis_batch_size` or
        `max_idle_time` that is not a number raise ValueError naming the attribute.
        """
        if self.server is not None:
            return
        crawler = crawler or getattr(self, "crawler", None)
        if crawler is None:
            raise ValueError("crawler is required")
        settings = crawler.settings
        self.keys = RedisContext.of(crawler).keys_for(self.name)  # the node's one copy
        if self.redis_key is not None:
            start_urls = fill(str(self.redis_key), self.name)
            if not start_urls.strip():
                raise ValueError("redis_key must not be empty")
            self.keys = dataclasses.replace(self.keys, start_urls=start_urls)
        if not self.keys.start_urls.strip():
            raise ValueError("redis_key must not be empty (REDIS_START_URLS_KEY is blank)")
        self.redis_key = self.keys.start_urls
        read = SettingsReader(settings)
        if self.redis_batch_size is None:  # derived: a bad CONCURRENT_REQUESTS is named as such
            self.redis_batch_size = read.int("REDIS_START_URLS_BATCH_SIZE", min=0)
            if not self.redis_batch_size:
                concurrent = settings.getint("CONCURRENT_REQUESTS", 16)
                if concurrent < 1:
                    raise ValueError(
                        f"CONCURRENT_REQUESTS ({concurrent}) must be >= 1: the requests a node downloads at once"
                    )
                self.redis_batch_size = concurrent
        self.redis_batch_size = _coerce(self.redis_batch_size, int, "redis_batch_size", "an integer")
        if self.redis_batch_size < 1:
            raise ValueError(f"redis_batch_size must be an integer >= 1, not {self.redis_batch_size}")
        if self.max_idle_time is None:
            self.max_idle_time = read.float("MAX_IDLE_TIME_BEFORE_CLOSE")
        self.max_idle_time = _coerce(self.max_idle_time, float, "max_idle_time", "a number of seconds")
        if self.max_idle_time < 0:
            raise ValueError(f"max_idle_time ({self.max_idle_time}) must be >= 0 (0 = run forever)")
        if self.redis_encoding is None:
            self.redis_encoding = read.str("REDIS_ENCODING")
        self.seed_max_bytes = read.int("SEED_MAX_BYTES", min=1)
        self.seed_key = SeedKey.from_settings(settings, self.name, self.redis_key)  # conflicting types: ValueError
        self.seeds_as = self.seed_key.kind
        self._take_pause = read.float("SEED_TAKE_PAUSE")
        self._held: set[bytes] = set()  # holds taken and not yet done (renewed by _renew_holds)
        self.redis_config = RedisConfig.from_settings(settings)
        self.server = server_from_settings(settings)
        logger.info(
            "Reading start URLs from redis key '%s' (%s, batch size: %s, encoding: %s)",
            self.redis_key,
            self.seeds_as,
            self.redis_batch_size,
            self.redis_encoding,
        )
        self.node_id = node_id_from_settings(settings)
        self._failed_max = read.int("SCHEDULER_FAILED_MAX", min=0)
        self._rejected: Counter[str] = Counter()
        self._wrong_types = WrongTypeLog("reading seeds", logger)
        self._data_errors = EpisodeLog(logger)
        crawler.signals.connect(self._log_rejected_summary, signal=signals.spider_closed)

    # -- seeds ----------------------------------------------------------------------------
    async def _take_seeds(self, client: AsyncRedis) -> Taken:
        """A batch of seeds, held in the taken key until `_seeds_enqueued` (frontier/seedkey.py)."""
        assert self.redis_batch_size is not None  # set when the crawler is
        taken = await self.seed_key.take(client, self.redis_batch_size, self.node_id)
        self._held.update(taken.holds)
        if taken.reclaimed:
            self.crawler.stats.inc_value("seeds/reclaimed", taken.reclaimed)
            logger.info(
                "Put back %d seeds a node took from %s and did not enqueue within SEED_LEASE_SECONDS (%gs)",
                taken.reclaimed,
                self.redis_key,
                self.seed_key.lease_seconds,
            )
        return taken

    async def _seeds_enqueued(self, client: AsyncRedis, holds: list[bytes]) -> None:
        """Forget the holds once the scheduler has pushed the requests made of them to the frontier
        (a request it refused, by admission or the dupefilter, is done too); if this node dies
        first, the holds expire and another node takes the seeds again."""
        scheduler = scheduler_of(self.crawler)
        wait = getattr(scheduler, "wait_pushed", None)  # another scheduler: in its queue once enqueued
        if wait is not None and not await wait(scheduler.outbox_mark()):
            return
        # ACK: the holds are renewed meanwhile; if this node dies first, the seeds come back
        await RedisContext.of(self.crawler).policy.run(Purpose.ACK, partial(self.seed_key.done, client, holds))
        self._held.difference_update(holds)

    def _frontier(self, client: AsyncRedis) -> Frontier:
        """The spider's frontier on `client` (its counts say whether the crawl has work)."""
        return frontier_from_settings(self.crawler.settings, self.name, client, self.keys)

    def _let_go(self, taken: Taken | None) -> None:
        """A batch whose handling failed after the take (its dead letters or the counts): no longer
        renewed, so its holds expire and its seeds come back after SEED_LEASE_SECONDS."""
        if taken is not None:
            self._held.difference_update(taken.holds)

    async def _renew_holds(self, client: AsyncRedis) -> None:
        """Renew this node's seed holds every third of SEED_LEASE_SECONDS while it lives."""
        policy = RedisContext.of(self.crawler).policy
        while True:
            await asyncio.sleep(self.seed_key.lease_seconds / 3)
            # HEARTBEAT: not renewed this round (Redis away, or reading seeds reports the bad key)
            await policy.run(
                Purpose.HEARTBEAT, partial(self.seed_key.renew, client, list(self._held)), on_error=_next_round
            )

    def make_request_from_data(self, data: bytes | str) -> Request:
        """A seed as a request; raises `SeedError` for anything we will not fetch.

        A plain URL, or JSON `{"url", "meta", "priority", "callback", "method", "headers", "body"}`
        where any other field is form data, as in scrapy-redis (a `FormRequest`).
        """
        if isinstance(data, bytes) and self.redis_encoding and self.redis_encoding.lower() not in ("utf-8", "utf8"):
            try:
                data = data.decode(self.redis_encoding)
            except (UnicodeDecodeError, LookupError):
                raise SeedError("not_utf8", f"not {self.redis_encoding} text (REDIS_ENCODING)") from None
        seed = parse_seed(data, self.seed_max_bytes)
        callback = None
        if seed.callback:
            callback = getattr(self, seed.callback, None)
            if seed.callback.startswith("_") or not callable(callback):
                raise SeedError("bad_callback", f"callback {seed.callback!r} is not a method of spider {self.name!r}")
        return seed.to_request(callback)

    def _seed_requests(self, raw: bytes) -> list[Request]:
        """`make_request_from_data` as a list (a subclass's may return one request, several, or
        none), with whatever it raises on bad data as a SeedError."""
        try:
            made = self.make_request_from_data(raw)
            if made is None:
                made = []
            requests = [made] if isinstance(made, Request) else list(made) if isinstance(made, Iterable) else [made]
        except SeedError:
            raise
        except Exception as exc:  # noqa: BLE001 - a seed is data: it never stops the spider
            raise SeedError("bad_request", f"not a valid request ({type(exc).__name__}: {str(exc)[:200]})") from None
        wrong = next((r for r in requests if not isinstance(r, Request)), None)
        if wrong is not None:
            raise SeedError("bad_request", f"make_request_from_data returned a {type(wrong).__name__}, not a Request")
        if not requests:
            self.logger.debug("Request not made from data: %r", preview(raw))
        return requests

    def _expected_types(self) -> dict[str, tuple[str, ...]]:
        """The Redis types of the keys `start()` reads (seeds, and the queues idle-close counts)."""
        assert self.redis_key is not None  # set when the crawler is
        return {self.redis_key: (self.seeds_as,), self.seed_key.taken: ("zset",)}

    async def _redis_refused(self, client: AsyncRedis, exc: BaseException) -> None:
        """A key of the wrong type or a script error: one ERROR line, the spider keeps polling."""
        if not isinstance(exc, ResponseError):
            raise exc  # a bug
        if is_wrong_type(exc):
            await self._wrong_types.check(client, self._expected_types(), exc=exc)
        else:
            self._data_errors.failed(
                "reading seeds",
                "Redis refused reading seeds from %s (%s); the spider keeps polling with backoff",
                self.redis_key,
                exc,
                exc_info=exc,
            )

    async def _redis_ok(self, client: AsyncRedis) -> None:
        self._data_errors.ok("reading seeds")
        if self._wrong_types.reported:
            await self._wrong_types.resolved(client, self._expected_types())

    def _reject(self, raw: bytes, error: SeedError) -> str:
        self._rejected[error.kind] += 1
        self.crawler.stats.inc_value(f"seeds/rejected/{error.kind}")
        if self._rejected[error.kind] == 1:
            logger.warning(
                "Rejected a seed from %s (%s): %s: %r; further %s rejects are counted in "
                "stats seeds/rejected/%s and listed by `dcrawl failed %s`",
                self.redis_key,
                error.kind,
                error.reason,
                preview(raw),
                error.kind,
                error.kind,
                self.name,
            )
        return failure_entry(
            preview(raw),
            f"rejected seed: {error.reason}",
            self.node_id,
            source="seed",
            kind=error.kind,
            payload=raw_preview(raw),
        )

    def _log_rejected_summary(self, spider: Any) -> None:
        if self._rejected:
            logger.warning("Rejected seeds: %s", ", ".join(f"{k}={v}" for k, v in sorted(self._rejected.items())))

    # -- Scrapy 2.19 start ----------------------------------------------------------------
    async def start(self) -> AsyncIterator[Any]:
        context = RedisContext.of(self.crawler).acquire()
        client = context.client
        dead_letters = DeadLetters(client, self.keys.failed, self.node_id, self._failed_max)
        idle_since: float | None = None
        poll = POLL_MIN
        assert self.max_idle_time is not None  # set when the crawler is

        async def take_round() -> tuple[Taken, list[Request], bool]:
            """Seeds as requests, their rejects dead-lettered, and whether the cluster is busy; on
            any failure the batch is let go (its holds expire, its seeds come back)."""
            taken: Taken | None = None
            try:
                taken = await self._take_seeds(client)
                raws = taken.seeds
                if raws and self._take_pause:
                    await asyncio.sleep(self._take_pause)
                rejects = []
                requests = []
                for raw in raws:
                    try:
                        requests.extend(self._seed_requests(raw))
                    except SeedError as exc:
                        rejects.append(self._reject(raw, exc))
                if rejects:
                    await dead_letters.push(rejects)
                frontier = self._frontier(client)
                busy = bool(raws) or self.max_idle_time == 0 or (await frontier.counts(seeds=True)).busy
                busy = busy or await CrawlControl.of(frontier).pause_state() is not None  # paused: no idle close
            except BaseException:
                self._let_go(taken)
                raise
            return taken, requests, busy

        renewing = asyncio.get_running_loop().create_task(self._renew_holds(client), name="dc-seed-holds")
        try:
            while True:
                # SEED: Redis away (or a key of the wrong type: one ERROR line), the spider waits
                taken, requests, busy = await context.policy.run(
                    Purpose.SEED,
                    take_round,
                    on_error=partial(self._redis_refused, client),
                    on_ok=partial(self._redis_ok, client),
                )
                raws = taken.seeds
                for request in requests:
                    yield request
                if taken.holds:
                    await self._seeds_enqueued(client, taken.holds)
                if raws:
                    idle_since, poll = None, POLL_MIN
                    continue
                if busy:
                    idle_since = None
                else:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since >= self.max_idle_time:
                        logger.info(
                            "Cluster idle for %.0fs (MAX_IDLE_TIME_BEFORE_CLOSE): closing this node",
                            self.max_idle_time,
                        )
                        asyncio.get_running_loop().call_later(0.05, wake_engine, self.crawler)
                        return
                await asyncio.sleep(poll)
                poll = min(poll * 2, POLL_MAX)
        finally:
            renewing.cancel()
            await context.release()


async def _next_round(exc: BaseException) -> None:
    """`on_error` of the hold renewal: reading seeds reports a bad key; renewed next round."""
    if not isinstance(exc, ResponseError):
        raise exc


class RedisSpider(RedisMixin, Spider):
    """A spider fed from `redis_key` (default `<name>:start_urls`); `parse` handles the seeds."""


class RedisCrawlSpider(RedisMixin, CrawlSpider):
    """A CrawlSpider fed from `redis_key`: seeds go through its `rules`, and the requests the rules
    follow travel through the cluster's queue like any other (frontier/callbacks.py)."""
