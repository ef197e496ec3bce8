"""`SCHEDULER`: one Redis frontier shared by every node, with leases, no pickle, no blocked reactor.

Scrapy glue only: Scrapy's scheduler API is synchronous, so the Redis work runs in background
tasks, one module each: core/intake.py + outbox.py (enqueue, batched push), feeder.py (lease into a
local buffer, doorbell), quarantine.py, lease_keeper.py (ack, renew, reclaim, release),
cluster_work.py (the cluster's counts), trouble.py (Redis errors). The frontier (queue/base.py)
alone knows the keys and scripts of the queue mode.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.misc import build_from_crawler, load_object

from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.policy import Purpose
from distributed_crawler.core.admission import Admission, Refusal
from distributed_crawler.core.cluster_work import ClusterWork
from distributed_crawler.core.context import RedisContext
from distributed_crawler.core.feeder import Feeder
from distributed_crawler.core.heap import freeze_startup_heap
from distributed_crawler.core.intake import Intake
from distributed_crawler.core.lease_keeper import LeaseKeeper
from distributed_crawler.core.leases import LeaseTracker
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
from distributed_crawler.internals import requests_in_progress, wake_engine
from distributed_crawler.queue.base import Frontier
from distributed_crawler.queue.codec import RequestCodec
from distributed_crawler.storage.labels import attach_labels

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

__all__ = ["RedisScheduler", "SchedulerConfig"]
logger = logging.getLogger(__name__)
PUSH_POLL = 0.02  # how often wait_pushed looks at the outbox (the spider acks its seeds after)
MEMUSAGE_CLOSE = "memusage_exceeded"  # the close reason of Scrapy's MemoryUsage extension (MEMUSAGE_LIMIT_MB)


class RedisScheduler:
    keeper: LeaseKeeper  # built after the feeder, which releases leases through it

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
        self.client: Any = None  # set by open(): Scrapy uses a scheduler only once it is open
        self._frontier = frontier
        self.leases = LeaseTracker()
        self.buffer: deque[Request] = deque()
        self.recent = RecentFingerprints(config.recent_fingerprints)
        self._closing = False  # no more leasing
        self.tasks = BackgroundTasks(crawler, lambda: self._closing)
        self._stopped = False  # background loops end
        self._guard: SecondSignalGuard | None = None
        self._len_client: Any = None  # sync client of __len__ (Scrapy's API is synchronous)
        get = lambda: self.frontier  # noqa: E731 - the parts follow the frontier as it is bound
        stopped = lambda: self._stopped  # noqa: E731
        self.trouble = RedisTrouble(get, dupefilter, self.context.policy, self.recent, stopped)
        self.work = ClusterWork(get, self.trouble)
        self.refusals = refusals = RefusalLog(crawler.stats, node_id)
        domain_hosts = DomainHosts(frontier.domain_hosts_key, config.domain_max_hosts)
        self.outbox = Outbox(get, self.trouble, self.stats, refusals, domain_hosts, self._pushed, self.leases)
        self.quarantine = Quarantine(get, self.trouble, self.leases, self.buffer, crawler, node_id)
        parts = (config, get, self.trouble, self.leases)
        release = lambda leases: self.keeper.release(leases)  # noqa: E731
        self.feeder = Feeder(*parts, self.buffer, self.recent, self.quarantine, crawler, release)
        attach_labels(crawler, sources := SourceCache.of(crawler))  # rows get their source (storage/labels.py)
        self.pause = self.feeder.pause = PauseWatch(get, self.context.policy, OverrideCache.of(crawler), sources)
        self.pause.wake += [self.feeder.want_more, self.feeder.new_work]
        engine = partial(requests_in_progress, crawler)
        self.keeper = LeaseKeeper(*parts, self.outbox, self.quarantine, self.feeder, self.stats, node_id, engine)
        admission = admission or Admission.from_settings(crawler.settings)
        self.intake = Intake(*parts, self.outbox, self.recent, dupefilter, admission, refusals, self.stats)
        self.already_sent = self.intake.already_sent  # the news spider asks before it yields a link

    @property
    def frontier(self) -> Frontier:
        """The spider's frontier on this node's client (bound when the client is set, at open)."""
        if self._frontier.client is not self.client:
            self._frontier = self._frontier.bind(self.client)
        return self._frontier

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

    async def _open(self, spider: Spider) -> None:
        self.client = self.context.acquire().client
        opening = partial(self.frontier.open_enqueuer, partial(self.df.open_dedup_at, self.client))
        self.outbox.enqueuer = await self.trouble.run(Purpose.LEASE, "opening the dupefilter", opening)
        self.intake.codec = self.feeder.codec = RequestCodec(spider, self.config.allowed_classes)
        self.outbox.dead_letters = self.feeder.dead_letters = self.frontier.dead_letters(
            self.node_id, self.config.failed_max
        )
        if self.config.flush_on_start:
            await self.flush()
        await self.trouble.run(Purpose.LEASE, "checking the frontier layout", self.frontier.check_layout)
        counts = await self.trouble.run(Purpose.LEASE, "counting the queue", self.work.count)
        if counts.scheduled:  # scrapy-redis's line, so existing log watchers keep working
            logger.info("Resuming crawl (%d requests scheduled)", counts.scheduled)
        self.keeper.watch_scrapes(self.crawler)
        await self.pause.refresh()  # a crawl paused before this node started: it leases nothing either
        stopped, closing = (lambda: self._stopped), (lambda: self._closing)
        holds_work = lambda: bool(self.buffer or self.outbox.entries or self.quarantine.request)  # noqa: E731
        pubsub, url = (lambda: self.context.pubsub_client), self.redis_config.masked_url
        self.tasks.start(
            {
                "outbox": self.outbox.run(stopped),
                "feeder": self.feeder.run(closing),
                "pause": self.pause.run(stopped),
                "leases": self.keeper.run(stopped, self._reinstall_guard),
                "doorbell": self.feeder.run_doorbell(pubsub, url, stopped),
                "counts": self.work.run(stopped, holds_work, lambda: wake_engine(self.crawler)),
            }
        )
        frozen = freeze_startup_heap()
        if threading.current_thread() is threading.main_thread():
            # Scrapy installs its own handlers once the reactor runs, and swaps them on the first
            # signal: the lease task re-wraps whatever is installed (a no-op when ours is on top).
            self._guard = SecondSignalGuard(self._force_release, on_first=self._stop_taking)
            self._guard.install()
        logger.info(
            "Scheduler on %s: queue %s (%s), lease %ss, node %s (%d startup objects frozen for gc)",
            self.redis_config.masked_url,
            self.frontier.index_key,
            self.frontier.mode,
            self.config.lease_seconds,
            self.node_id,
            frozen,
        )

    def _pushed(self, n: int) -> None:
        self.work.pushed(n)
        self.feeder.new_work.set()

    def _reinstall_guard(self) -> None:
        if self._guard is not None:
            self._guard.install()

    def _stop(self) -> None:
        self._stopped = True  # the loops check it too: a cancel swallowed inside redis-py ends them

    def _stop_taking(self) -> None:
        """First stop signal: lease nothing more (no pop may race the forced release)."""
        self._closing = True

    def _force_release(self) -> None:
        """Second stop signal (runs in the signal handler): ack what is done, release the rest, then
        tell the heartbeat (FORCED_STOP: the node is closed, unless it still holds leases)."""
        client = self.redis_config.sync_client()
        try:
            self.keeper.force_release(client)
        except Exception:  # noqa: BLE001 - leases then expire and are reclaimed; nothing is lost
            pass
        try:
            self.crawler.signals.send_catch_log(FORCED_STOP, client=client, leases_held=self.leases_held)
        finally:
            client.close()

    async def _close(self, reason: str) -> None:
        self._closing = True
        await self.tasks.finish("feeder", self.feeder.wake)  # its last lease lands in the buffer, released below
        await self.keeper.release(self.keeper.unstarted())
        self.buffer.clear()
        await self.keeper.settle(self.tasks, self._stop, reason == MEMUSAGE_CLOSE, self.redis_config.masked_url)
        if not self.config.persist:  # as in scrapy-redis: on every close reason, not only "finished"
            await self.flush()
        if self._len_client is not None:
            self._len_client.close()
            self._len_client = None
        self.df.close(reason)
        await self.context.release()  # the last user closes the node's client
        if self._guard is not None:  # only now: a forced stop during the drain still releases
            self._guard.uninstall()

    async def flush(self) -> None:
        """Delete the crawl's frontier and filter, and drop what this node holds of it: requests
        still in the outbox or buffered are part of the frontier being flushed."""
        dropped = self.outbox.drop()
        buffered = self.keeper.unstarted()
        self.buffer.clear()
        self.quarantine.forget()
        self.leases.forget(buffered + [e.handover for e in dropped if e.handover])
        await flush_crawl(self.frontier, self.df.key)
        self.work.reset()
        self.recent.clear()

    # -- Scrapy's scheduler interface -----------------------------------------------------
    def has_pending_requests(self) -> bool:
        """Work this node holds, work on its way to Redis, or work anywhere in the cluster (as last
        counted): a node closes only when the whole crawl has nothing left for it."""
        busy = bool(self.buffer or self.outbox.entries) or self.quarantine.request is not None
        return busy or self.work.busy or self.pause.paused  # paused: waits, never idle-closes

    def outbox_mark(self) -> int:
        """The last request enqueued so far: `wait_pushed(mark)` returns once it is in Redis."""
        return self.outbox.enqueued_seq

    async def wait_pushed(self, mark: int) -> bool:
        """Wait until every request enqueued up to `mark` is pushed (or refused); False if the node
        stopped first (the spider's seed holds then expire and the seeds come back)."""
        while self.outbox.flushed_seq < mark:
            if self._stopped:
                return False
            await asyncio.sleep(PUSH_POLL)
        return True

    def enqueue_request(self, request: Request) -> bool:
        return self.intake.enqueue(request)

    def refuse(self, request: Request, refusal: Refusal, source: str = "download", counted: bool = False) -> None:
        """A request refused after it left the queue (e.g. at connect time): see Intake.refuse."""
        self.intake.refuse(request, refusal, source, counted)

    async def mark_seen(self, requests: Sequence[Request]) -> list[bool]:
        """Add the requests' fingerprints to the seen-filter without queueing them; True = it was new."""
        return await self.intake.mark_seen(requests)

    def next_request(self) -> Request | None:
        request = self.quarantine.take() or self.feeder.take()
        if request is not None:
            self.stats.inc_value("scheduler/dequeued/redis")
        return request

    def __len__(self) -> int:
        """The shared queue, as in scrapy-redis: requests waiting in Redis (any node's, delayed
        retries included; the pending counter, exact in every queue mode), plus what this node
        holds but has not handed to the engine. One blocking round trip, like scrapy-redis's."""
        local = len(self.buffer) + len(self.outbox)
        if self.client is None:  # not open
            return local
        if self._len_client is None:
            self._len_client = self.redis_config.sync_client()
        return self.work.count_sync(self._len_client).scheduled + local

    @property
    def leases_held(self) -> int:
        """Leases this node holds in Redis: buffered, running, waiting for their ack, being given back."""
        return self.leases.in_redis()

    @property
    def stalled_seconds(self) -> float:
        """How long this node has held leases with nothing in flight, once longer than a lease (else 0).
        Looked at now too (on the reactor's thread; Prometheus reads from its own), so a lease task
        stuck in a retry cannot hide a stall from the heartbeat."""
        if threading.current_thread() is threading.main_thread():
            self.keeper.watch_stall()
        return self.keeper.stall.seconds(time.monotonic())
