"""The feeder: leases requests from the frontier into a small local buffer that `next_request`
serves, and wakes the engine when work arrives (no 5-second heartbeat stall).

An idle node waits on the doorbell (one pub/sub subscription, rung by the scripts that push),
the next host's or retry's due time, or (the doorbell not listening) a backed-off poll: never a
hot loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from distributed_crawler.connection.clients import subscribe
from distributed_crawler.connection.policy import Purpose
from distributed_crawler.connection.types import AsyncRedis
from distributed_crawler.connection.untrusted import preview
from distributed_crawler.core.held import HeldRequests
from distributed_crawler.core.leases import LeaseTracker
from distributed_crawler.core.lifecycle import Lifecycle
from distributed_crawler.core.pause import PauseWatch, give_back_buffer
from distributed_crawler.core.quarantine import Quarantine
from distributed_crawler.core.trouble import RedisTrouble
from distributed_crawler.dedup.recent import RecentFingerprints
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.codec import PayloadError, RequestCodec
from distributed_crawler.frontier.doorbell import Ring
from distributed_crawler.frontier.envelope import split_member
from distributed_crawler.internals import downloads_in_flight, wake_engine
from distributed_crawler.meta import HOST_BACKOFF_META, HOST_SLOT_META, LEASE_META

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from distributed_crawler.core.scheduler_config import SchedulerConfig
    from distributed_crawler.frontier.deadletters import DeadLetters

logger = logging.getLogger(__name__)

DUE_BATCH = 100  # due retries the lease script moves from delayed back to the queue per call
PAUSE_CHECK_SECONDS = 0.5  # a paused feeder looks at the pause this often (read every 1.5 s: core/pause.py)
DOORBELL_RETRY_SECONDS = 30  # pub/sub failed for another reason than an outage: polling meanwhile
RING_SETTLE_SECONDS = 0.003  # a ring wakes a lease this much later: another node's "drained" may come first


class Wake(asyncio.Event):
    """The feeder's wake-up: `set` by this node (a push, a reclaim, the pause), `ring` by the doorbell."""

    def __init__(self) -> None:
        super().__init__()
        self.local = False

    def set(self) -> None:
        self.local = True
        super().set()

    def ring(self) -> None:
        super().set()

    def clear(self) -> None:
        self.local = False
        super().clear()


@dataclass
class Held:
    """What this node leased and has not started, and the feeder's two wake-ups: made before the
    parts that share them (the lease task renews what is held and rings after a reclaim; the
    pause wakes the feeder when it changes)."""

    buffer: deque[Request] = field(default_factory=deque)  # leased, decoded, waiting for the engine
    arriving: list[Request] = field(default_factory=list)  # leased, being decoded and admitted: their leases are work
    want_more: asyncio.Event = field(default_factory=asyncio.Event)  # the buffer runs low
    new_work: Wake = field(default_factory=Wake)  # work arrived in Redis (a push, a reclaim, a ring)
    ready: Callable[[], None] = lambda: None  # asks the engine for the next request
    back: HeldRequests = field(init=False)  # leased, started, held back a moment; served before the buffer

    def __post_init__(self) -> None:
        self.back = HeldRequests(self.buffer, self.ready)


class Feeder:
    def __init__(
        self,
        config: SchedulerConfig,
        frontier: Frontier,
        codec: RequestCodec,
        trouble: RedisTrouble,
        leases: LeaseTracker,
        quarantine: Quarantine,
        pause: PauseWatch,
        dead_letters: DeadLetters,
        release: Callable[[list[bytes]], Awaitable[None]],
        held: Held,
        recent: RecentFingerprints,
        crawler: Crawler,
        lifecycle: Lifecycle,
    ) -> None:
        self.config = config
        self.frontier = frontier
        self.codec = codec
        self.trouble = trouble
        self.leases = leases
        self.quarantine = quarantine
        self.pause = pause  # the crawl's pause: while paused, nothing is leased
        self.dead_letters = dead_letters  # where undecodable leased payloads go
        self.release = release  # gives leases back (core/lease_keeper.py)
        self.buffer = held.buffer
        self.arriving = held.arriving
        self.want_more = held.want_more
        self.new_work = held.new_work
        self.recent = recent
        self.crawler = crawler
        self.stats = crawler.stats
        self.lifecycle = lifecycle
        self._rings: list[Ring] = []  # doorbell messages that woke the idle feeder since its last lease
        self._undecodable: Counter[str] = Counter()  # leased payloads that did not decode, by kind
        self.doorbell_live = False  # subscribed to the doorbell: an idle feeder waits for it, no polling
        self._gave_back = False  # the last lease gave requests back (a quarantine): poll for them

    def wake(self) -> None:
        """Wake the loop from its waits, so it sees at once that the node closes."""
        self.want_more.set()
        self.new_work.set()

    def wanted(self) -> int:
        """How many more requests to lease: enough to keep the downloader full, no hoarding.

        Leases held in a buffer are work other nodes cannot take, so a node holds at most
        what its downloader can start soon (SCHEDULER_PREFETCH, default CONCURRENT_REQUESTS)
        plus a quarter of that for batching.
        """
        if len(self.buffer) > self.config.prefetch // 4:
            return 0
        active = downloads_in_flight(self.crawler)
        return self.config.prefetch + self.config.prefetch // 4 - len(self.buffer) - active

    def take(self) -> Request | None:
        """The next buffered request (asking for more when the buffer runs low)."""
        if not self.buffer:
            self.want_more.set()
            return None
        if self.pause.paused and not self.pause.drain:
            self.want_more.set()  # the feeder gives the buffer back
            return None
        request = self.buffer.popleft()
        while self.pause.blocks(request):
            # an operator blocked its host: never renewed from now on, the lease task releases it
            self.leases.give_back([request.meta[LEASE_META]])
            self.stats.inc_value("scheduler/released_blocked")
            self.want_more.set()
            if not self.buffer:
                return None
            request = self.buffer.popleft()
        self.leases.started(request.meta[LEASE_META])
        if len(self.buffer) <= self.config.prefetch // 4:
            self.want_more.set()
        return request

    async def run(self) -> None:
        """Lease while the buffer runs low, until the node closes (its last lease lands in the buffer)."""
        idle_wait = 0.01
        while not self.lifecycle.closing:
            if self.pause.paused:
                if not self.pause.drain and self.buffer:
                    released = await give_back_buffer(self.buffer, self.release)
                    self.stats.inc_value("scheduler/released_on_pause", released)
                await self.pause.wait(PAUSE_CHECK_SECONDS)
                continue
            if self.quarantine.active:
                await self.quarantine.step()
                continue
            want = self.wanted()
            if want <= 0:
                self.want_more.clear()
                await self.want_more.wait()
                continue
            self.new_work.clear()  # before the lease: a ring while it runs is not lost
            self._rings.clear()
            lease = partial(self.frontier.lease, want, self.config.lease_seconds, DUE_BATCH)
            popped = await self.trouble.run(Purpose.LEASE, "pop", lease)
            members = [h.lease for h in popped.leases]
            self.trouble.report_broken_hosts(popped.broken)
            per_host = self.frontier.host_control() is not None
            hosts = {h.lease: (h.slot, h.backoff) for h in popped.leases} if per_host else {}
            if not members and not popped.expired:
                self.stats.inc_value("scheduler/lease_empty")  # a lease that found nothing due
            if popped.expired:
                self.stats.inc_value("scheduler/expired", popped.expired)
                idle_wait = 0.01
            if members:
                was_empty = not self.buffer
                await self.accept(members, hosts)
                if was_empty and self.buffer:
                    wake_engine(self.crawler)
                idle_wait = 0.01
            if (members or popped.expired) and len(members) + popped.expired == want:
                continue
            # The queue is (nearly) empty, or no host is due yet: wait for a push (local or the
            # doorbell), for the next host or retry to be due, or poll again, backing off (at once
            # to the longest poll while the doorbell listens: it rings for every push).
            if popped.next_due is not None:
                idle_wait = min(max(popped.next_due, 0.01), self.config.poll_max_seconds)
            elif self.doorbell_live and not self._gave_back:
                idle_wait = self.config.poll_max_seconds  # drained: only a push (a ring) brings work
            if not await self._idle(idle_wait):
                idle_wait = min(idle_wait * 2, self.config.poll_max_seconds)

    async def _idle(self, timeout: float) -> bool:
        """Wait for work (True) or the timeout (False). Woken by the doorbell alone, it first lets
        the rings settle: when another node's lease has meanwhile taken what they announced (its
        host_pop published "drained"), they are no reason for a lease (no empty lease for them)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                await asyncio.wait_for(self.new_work.wait(), timeout=max(0.0, deadline - loop.time()))
            except TimeoutError:
                return False
            if self.new_work.local or not self._rings:
                return True
            await asyncio.sleep(RING_SETTLE_SECONDS)
            frontier = self.frontier
            if self.new_work.local or not all(frontier.stale_ring(ring) for ring in self._rings):
                return True
            self.stats.inc_value("scheduler/doorbell_stale", len(self._rings))
            self._rings.clear()
            self.new_work.clear()

    async def accept(self, members: list[bytes], hosts: dict[bytes, tuple[str, int]] | None = None) -> None:
        """Decode leased members into requests (per-host frontiers: with their slot and backoff level).
        Until each lands in the buffer, the quarantine or is given back, it is `arriving`: work
        whose lease the lease task renews (never a lease without a request)."""
        try:
            await self._accept(members, hosts or {})
        finally:
            self.arriving.clear()

    async def _accept(self, members: list[bytes], hosts: dict[bytes, tuple[str, int]]) -> None:
        was_empty = self.quarantine.node_empty()
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
            host = hosts.get(lease)
            if host is not None:
                request.meta[HOST_SLOT_META], request.meta[HOST_BACKOFF_META] = host
            self.leases.buffered(lease, host)
            self.arriving.append(request)
            (suspects if envelope.deliveries >= 2 else normal).append(request)
        self.stats.inc_value("scheduler/leased", len(members) - len(bad))
        if bad:
            self.stats.inc_value("scheduler/undecodable", len(bad))
            await self.trouble.run(Purpose.DEADLETTER, "dead-letter", lambda: self.dead_letters.undecodable(bad))
        self._gave_back = False
        if not suspects:
            self.buffer.extend(normal)
            return
        # A redelivery means a node died or an ack was lost (e.g. a failover that dropped writes):
        # the links its page gave last time may be lost with it, so they must reach the shared
        # filter again instead of stopping at this node's recent-fingerprint cache.
        self.recent.clear()
        giving_back = await self.quarantine.admit(suspects, normal, was_empty)
        await self.release([r.meta[LEASE_META] for r in giving_back])
        self._gave_back = bool(giving_back)  # work left in Redis without a ring: polled for as before

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
                self.frontier.spider,
            )

    def _heard(self, data: bytes | None) -> None:
        """A doorbell message (frontier/doorbell.py): a lease's "drained" notice, a ring for work a
        lease already took (dropped), or a ring that wakes the feeder."""
        frontier, ring = self.frontier, Ring.parse(data)
        if frontier.saw(ring):
            return
        if frontier.stale_ring(ring):
            self.stats.inc_value("scheduler/doorbell_stale")
            return
        frontier.woken(ring)
        if data is not None:
            self._rings.append(ring)
        self.new_work.ring()

    async def run_doorbell(self, pubsub_client: AsyncRedis, masked_url: str) -> None:
        """Wake the feeder when any node pushes work (PUBLISHed by the frontier's scripts), not on a poll.

        Pub/sub only saves latency: while Redis is away it waits like a lease (the node's policy);
        if pub/sub cannot work here at all, idle nodes poll instead and it is tried again later.
        """
        self._doorbell_logged = False

        async def listen() -> None:
            pubsub = None
            try:
                # its own connection (the "+1"): a subscription never holds one of the pool's
                pubsub = await subscribe(pubsub_client, self.frontier.doorbell)
                while not self.lifecycle.stopped:
                    self.doorbell_live = True
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None:
                        self.trouble.policy.ok()
                        self._heard(message.get("data"))
            finally:
                self.doorbell_live = False
                if pubsub is not None:
                    await pubsub.aclose()

        async def unavailable(exc: BaseException) -> None:  # e.g. a proxy without pub/sub
            if not self._doorbell_logged:
                self._doorbell_logged = True
                logger.warning(
                    "Doorbell (pub/sub on %s) unavailable (%s: %s); idle nodes poll for work every "
                    "SCHEDULER_POLL_MAX_SECONDS (%ss) instead, and pub/sub is tried again every %ss",
                    masked_url,
                    type(exc).__name__,
                    exc,
                    self.config.poll_max_seconds,
                    DOORBELL_RETRY_SECONDS,
                )
            for _ in range(DOORBELL_RETRY_SECONDS):
                if self.lifecycle.stopped:
                    break
                await asyncio.sleep(1.0)

        def stopped() -> bool:
            return self.lifecycle.stopped

        while not stopped():
            await self.trouble.policy.run(Purpose.LEASE, listen, stopped=stopped, on_error=unavailable)
