"""This node's leases in Redis: acks of finished requests (batched), renewal of the ones still held,
reclaim of expired leases of dead nodes, and giving leases back at close."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from distributed_crawler.connection.policy import NodeStopping, Purpose
from distributed_crawler.core.leases import LeaseTracker, Stage
from distributed_crawler.core.outbox import Outbox
from distributed_crawler.core.quarantine import Quarantine
from distributed_crawler.core.tasks import BackgroundTasks
from distributed_crawler.core.trouble import DATA_BACKOFF_MAX, RedisTrouble, logger
from distributed_crawler.meta import LEASE_META
from distributed_crawler.queue.base import Frontier

if TYPE_CHECKING:
    from scrapy import Request

    from distributed_crawler.core.scheduler_config import SchedulerConfig

ACK_BATCH = 1000
ACK_INTERVAL = 0.1
RELEASE_SECONDS = 5.0  # how long giving leases back may wait for Redis (at close, a quarantine)


class LeaseKeeper:
    def __init__(
        self,
        config: SchedulerConfig,
        frontier: Callable[[], Frontier],
        trouble: RedisTrouble,
        leases: LeaseTracker,
        outbox: Outbox,
        quarantine: Quarantine,
        buffer: deque[Request],
        stats: Any,
        node_id: str,
        new_work: asyncio.Event,
    ) -> None:
        self.config = config
        self._frontier = frontier
        self.trouble = trouble
        self.leases = leases
        self.outbox = outbox
        self.quarantine = quarantine
        self.buffer = buffer
        self.stats = stats
        self.node_id = node_id
        self.new_work = new_work

    async def run(self, stopped: Callable[[], bool], each_round: Callable[[], None]) -> None:
        next_renew = time.monotonic()
        next_reclaim = time.monotonic()
        backoff = 0.0  # grows while Redis refuses (outage, wrong type, corrupt key); 0 when all is well
        while not stopped():
            await self.ack()
            if self.outbox.refusals.counting:
                await self.outbox.push_refusal_counts()
            now = time.monotonic()
            ok = True
            if now >= next_renew:  # HEARTBEAT: Redis away or refusing, this round is skipped
                next_renew = now + self.config.renew_interval
                ok = await self.trouble.run(Purpose.HEARTBEAT, "lease renewal", self.renew) is not None
            if now >= next_reclaim:
                next_reclaim = now + min(5.0, self.config.renew_interval)
                ok = await self.trouble.run(Purpose.HEARTBEAT, "reclaim", self.reclaim) is not None and ok
            backoff = 0.0 if ok else min(max(2 * backoff, ACK_INTERVAL), DATA_BACKOFF_MAX)
            each_round()
            await asyncio.sleep(max(ACK_INTERVAL, backoff))

    async def ack(self) -> None:
        """Remove the leases of finished requests (batched; ACK: retried until Redis takes them)."""
        acks = self.leases.take_ackable(self.outbox.flushed_seq)
        if not acks:
            return
        done = 0
        try:
            for i in range(0, len(acks), ACK_BATCH):
                chunk = acks[i : i + ACK_BATCH]
                await self.trouble.run(Purpose.ACK, "acking finished requests", partial(self._frontier().ack, chunk))
                done = i + len(chunk)
        except NodeStopping:
            self.leases.requeue_acks(acks[done:])  # still ours: acked or released at close
            raise
        self.stats.inc_value("scheduler/acked", len(acks))

    async def renew(self) -> bool:
        held = self.leases.held()
        for i in range(0, len(held), ACK_BATCH):
            await self._frontier().renew(held[i : i + ACK_BATCH], self.config.lease_seconds)
        return True

    async def reclaim(self, limit: int = 500) -> tuple[int, int]:
        """Return expired leases (of any node) to the queue; dead-letter the poison ones and the
        ones that are not ours (no envelope: the reclaim script moves them to the failed list)."""
        config = self.config
        frontier = self._frontier()
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
            await self._frontier().expire(running)
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

    async def settle(self, tasks: BackgroundTasks, stop: Callable[[], None], memusage: bool, masked_url: str) -> None:
        """At close: push and ack what the engine finished (bounded, while the tasks doing it live),
        stop the tasks, give back what never finished; one ERROR line if anything stays behind."""
        deadline = time.monotonic() + 30
        while (
            self.outbox.entries and tasks.alive("outbox") or self.leases.pending_acks() and tasks.alive("leases")
        ) and time.monotonic() < deadline:
            self.outbox.ready.set()
            await asyncio.sleep(0.05)
        stop()
        await tasks.stop()
        unfinished = self.leases.held()
        if unfinished and memusage:
            unfinished = await self.expire_running(unfinished)
        if unfinished:  # a forced stop: give this node's work back now rather than at expiry
            await self.release(unfinished)
        if self.outbox.entries or self.leases.pending_acks():
            logger.error(
                "%s at close: %d requests not pushed, %d leases not acked; their leases expire after "
                "SCHEDULER_LEASE_SECONDS and another node redoes them",
                tasks.failure("outbox", "leases") or f"Redis at {masked_url} unreachable",
                len(self.outbox),
                self.leases.pending_acks(),
            )

    def unstarted(self) -> list[bytes]:
        """Leases of requests this node took but never started (the quarantined one included)."""
        return [r.meta[LEASE_META] for r in self.buffer] + self.quarantine.unstarted()

    async def release(self, leases: list[bytes]) -> None:
        """Give leases back to the queue front without counting a delivery (bounded tries)."""
        if not leases:
            return
        quarantined = self.quarantine.lease

        async def give_back() -> None:
            if quarantined is not None and quarantined in leases:
                await self.quarantine.unmark([quarantined])
            await self._frontier().release(leases)

        deadline = time.monotonic() + RELEASE_SECONDS  # bounded: else the leases expire and are reclaimed
        try:
            await self.trouble.run(
                Purpose.ACK, "giving leases back", give_back, stopped=lambda: time.monotonic() > deadline
            )
        except NodeStopping:
            return
        self.leases.forget(leases)

    def force_release(self, client: Any) -> None:
        """Second stop signal (runs in the signal handler): ack what is done, release the rest, on
        a sync `client`. Synchronous on purpose: the reactor stops right after this returns."""
        frontier = self._frontier().bind(client)
        done = self.leases.take_ackable(self.outbox.flushed_seq)
        if done:
            frontier.ack(done)
        unacked = self.leases.unacked()
        # A redirect, retry or held-back request whose successor is still in the outbox: the
        # successor is lost with this process, so its predecessor's lease goes back instead
        # (release skips a lease the outbox's in-flight push already removed).
        handed_over = self.outbox.handovers()
        if unacked or handed_over:
            frontier.release(unacked + handed_over)
        self.leases.forget(unacked)
