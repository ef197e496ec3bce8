"""`SCHEDULER`: one Redis queue shared by every node, with leases, no pickle, no blocked reactor.

Scrapy's scheduler API is synchronous, so Redis work happens in background asyncio tasks:
- the *outbox* task pushes enqueued requests (dedup check+add and push in one Lua call, batched);
- the *feeder* task pops and leases requests into a small local buffer that `next_request` serves,
  and wakes the engine when work arrives (no 5-second heartbeat stall);
- the *lease* task acks finished leases in batches, renews the ones still held and, every few
  seconds, returns expired leases of dead nodes to the queue;
- the *counts* task keeps how much work the whole cluster has (queue, delayed, leased) while this
  node has none, so `has_pending_requests()` is true while work is in the outbox or anywhere in
  Redis: a plain spider's start_urls or a resumed crawl never closes the node early.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

from redis.exceptions import ResponseError
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.misc import build_from_crawler, load_object

from distributed_crawler.connection.clients import TRANSIENT_ERRORS, OutageLog, RedisConfig, subscribe
from distributed_crawler.connection.retrying import retry_transient
from distributed_crawler.connection.untrusted import EpisodeLog, WrongTypeLog, finite, is_wrong_type, preview
from distributed_crawler.core.admission import Admission, Refusal
from distributed_crawler.core.context import RedisContext
from distributed_crawler.core.heap import freeze_startup_heap
from distributed_crawler.core.leases import LeaseTracker, Stage
from distributed_crawler.core.refusals import RefusalLog
from distributed_crawler.core.shutdown import SecondSignalGuard
from distributed_crawler.core.traps import DomainHosts
from distributed_crawler.dedup.dupefilter import DEDUP_TYPES, DedupDataError, flush_crawl
from distributed_crawler.dedup.recent import RecentFingerprints
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.internals import downloads_in_flight, wake_engine, watch_scrapes
from distributed_crawler.meta import (
    EXPIRES_AT_META,
    HOST_BACKOFF_META,
    HOST_SLOT_META,
    LEASE_META,
    RETRY_DELAY_META,
    RETRY_TIMES_META,
)
from distributed_crawler.queue.codec import (
    PayloadError,
    RequestCodec,
    UnserializableRequestError,
    allowed_classes,
    payload_url,
)
from distributed_crawler.queue.counts import CrawlCounts, crawl_counts
from distributed_crawler.queue.deadletters import DeadLetters
from distributed_crawler.queue.enqueue import Enqueuer, run_sync
from distributed_crawler.queue.envelope import make_member, split_member
from distributed_crawler.queue.frontier import FrontierConfig, slot_of
from distributed_crawler.queue.keys import SpiderKeys
from distributed_crawler.queue.scripts import QueueScripts

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

QUEUE_TYPES = {
    "host": "host",  # the per-host frontier (default): fair across hosts, politeness at pop time
    "priority": "priority",
    "fifo": "fifo",
    "lifo": "lifo",
    # scrapy-redis names, so a scrapy-redis project moves over unchanged
    "scrapy_redis.queue.PriorityQueue": "priority",
    "scrapy_redis.queue.FifoQueue": "fifo",
    "scrapy_redis.queue.LifoQueue": "lifo",
    # their older aliases, still in scrapy-redis 0.9.1 (its example settings name them)
    "scrapy_redis.queue.SpiderPriorityQueue": "priority",
    "scrapy_redis.queue.SpiderQueue": "fifo",
    "scrapy_redis.queue.SpiderStack": "lifo",
}
OUTBOX_BATCH = 500
ACK_BATCH = 1000
ACK_INTERVAL = 0.1
PUSH_POLL = 0.02  # how often wait_pushed looks at the outbox (the spider acks its seeds after)
DOORBELL_RETRY_SECONDS = 30  # pub/sub failed for another reason than an outage: polling meanwhile
DUE_BATCH = 100  # due retries pop.lua moves from delayed back to the queue per call
DATA_BACKOFF_MAX = 5.0  # a key of the wrong type or a corrupt key: how often a waiting node looks again
BROKEN_HOSTS_LOGGED = 10_000  # host queue keys of the wrong type remembered (logged once each)
COUNTS_INTERVAL = 1.0  # while this node holds no work: how often it asks how much the cluster has
MEMUSAGE_CLOSE = "memusage_exceeded"  # the close reason of Scrapy's MemoryUsage extension (MEMUSAGE_LIMIT_MB)


@dataclass(frozen=True)
class SchedulerConfig:
    queue_type: str = "host"
    persist: bool = True
    flush_on_start: bool = False
    lease_seconds: float = 60.0
    max_deliveries: int = 5
    prefetch: int = 16
    poll_max_seconds: float = 1.0
    failed_max: int = 100_000
    allowed_classes: tuple[str, ...] = ()
    frontier: FrontierConfig = FrontierConfig()
    recent_fingerprints: int = 50_000
    domain_max_hosts: int = 100  # DOMAIN_MAX_HOSTS (core/traps.py; 0 = no limit)
    request_ttl: int = 0  # REQUEST_TTL seconds (0 = requests never expire)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> SchedulerConfig:
        read = SettingsReader(settings)
        raw_queue = read.str("SCHEDULER_QUEUE_CLASS")
        if raw_queue not in QUEUE_TYPES:
            raise ValueError(
                f"SCHEDULER_QUEUE_CLASS ({raw_queue}) must be one of host (fair per-host frontier, the default), "
                "priority, fifo, lifo"
            )
        prefetch = read.int("SCHEDULER_PREFETCH", min=0, hint="(0 = automatic)") or max(
            1, settings.getint("CONCURRENT_REQUESTS", 16)
        )
        return cls(
            queue_type=QUEUE_TYPES[raw_queue],
            persist=read.bool("SCHEDULER_PERSIST"),
            flush_on_start=read.bool("SCHEDULER_FLUSH_ON_START"),
            lease_seconds=read.float("SCHEDULER_LEASE_SECONDS", min=2),
            max_deliveries=read.int("SCHEDULER_MAX_DELIVERIES", min=1),
            prefetch=prefetch,
            poll_max_seconds=read.float("SCHEDULER_POLL_MAX_SECONDS", above=0),
            failed_max=read.int("SCHEDULER_FAILED_MAX", min=0),
            allowed_classes=allowed_classes(settings),
            frontier=FrontierConfig.from_settings(settings),
            recent_fingerprints=read.int("DUPEFILTER_LOCAL_CACHE_SIZE", min=0),
            domain_max_hosts=DomainHosts.max_hosts_from_settings(settings),
            request_ttl=read.int("REQUEST_TTL", min=0, hint="(seconds; 0 = never)"),
        )

    @property
    def renew_interval(self) -> float:
        """Renew well before expiry: a third of the lease, at most every 10 s."""
        return max(0.5, min(10.0, self.lease_seconds / 3))


class OutboxEntry(NamedTuple):
    fingerprint: str
    dont_filter: bool
    member: str
    handover: bytes | None  # lease of the request this one succeeds (redirect, retry)
    delay: float = 0.0  # > 0: a retry, parked in {spider}:delayed for this many seconds
    slot: str = ""  # host mode: the request's host (queue/frontier.py slot_of)
    interval: float | None = None  # host mode: seconds between two requests of the slot
    budget: int | None = None  # host mode: the slot's page budget (-1 = none)
    in_flight: int | None = None  # host mode: the slot's cluster-wide in-flight cap (-1 = none)
    refused: str = ""  # a refused request (core/admission.py): its dead letter, written instead of a push
    host: str = ""  # DOMAIN_MAX_HOSTS on: the request's host, allowed or refused by Redis before the push


class RedisScheduler:
    def __init__(
        self,
        crawler: Crawler,
        config: SchedulerConfig,
        redis_config: RedisConfig,
        keys: SpiderKeys,
        dupefilter: Any,
        node_id: str,
        context: RedisContext | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.config = config
        self.redis_config = redis_config
        self.keys = keys
        self.df = dupefilter
        self.node_id = node_id
        self.context = context or RedisContext.of(crawler)  # the node's one client, shared
        self.leases = LeaseTracker()
        self.admission = admission or Admission.from_settings(crawler.settings)
        self.refusals = RefusalLog(crawler.stats, node_id)
        self.domain_hosts = DomainHosts(keys.domain_hosts, config.domain_max_hosts)
        self._refusal_counts = EpisodeLog(logger)
        self.client: Any = None
        # set by open(): Scrapy uses a scheduler only once it is open
        self.scripts: QueueScripts
        self.enqueuer: Enqueuer
        self.codec: RequestCodec
        self.dead_letters: DeadLetters
        self._buffer: deque[Request] = deque()
        self._recent = RecentFingerprints(config.recent_fingerprints)
        self._outbox: deque[tuple[int, OutboxEntry]] = deque()
        self._enqueued_seq = 0  # sequence number of the last outbox entry
        self._flushed_seq = 0  # every entry up to this one is in Redis
        self._want_more = asyncio.Event()
        self._outbox_ready = asyncio.Event()
        self._new_work = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._closing = False  # no more leasing
        self._stopped = False  # background loops end
        self._outage = OutageLog("scheduling", redis_config.masked_url)
        self._guard: SecondSignalGuard | None = None
        self._quarantined: Request | None = None  # a redelivered request, run alone
        self._draining = False  # waiting for this node to be empty before taking one
        self._wrong_types = WrongTypeLog("scheduling", logger)
        self._broken_hosts: set[str] = set()  # host queue keys of the wrong type, logged once each
        self._data_errors = EpisodeLog(logger)
        self._shared = CrawlCounts()  # the cluster's work as last counted (counts task)
        # pushes this node made / of them, those the last count had seen: work not yet counted
        # keeps has_pending_requests true (a push to a host in ready shows only in the next count)
        self._pushes = self._pushes_counted = 0
        self._refused: Counter[str] = Counter()  # requests the codec refused, by kind
        self._undecodable: Counter[str] = Counter()  # leased payloads that did not decode, by kind
        self._len_client: Any = None  # sync client of __len__ (Scrapy's API is synchronous)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisScheduler:
        settings = crawler.settings
        assert crawler.spider is not None
        dupefilter = build_from_crawler(load_object(settings["DUPEFILTER_CLASS"]), crawler)
        for attr in ("open_dedup", "fingerprint_hex"):
            if not hasattr(dupefilter, attr):
                raise ValueError(
                    f"DUPEFILTER_CLASS ({settings['DUPEFILTER_CLASS']}) is not a Redis dupefilter; "
                    "use distributed_crawler.dedup.dupefilter.BloomDupeFilter"
                )
        context = RedisContext.of(crawler)
        return cls(
            crawler,
            SchedulerConfig.from_settings(settings),
            context.config,
            context.keys_for(crawler.spider.name),
            dupefilter,
            context.node_id,
            context,
            Admission.from_settings(settings),
        )

    # -- lifecycle ------------------------------------------------------------------------
    def open(self, spider: Spider) -> Deferred[None]:
        # Scrapy awaits a Deferred here, not a coroutine.
        return deferred_from_coro(self._open(spider))

    def close(self, reason: str) -> Deferred[None]:
        return deferred_from_coro(self._close(reason))

    async def _open(self, spider: Spider) -> None:
        self.client = self.context.acquire().client
        self.scripts = QueueScripts.register(self.client, self.keys, self.config.queue_type)
        dedup = await self._retrying("opening the dupefilter", lambda: self.df.open_dedup(self.client))
        self.enqueuer = Enqueuer(
            self.client, self.keys, dedup, self.config.queue_type, self.keys.doorbell, scripts=self.scripts
        )
        self.codec = RequestCodec(spider, self.config.allowed_classes)
        self.dead_letters = DeadLetters(self.client, self.keys.failed, self.node_id, self.config.failed_max)
        if self.config.flush_on_start:
            await self.flush()
        self._shared = await self._retrying(
            "counting the queue", lambda: crawl_counts(self.client, self.keys, seeds=False)
        )
        if self._shared.scheduled:  # scrapy-redis's line, so existing log watchers keep working
            logger.info("Resuming crawl (%d requests scheduled)", self._shared.scheduled)
        self._watch_scrapes()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._run_outbox(), name="dc-outbox"),
            loop.create_task(self._run_feeder(), name="dc-feeder"),
            loop.create_task(self._run_leases(), name="dc-leases"),
            loop.create_task(self._run_doorbell(), name="dc-doorbell"),
            loop.create_task(self._run_counts(), name="dc-counts"),
        ]
        for task in self._tasks:
            task.add_done_callback(self._task_died)
        frozen = freeze_startup_heap()
        if threading.current_thread() is threading.main_thread():
            # Scrapy installs its own handlers once the reactor runs, and swaps them on the first
            # signal: the lease task re-wraps whatever is installed (a no-op when ours is on top).
            self._guard = SecondSignalGuard(self._force_release, on_first=self._stop_taking)
            self._guard.install()
        logger.info(
            "Scheduler on %s: queue %s (%s), lease %ss, node %s (%d startup objects frozen for gc)",
            self.redis_config.masked_url,
            self.keys.ready if self.config.queue_type == "host" else self.keys.requests,
            self.config.queue_type,
            self.config.lease_seconds,
            self.node_id,
            frozen,
        )

    def _task_died(self, task: asyncio.Task) -> None:
        """A background task must never end on its own: stop this node loudly (work stays leased)."""
        if task.cancelled() or self._closing:
            return
        logger.error(
            "Scheduler task %s stopped: %r; closing this node (its leases return to the queue "
            "after SCHEDULER_LEASE_SECONDS)",
            task.get_name(),
            task.exception(),
            exc_info=task.exception(),
        )
        asyncio.ensure_future(self._close_node())

    async def _close_node(self) -> None:
        """Close the spider once the engine runs: a close while it is still opening (a task that
        died at once) would be undone by its start, leaving a node that never ends."""
        engine = self.crawler.engine
        for _ in range(600):  # bounded: 60 s
            if engine.running:
                break
            await asyncio.sleep(0.1)
        await engine.close_spider_async(reason="scheduler_error")

    def _stop_taking(self) -> None:
        """First stop signal: lease nothing more (no pop may race the forced release)."""
        self._closing = True

    def _force_release(self) -> None:
        """Second stop signal (runs in the signal handler): ack what is done, release the rest.

        Synchronous on purpose: the reactor stops right after this returns.
        """
        client = self.redis_config.sync_client()
        try:
            done = self.leases.take_ackable(self._flushed_seq)
            if done:
                client.zrem(self.keys.processing, *done)
            unacked = self.leases.unacked()
            # A redirect, retry or held-back request whose successor is still in the outbox: the
            # successor is lost with this process, so its predecessor's lease goes back instead
            # (release skips a lease the outbox's in-flight push already removed).
            handed_over = [entry.handover for _, entry in self._outbox if entry.handover]
            if unacked or handed_over:
                QueueScripts.register(client, self.keys, self.config.queue_type).release(unacked + handed_over)
            self.leases.forget(unacked)
        except Exception:  # noqa: BLE001 - leases then expire and are reclaimed; nothing is lost
            pass
        finally:
            client.close()

    async def _close(self, reason: str) -> None:
        self._closing = True
        feeder = self._tasks[1] if len(self._tasks) > 1 else None
        if feeder:
            feeder.cancel()
        await self._release(self._buffer_leases())
        self._buffer.clear()
        # Everything the engine finished is queued for push or ack: drain both, bounded, and
        # only while the tasks doing it are alive.
        outbox_task, lease_task = self._tasks[0], self._tasks[2]
        deadline = time.monotonic() + 30
        while (
            self._outbox and not outbox_task.done() or self.leases.pending_acks() and not lease_task.done()
        ) and time.monotonic() < deadline:
            self._outbox_ready.set()
            await asyncio.sleep(0.05)
        self._stopped = True  # the loops check it too: a cancel swallowed inside redis-py ends them
        for task in self._tasks:
            task.cancel()
        _, stuck = await asyncio.wait(self._tasks, timeout=5)
        if stuck:
            logger.warning("Scheduler tasks did not stop in 5 s: %s", ", ".join(t.get_name() for t in stuck))
        unfinished = self.leases.held()
        if unfinished and reason == MEMUSAGE_CLOSE:
            unfinished = await self._expire_running(unfinished)
        if unfinished:  # a forced stop: give this node's work back now rather than at expiry
            await self._release(unfinished)
        if self._outbox or self.leases.pending_acks():
            dead = next(
                (t for t in (outbox_task, lease_task) if t.done() and not t.cancelled() and t.exception()), None
            )
            cause = (
                f"scheduler task {dead.get_name()} failed: {dead.exception()!r}"
                if dead
                else (f"Redis at {self.redis_config.masked_url} unreachable")
            )
            logger.error(
                "%s at close: %d requests not pushed, %d leases not acked; their leases expire after "
                "SCHEDULER_LEASE_SECONDS and another node redoes them",
                cause,
                len(self._outbox),
                self.leases.pending_acks(),
            )
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
        """Delete the crawl's queue, leases and filter, and drop what this node holds of it:
        requests still in the outbox or buffered are part of the queue being flushed."""
        dropped = [entry for _, entry in self._outbox]
        self._outbox.clear()
        self._flushed_seq = self._enqueued_seq
        buffered = self._buffer_leases()
        self._buffer.clear()
        self._quarantined = None
        self.leases.forget(buffered + [e.handover for e in dropped if e.handover])
        await flush_crawl(self.client, self.keys)
        self._shared = CrawlCounts()
        self._recent.clear()

    def _expires_at(self, request: Request) -> int:
        """Unix seconds after which `request` is dropped at lease (0 = never): meta `expires_at`,
        else REQUEST_TTL from its first enqueue (kept in meta, so a retry does not start again)."""
        given = request.meta.get(EXPIRES_AT_META)
        if isinstance(given, (int, float)) and not isinstance(given, bool) and math.isfinite(given) and given > 0:
            return int(given)
        if not self.config.request_ttl:
            return 0
        request.meta[EXPIRES_AT_META] = expires = int(time.time()) + self.config.request_ttl
        return expires

    # -- Scrapy's scheduler interface -----------------------------------------------------
    def has_pending_requests(self) -> bool:
        """Work this node holds, work on its way to Redis, or work anywhere in the cluster (as last
        counted): a node closes only when the whole crawl has nothing left for it."""
        busy = bool(self._buffer or self._outbox) or self._quarantined is not None
        return busy or self._shared.frontier_busy or self._pushes != self._pushes_counted

    def outbox_mark(self) -> int:
        """The last request enqueued so far: `wait_pushed(mark)` returns once it is in Redis."""
        return self._enqueued_seq

    async def wait_pushed(self, mark: int) -> bool:
        """Wait until every request enqueued up to `mark` is pushed (or refused); False if the node
        stopped first (the spider's seed holds then expire and the seeds come back)."""
        while self._flushed_seq < mark:
            if self._stopped:
                return False
            await asyncio.sleep(PUSH_POLL)
        return True

    def enqueue_request(self, request: Request) -> bool:
        lease = request.meta.get(LEASE_META)
        handover = lease if lease and self.leases.hand_over(lease) else None
        fingerprint = self.df.fingerprint_hex(request)
        # a new link this node already sent to the shared filter is a duplicate: dropped here
        # (dedup/recent.py); a hand-over must reach Redis (it removes its lease there)
        checked = handover is None and not request.dont_filter
        if checked and fingerprint in self._recent:
            self.stats.inc_value("dupefilter/filtered")
            self.stats.inc_value("dupefilter/filtered_locally")
            return False
        refusal = self.admission.check(request)
        if refusal is not None:
            self._refuse(request, refusal, "enqueue", fingerprint if checked else "", handover)
            if checked:
                self._recent.add(fingerprint)
            return False
        host = _hostname(request.url) if self.config.domain_max_hosts else ""
        if host and not self.domain_hosts.allowed(host):  # Redis said so for an earlier request
            self._refuse(request, self.domain_hosts.refusal(host), "enqueue", fingerprint if checked else "", handover)
            if checked:
                self._recent.add(fingerprint)
            return False
        host_mode = self.config.queue_type == "host"
        slot = slot_of(request.url, self.config.frontier) if host_mode else None
        expires_at = self._expires_at(request)
        try:
            # a retry or a hand-back (it waits in delayed) of a page its host's budget already counted
            again = handover is not None and request.meta.get(RETRY_DELAY_META) is not None
            payload = self.codec.encode(request, slot=slot, again=host_mode and again)
        except UnserializableRequestError as exc:
            self._log_refused(exc)
            if handover:
                self.leases.finished(handover, self._enqueued_seq)
            return False
        entry = OutboxEntry(
            fingerprint,
            request.dont_filter,
            # a successor starts at 0 deliveries: a retry or redirect is not a redelivery
            make_member(payload, request.priority, expires_at=expires_at),
            handover,
            max(0.0, finite(request.meta.get(RETRY_DELAY_META))),
            host=host,
        )
        if slot is not None:
            interval, budget, in_flight = self.config.frontier.limits(slot)
            entry = entry._replace(slot=slot, interval=interval, budget=budget, in_flight=in_flight)
        self._enqueued_seq += 1
        self._outbox.append((self._enqueued_seq, entry))
        if checked:
            self._recent.add(fingerprint)
        self._outbox_ready.set()
        return True

    def refuse(self, request: Request, refusal: Refusal, source: str = "download", counted: bool = False) -> None:
        """A request refused after it left the queue (e.g. at connect time): dead-lettered once and
        never retried; its lease is acked as usual once its failure went through the scraper.
        `counted`: the refusal was counted and logged when it happened (the browser's proxy)."""
        attempts = int(request.meta.get(RETRY_TIMES_META, 0)) + 1  # it was tried, and refused at this try
        self._refuse(request, refusal, source, "", None, attempts, counted)

    def _refuse(
        self,
        request: Request,
        refusal: Refusal,
        source: str,
        fingerprint: str,
        handover: bytes | None,
        attempts: int = 0,
        counted: bool = False,
    ) -> None:
        """Queue the dead letter of a refused request in the outbox (so in order with this node's other
        writes, before the lease it concerns is acked); a hand-over's lease goes with it.

        `fingerprint` (a new link): dead-lettered only if the shared filter had not seen it, so a
        refused link found on a thousand pages is one dead letter."""
        extra: dict[str, Any] = {"attempts": attempts, "priority": request.priority}
        try:
            extra["payload"] = self.codec.encode(request)
        except (UnserializableRequestError, AttributeError) as exc:  # AttributeError: not open yet
            extra["payload_error"] = str(exc)[:300]
        letter = self.refusals.note(request.url, refusal, source, counted, **extra)
        entry = OutboxEntry(fingerprint, not fingerprint, "", handover, refused=letter)
        self._enqueued_seq += 1
        self._outbox.append((self._enqueued_seq, entry))
        self._outbox_ready.set()

    async def mark_seen(self, requests: Sequence[Request]) -> list[bool]:
        """Add the requests' fingerprints to the seen-filter without queueing them (a page's
        canonical URL, fetched under another URL); True = it was new."""
        fingerprints = [self.df.fingerprint_hex(r) for r in requests]
        entries: list[Any] = [(fp, False, "") for fp in fingerprints]
        result = await self._retrying("dedup add", partial(self.enqueuer.run, "add", entries))
        for fingerprint in fingerprints:
            self._recent.add(fingerprint)  # a link to it from this node is dropped here too
        added = sum(1 for r in result if r)
        self.stats.inc_value("dupefilter/added", added)
        return [bool(r) for r in result]

    def next_request(self) -> Request | None:
        quarantined = self._quarantined
        if quarantined is not None and not downloads_in_flight(self.crawler):
            lease = quarantined.meta[LEASE_META]
            if self.leases.stage(lease) is Stage.BUFFERED and self._node_empty_but(lease):
                self.leases.started(lease)
                self.stats.inc_value("scheduler/dequeued/redis")
                return quarantined
        if not self._buffer:
            self._want_more.set()
            return None
        request = self._buffer.popleft()
        self.leases.started(request.meta[LEASE_META])
        self.stats.inc_value("scheduler/dequeued/redis")
        if len(self._buffer) <= self.config.prefetch // 4:
            self._want_more.set()
        return request

    def __len__(self) -> int:
        """The shared queue, as in scrapy-redis: requests waiting in Redis (any node's, delayed
        retries included; the pending counter, exact in every queue mode), plus what this node
        holds but has not handed to the engine. One blocking round trip, like scrapy-redis's."""
        local = len(self._buffer) + len(self._outbox)
        if self.client is None:  # not open
            return local
        try:
            if self._len_client is None:
                self._len_client = self.redis_config.sync_client()
            before = self._pushes
            self._shared = run_sync(crawl_counts(self._len_client, self.keys, seeds=False))
            self._pushes_counted = before
        except TRANSIENT_ERRORS + (ResponseError,):
            pass  # Redis away or refusing: the last count stands (the background tasks report it)
        return self._shared.scheduled + local

    def _log_refused(self, exc: UnserializableRequestError) -> None:
        """A request the codec refused: counted by kind, logged once per kind with its reason."""
        kind = getattr(exc, "kind", "value")
        self._refused[kind] += 1
        self.stats.inc_value("scheduler/unserializable")
        self.stats.inc_value(f"scheduler/unserializable/{kind}")
        if self._refused[kind] == 1:
            logger.error(
                "Request not scheduled (%s): %s. Further requests refused for this reason are not logged, "
                "only counted in stats scheduler/unserializable/%s",
                kind,
                exc,
                kind,
            )

    @property
    def leases_held(self) -> int:
        """Leases this node holds in Redis: buffered, running, or done and waiting for their ack."""
        return len(self.leases) + self.leases.pending_acks()

    # -- ack after the scrape ---------------------------------------------------------------
    def _watch_scrapes(self) -> None:
        """Mark a lease finished when the scraper is done with its response or failure.

        The scraper is done once every item of the response went through the pipelines (ours
        awaits the storage commit) and every child request reached `enqueue_request`. That is
        exactly when the lease may go (internals.watch_scrapes).
        """

        def on_scrape(request: Request) -> Callable[[], None] | None:
            lease = request.meta.get(LEASE_META)
            if lease is None:
                return None
            self.leases.scraping(lease)
            return lambda: self.leases.finished(lease, self._enqueued_seq)

        watch_scrapes(self.crawler, on_scrape)

    # -- background tasks ------------------------------------------------------------------
    async def _retrying(self, what: str, call: Any) -> Any:
        """Run a Redis call until it succeeds, backing off on outages and bad data (never drops work)."""
        # closing: CancelledError, the caller's work stays leased or in the outbox
        return await retry_transient(
            call,
            outage=self._outage,
            stopped=lambda: self._stopped,
            max_delay=DATA_BACKOFF_MAX,
            on_error=partial(self._redis_failed, what),  # re-raises what is a bug
            on_ok=partial(self._redis_ok, what),
        )

    # -- what Redis may throw at a node ---------------------------------------------------------
    def _expected_types(self) -> dict[str, tuple[str, ...]]:
        """Every key the scheduler's scripts touch, with the Redis types they need."""
        queue = ("zset",) if self.config.queue_type in ("priority", "host") else ("list",)
        expected: dict[str, tuple[str, ...]] = {
            self.keys.ready if self.config.queue_type == "host" else self.keys.requests: queue,
            self.keys.processing: ("zset",),
            self.keys.delayed: ("zset",),
            self.keys.seq: ("string",),
            self.keys.failed: ("list",),
        }
        if self.config.queue_type == "host":
            expected[self.keys.over_budget] = ("zset",)
        dedup = getattr(self.df, "dedup", None)
        expected[self.keys.dupefilter] = DEDUP_TYPES.get(getattr(dedup, "mode", ""), ("hash", "set", "MBbloom--"))
        return expected

    def _report_broken_hosts(self, hosts: list[str]) -> None:
        """host_pop.lua dropped these hosts from ready (queue key of the wrong type): one ERROR per key."""
        for host in hosts:
            key = self.keys.host_queue(host)
            if key in self._broken_hosts:
                continue
            if len(self._broken_hosts) < BROKEN_HOSTS_LOGGED:
                self._broken_hosts.add(key)
            shown = preview(key)
            logger.error(
                "Redis key %s (the queue of host %s) is not a sorted set: that host is no longer served; "
                "inspect it with `redis-cli type '%s'`, then remove it with `redis-cli del '%s'` "
                "(new requests for the host queue again)",
                shown,
                preview(host),
                shown,
                shown,
            )

    def _fixes(self) -> dict[str, str]:
        return {self.keys.dupefilter: f"dcrawl dedup reset {self.keys.spider}"}

    async def _redis_failed(self, what: str, exc: BaseException) -> None:
        """Why a Redis call failed, logged once per episode; re-raises what is not Redis's or data's.

        No scheduler task dies because of data: an outage, a key of the wrong type, a corrupt key
        or a script that refuses it all mean "wait and retry"; the operator gets one ERROR line.
        """
        if isinstance(exc, TRANSIENT_ERRORS):
            self._outage.failed(exc)
        elif isinstance(exc, DedupDataError):
            self._data_errors.failed(what, "%s; the node waits and retries (%s)", exc, what)
        elif is_wrong_type(exc):
            try:
                await self._wrong_types.check(self.client, self._expected_types(), self._fixes(), exc)
            except TRANSIENT_ERRORS as lost:
                self._outage.failed(lost)
        elif isinstance(exc, ResponseError):
            await self._diagnose_script_error(what, exc)
        else:
            raise exc

    async def _diagnose_script_error(self, what: str, exc: ResponseError) -> None:
        """A script error that is not WRONGTYPE: a corrupt counter, foreign data, or a bug."""
        fix = "a corrupt key or a bug: check the keys of this spider (`dcrawl status " + self.keys.spider + "`)"
        if "integer" in str(exc) or "overflow" in str(exc):
            try:
                raw = await self.client.get(self.keys.seq)
            except TRANSIENT_ERRORS + (ResponseError,):
                raw = None
            if raw is not None and not raw.isdigit():
                fix = f"{self.keys.seq} holds {preview(raw, 40)!r}, not a counter: `redis-cli del '{self.keys.seq}'`"
        self._data_errors.failed(
            what,
            "Redis refused %s (%s); %s. The node keeps its work and retries with backoff",
            what,
            str(exc)[:300],
            fix,
            exc_info=exc,
        )

    async def _redis_ok(self, what: str) -> None:
        if self._outage.since is not None:
            # a failover or a restart may have lost writes Redis had acknowledged (asynchronous
            # replication): links this node sent may be gone, so the shared filter decides again
            self._recent.clear()
        self._outage.ok()
        self._data_errors.ok(what)
        if self._wrong_types.reported:
            try:
                await self._wrong_types.resolved(self.client, self._expected_types())
            except TRANSIENT_ERRORS + (ResponseError,):
                pass  # looked at again after the next call

    async def _run_outbox(self) -> None:
        while not self._stopped:
            if not self._outbox:
                self._outbox_ready.clear()
                await self._outbox_ready.wait()
                continue
            batch = [self._outbox[i] for i in range(min(OUTBOX_BATCH, len(self._outbox)))]
            batch = await self._admit_hosts(batch)
            refused = [e for _, e in batch if e.refused]
            if refused:
                await self._write_refused(refused)
            pushes = [e for _, e in batch if not e.refused]
            entries: list[Any] = [
                (e.fingerprint, e.dont_filter, e.member, e.delay, e.slot, e.interval, e.budget, e.in_flight)
                for e in pushes
            ]
            handovers = [e.handover for e in pushes if e.handover]
            result = []
            if entries:
                result = await self._retrying("enqueue", partial(self.enqueuer.run, "push", entries, handovers))
            for _ in batch:
                self._outbox.popleft()
            self._flushed_seq = batch[-1][0]
            batch = [(0, e) for e in pushes]
            pushed = sum(result)
            if pushed:  # counted as pending at once: the counts task may not have looked yet
                self._shared = replace(self._shared, pending=(self._shared.pending or 0) + pushed)
                self._pushes += 1
            added = sum(1 for r, (_, e) in zip(result, batch) if r and not e.dont_filter)
            delayed = sum(1 for r, (_, e) in zip(result, batch) if r and e.delay > 0)
            self.stats.inc_value("scheduler/enqueued/redis", pushed)
            if delayed:
                self.stats.inc_value("scheduler/delayed", delayed)
            self.stats.inc_value("dupefilter/added", added)
            if len(batch) - pushed:
                self.stats.inc_value("dupefilter/filtered", len(batch) - pushed)
            if pushed:
                self._new_work.set()

    async def _admit_hosts(self, batch: list[tuple[int, OutboxEntry]]) -> list[tuple[int, OutboxEntry]]:
        """DOMAIN_MAX_HOSTS: ask Redis once about the batch's hosts this node has no answer for;
        a request whose host is over its domain's cap becomes a refusal (core/traps.py)."""
        hosts = self.domain_hosts.unknown([e.host for _, e in batch if e.host and not e.refused])
        if hosts:
            await self._retrying("counting hosts per domain", partial(self.domain_hosts.ask, self.client, hosts))
        admitted = []
        for seq, entry in batch:
            if entry.host and not entry.refused and not self.domain_hosts.allowed(entry.host):
                entry = self._refused_entry(entry, self.domain_hosts.refusal(entry.host))
            admitted.append((seq, entry))
        return admitted

    def _refused_entry(self, entry: OutboxEntry, refusal: Refusal) -> OutboxEntry:
        """An outbox entry turned into a refusal after all (its payload is the dead letter's)."""
        envelope = split_member(entry.member)  # made by enqueue_request: ours, valid
        url = payload_url(envelope.payload) or ""
        letter = self.refusals.note(
            url, refusal, "enqueue", attempts=0, priority=envelope.priority, payload=envelope.payload
        )
        # a new link is dead-lettered once cluster-wide (by fingerprint); a successor or dont_filter always
        link = not entry.dont_filter and entry.handover is None
        return entry._replace(refused=letter, fingerprint=entry.fingerprint if link else "")

    async def _write_refused(self, refused: list[OutboxEntry]) -> None:
        """Dead letters of refused requests (a new link only if the shared filter had not seen it),
        the leases handed over to them removed in the same transaction; then the per-host counts."""
        links = [e for e in refused if e.fingerprint]
        fresh = [e for e in refused if not e.fingerprint]
        if links:
            added = [(e.fingerprint, False, "") for e in links]
            new = await self._retrying("dedup add", partial(self.enqueuer.run, "add", added))
            fresh += [e for e, is_new in zip(links, new) if is_new]
        letters = [e.refused for e in fresh]
        leases = [e.handover for e in refused if e.handover]
        if letters:
            remove = (self.keys.processing, leases)
            await self._retrying("dead-letter", partial(self.dead_letters.push, letters, remove))
            self.stats.inc_value("scheduler/dead_lettered/refused", len(letters))
        await self._push_refusal_counts()

    async def _push_refusal_counts(self) -> None:
        """The per-host refusal counts to {spider}:refused (refusals without a dead letter too:
        a rendered page's refused subresources, robots.txt)."""
        try:
            await self.refusals.push_counts(self.client, self.keys.refused)
            self._refusal_counts.ok("counting refusals")
        except TRANSIENT_ERRORS:
            pass  # kept: added with the next refusals
        except ResponseError as exc:  # e.g. the key holds another type: counts dropped, the crawl goes on
            self._refusal_counts.failed(
                "counting refusals",
                "Refusal counts not written to %s (Redis: %s); `dcrawl hosts` misses them. Check it with "
                "`redis-cli type '%s'`",
                self.keys.refused,
                str(exc)[:200],
                self.keys.refused,
            )

    def _wanted(self) -> int:
        """How many more requests to lease: enough to keep the downloader full, no hoarding.

        Leases held in a buffer are work other nodes cannot take, so a node holds at most
        what its downloader can start soon (SCHEDULER_PREFETCH, default CONCURRENT_REQUESTS)
        plus a quarter of that for batching.
        """
        if len(self._buffer) > self.config.prefetch // 4:
            return 0
        active = downloads_in_flight(self.crawler)
        return self.config.prefetch + self.config.prefetch // 4 - len(self._buffer) - active

    async def _run_feeder(self) -> None:
        idle_wait = 0.01
        while not self._closing:
            if self._quarantined is not None or self._draining:
                await self._quarantine_step()
                continue
            want = self._wanted()
            if want <= 0:
                self._want_more.clear()
                await self._want_more.wait()
                continue
            next_due: float | None = None
            if self.config.queue_type == "host":
                pop = partial(self.scripts.pop_hosts, want, self.config.lease_seconds, DUE_BATCH)
                popped = await self._retrying("pop", pop)
                members = [h.lease for h in popped.leases]
                self._report_broken_hosts(popped.broken)
                hosts = {h.lease: (h.slot, h.backoff) for h in popped.leases}
                next_due = popped.next_due
                expired = popped.expired
            else:
                pop = partial(self.scripts.pop, want, self.config.lease_seconds, DUE_BATCH)
                members = await self._retrying("pop", pop)
                expired = sum(1 for m in members if not m)  # b"": dropped at lease (expired), never fetched
                members = [m for m in members if m]
                hosts = {}
            if expired:
                self.stats.inc_value("scheduler/expired", expired)
                idle_wait = 0.01
            if members:
                was_empty = not self._buffer
                await self._accept(members, hosts)
                if was_empty and self._buffer:
                    wake_engine(self.crawler)
                idle_wait = 0.01
            if members or expired:
                if len(members) + expired == want:
                    continue
            # The queue is (nearly) empty, or no host is due yet: wait for a local push, for the next
            # host to be due (host mode), or poll again, backing off.
            if next_due is not None:
                idle_wait = min(max(next_due, 0.01), self.config.poll_max_seconds)
            self._new_work.clear()
            try:
                await asyncio.wait_for(self._new_work.wait(), timeout=idle_wait)
            except TimeoutError:
                idle_wait = min(idle_wait * 2, self.config.poll_max_seconds)

    async def _accept(self, members: list[bytes], hosts: dict[bytes, tuple[str, int]] | None = None) -> None:
        """Decode leased members into requests (host mode: with their slot and the host's backoff level)."""
        was_empty = self._node_empty()
        bad: list[tuple[bytes, str]] = []
        normal: list[Request] = []
        suspects: list[Request] = []
        for lease in members:  # bytes, exactly as stored: acks must match them byte for byte
            try:
                envelope = split_member(lease)
                request = self.codec.decode(envelope.payload)
            except (PayloadError, ValueError) as exc:
                bad.append((lease, str(exc)[:300]))
                self._log_undecodable(lease, getattr(exc, "kind", "envelope"), str(exc)[:300])
                continue
            except Exception as exc:
                logger.error("Decoding a leased request failed unexpectedly; it is dead-lettered", exc_info=exc)
                bad.append((lease, f"{type(exc).__name__}: {exc}"[:300]))
                self._log_undecodable(lease, "error", bad[-1][1])
                continue
            request.meta[LEASE_META] = lease
            host = hosts.get(lease) if hosts else None
            if host is not None:
                request.meta[HOST_SLOT_META], request.meta[HOST_BACKOFF_META] = host
            self.leases.buffered(lease, host)
            (suspects if envelope.deliveries >= 2 else normal).append(request)
        self.stats.inc_value("scheduler/leased", len(members) - len(bad))
        if bad:
            self.stats.inc_value("scheduler/undecodable", len(bad))
            await self._retrying("dead-letter", lambda: self.dead_letters.undecodable(bad, self.keys.processing))
        if not suspects:
            self._buffer.extend(normal)
            return
        # A redelivery means a node died or an ack was lost (e.g. a failover that dropped writes):
        # the links its page gave last time may be lost with it, so they must reach the shared
        # filter again instead of stopping at this node's recent-fingerprint cache.
        self._recent.clear()
        # Quarantine: a redelivered request may be what killed its last node, so it runs alone
        # here. Otherwise every request in flight beside it would be charged a delivery each
        # time it crashes a node, and innocent requests would be dead-lettered with the poison.
        giving_back = suspects
        if self._quarantined is None and was_empty:
            # marked before it runs: if this node dies now, reclaim.lua knows it died running it alone
            lease = suspects[0].meta[LEASE_META]
            await self._retrying("marking a quarantined request", partial(self._mark_solo, lease))
            self._quarantined, giving_back = suspects[0], suspects[1:] + normal
            self.stats.inc_value("scheduler/quarantined")
        else:
            self._buffer.extend(normal)
            self._draining = True  # finish current work, then take the redelivered one alone
        await self._release([r.meta[LEASE_META] for r in giving_back])

    def _log_undecodable(self, lease: bytes, kind: str, reason: str) -> None:
        """A leased payload that did not decode: one WARNING per kind of reason, then only counted."""
        self._undecodable[kind] += 1
        self.stats.inc_value(f"scheduler/undecodable/{kind}")
        if self._undecodable[kind] == 1:
            logger.warning(
                "A queued request could not be decoded and goes to the dead letters (%s): %s (payload %r); "
                "further ones of this kind are only counted in stats scheduler/undecodable/%s and listed "
                "by `dcrawl failed %s`",
                kind,
                reason,
                preview(lease, 200),
                kind,
                self.keys.spider,
            )

    def _node_empty(self) -> bool:
        """This node holds no lease at all (nothing buffered, running or waiting for its ack)."""
        return not self._buffer and not len(self.leases) and not self.leases.pending_acks()

    async def _quarantine_step(self) -> None:
        """While draining or running a quarantined request, do not lease anything else."""
        if self._quarantined is not None:
            lease = self._quarantined.meta[LEASE_META]
            if not self.leases.holds(lease) and not self.leases.pending_acks():
                self._quarantined = None  # done and acked: it killed no one this time
                await self._retrying("unmarking a quarantined request", partial(self._unmark_solo, [lease], True))
            elif self.leases.holds(lease) and self._node_empty_but(lease):
                wake_engine(self.crawler)
        elif self._draining and self._node_empty():
            self._draining = False
        await asyncio.sleep(0.05)

    def _node_empty_but(self, lease: bytes) -> bool:
        return not self._buffer and self.leases.held() == [lease] and not self.leases.pending_acks()

    async def _run_counts(self) -> None:
        """Count the cluster's work while this node holds none (what has_pending_requests reports).

        Cheap: one read-only script call per COUNTS_INTERVAL, the pending counter, never a scan; when the
        cluster's work runs out, the engine is woken to see it and close the spider.
        """
        while not self._stopped:
            await asyncio.sleep(COUNTS_INTERVAL)
            if self._buffer or self._outbox or self._quarantined is not None:
                continue
            try:
                was_pending = self._shared.frontier_busy
                before = self._pushes
                self._shared = await crawl_counts(self.client, self.keys, seeds=False)
                self._pushes_counted = before
                await self._redis_ok("counting the queue")
            except Exception as exc:  # noqa: BLE001 - _redis_failed re-raises what is a bug
                await self._redis_failed("counting the queue", exc)
                continue
            if was_pending and not self._shared.frontier_busy:
                wake_engine(self.crawler)

    async def _run_doorbell(self) -> None:
        """Wake the feeder when any node pushes work (PUBLISHed by enqueue.lua), not on a poll.

        Pub/sub only saves latency: if it cannot work here, idle nodes poll instead.
        """
        outage = OutageLog("doorbell", self.redis_config.masked_url)
        unavailable_logged = False
        while not self._stopped:
            pubsub = None
            try:
                # its own connection (the "+1"): a subscription never holds one of the pool's
                pubsub = await subscribe(self.context.pubsub_client, self.keys.doorbell)
                outage.ok()
                while not self._stopped:
                    if await pubsub.get_message(timeout=1.0) is not None:
                        self._new_work.set()
            except TRANSIENT_ERRORS as exc:
                outage.failed(exc)
                await asyncio.sleep(1.0)
            except Exception as exc:  # noqa: BLE001 - e.g. a proxy without pub/sub
                if not unavailable_logged:
                    unavailable_logged = True
                    logger.warning(
                        "Doorbell (pub/sub on %s) unavailable (%s: %s); idle nodes poll for work every "
                        "SCHEDULER_POLL_MAX_SECONDS (%ss) instead, and pub/sub is tried again every %ss",
                        self.redis_config.masked_url,
                        type(exc).__name__,
                        exc,
                        self.config.poll_max_seconds,
                        DOORBELL_RETRY_SECONDS,
                    )
                for _ in range(DOORBELL_RETRY_SECONDS):
                    if self._stopped:
                        break
                    await asyncio.sleep(1.0)
            finally:
                if pubsub is not None:
                    await pubsub.aclose()

    async def _run_leases(self) -> None:
        next_renew = time.monotonic()
        next_reclaim = time.monotonic()
        backoff = 0.0  # grows while Redis refuses (outage, wrong type, corrupt key); 0 when all is well
        while not self._stopped:
            ok = await self._ack()
            if self.refusals.counting:
                await self._push_refusal_counts()
            now = time.monotonic()
            what = "lease renewal"
            try:
                if now >= next_renew:
                    next_renew = now + self.config.renew_interval
                    await self._renew()  # node reporting: the Heartbeat extension (extensions.py)
                    await self._redis_ok(what)
                what = "reclaim"
                if now >= next_reclaim:
                    next_reclaim = now + min(5.0, self.config.renew_interval)
                    await self.reclaim()
                    await self._redis_ok(what)
            except Exception as exc:  # noqa: BLE001 - _redis_failed re-raises what is a bug
                await self._redis_failed(what, exc)
                ok = False
            backoff = 0.0 if ok else min(max(2 * backoff, ACK_INTERVAL), DATA_BACKOFF_MAX)
            if self._guard is not None:
                self._guard.install()
            await asyncio.sleep(max(ACK_INTERVAL, backoff))

    async def _ack(self) -> bool:
        """Remove the leases of finished requests (batched); False if Redis refused (kept for later)."""
        acks = self.leases.take_ackable(self._flushed_seq)
        if not acks:
            return True
        try:
            for i in range(0, len(acks), ACK_BATCH):
                await self.client.zrem(self.keys.processing, *acks[i : i + ACK_BATCH])
        except Exception as exc:  # noqa: BLE001 - _redis_failed re-raises what is a bug
            self.leases.requeue_acks(acks)
            await self._redis_failed("acking finished requests", exc)
            return False
        await self._redis_ok("acking finished requests")
        self.stats.inc_value("scheduler/acked", len(acks))
        return True

    async def _renew(self) -> None:
        held = self.leases.held()
        for i in range(0, len(held), ACK_BATCH):
            chunk = held[i : i + ACK_BATCH]
            await self.scripts.renew(chunk, self.config.lease_seconds)

    async def reclaim(self, limit: int = 500) -> tuple[int, int]:
        """Return expired leases (of any node) to the queue; dead-letter the poison ones and the
        ones that are not ours (no envelope: reclaim.lua moves them to the failed list)."""
        config = self.config
        requeued, dead = await self.scripts.reclaim(config.max_deliveries, limit, config.failed_max, self.node_id)
        if requeued or dead:
            self.stats.inc_value("scheduler/reclaimed", requeued)
            self.stats.inc_value("scheduler/dead_lettered", dead)
            logger.warning(
                "Reclaimed %d expired leases (a node died or hung); %d dead-lettered (delivered "
                "SCHEDULER_MAX_DELIVERIES (%d) times, or not a queue entry: `dcrawl failed %s`)",
                requeued,
                dead,
                self.config.max_deliveries,
                self.keys.spider,
            )
            self._new_work.set()
        return requeued, dead

    async def _expire_running(self, leases: list[bytes]) -> list[bytes]:
        """MEMUSAGE_LIMIT_MB closed this node: the requests it was running may be what filled its
        memory, so they go back through reclaim.lua now (a delivery counted, SCHEDULER_MAX_DELIVERIES
        applies) instead of a free release. Returns the leases never started (released as usual)."""
        running = [lease for lease in leases if self.leases.stage(lease) is not Stage.BUFFERED]
        if not running:
            return leases
        try:
            await self.client.zadd(self.keys.processing, dict.fromkeys(running, 0), xx=True)
            await self.reclaim(limit=max(500, len(running)))
        except Exception as exc:  # noqa: BLE001 - they expire and are reclaimed after the lease anyway
            logger.warning("Leases of the requests running at the memory limit not expired now (%s)", exc)
        self.leases.forget(running)
        logger.warning(
            "Closed at the memory limit (MEMUSAGE_LIMIT_MB): %d running requests returned with a delivery counted",
            len(running),
        )
        gone = set(running)
        return [lease for lease in leases if lease not in gone]

    def _buffer_leases(self) -> list[bytes]:
        """Leases of requests this node took but never started (the quarantined one included)."""
        leases = [r.meta[LEASE_META] for r in self._buffer]
        quarantined = self._quarantined
        if quarantined is not None and self.leases.stage(quarantined.meta[LEASE_META]) is Stage.BUFFERED:
            leases.append(quarantined.meta[LEASE_META])
        return leases

    async def _mark_solo(self, lease: bytes) -> None:
        await self.client.hset(self.keys.solo, lease, self.node_id)

    async def _unmark_solo(self, leases: list[bytes], done: bool = False) -> None:
        """The quarantine mark of leases given back (and, `done`: the death count of a request that
        ran alone and finished, so a later redelivery starts from none)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hdel(self.keys.solo, *leases)
        if done:
            pipe.hdel(self.keys.deaths, *(hashlib.sha1(lease.split(b":", 2)[2]).hexdigest() for lease in leases))
        await pipe.execute()

    async def _release(self, leases: list[bytes]) -> None:
        """Give leases back to the queue front without counting a delivery (bounded tries)."""
        if not leases:
            return
        for _ in range(3):
            try:
                if self._quarantined is not None and self._quarantined.meta[LEASE_META] in leases:
                    await self._unmark_solo([self._quarantined.meta[LEASE_META]])
                await self.scripts.release(leases)
                self.leases.forget(leases)
                return
            except Exception as exc:  # noqa: BLE001 - _redis_failed re-raises what is a bug
                await self._redis_failed("giving leases back", exc)
                await asyncio.sleep(0.5)


def _hostname(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""
