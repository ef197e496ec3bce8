"""`SCHEDULER`: one Redis frontier shared by every node, with leases, no pickle, no blocked reactor.

Scrapy glue only: Scrapy's scheduler API is synchronous, so the Redis work runs in background
tasks, one module each: core/intake.py + outbox.py (enqueue, batched push), feeder.py (lease into a
local buffer, doorbell), quarantine.py, lease_keeper.py (ack, renew, reclaim, release),
cluster_work.py (the cluster's counts), pause.py (the crawl's pause), trouble.py (Redis errors).
Open binds the frontier to the node's client, opens the dupefilter and builds every part once with
its final arguments (`build_parts`); the parts share one Lifecycle (closing, then stopped). The
frontier (frontier/base.py) alone knows the keys and scripts of the queue mode.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.misc import build_from_crawler, load_object

from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.policy import Purpose
from distributed_crawler.connection.types import AsyncRedis, SyncRedis
from distributed_crawler.core.admission import Admission, Refusal
from distributed_crawler.core.cluster_work import ClusterWork
from distributed_crawler.core.context import RedisContext
from distributed_crawler.core.feeder import Feeder, Held
from distributed_crawler.core.heap import freeze_startup_heap
from distributed_crawler.core.intake import Intake
from distributed_crawler.core.lease_keeper import LeaseKeeper
from distributed_crawler.core.leases import LeaseTracker
from distributed_crawler.core.lifecycle import Lifecycle
from distributed_crawler.core.outbox import Outbox
from distributed_crawler.core.overrides import OverrideCache
from distributed_crawler.core.pause import PauseWatch
from distributed_crawler.core.quarantine import Quarantine
from distributed_crawler.core.refusals import RefusalLog
from distributed_crawler.core.registry import SourceCache, source_scope_check
from distributed_crawler.core.scheduler_config import SchedulerConfig, redis_dupefilter
from distributed_crawler.core.shutdown import FORCED_STOP, SecondSignalGuard
from distributed_crawler.core.tasks import BackgroundTasks
from distributed_crawler.core.traps import DomainHosts
from distributed_crawler.core.trouble import RedisTrouble
from distributed_crawler.dedup.dupefilter import flush_crawl
from distributed_crawler.dedup.recent import RecentFingerprints
from distributed_crawler.frontier.base import Frontier, RevisitRecord
from distributed_crawler.frontier.codec import RequestCodec
from distributed_crawler.frontier.enqueue import Enqueuer
from distributed_crawler.internals import requests_in_progress, wake_engine
from distributed_crawler.storage.labels import attach_labels

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

__all__ = ["RedisScheduler", "SchedulerConfig"]
logger = logging.getLogger(__name__)
PUSH_POLL = 0.02  # how often wait_pushed looks at the outbox (the spider acks its seeds after)
MEMUSAGE_CLOSE = "memusage_exceeded"  # the close reason of Scrapy's MemoryUsage extension (MEMUSAGE_LIMIT_MB)


@dataclass(frozen=True)
class SchedulerParts:
    """The scheduler's parts on one frontier, built once at open (RedisScheduler.build_parts)."""

    frontier: Frontier  # bound to this node's client
    trouble: RedisTrouble
    held: Held
    work: ClusterWork
    outbox: Outbox
    quarantine: Quarantine
    pause: PauseWatch
    keeper: LeaseKeeper
    feeder: Feeder
    intake: Intake


class RedisScheduler:
    def __init__(
        self,
        crawler: Crawler,
        config: SchedulerConfig,
        redis_config: RedisConfig,
        frontier: Frontier,
        dupefilter: Any,
        node_id: str,
        context: RedisContext | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.config = config
        self.redis_config = redis_config
        self.df = dupefilter
        self.node_id = node_id
        self.context = context or RedisContext.of(crawler)  # the node's one client, shared
        self.admission = admission or Admission.from_settings(crawler.settings)
        self.client: AsyncRedis | None = None  # set by open(): Scrapy uses a scheduler only once it is open
        self._frontier = frontier  # unbound until open
        # shared by the parts, and read before open or after close (leases_held, the heartbeat's)
        self.lifecycle = Lifecycle()
        self.leases = LeaseTracker()
        self.recent = RecentFingerprints(config.recent_fingerprints)
        self.refusals = RefusalLog.of_node(crawler, node_id, frontier.spider)
        self.tasks = BackgroundTasks(crawler, self.lifecycle)
        self.parts: SchedulerParts | None = None  # built by open()
        self._guard: SecondSignalGuard | None = None
        self._len_client: SyncRedis | None = None  # sync client of __len__ (Scrapy's API is synchronous)
        self._sources = SourceCache.of(crawler)
        attach_labels(crawler, self._sources)  # rows get their source (storage/labels.py)

    @property
    def frontier(self) -> Frontier:
        """The spider's frontier (on this node's client once open)."""
        return self.parts.frontier if self.parts is not None else self._frontier

    @property
    def _open_parts(self) -> SchedulerParts:
        if self.parts is None:
            raise RuntimeError("RedisScheduler used before open(): Scrapy opens its scheduler first")
        return self.parts

    def build_parts(
        self, frontier: Frontier, trouble: RedisTrouble, enqueuer: Enqueuer, codec: RequestCodec
    ) -> SchedulerParts:
        """Every part once, with its final arguments, in the order they need each other: `frontier`
        on this node's client, `trouble` on it, `enqueuer` on the opened dupefilter (what open()
        passes; a unit test may pass fakes)."""
        crawler, config, stats, node_id, lifecycle = self.crawler, self.config, self.stats, self.node_id, self.lifecycle
        held = Held(ready=partial(wake_engine, crawler))
        dead_letters = frontier.dead_letters(node_id, config.failed_max)
        quarantine = Quarantine(frontier, trouble, self.leases, held.buffer, crawler, node_id)

        # the counts and the outbox need each other: each reads the other only once their tasks run
        def holds_work() -> bool:
            return bool(held.buffer or held.back or outbox.entries or quarantine.request)

        work = ClusterWork(frontier, trouble, lifecycle, holds_work, partial(wake_engine, crawler))

        def pushed(n: int) -> None:
            work.pushed(n)
            held.new_work.set()

        outbox = Outbox(
            frontier,
            trouble,
            enqueuer,
            dead_letters.cap,
            self.leases,
            self.refusals,
            DomainHosts(frontier.domain_hosts_key, config.domain_max_hosts),
            stats,
            lifecycle,
            on_pushed=pushed,
        )
        pause = PauseWatch(
            frontier,
            self.context.policy,
            OverrideCache.of(crawler),
            self._sources,
            wake=(held.want_more, held.new_work),
            lifecycle=lifecycle,
        )
        keeper = LeaseKeeper(
            config,
            frontier,
            trouble,
            self.leases,
            outbox,
            quarantine,
            held,
            partial(requests_in_progress, crawler),
            stats,
            node_id,
            lifecycle,
            each_round=self._reinstall_guard,
        )
        feeder = Feeder(
            config,
            frontier,
            codec,
            trouble,
            self.leases,
            quarantine,
            pause,
            dead_letters,
            keeper.release,
            held,
            self.recent,
            crawler,
            lifecycle,
        )
        intake = Intake(
            config,
            frontier,
            codec,
            trouble,
            self.leases,
            outbox,
            self.recent,
            self.df,
            self.admission,
            self.refusals,
            stats,
            held.back,
        )
        return SchedulerParts(frontier, trouble, held, work, outbox, quarantine, pause, keeper, feeder, intake)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisScheduler:
        settings = crawler.settings
        assert crawler.spider is not None
        dupefilter = redis_dupefilter(build_from_crawler(load_object(settings["DUPEFILTER_CLASS"]), crawler), settings)
        context = RedisContext.of(crawler)
        config = SchedulerConfig.from_settings(settings)
        frontier = context.new_frontier(crawler.spider.name)  # bound to the node's client at open
        admission = Admission.from_settings(settings, extra=(source_scope_check(SourceCache.of(crawler)),))
        return cls(crawler, config, context.config, frontier, dupefilter, context.node_id, context, admission)

    def open(self, spider: Spider) -> Deferred[None]:
        # Scrapy awaits a Deferred here, not a coroutine.
        return deferred_from_coro(self._open(spider))

    def close(self, reason: str) -> Deferred[None]:
        return deferred_from_coro(self._close(reason))

    async def open_parts(self, spider: Spider) -> SchedulerParts:
        """Take this node's client, bind the frontier to it, open the dupefilter and build the parts
        (open() then starts their tasks; the caller releases the client: close() does)."""
        self.client = self.context.acquire().client
        frontier = self._frontier.bind(self.client)
        trouble = RedisTrouble(frontier, self.df, self.context.policy, self.recent, self.lifecycle)
        opening = partial(frontier.open_enqueuer, partial(self.df.open_dedup_at, self.client))
        enqueuer = await trouble.run(Purpose.LEASE, "opening the dupefilter", opening)
        codec = RequestCodec(spider, self.config.allowed_classes)
        self.parts = self.build_parts(frontier, trouble, enqueuer, codec)
        return self.parts

    async def _open(self, spider: Spider) -> None:
        parts = await self.open_parts(spider)
        frontier, trouble = parts.frontier, parts.trouble
        if self.config.flush_on_start:
            await self.flush()
        await trouble.run(Purpose.LEASE, "checking the frontier layout", frontier.check_layout)
        counts = await trouble.run(Purpose.LEASE, "counting the queue", parts.work.count)
        if counts.scheduled:  # scrapy-redis's line, so existing log watchers keep working
            logger.info("Resuming crawl (%d requests scheduled)", counts.scheduled)
        parts.keeper.watch_scrapes(self.crawler)
        await parts.pause.refresh()  # a crawl paused before this node started: it leases nothing either
        self.tasks.start(
            {
                "outbox": parts.outbox.run(),
                "feeder": parts.feeder.run(),
                "pause": parts.pause.run(),
                "leases": parts.keeper.run(),
                "doorbell": parts.feeder.run_doorbell(self.context.pubsub_client, self.redis_config.masked_url),
                "counts": parts.work.run(),
            }
        )
        frozen = freeze_startup_heap()
        if threading.current_thread() is threading.main_thread():
            # Scrapy installs its own handlers once the reactor runs, and swaps them on the first
            # signal: the lease task re-wraps whatever is installed (a no-op when ours is on top).
            self._guard = SecondSignalGuard(self._force_release, on_first=self.lifecycle.stop_taking)
            self._guard.install()
        logger.info(
            "Scheduler on %s: queue %s (%s), lease %ss, node %s (%d startup objects frozen for gc)",
            self.redis_config.masked_url,
            frontier.index_key,
            frontier.mode,
            self.config.lease_seconds,
            self.node_id,
            frozen,
        )

    def _reinstall_guard(self) -> None:
        if self._guard is not None:
            self._guard.install()

    def _force_release(self) -> None:
        """Second stop signal (runs in the signal handler): ack what is done, release the rest, then
        tell the heartbeat (FORCED_STOP: the node is closed, unless it still holds leases)."""
        client = self.redis_config.sync_client()
        try:
            if self.parts is not None:
                self.parts.keeper.force_release(client)
        except Exception:  # noqa: BLE001 - leases then expire and are reclaimed; nothing is lost
            pass
        try:
            self.crawler.signals.send_catch_log(FORCED_STOP, client=client, leases_held=self.leases_held)
        finally:
            client.close()

    async def _close(self, reason: str) -> None:
        self.lifecycle.stop_taking()
        parts = self.parts
        if parts is not None:
            # the feeder's last lease lands in the buffer, released below
            await self.tasks.finish("feeder", parts.feeder.wake)
            await parts.keeper.release(parts.keeper.unstarted())
            parts.held.buffer.clear()
            await parts.keeper.settle(self.tasks, reason == MEMUSAGE_CLOSE, self.redis_config.masked_url)
            if not self.config.persist:  # as in scrapy-redis: on every close reason, not only "finished"
                await self.flush()
        self.lifecycle.stop()
        if self._len_client is not None:
            self._len_client.close()
            self._len_client = None
        self.df.close(reason)
        if self.client is not None:
            await self.context.release()  # the last user closes the node's client
        if self._guard is not None:  # only now: a forced stop during the drain still releases
            self._guard.uninstall()

    async def flush(self) -> None:
        """Delete the crawl's frontier and filter, and drop what this node holds of it: requests
        still in the outbox or buffered are part of the frontier being flushed."""
        parts = self._open_parts
        dropped = parts.outbox.drop()
        buffered = parts.keeper.unstarted()
        parts.held.buffer.clear()
        parts.quarantine.forget()
        self.leases.forget(buffered + [e.handover for e in dropped if e.handover])
        await flush_crawl(parts.frontier, self.df.key)
        parts.work.reset()
        self.recent.clear()

    # -- Scrapy's scheduler interface -----------------------------------------------------
    def has_pending_requests(self) -> bool:
        """Work this node holds, work on its way to Redis, or work anywhere in the cluster (as last
        counted): a node closes only when the whole crawl has nothing left for it."""
        parts = self.parts
        if parts is None:
            return False
        busy = (
            bool(parts.held.buffer or parts.held.back or parts.outbox.entries) or parts.quarantine.request is not None
        )
        return busy or parts.work.busy or parts.pause.paused  # paused: waits, never idle-closes

    def outbox_mark(self) -> int:
        """The last request enqueued so far: `wait_pushed(mark)` returns once it is in Redis."""
        return self._open_parts.outbox.enqueued_seq

    async def wait_pushed(self, mark: int) -> bool:
        """Wait until every request enqueued up to `mark` is pushed (or refused); False if the node
        stopped first (the spider's seed holds then expire and the seeds come back)."""
        outbox = self._open_parts.outbox
        while outbox.flushed_seq < mark:
            if self.lifecycle.stopped:
                return False
            await asyncio.sleep(PUSH_POLL)
        return True

    def enqueue_request(self, request: Request) -> bool:
        return self._open_parts.intake.enqueue(request)

    def already_sent(self, request: Request) -> bool:
        """A link this node sent to the shared filter lately (Intake.already_sent): the news spider
        asks before it yields one."""
        return self.parts is not None and self.parts.intake.already_sent(request)

    def refuse(self, request: Request, refusal: Refusal, source: str = "download", counted: bool = False) -> None:
        """A request refused after it left the queue (e.g. at connect time): see Intake.refuse."""
        self._open_parts.intake.refuse(request, refusal, source, counted)

    def record_with_ack(self, lease: bytes, record: RevisitRecord, on_reply: Callable[[Any], None]) -> bool:
        """Write a page's revisit record in the call that acks its lease (LeaseTracker.record_with_ack):
        False when this node is not scraping that lease (the caller writes the record itself)."""
        return self.parts is not None and self.leases.record_with_ack(lease, record, on_reply)

    async def mark_seen(self, requests: Sequence[Request]) -> list[bool]:
        """Add the requests' fingerprints to the seen-filter without queueing them; True = it was new."""
        return await self._open_parts.intake.mark_seen(requests)

    def next_request(self) -> Request | None:
        parts = self._open_parts
        request = parts.quarantine.take() or parts.feeder.take()
        if request is not None:
            self.stats.inc_value("scheduler/dequeued/redis")
        return request

    def __len__(self) -> int:
        """The shared queue, as in scrapy-redis: requests waiting in Redis (any node's, delayed
        retries included; the pending counter, exact in every queue mode), plus what this node
        holds but has not handed to the engine. One blocking round trip, like scrapy-redis's."""
        parts = self.parts
        if parts is None:  # not open: holds nothing
            return 0
        local = len(parts.held.buffer) + len(parts.held.back) + len(parts.outbox)
        if self.client is None:  # parts built without a client (a unit test): what this node holds
            return local
        if self._len_client is None:
            self._len_client = self.redis_config.sync_client()
        return parts.work.count_sync(self._len_client).scheduled + local

    @property
    def leases_held(self) -> int:
        """Leases this node holds in Redis: buffered, running, waiting for their ack, being given back."""
        return self.leases.in_redis()

    @property
    def stalled_seconds(self) -> float:
        """How long this node has held leases with nothing in flight, once longer than a lease (else 0).
        Looked at now too (on the reactor's thread; Prometheus reads from its own), so a lease task
        stuck in a retry cannot hide a stall from the heartbeat."""
        if self.parts is None:
            return 0.0
        if threading.current_thread() is threading.main_thread():
            self.parts.keeper.watch_stall()
        return self.parts.keeper.stall.seconds(time.monotonic())
