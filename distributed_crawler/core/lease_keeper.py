"""This node's leases in Redis: acks of finished requests (batched), renewal of the ones it works on,
reclaim of expired leases of dead nodes, giving leases back (retried until Redis takes them), and
the one WARNING line when the node holds leases with nothing in flight for longer than a lease."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from functools import partial
from itertools import chain
from typing import TYPE_CHECKING, Any

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.policy import NodeStopping, Purpose
from distributed_crawler.connection.types import SyncRedis
from distributed_crawler.core.feeder import Held
from distributed_crawler.core.leases import LeaseTracker, Stage
from distributed_crawler.core.lifecycle import Lifecycle
from distributed_crawler.core.outbox import Outbox
from distributed_crawler.core.quarantine import Quarantine
from distributed_crawler.core.stall import StallClock
from distributed_crawler.core.tasks import BackgroundTasks
from distributed_crawler.core.trouble import DATA_BACKOFF_MAX, RedisTrouble
from distributed_crawler.frontier.base import Frontier, RevisitRecord
from distributed_crawler.internals import watch_scrapes
from distributed_crawler.meta import LEASE_META

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from distributed_crawler.core.scheduler_config import SchedulerConfig

logger = logging.getLogger(__name__)

ACK_BATCH = 1000
ACK_INTERVAL = 0.1
RELEASE_SECONDS = 5.0  # how long one try at giving leases back may wait for Redis (then: next round)


class LeaseKeeper:
    def __init__(
        self,
        config: SchedulerConfig,
        frontier: Frontier,
        trouble: RedisTrouble,
        leases: LeaseTracker,
        outbox: Outbox,
        quarantine: Quarantine,
        held: Held,
        in_engine: Callable[[], Iterable[Request]],
        stats: Any,
        node_id: str,
        lifecycle: Lifecycle,
        each_round: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        self.frontier = frontier
        self.trouble = trouble
        self.leases = leases
        self.outbox = outbox
        self.quarantine = quarantine
        self.buffer = held.buffer  # leased, not started yet
        self.arriving = held.arriving  # leased, being decoded and admitted by the feeder
        self.held = held.back  # leased, started, held back a moment (core/held.py)
        self.new_work = held.new_work  # rung after a reclaim put work back
        self.in_engine = in_engine  # requests downloading or scraping (internals.requests_in_progress)
        self.stats = stats
        self.node_id = node_id
        self.lifecycle = lifecycle
        self.each_round = each_round  # after each round of the lease task (the scheduler re-wraps its signal guard)
        self.stall = StallClock(config.lease_seconds)
        self._strays_logged = False

    async def run(self) -> None:
        """Ack, renew, reclaim and give back, a round every ACK_INTERVAL (longer while Redis refuses),
        until the node stops."""
        next_renew = time.monotonic()
        next_reclaim = time.monotonic()
        backoff = 0.0  # grows while Redis refuses (outage, wrong type, corrupt key); 0 when all is well
        while not self.lifecycle.stopped:
            await self.ack()
            if self.outbox.refusals.due():  # at most every FLUSH_SECONDS: no round trip per refusal
                await self.outbox.push_refusal_counts()
            now = time.monotonic()
            ok = True
            if now >= next_renew:  # HEARTBEAT: Redis away or refusing, this round is skipped
                next_renew = now + self.config.renew_interval
                ok = await self.trouble.run(Purpose.HEARTBEAT, "lease renewal", self.renew) is not None
            if now >= next_reclaim:
                next_reclaim = now + min(5.0, self.config.renew_interval)
                ok = await self.trouble.run(Purpose.HEARTBEAT, "reclaim", self.reclaim) is not None and ok
            if self.leases.returning():  # a release Redis refused: one more try a round (backing off)
                ok = await self.give_back(0.0) and ok
            backoff = 0.0 if ok else min(max(2 * backoff, ACK_INTERVAL), DATA_BACKOFF_MAX)
            self.watch_stall()
            self.each_round()
            await asyncio.sleep(max(ACK_INTERVAL, backoff))

    async def ack(self) -> None:
        """Remove the leases of finished requests, with the revisit records of their pages (batched;
        ACK: retried until Redis takes them)."""
        acks = self.leases.take_ackable(self.outbox.flushed_seq)
        if not acks:
            return
        done = 0
        try:
            for i in range(0, len(acks), ACK_BATCH):
                chunk = acks[i : i + ACK_BATCH]
                riders = self.leases.riders(chunk)
                ack = partial(self._ack, chunk, [(lease, record) for lease, (record, _) in riders])
                replies = await self.trouble.run(Purpose.ACK, "acking finished requests", ack)
                done = i + len(chunk)
                self.leases.acked(chunk)
                for (_, (_, on_reply)), reply in zip(riders, replies or ()):
                    on_reply(reply)
        except NodeStopping:
            self.leases.requeue_acks(acks[done:])  # still ours: acked or released at close
            raise
        self.stats.inc_value("scheduler/acked", len(acks))

    async def _ack(self, leases: list[bytes], records: list[tuple[bytes, RevisitRecord]]) -> list[Any]:
        """One call per shard: a plain removal, or recrawl_ack.lua when pages' records ride along
        (-> their replies)."""
        if not records:
            await self.frontier.ack(leases)
            return []
        return await self.frontier.ack_recorded(leases, records)

    def watch_scrapes(self, crawler: Crawler) -> None:
        """A lease is finished once the scraper is done with its response: every item committed (our
        pipeline awaits the commit) and every child request enqueued (internals.watch_scrapes)."""

        def on_scrape(request: Request) -> Callable[[], None] | None:
            lease = request.meta.get(LEASE_META)
            if lease is None:
                return None
            self.leases.scraping(lease)
            return lambda: self.leases.finished(lease, self.outbox.enqueued_seq)

        watch_scrapes(crawler, on_scrape)

    def working(self) -> set[bytes]:
        """The leases of every request found where work is now: the prefetch buffer, a lease being
        admitted, the requests held back a moment, the quarantine, the engine (downloading or scraping)."""
        quarantined = [self.quarantine.request] if self.quarantine.request is not None else []
        requests = chain(self.buffer, self.arriving, self.held.requests(), quarantined, self.in_engine())
        return {lease for lease in (r.meta.get(LEASE_META) for r in requests) if lease is not None}

    async def renew(self) -> bool:
        """Renew the leases of work (buffered, running, waiting for the ack), nothing else: a lease
        whose request is gone is given back instead (LeaseTracker.renewable)."""
        renewing, strays = self.leases.renewable(self.working())
        if strays:
            self.stats.inc_value("scheduler/stray_leases", len(strays))
            if not self._strays_logged:  # a bug of ours or of a component that dropped a request
                self._strays_logged = True
                logger.warning(
                    "%d leases had no request behind them any more (dropped without an outcome); they "
                    "are given back, never renewed; further ones are counted in stats scheduler/stray_leases",
                    len(strays),
                )
        for i in range(0, len(renewing), ACK_BATCH):
            await self.frontier.renew(renewing[i : i + ACK_BATCH], self.config.lease_seconds)
        return True

    def watch_stall(self) -> None:
        """One WARNING when this node has held leases with nothing in flight for longer than a
        lease (a Redis outage aside: it has its own line), one INFO when that ends."""
        policy = self.trouble.policy
        held, engine = self.leases.in_redis(), sum(1 for _ in self.in_engine())
        change = self.stall.observe(held, engine, time.monotonic(), outage=policy.since is not None)
        if change is True:
            logger.warning(
                "Node %s stalled: it holds %d leases with nothing in flight for %.0fs (longer than "
                "SCHEDULER_LEASE_SECONDS, %ss): %d buffered, %d waiting for their ack, %d being given back; "
                "`dcrawl status %s` shows it stalled; restart it if it stays so (its leases then expire "
                "and another node takes them)",
                self.node_id,
                held,
                self.stall.seconds(time.monotonic()),
                self.config.lease_seconds,
                len(self.buffer),
                self.leases.pending_acks(),
                len(self.leases.returning()),
                self.frontier.spider,
            )
        elif change is False:
            logger.info("Node %s is no longer stalled", self.node_id)

    async def reclaim(self, limit: int = 500) -> tuple[int, int]:
        """Return expired leases (of any node) to the queue; dead-letter the poison ones and the
        ones that are not ours (no envelope: the reclaim script moves them to the failed list)."""
        config = self.config
        frontier = self.frontier
        requeued, dead = await frontier.reclaim(config.max_deliveries, limit, config.failed_max, self.node_id)
        if requeued or dead:
            self.stats.inc_value("scheduler/reclaimed", requeued)
            self.stats.inc_value("scheduler/dead_lettered", dead)
            logger.warning(
                "Reclaimed %d expired leases (a node died or hung); %d dead-lettered (delivered "
                "SCHEDULER_MAX_DELIVERIES (%d) times, or not a queue entry: `dcrawl failed %s`)",
                requeued,
                dead,
                config.max_deliveries,
                frontier.spider,
            )
            self.new_work.set()
        return requeued, dead

    async def expire_running(self, leases: list[bytes]) -> list[bytes]:
        """MEMUSAGE_LIMIT_MB closed this node: the requests it was running may be what filled its
        memory, so they go back through the reclaim script now (a delivery counted,
        SCHEDULER_MAX_DELIVERIES applies) instead of a free release. Returns the leases never
        started (released as usual)."""
        running = [lease for lease in leases if self.leases.stage(lease) is not Stage.BUFFERED]
        if not running:
            return leases
        try:
            await self.frontier.expire(running)
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

    async def settle(self, tasks: BackgroundTasks, memusage: bool, masked_url: str) -> None:
        """At close: push and ack what the engine finished (bounded, while the tasks doing it live),
        stop the tasks, give back what never finished; one ERROR line if anything stays behind."""
        deadline = time.monotonic() + 30
        while (
            self.outbox.entries and tasks.alive("outbox") or self.leases.pending_acks() and tasks.alive("leases")
        ) and time.monotonic() < deadline:
            self.outbox.ready.set()
            await asyncio.sleep(0.05)
        self.lifecycle.stop()
        await tasks.stop()
        if self.outbox.refusals.counting:  # the last ones (STATS: skipped if Redis is away)
            await self.outbox.push_refusal_counts()
        unfinished = self.leases.held()
        if unfinished and memusage:
            unfinished = await self.expire_running(unfinished)
        if unfinished or self.leases.returning():  # a forced stop: give this node's work back now, not at expiry
            await self.release(unfinished)
        if self.outbox.entries or self.leases.pending_acks() or self.leases.returning():
            logger.error(
                "%s at close: %d requests not pushed, %d leases not acked, %d not given back; their leases "
                "expire after SCHEDULER_LEASE_SECONDS and another node redoes them",
                tasks.failure("outbox", "leases") or f"Redis at {masked_url} unreachable",
                len(self.outbox),
                self.leases.pending_acks(),
                len(self.leases.returning()),
            )

    def unstarted(self) -> list[bytes]:
        """Leases of requests this node took but never started (the quarantined one and the held ones
        included: a held request is dropped here, its lease given back)."""
        return [r.meta[LEASE_META] for r in self.buffer] + self.held.drop() + self.quarantine.unstarted()

    async def release(self, leases: list[bytes]) -> None:
        """Give leases back to the queue front without counting a delivery. From now on they are
        never renewed; if Redis does not take them within RELEASE_SECONDS, the lease task tries
        again every round (they stay counted as held until it lands, or they expire)."""
        self.leases.give_back(leases)
        await self.give_back(RELEASE_SECONDS)

    async def give_back(self, patience: float) -> bool:
        """One bounded try (the node's policy, ACK: retried with backoff for `patience` seconds) at
        releasing every lease being given back; False if Redis has not taken them yet."""
        leases = self.leases.returning()
        if not leases:
            return True
        quarantined = self.quarantine.lease

        async def release() -> None:
            if quarantined is not None and quarantined in leases:
                await self.quarantine.unmark([quarantined])
            for i in range(0, len(leases), ACK_BATCH):
                await self.frontier.release(leases[i : i + ACK_BATCH])

        deadline = time.monotonic() + patience
        try:
            await self.trouble.run(
                Purpose.ACK, "giving leases back", release, stopped=lambda: time.monotonic() > deadline
            )
        except NodeStopping:
            return False
        self.leases.returned(leases)  # a lease Redis no longer had (reclaimed meanwhile) is skipped by the script
        return True

    def force_release(self, client: SyncRedis) -> None:
        """Second stop signal (runs in the signal handler): ack what is done, release the rest, on
        a sync `client`. Synchronous on purpose: the reactor stops right after this returns."""
        frontier = self.frontier.bind(client)
        done = self.leases.take_ackable(self.outbox.flushed_seq)
        riders = self.leases.riders(done)
        if riders:
            run_sync(frontier.ack_recorded(done, [(lease, record) for lease, (record, _) in riders]))
        elif done:
            run_sync(frontier.ack(done))
        unacked = self.leases.unacked()
        # A redirect, retry or held-back request whose successor is still in the outbox: the
        # successor is lost with this process, so its predecessor's lease goes back instead
        # (release skips a lease the outbox's in-flight push already removed).
        handed_over = self.outbox.handovers()
        if unacked or handed_over:
            run_sync(frontier.release(unacked + handed_over))
        self.leases.forget(unacked)
