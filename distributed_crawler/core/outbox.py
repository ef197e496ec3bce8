"""The outbox: requests this node enqueued, on their way to Redis in batches.

One enqueue.lua call per batch does the dedup check+add and the push (and removes the leases the
pushed requests succeed, and the leases of finished requests due for their ack: an ack rides on
the next push instead of a round trip of its own); a refused request rides in the same call: its
link added to the filter and, if new, its dead letter written, in the step that removes the lease
it replaces (a lease is never acked before the dead letter that replaces it is written).
A batch lingers OUTBOX_LINGER after the first entry wakes the outbox, so the links of the responses
parsed meanwhile share its script call (a small page is parsed at once, its few links alone).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from redis.exceptions import ResponseError

from distributed_crawler.connection.policy import Purpose
from distributed_crawler.connection.untrusted import EpisodeLog
from distributed_crawler.core.admission import Refusal
from distributed_crawler.core.leases import LeaseTracker
from distributed_crawler.core.lifecycle import Lifecycle
from distributed_crawler.core.refusals import RefusalLog
from distributed_crawler.core.traps import DomainHosts
from distributed_crawler.core.trouble import RedisTrouble
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.codec import payload_url
from distributed_crawler.frontier.enqueue import Enqueuer, PushEntry, refused_entry
from distributed_crawler.frontier.envelope import split_member

logger = logging.getLogger(__name__)

OUTBOX_BATCH = 500
ACKS_RIDING_MAX = 1000  # acks one push carries at most (Lua unpacks them in one call)
OUTBOX_LINGER = 0.005  # seconds a batch short of OUTBOX_BATCH waits for more entries (new links, and the acks waiting for them, wait at most this long)


class OutboxEntry(NamedTuple):
    fingerprint: str
    dont_filter: bool
    member: str
    handover: bytes | None  # lease of the request this one succeeds (redirect, retry)
    delay: float = 0.0  # > 0: a retry, parked in {spider}:delayed for this many seconds
    slot: str = ""  # per-host frontier: the request's slot (frontier/config.py slot_of)
    interval: float | None = None  # per-host frontier: seconds between two requests of the slot
    budget: int | None = None  # per-host frontier: the slot's page budget (-1 = none)
    in_flight: int | None = None  # per-host frontier: the slot's cluster-wide in-flight cap (-1 = none)
    refused: str = ""  # a refused request (core/admission.py): its dead letter, written instead of a push
    host: str = ""  # DOMAIN_MAX_HOSTS on: the request's host, allowed or refused by Redis before the push


class Outbox:
    def __init__(
        self,
        frontier: Frontier,
        trouble: RedisTrouble,
        enqueuer: Enqueuer,
        failed_cap: int,
        leases: LeaseTracker,
        refusals: RefusalLog,
        domain_hosts: DomainHosts,
        stats: Any,
        lifecycle: Lifecycle,
        on_pushed: Callable[[int], None],
    ) -> None:
        self.frontier = frontier
        self.trouble = trouble
        self.enqueuer = enqueuer  # the frontier's enqueue script on the opened dupefilter
        self.failed_cap = (
            failed_cap  # the failed list's cap (DeadLetters.cap): refused requests' letters ride with the push
        )
        self.leases = leases  # finished requests' leases: acked with the next push (core/lease_keeper.py acks the rest)
        self.refusals = refusals
        self.domain_hosts = domain_hosts
        self.stats = stats
        self.lifecycle = lifecycle
        self.on_pushed = on_pushed  # requests pushed by a batch (> 0): counted and the feeder woken
        self.entries: deque[tuple[int, OutboxEntry]] = deque()
        self.enqueued_seq = 0  # sequence number of the last outbox entry
        self.flushed_seq = 0  # every entry up to this one is in Redis
        self.ready = asyncio.Event()
        self._refusal_counts = EpisodeLog(logger)

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, entry: OutboxEntry) -> int:
        """Queue an entry for the next batch; returns its sequence number."""
        self.enqueued_seq += 1
        self.entries.append((self.enqueued_seq, entry))
        self.ready.set()
        return self.enqueued_seq

    def drop(self) -> list[OutboxEntry]:
        """Forget every entry (a flush): returns them."""
        dropped = [entry for _, entry in self.entries]
        self.entries.clear()
        self.flushed_seq = self.enqueued_seq
        return dropped

    def handovers(self) -> list[bytes]:
        """Leases whose successors are still here (lost with the process on a forced stop)."""
        return [entry.handover for _, entry in self.entries if entry.handover]

    async def run(self) -> None:
        """Push the entries in batches until the node stops (at close, after the last batch)."""
        while not self.lifecycle.stopped:
            if not self.entries:
                self.ready.clear()
                await self.ready.wait()
                continue
            if len(self.entries) < OUTBOX_BATCH and not self.lifecycle.stopped:
                await asyncio.sleep(OUTBOX_LINGER)
            batch = [self.entries[i] for i in range(min(OUTBOX_BATCH, len(self.entries)))]
            batch = await self._admit_hosts(batch)
            pushes = [e for _, e in batch if not e.refused]
            refused = [e for _, e in batch if e.refused]
            # the refused first: a failed list Redis refuses (WRONGTYPE) stops the script before any push
            entries = [refused_entry(e.fingerprint, e.refused, self.failed_cap) for e in refused]
            entries += [
                PushEntry(e.fingerprint, e.dont_filter, e.member, e.delay, e.slot, e.interval, e.budget, e.in_flight)
                for e in pushes
            ]
            handovers = [e.handover for e in refused + pushes if e.handover]
            result = []
            if entries:
                acks = self._riding_acks(pushes)
                push = partial(self.enqueuer.run, "push", entries, handovers + acks)
                try:
                    result = await self.trouble.run(Purpose.PUSH, "enqueue", push)
                except BaseException:  # NodeStopping, a cancel: still ours, acked or released at close
                    self.leases.requeue_acks(acks)
                    raise
                if acks:
                    self.stats.inc_value("scheduler/acked", len(acks))
            for _ in batch:
                self.entries.popleft()
            self.flushed_seq = batch[-1][0]
            self._count(pushes, result[len(refused) :])
            if letters := sum(result[: len(refused)]):
                self.stats.inc_value("scheduler/dead_lettered/refused", letters)

    def _riding_acks(self, pushes: list[OutboxEntry]) -> list[bytes]:
        """Leases of finished requests whose links are all in Redis already (so their removal
        needs no atomicity with this batch), on the shards this batch writes to; not those whose
        page's revisit record must be written with the ack (the lease keeper's recrawl_ack.lua)."""
        due = self.leases.take_ackable(self.flushed_seq, riders=False)  # a record rides with the lease keeper's ack
        if not due:
            return []
        riding = self.frontier.acks_riding(due, [e.member for e in pushes])[:ACKS_RIDING_MAX]
        if len(riding) < len(due):
            kept = set(riding)
            self.leases.requeue_acks([lease for lease in due if lease not in kept])
        return riding

    def _count(self, pushes: list[OutboxEntry], result: list[int]) -> None:
        pushed = sum(result)
        added = sum(1 for r, e in zip(result, pushes) if r and not e.dont_filter)
        delayed = sum(1 for r, e in zip(result, pushes) if r and e.delay > 0)
        self.stats.inc_value("scheduler/enqueued/redis", pushed)
        if delayed:
            self.stats.inc_value("scheduler/delayed", delayed)
        self.stats.inc_value("dupefilter/added", added)
        if len(pushes) - pushed:
            self.stats.inc_value("dupefilter/filtered", len(pushes) - pushed)
        if pushed:
            self.on_pushed(pushed)

    async def _admit_hosts(self, batch: list[tuple[int, OutboxEntry]]) -> list[tuple[int, OutboxEntry]]:
        """DOMAIN_MAX_HOSTS: ask Redis once about the batch's hosts this node has no answer for;
        a request whose host is over its domain's cap becomes a refusal (core/traps.py)."""
        hosts = self.domain_hosts.unknown([e.host for _, e in batch if e.host and not e.refused])
        if hosts:
            ask = partial(self.domain_hosts.ask, self.frontier.client, hosts)
            await self.trouble.run(Purpose.PUSH, "counting hosts per domain", ask)
        admitted = []
        for seq, entry in batch:
            if entry.host and not entry.refused and not self.domain_hosts.allowed(entry.host):
                entry = self._refused_entry(entry, self.domain_hosts.refusal(entry.host))
            admitted.append((seq, entry))
        return admitted

    def _refused_entry(self, entry: OutboxEntry, refusal: Refusal) -> OutboxEntry:
        """An outbox entry turned into a refusal after all (its payload is the dead letter's)."""
        envelope = split_member(entry.member)  # made by the intake: ours, valid
        url = payload_url(envelope.payload) or ""
        letter = self.refusals.note(
            url, refusal, "enqueue", attempts=0, priority=envelope.priority, payload=envelope.payload
        )
        # a new link is dead-lettered once cluster-wide (by fingerprint); a successor or dont_filter always
        link = not entry.dont_filter and entry.handover is None
        return entry._replace(refused=letter, fingerprint=entry.fingerprint if link else "")

    async def push_refusal_counts(self) -> None:
        """The refusal counts: per host to the frontier's refused hash, per source to its hash
        (refusals without a dead letter too: a rendered page's refused subresources, robots.txt)."""
        frontier = self.frontier

        async def push() -> None:
            await self.refusals.push_counts(frontier.client, frontier.refused_key)
            self._refusal_counts.ok("counting refusals")

        # STATS: Redis away -> skipped, the counts are kept and added with the next refusals
        await self.trouble.policy.run(Purpose.STATS, push, on_error=partial(self._counts_refused, frontier))

    async def _counts_refused(self, frontier: Frontier, exc: BaseException) -> None:
        """e.g. the key holds another type: counts dropped, the crawl goes on."""
        if not isinstance(exc, ResponseError):
            raise exc
        self._refusal_counts.failed(
            "counting refusals",
            "Refusal counts not written to %s (Redis: %s); `dcrawl hosts` misses them. Check it with "
            "`redis-cli type '%s'`",
            frontier.refused_key,
            str(exc)[:200],
            frontier.refused_key,
        )
