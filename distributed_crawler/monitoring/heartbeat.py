"""`Heartbeat`: this node's fields in Redis every `HEARTBEAT_INTERVAL`, health alerts, progress log.

Every interval, in a background asyncio task (never in the engine's way):
1. one Lua call (`heartbeat.lua`) writes `{spider}:node:<id>` (hash, TTL 3 intervals + 1 s), the
   `{spider}:nodes` zset, the last-known snapshot, the per-minute history and the cluster totals;
2. one read of the cluster (queues, every node) drives the health checks and a progress line:
   - this node had work but stored no item for `HEALTH_NO_ITEMS_SECONDS` -> alert (once per stall);
   - this node held leases with nothing in flight for longer than a lease (state `stalled`,
     core/stall.py) -> alert `stalled` (once per stall);
   - another node stopped beating while it held leases -> alert (one live node claims it);
3. on close, a last heartbeat with state `closed` and the node's final report (taken, completed,
   failed, items), so losses can be accounted per node after it is gone. A forced stop (a second
   Ctrl-C) writes it too, synchronously in the signal handler, once the node's leases went back
   (core/shutdown.py FORCED_STOP): a node that returned its work is `closed`, never `dead`.

Lease renewal and the reclaim of expired leases stay in the scheduler's lease task, which runs at
its own cadence (a third of `SCHEDULER_LEASE_SECONDS`, at most 10 s): a node whose heartbeat is
off still keeps its leases.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError
from scrapy import signals
from scrapy.exceptions import NotConfigured

from distributed_crawler import __version__
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.policy import Purpose, RedisPolicy
from distributed_crawler.connection.types import AsyncRedis, SyncRedis
from distributed_crawler.connection.untrusted import EpisodeLog, WrongTypeLog, is_wrong_type
from distributed_crawler.core.context import RedisContext
from distributed_crawler.core.shutdown import FORCED_STOP
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.internals import downloads_in_flight, node_stopping
from distributed_crawler.monitoring.alerts import AlertConfig, Alerter
from distributed_crawler.monitoring.nodes import (
    NodeKeys,
    beat,
    duration,
    forget_old_nodes,
    heartbeat_script,
    read_nodes,
    read_totals,
)

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT = 5.0  # the final report must not hold a closing node for long


async def _looked_at_next_round(exc: BaseException) -> None:
    """A diagnosis that Redis refused: nothing to add, the next round looks again."""
    logger.debug("Heartbeat diagnosis failed: %r", exc)


@dataclass(frozen=True)
class HeartbeatConfig:
    interval: float = 10.0
    no_items_seconds: float = 300.0
    log_progress: bool = True

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> HeartbeatConfig:
        read = SettingsReader(settings)
        return cls(
            interval=read.float("HEARTBEAT_INTERVAL", above=0, hint="seconds"),
            no_items_seconds=read.float("HEALTH_NO_ITEMS_SECONDS", min=0, hint="(0 = no alert)"),
            log_progress=read.bool("HEARTBEAT_LOG_PROGRESS"),
        )


@dataclass
class NodeSample:
    """This node's counters now (read from Scrapy's stats and the scheduler; no I/O)."""

    state: str
    pages: int
    items: int
    errors: int
    in_flight: int
    leases: int
    rss: int
    browser_pages: int
    stalled: int = 0  # seconds it has held leases with nothing in flight, once longer than a lease


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # peak, not current


def errors_count(stats: dict[str, Any]) -> int:
    """Download exceptions (every try; not requests dropped on purpose) plus callback exceptions."""
    spider = sum(v for k, v in stats.items() if k.startswith("spider_exceptions/") and isinstance(v, int))
    downloads = int(stats.get("downloader/exception_count", 0)) - int(
        stats.get("downloader/exception_type_count/scrapy.exceptions.IgnoreRequest", 0)  # robots.txt, offsite
    )
    return max(0, downloads) + spider


def browser_pages_open(stats: dict[str, Any]) -> int:
    if "render/pages_open" in stats:  # rendering.py's handler
        return int(stats["render/pages_open"])
    return max(0, int(stats.get("playwright/page_count", 0)) - int(stats.get("playwright/page_count/closed", 0)))


def sample_node(crawler: Crawler, closed: bool = False) -> NodeSample:
    stats = dict(crawler.stats.get_stats())  # a copy: Prometheus samples from another thread
    engine = crawler.engine
    in_flight = downloads_in_flight(crawler)
    scheduler = engine.scheduler if engine is not None else None
    leases = int(getattr(scheduler, "leases_held", 0) or 0)
    stopping = node_stopping(crawler)
    stalled_for = 0.0 if closed else float(getattr(scheduler, "stalled_seconds", 0.0) or 0.0)
    stalled = max(1, round(stalled_for)) if stalled_for > 0 else 0
    if closed:
        state = "closed"
    elif stalled:
        state = "stalled"
    elif stopping:
        state = "draining"
    elif in_flight or leases:
        state = "running"
    else:
        state = "idle"
    return NodeSample(
        state=state,
        pages=int(stats.get("response_received_count", 0)),
        items=int(stats.get("item_scraped_count", 0)),
        errors=errors_count(stats),
        in_flight=in_flight,
        leases=leases,
        rss=rss_bytes(),
        browser_pages=browser_pages_open(stats),
        stalled=stalled,
    )


class RateWindow:
    """Pages per minute over the last minute, from samples taken every heartbeat."""

    def __init__(self, window: float = 60.0) -> None:
        self.window = window
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, when: float, count: int) -> float:
        self.samples.append((when, count))
        # Keep one sample at or before the window's start, so the rate spans a full minute.
        while len(self.samples) > 2 and self.samples[1][0] <= when - self.window:
            self.samples.popleft()
        first_t, first_count = self.samples[0]
        if when - first_t <= 0:
            return 0.0
        return round((count - first_count) / (when - first_t) * 60, 1)


class Heartbeat:
    def __init__(
        self,
        crawler: Crawler,
        config: HeartbeatConfig,
        redis_config: RedisConfig,
        alert_config: AlertConfig,
        node_id: str,
        policy: RedisPolicy,
    ) -> None:
        self.crawler = crawler
        self.policy = policy
        self.config = config
        self.redis_config = redis_config
        self.alert_config = alert_config
        self.node_id = node_id
        self.keys: NodeKeys | None = None
        self.spider_keys: SpiderKeys | None = None
        self.client: AsyncRedis | None = None
        self.script: Any = None
        self.alerter: Alerter | None = None
        self.started = time.time()
        self.rate = RateWindow()
        self.reported = (0, 0, 0)  # pages, items, errors already counted in Redis
        self._task: asyncio.Task | None = None
        self._closed = False  # ends _run even if a Redis call swallowed the task's cancel
        self._progress_items = 0
        self._progress_at = time.monotonic()
        self._stall_alerted = False
        self._stalled_alerted = False
        self._wrong_types = WrongTypeLog("heartbeat", logger)
        self._errors = EpisodeLog(logger)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Heartbeat:
        settings = crawler.settings
        if not SettingsReader(settings).bool("HEARTBEAT_ENABLED"):
            raise NotConfigured("HEARTBEAT_ENABLED is off")
        context = RedisContext.of(crawler)
        ext = cls(
            crawler,
            HeartbeatConfig.from_settings(settings),
            context.config,
            AlertConfig.from_settings(settings),
            context.node_id,
            context.policy,
        )
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(ext.forced_stop, signal=FORCED_STOP)
        return ext

    # -- lifecycle ------------------------------------------------------------------------
    def spider_opened(self, spider: Spider) -> None:
        settings = self.crawler.settings
        keys = getattr(spider, "keys", None)  # RedisSpider's (it may rename the seeds key)
        context = RedisContext.of(self.crawler)
        self.spider_keys = keys if isinstance(keys, SpiderKeys) else context.keys_for(spider.name)
        self.keys = NodeKeys.from_settings(settings, spider.name, self.spider_keys)
        self.client = context.acquire().client
        self.script = heartbeat_script(self.client)
        self.alerter = Alerter(self.alert_config, self.client, self.keys.alerts, spider.name, self.node_id, self.policy)
        self.started = time.time()
        self._progress_at = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="dc-heartbeat")

    def _report(self, reason: str, sample: NodeSample) -> dict[str, Any]:
        """The node's final report (taken, completed, failed, items...), kept after it is gone."""
        stats = self.crawler.stats.get_stats()
        return {
            "reason": reason,
            "taken": int(stats.get("scheduler/leased", 0)),
            "completed": int(stats.get("scheduler/acked", 0)),
            "failed": int(stats.get("retry/max_reached", 0))
            + int(stats.get("proxy/retry_max_reached", 0))
            + sum(v for k, v in stats.items() if k.startswith("spider_exceptions/") and isinstance(v, int)),
            "dead_lettered": int(stats.get("scheduler/dead_lettered", 0)),
            "pages": sample.pages,
            "items": sample.items,
            "errors": sample.errors,
        }

    async def spider_closed(self, spider: Spider, reason: str) -> None:
        if self._task is None:
            return
        self._closed = True
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        sample = sample_node(self.crawler, closed=True)
        report = self._report(reason, sample)
        logger.info("Node %s report: %s", self.node_id, ", ".join(f"{k}={v}" for k, v in report.items()))
        refused: list[BaseException] = []

        async def final() -> bool:
            await asyncio.wait_for(self._beat(sample, report=report), CLOSE_TIMEOUT)
            return True

        async def keep(exc: BaseException) -> None:
            if not isinstance(exc, ResponseError):
                raise exc
            refused.append(exc)

        if not await self.policy.run(Purpose.HEARTBEAT, final, default=False, on_error=keep):
            why = f"Redis refused it: {str(refused[0])[:300]}" if refused else "Redis unreachable"
            logger.warning("Final heartbeat of node %s not written (%s); it will show as dead", self.node_id, why)
        if self.alerter is not None:
            await self.alerter.close()
        await RedisContext.of(self.crawler).release()  # the node's client: closed by its last user

    def forced_stop(self, client: SyncRedis, leases_held: int) -> None:
        """The second stop signal gave the node's leases back (core/shutdown.py FORCED_STOP; runs in
        the signal handler, on a sync client): the final heartbeat now, state `closed`, since the
        reactor stops without closing the spider. A node still holding leases is left to show dead."""
        if self.keys is None or self._task is None or self._closed:
            return
        self._closed = True  # no later round overwrites it
        if leases_held:
            logger.warning(
                "Forced stop: %d leases of node %s not given back; it shows as dead until they expire",
                leases_held,
                self.node_id,
            )
            return
        sample = sample_node(self.crawler, closed=True)
        report = self._report("shutdown_forced", sample)
        try:
            run_sync(self._beat(sample, report=report, script=heartbeat_script(client)))
        except Exception as exc:  # noqa: BLE001 - inside a signal handler: one line, never a traceback
            logger.warning("Final heartbeat of node %s not written (%s); it will show as dead", self.node_id, exc)
            return
        logger.info("Node %s report: %s", self.node_id, ", ".join(f"{k}={v}" for k, v in report.items()))

    async def _run(self) -> None:
        while not self._closed:
            began = time.monotonic()
            # Redis away: this round is skipped; the counts not yet reported go with the next one
            await self.policy.run(Purpose.HEARTBEAT, self.tick, on_error=self._failed, on_ok=self._tick_ok)
            await asyncio.sleep(max(0.05, self.config.interval - (time.monotonic() - began)))

    def _expected_types(self) -> dict[str, tuple[str, ...]]:
        """The keys heartbeat.lua writes, with their Redis types."""
        assert self.keys is not None
        keys = self.keys
        expected: dict[str, tuple[str, ...]] = {keys.nodes: ("zset",), keys.node(self.node_id): ("hash",)}
        expected.update({key: ("hash",) for key in (keys.last, keys.alerted, keys.history, keys.stats)})
        return expected

    async def _failed(self, exc: BaseException) -> None:
        """Not an outage: a key of the wrong type or a corrupt one (named once, then wait), or a
        bug, which must not stop the heartbeats for good (logged once a run)."""
        if is_wrong_type(exc):
            assert self.client is not None  # set at open: this follows a call on it
            check = partial(self._wrong_types.check, self.client, self._expected_types(), exc=exc)
            await self.policy.run(Purpose.HEARTBEAT, check, on_error=_looked_at_next_round)
        elif isinstance(exc, ResponseError):
            self._errors.failed(
                "heartbeat",
                "Redis refused the heartbeat of node %s (%s); trying again every interval",
                self.node_id,
                str(exc)[:300],
                exc_info=exc,
            )
        else:
            self._errors.failed(
                "heartbeat", "Heartbeat of node %s failed; trying again every interval", self.node_id, exc_info=exc
            )

    async def _tick_ok(self) -> None:
        self._errors.ok("heartbeat")
        if self._wrong_types.reported:
            assert self.client is not None  # set at open: this follows a call on it
            resolved = partial(self._wrong_types.resolved, self.client, self._expected_types())
            await self.policy.run(Purpose.HEARTBEAT, resolved, on_error=_looked_at_next_round)

    # -- one interval -----------------------------------------------------------------------
    async def _beat(self, sample: NodeSample, report: dict[str, Any] | None = None, script: Any = None) -> float:
        """Write this node's fields (with `script`: on another client, e.g. a sync one)."""
        assert self.keys is not None
        fields = asdict(sample)
        fields.update(
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "version": __version__,
                "spider": self.keys.spider,
                "started": round(self.started, 3),
                "rate": self.rate.add(time.monotonic(), sample.pages),
            }
        )
        if report is not None:
            fields["report"] = report
        counted = (sample.pages, sample.items, sample.errors)
        deltas = tuple(max(0, now - before) for now, before in zip(counted, self.reported))
        now = await beat(script or self.script, self.keys, self.node_id, self.config.interval, fields, deltas)
        self.reported = counted
        return now

    async def tick(self) -> None:
        assert self.keys is not None and self.spider_keys is not None and self.client is not None
        sample = sample_node(self.crawler)
        now = await self._beat(sample)
        counts = await RedisContext.of(self.crawler).frontier_for(self.spider_keys.spider).counts(seeds=True)
        nodes = await read_nodes(self.client, self.keys, now)
        totals = await read_totals(self.client, self.keys)
        await forget_old_nodes(self.client, self.keys, now)
        await self._check_items(sample, counts, now)
        await self._check_stalled(sample, now)
        await self._check_dead_nodes(nodes, now)
        if self.config.log_progress:
            self._log_progress(counts, nodes, totals)

    async def _check_items(self, sample: NodeSample, counts: Any, now: float) -> None:
        """Alert once when this node had work for HEALTH_NO_ITEMS_SECONDS without storing an item."""
        has_work = bool(
            sample.leases or sample.in_flight or counts.hosts or counts.single_queue or counts.pending is None
        )
        moment = time.monotonic()
        if sample.items > self._progress_items or not has_work:
            self._progress_items = sample.items
            self._progress_at = moment
            self._stall_alerted = False
            return
        quiet = moment - self._progress_at
        if self.config.no_items_seconds and quiet >= self.config.no_items_seconds and not self._stall_alerted:
            self._stall_alerted = True
            assert self.alerter is not None
            await self.alerter.alert(
                "no_items",
                self.node_id,
                f"no item for {quiet:.0f}s while work was available ({sample.pages} pages, "
                f"{sample.leases} leases held, {'unknown' if counts.pending is None else counts.pending} pending); HEALTH_NO_ITEMS_SECONDS="
                f"{self.config.no_items_seconds:g}",
                now,
                pages=sample.pages,
                items=sample.items,
                leases=sample.leases,
                pending=counts.pending,
            )

    async def _check_stalled(self, sample: NodeSample, now: float) -> None:
        """Alert once per stall: this node held leases with nothing in flight for longer than a lease."""
        if sample.state != "stalled":
            self._stalled_alerted = False
            return
        if self._stalled_alerted:
            return
        self._stalled_alerted = True
        assert self.alerter is not None
        await self.alerter.alert(
            "stalled",
            self.node_id,
            f"holds {sample.leases} leases with nothing in flight for {sample.stalled}s (longer than "
            "SCHEDULER_LEASE_SECONDS): no other node can take that work; see this node's log, restart it "
            "if it stays so",
            now,
            leases=sample.leases,
            seconds=sample.stalled,
            pages=sample.pages,
            items=sample.items,
        )

    async def _check_dead_nodes(self, nodes: list[dict[str, Any]], now: float) -> None:
        """Alert once for each node that stopped beating while holding leases (first live node wins).
        Not while Redis refuses this node's writes (an outage, a full Redis): the others' heartbeats
        were refused too, so their silence says nothing; a node really dead is alerted once it ends."""
        assert self.keys is not None and self.alerter is not None and self.client is not None
        if self.policy.since is not None:
            return
        for node in nodes:
            if node["state"] != "dead" or not node["leases"] or node["id"] == self.node_id:
                continue
            if not await self.client.hsetnx(self.keys.alerted, node["id"], round(now, 3)):
                continue  # another node alerted already
            silent = now - node["last_seen"]
            await self.alerter.alert(
                "dead_node",
                node["id"],
                f"no heartbeat for {silent:.0f}s while holding {node['leases']} leases; they return to the "
                f"queue once they expire (SCHEDULER_LEASE_SECONDS)",
                now,
                leases=node["leases"],
                last_seen=node["last_seen"],
                pages=node["pages"],
                items=node["items"],
            )

    def _log_progress(self, counts: Any, nodes: list[dict[str, Any]], totals: dict[str, int]) -> None:
        alive = [n for n in nodes if n["alive"]]
        dead = sum(1 for n in nodes if n["state"] == "dead")
        rate = sum(n["rate"] for n in alive)
        pending = "unknown" if counts.pending is None else str(counts.pending)
        eta = counts.pending / rate * 60 if rate and counts.pending else None
        logger.info(
            "Cluster %s: %d nodes alive%s, %d pages (%.0f/min), %d items, %d errors; "
            "pending %s, leased %d, delayed %d, failed %d; queue drains in ~%s",
            self.keys.spider if self.keys else "?",
            len(alive),
            f" ({dead} dead)" if dead else "",
            totals["pages"],
            rate,
            totals["items"],
            totals["errors"],
            pending,
            counts.leased,
            counts.delayed,
            counts.failed,
            duration(eta) if counts.pending else ("?" if counts.pending is None else "0s"),
        )
