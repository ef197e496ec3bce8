"""`ChangeFeedExtension`: builds the node's change feed and checks the sources for silence.

The feed (events/feed.py) is attached to the crawler for the storage pipeline (extensions are
built before item pipelines). Every `SOURCE_CHECK_SECONDS` one node of the cluster (whichever takes
the `{spider}:sources:check` lock first) reads the sources, raises `source_silent` once when one
goes silent and once when it publishes again (monitoring/alerts.py: log, `{spider}:alerts`,
`ALERT_WEBHOOK_URL`), alerts `extraction_drift` (events/drift.py) and `coverage_low`
(events/coverage_alert.py) the same way, and drops the least recently active sources beyond
`SOURCES_MAX`. Every few seconds each node writes the coverage it gathered (events/coverage.py)
unless a change-feed write took it first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

from distributed_crawler.connection.calls import server_time
from distributed_crawler.connection.policy import Purpose
from distributed_crawler.connection.types import AsyncRedis
from distributed_crawler.core.context import RedisContext
from distributed_crawler.core.registry import SourceCache
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.events.coverage import FLUSH_SECONDS
from distributed_crawler.events.coverage_alert import check_coverage
from distributed_crawler.events.drift import check_drift
from distributed_crawler.events.feed import ChangeFeed, EventsConfig
from distributed_crawler.events.sources import SourceHealth, SourcesConfig, members, read_named_sources, read_sources
from distributed_crawler.internals import spider_closing
from distributed_crawler.keyspace import fill
from distributed_crawler.keyspace import key as spider_key
from distributed_crawler.monitoring.alerts import AlertConfig, Alerter
from distributed_crawler.storage.changes import attach

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

_FEEDS: weakref.WeakKeyDictionary[Any, ChangeFeed] = weakref.WeakKeyDictionary()
SOURCE_SILENT = "source_silent"
CLOSE_FLUSH_SECONDS = 5.0  # longest wait for the last coverage write of a closing node
# A check reads and judges this many sources at once: the checking node's memory holds their
# health and coverage (~5 KB a source), not every source's (a wide crawl keeps up to SOURCES_MAX).
CHECK_CHUNK = 1_000
# A check covers at most this many sources; more are checked in turn, one slice per interval, so
# a check's Redis work does not grow with the sources kept (each is seen every ceil(n / 10,000)
# intervals: 10 min at 100,000 sources with the 60 s default).
CHECK_SLICE = 10_000


def check_slice(kept: int, now: float, interval: float) -> range:
    """The ranks (most recently active first) of the sources the check at *now* covers: all of
    them up to CHECK_SLICE, else the slice whose turn it is (one per interval, round the clock)."""
    slices = max(1, -(-kept // CHECK_SLICE))
    start = int(now // interval) % slices * CHECK_SLICE
    return range(start, min(kept, start + CHECK_SLICE))


async def check_sources(
    client: AsyncRedis, config: SourcesConfig, spider: str, alerter: Any, now: float
) -> tuple[list[tuple[str, bool]], list[tuple[str, str, str]], list[tuple[str, bool]]]:
    """One check (silence, drift, coverage) of this interval's slice of the sources, CHECK_CHUNK at
    a time, then the sources beyond SOURCES_MAX dropped; returns what each check alerted."""
    index = config.index_key(spider)
    kept = min(int(await client.zcard(index)), config.max_sources)
    ranks = check_slice(kept, now, config.check_seconds)
    silent: list[tuple[str, bool]] = []
    drift: list[tuple[str, str, str]] = []
    coverage: list[tuple[str, bool]] = []
    for first in range(ranks.start, ranks.stop, CHECK_CHUNK):
        names = await client.zrevrange(index, first, min(ranks.stop, first + CHECK_CHUNK) - 1)
        sources = [n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n) for n in members(names, index)]
        if not sources:
            break
        healths = await read_named_sources(client, config, spider, sources, now)
        silent += await check_silence(client, config, spider, alerter, now, healths, trim=False)
        drift += await check_drift(client, config, spider, alerter, now, healths)
        coverage += await check_coverage(client, config, spider, alerter, now, sources)
    await _trim(client, config, spider)
    return silent, drift, coverage


async def check_silence(
    client: AsyncRedis,
    config: SourcesConfig,
    spider: str,
    alerter: Any,
    now: float,
    healths: list[SourceHealth] | None = None,
    trim: bool = True,
) -> list[tuple[str, bool]]:
    """Raise `source_silent` for each source that entered or left silence; returns (source, silent)
    of those alerted. The `silent` flag in the source's hash makes each transition alert once.
    *healths*: the sources as read for this check (else read here); *trim*: then drop the sources
    beyond SOURCES_MAX (a check in chunks does it once, at its end)."""
    changed: list[tuple[str, bool]] = []
    if healths is None:
        healths = await read_sources(client, config, spider, now, config.max_sources)
    for health in healths:
        silent = health.is_silent(now, config.silent_min_hours)
        if silent == health.silent_flag or health.last is None:
            continue
        await client.hset(config.key_of(spider, health.source), "silent", "1" if silent else "0")
        await alerter.alert(
            SOURCE_SILENT, "-", _message(health, silent, now, config), now, **_details(health, silent, now)
        )
        changed.append((health.source, silent))
    if trim:
        await _trim(client, config, spider)
    return changed


def _message(health: SourceHealth, silent: bool, now: float, config: SourcesConfig) -> str:
    hours = (now - (health.last or now)) / 3600
    if silent:
        return (
            f"source {health.source} published nothing new for {hours:.1f} h "
            f"(silent after {health.silent_after(config.silent_min_hours) / 3600:.1f} h); check the site"
        )
    return f"source {health.source} publishes again"


def _details(health: SourceHealth, silent: bool, now: float) -> dict[str, Any]:
    return {"source": health.source, "state": "silent" if silent else "recovered", "last_new": health.last}


async def _trim(client: AsyncRedis, config: SourcesConfig, spider: str) -> None:
    """Drop the least recently active sources beyond SOURCES_MAX (their hashes too)."""
    index = config.index_key(spider)
    extra = int(await client.zcard(index)) - config.max_sources
    if extra <= 0:
        return
    names = await client.zrange(index, 0, extra - 1)
    pipe = client.pipeline(transaction=False)
    for raw in names:
        if not isinstance(raw, (bytes, str)):  # ZRANGE without scores: members only
            raise ValueError(f"{index}: ZRANGE gave {raw!r:.60}, not a member")
        name = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        pipe.delete(config.key_of(spider, name), config.coverage_key_of(spider, name))
        pipe.zrem(index, raw)
    await pipe.execute()


class ChangeFeedExtension:
    def __init__(self, crawler: Crawler, feed: ChangeFeed, sources: SourcesConfig) -> None:
        self.crawler = crawler
        self.feed = feed
        self.sources = sources
        self.context = RedisContext.of(crawler)
        self.alert_config = AlertConfig.from_settings(crawler.settings)
        self.alerts_key = SettingsReader(crawler.settings).str("ALERTS_KEY")
        self._task: asyncio.Task[None] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._alerter: Alerter | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ChangeFeedExtension:
        config = EventsConfig.from_settings(crawler.settings)
        if not config.enabled:
            raise NotConfigured("EVENTS_ENABLED is off")
        if crawler.spider is None:
            raise NotConfigured("no spider: the change feed needs the spider's name")
        sources = SourcesConfig.from_settings(crawler.settings)
        context = RedisContext.of(crawler)
        skipped_hosts = spider_key(crawler.settings, "LANGUAGE_SKIPPED_KEY", crawler.spider.name)
        feed = ChangeFeed(
            config,
            sources,
            lambda: context.client,
            crawler.spider.name,
            context.policy,
            lambda: spider_closing(crawler),
            source_name=lambda url: SourceCache.of(crawler).label(url)[0],
            counts_keys=(context.keys.stats, skipped_hosts),
        )
        _FEEDS[crawler] = feed
        attach(crawler, feed)
        ext = cls(crawler, feed, sources)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    @staticmethod
    def feed_of(crawler: Crawler) -> ChangeFeed | None:
        return _FEEDS.get(crawler)

    async def spider_opened(self, spider: Spider) -> None:
        self.context.acquire()
        self._alerter = Alerter(
            self.alert_config,
            self.context.client,
            fill(self.alerts_key, spider.name),
            spider.name,
            self.context.node_id,
            self.context.policy,
        )
        self._task = asyncio.ensure_future(self._check_loop(spider.name))
        self._flusher = asyncio.ensure_future(self._flush_loop())

    async def spider_closed(self, spider: Spider) -> None:
        for task in (self._task, self._flusher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self._flush_coverage(timeout=CLOSE_FLUSH_SECONDS)
        if self._alerter is not None:
            await self._alerter.close()
        logger.info("Change feed: %d events written to %s", self.feed.published, self.feed.stream)
        await self.context.release()

    async def _check_loop(self, spider: str) -> None:
        lock = self.sources.check_lock(spider)
        interval = self.sources.check_seconds

        async def check() -> None:
            client = self.context.client
            # one node per interval: the first to take the lock checks, the others skip
            if await client.set(lock, self.context.node_id, nx=True, px=max(1, int(interval * 900))):
                now = await server_time(client)
                await check_sources(client, self.sources, spider, self._alerter, now)

        async def garbage(exc: BaseException) -> None:  # a bug or garbage: logged, the next interval tries again
            logger.error("Source check failed: %s", exc)

        while True:
            await asyncio.sleep(interval)
            # STATS: skipped while Redis is away (the node's one outage line says so)
            await self.context.policy.run(Purpose.STATS, check, on_error=garbage)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self._flush_coverage(timeout=CLOSE_FLUSH_SECONDS)

    async def _flush_coverage(self, timeout: float) -> None:
        """STATS: Redis away, this write's coverage is lost (counts only; the next ones are written)."""

        async def flush() -> None:
            await asyncio.wait_for(self.feed.flush_coverage(), timeout)

        async def refused(exc: BaseException) -> None:
            logger.debug("Coverage not written: %r", exc)

        await self.context.policy.run(Purpose.STATS, flush, on_error=refused)
