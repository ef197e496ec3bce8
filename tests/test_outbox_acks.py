"""core/outbox.py: acks of finished requests ride on the next push (one round trip, not two)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from distributed_crawler.core.leases import LeaseTracker
from distributed_crawler.core.lifecycle import Lifecycle
from distributed_crawler.core.outbox import Outbox, OutboxEntry
from distributed_crawler.core.traps import DomainHosts


class Shards:
    """A frontier stub: leases and members named "<shard>/..." live on that shard."""

    def acks_riding(self, leases: list[bytes], members: list[str]) -> list[bytes]:
        pushed = {m.split("/")[0] for m in members}
        return [lease for lease in leases if lease.decode().split("/")[0] in pushed]


class Pushes:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[bytes]]] = []

    async def run(self, action: str, entries: list[Any], handovers: list[bytes] = (), urls: Any = ()) -> list[int]:
        self.calls.append(([e[2] for e in entries], list(handovers)))
        return [1] * len(entries)


class Trouble:
    async def run(self, purpose: Any, what: str, call: Callable[[], Awaitable[Any]], **kw: Any) -> Any:
        return await call()


def make_outbox(leases: LeaseTracker, stats: Any, lifecycle: Lifecycle) -> Outbox:
    no_caps = DomainHosts(lambda domain: domain, 0)
    return Outbox(Shards(), Trouble(), Pushes(), 100, leases, None, no_caps, stats, lifecycle, lambda n: None)  # type: ignore[arg-type]


def finished(leases: LeaseTracker, lease: bytes, seq: int) -> None:
    leases.buffered(lease)
    leases.started(lease)
    leases.scraping(lease)
    leases.finished(lease, seq)


def test_due_acks_ride_on_the_next_push_of_their_shard() -> None:
    leases = LeaseTracker()
    stats = MemoryStatsCollector(get_crawler())
    lifecycle = Lifecycle()
    outbox = make_outbox(leases, stats, lifecycle)

    async def main() -> None:
        finished(leases, b"a/done", 0)  # its links are all in Redis (none): due
        finished(leases, b"b/done", 0)  # due, but on a shard the push does not write to
        outbox.add(OutboxEntry("fp1", False, "a/new", None))
        finished(leases, b"a/later", outbox.enqueued_seq)  # its link is in this very batch: not yet
        task = asyncio.ensure_future(outbox.run())
        for _ in range(100):
            if outbox.flushed_seq == outbox.enqueued_seq:
                break
            await asyncio.sleep(0.01)
        lifecycle.stop()
        outbox.ready.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(main())
    assert outbox.enqueuer.calls == [(["a/new"], [b"a/done"])]  # type: ignore[attr-defined]
    assert sorted(leases.take_ackable(outbox.flushed_seq)) == [b"a/later", b"b/done"]  # for the lease keeper
    assert stats.get_value("scheduler/acked") == 1


def test_links_added_within_the_linger_share_one_push() -> None:
    """Responses parsed one by one on the reactor send their links in one script call, not one each."""
    stats = MemoryStatsCollector(get_crawler())
    lifecycle = Lifecycle()
    outbox = make_outbox(LeaseTracker(), stats, lifecycle)

    async def main() -> None:
        task = asyncio.ensure_future(outbox.run())
        for page in range(3):  # three responses, each parsed in its own reactor turn
            outbox.add(OutboxEntry(f"fp{page}", False, f"a/link{page}", None))
            await asyncio.sleep(0)
        for _ in range(100):
            if outbox.flushed_seq == outbox.enqueued_seq:
                break
            await asyncio.sleep(0.01)
        lifecycle.stop()
        outbox.ready.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(main())
    assert outbox.enqueuer.calls == [(["a/link0", "a/link1", "a/link2"], [])]  # type: ignore[attr-defined]
