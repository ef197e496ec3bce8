"""core/outbox.py with fakes (no Redis): a batch is pushed in one script call and counted; through
an outage it is retried until it lands (nothing dropped, nothing pushed twice); when the node stops
first, the entries and the acks riding on them stay this node's (acked or released at close)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from distributed_crawler.connection.policy import NodeStopping
from distributed_crawler.core.admission import Refusal
from distributed_crawler.core.leases import LeaseTracker
from distributed_crawler.core.lifecycle import Lifecycle
from distributed_crawler.core.outbox import Outbox, OutboxEntry
from distributed_crawler.core.refusals import RefusalLog
from distributed_crawler.core.traps import DomainHosts
from tests import scheduler_fakes as fakes


def make_outbox(lifecycle: Lifecycle, pushed: list[int]) -> Outbox:
    frontier, stats = fakes.FakeFrontier(), fakes.stats()
    return Outbox(
        frontier,  # type: ignore[arg-type]
        fakes.trouble(frontier, lifecycle, stats),
        fakes.FakeEnqueuer(),  # type: ignore[arg-type]
        100,  # the failed list's cap
        LeaseTracker(),
        RefusalLog(stats, "n1"),
        DomainHosts(lambda domain: "{news}:domain:" + domain, 0),
        stats,
        lifecycle,
        on_pushed=pushed.append,
    )


def link(n: int, dont_filter: bool = False) -> OutboxEntry:
    return OutboxEntry(f"fp{n}", dont_filter, f'0:0:{{"url": "http://site.test/{n}"}}', None)


def finished(leases: LeaseTracker, lease: bytes) -> None:
    leases.buffered(lease)
    leases.started(lease)
    leases.scraping(lease)
    leases.finished(lease, 0)


async def flushed(outbox: Outbox, lifecycle: Lifecycle) -> None:
    """Run the outbox until every entry is in Redis, then stop it as close does."""
    task = asyncio.ensure_future(outbox.run())
    await fakes.until(lambda: outbox.flushed_seq == outbox.enqueued_seq, "the outbox to flush")
    lifecycle.stop()
    outbox.ready.set()
    await fakes.ended(task)


def test_a_batch_is_one_push_counted_and_announced() -> None:
    lifecycle, pushed = Lifecycle(), []
    outbox = make_outbox(lifecycle, pushed)
    enqueuer = outbox.enqueuer
    enqueuer.answers = lambda entries: [1, 0, 1]  # type: ignore[attr-defined]  # the second: seen before
    for n in range(3):
        outbox.add(link(n, dont_filter=n == 2))
    asyncio.run(flushed(outbox, lifecycle))
    (push,) = enqueuer.of("push")  # type: ignore[attr-defined]
    assert [e[0] for e in push[0]] == ["fp0", "fp1", "fp2"]
    assert not outbox.entries and pushed == [2]
    stats = outbox.stats
    assert stats.get_value("scheduler/enqueued/redis") == 2
    assert stats.get_value("dupefilter/added") == 1 and stats.get_value("dupefilter/filtered") == 1


def test_an_outage_delays_the_push_and_loses_nothing() -> None:
    lifecycle, pushed = Lifecycle(), []
    outbox = make_outbox(lifecycle, pushed)
    enqueuer = outbox.enqueuer
    enqueuer.fail("push", times=3)  # type: ignore[attr-defined]
    finished(outbox.leases, b"done")  # an ack rides on the push, through the outage too
    outbox.add(link(0))
    asyncio.run(flushed(outbox, lifecycle))
    (push,) = enqueuer.of("push")  # type: ignore[attr-defined]  # once: the failed tries never landed
    assert [e[0] for e in push[0]] == ["fp0"] and push[1] == [b"done"]
    assert pushed == [1] and outbox.stats.get_value("redis/push/retried") == 1
    assert outbox.stats.get_value("scheduler/acked") == 1 and outbox.leases.pending_acks() == 0


def test_stopped_during_an_outage_the_entries_and_acks_stay_this_nodes() -> None:
    lifecycle, pushed = Lifecycle(), []
    outbox = make_outbox(lifecycle, pushed)
    outbox.enqueuer.fail("push", times=1000)  # type: ignore[attr-defined]
    finished(outbox.leases, b"done")
    outbox.add(link(0))

    async def main() -> None:
        task = asyncio.ensure_future(outbox.run())
        await fakes.until(lambda: outbox.stats.get_value("redis/push/retried") == 1, "the outage")
        lifecycle.stop()  # close: Redis still away
        with pytest.raises(NodeStopping):
            await fakes.ended(task)

    asyncio.run(main())
    assert len(outbox.entries) == 1 and outbox.flushed_seq == 0 and pushed == []
    assert outbox.leases.take_ackable(outbox.flushed_seq) == [b"done"]  # for the lease task's last acks


def test_a_refused_link_is_dead_lettered_only_if_the_filter_had_not_seen_it() -> None:
    lifecycle, pushed = Lifecycle(), []
    outbox = make_outbox(lifecycle, pushed)
    outbox.enqueuer.answers = lambda entries: [1, 0]  # type: ignore[attr-defined]  # the second: seen before
    counted: list[str] = []

    async def push_counts(client: object, key: str) -> None:
        counted.append(key)

    outbox.refusals.push_counts = push_counts  # type: ignore[method-assign]
    for n in range(2):
        letter = outbox.refusals.note(f"http://10.0.0.{n}/", Refusal("private_address", "private"), "enqueue")
        outbox.add(OutboxEntry(f"fp{n}", False, "", None, refused=letter))
    asyncio.run(flushed(outbox, lifecycle))
    ((entries, leases),) = outbox.enqueuer.of("push")  # type: ignore[attr-defined]  # one call: the letters ride in it
    assert [(e.fingerprint, e.failed_cap, json.loads(e.member)["url"]) for e in entries] == [
        ("fp0", 100, "http://10.0.0.0/"),
        ("fp1", 100, "http://10.0.0.1/"),
    ]
    assert leases == [] and outbox.stats.get_value("scheduler/dead_lettered/refused") == 1
    assert outbox.stats.get_value("scheduler/enqueued/redis") == 0  # never queued
    assert counted == []  # the per-host counts go with the lease task's next flush, no round trip here
    assert outbox.refusals.counting


def test_refusal_counts_redis_refuses_are_skipped_with_one_line_of_the_outbox(caplog: pytest.LogCaptureFixture) -> None:
    """STATS: the counts are kept for the next push; the line carries the outbox's own logger name."""
    import redis

    lifecycle = Lifecycle()
    outbox = make_outbox(lifecycle, [])
    outbox.refusals.note("http://10.0.0.1/", Refusal("private_address", "private"), "enqueue")

    async def refused_key(*args: object) -> None:
        raise redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")

    outbox.refusals.push_counts = refused_key  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="distributed_crawler.core.outbox"):
        asyncio.run(outbox.push_refusal_counts())
        asyncio.run(outbox.push_refusal_counts())
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.name for r in errors] == ["distributed_crawler.core.outbox"]  # once per episode
    assert "redis-cli type '{news}:refused'" in errors[0].getMessage()
    assert outbox.refusals.counting  # kept for the next push
