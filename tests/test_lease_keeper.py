"""core/lease_keeper.py with fakes (no Redis): finished requests acked in batches, work renewed
and strays given back, leases released; through an outage acks and releases are retried, a renewal
round is skipped; at close what never finished goes back, and what Redis did not take is one line."""

from __future__ import annotations

import asyncio
import logging

import pytest
from scrapy import Request

from distributed_crawler.connection.policy import NodeStopping
from distributed_crawler.core import lease_keeper
from distributed_crawler.core.feeder import Held
from distributed_crawler.core.lease_keeper import LeaseKeeper
from distributed_crawler.core.leases import LeaseTracker
from distributed_crawler.core.lifecycle import Lifecycle
from distributed_crawler.core.quarantine import Quarantine
from distributed_crawler.core.scheduler_config import SchedulerConfig
from distributed_crawler.core.tasks import BackgroundTasks
from distributed_crawler.meta import LEASE_META
from tests import scheduler_fakes as fakes


class Outbox:
    """What the lease keeper reads of the outbox: how far it flushed, what it still holds."""

    def __init__(self) -> None:
        self.flushed_seq = 0
        self.entries: list[object] = []
        self.refusals = type("Refusals", (), {"counting": False, "due": lambda self: False})()

    def __len__(self) -> int:
        return len(self.entries)

    def handovers(self) -> list[bytes]:
        return []


def make_keeper(lifecycle: Lifecycle | None = None) -> LeaseKeeper:
    lifecycle = lifecycle or Lifecycle()
    frontier, stats, leases, held = fakes.FakeFrontier(), fakes.stats(), LeaseTracker(), Held()
    trouble = fakes.trouble(frontier, lifecycle, stats)
    quarantine = Quarantine(frontier, trouble, leases, held.buffer, fakes.crawler(stats), "n1")  # type: ignore[arg-type]
    return LeaseKeeper(
        SchedulerConfig(lease_seconds=1.5),  # renewed every 0.5 s (the shortest interval)
        frontier,  # type: ignore[arg-type]
        trouble,
        leases,
        Outbox(),  # type: ignore[arg-type]
        quarantine,
        held,
        list,
        stats,
        "n1",
        lifecycle,
    )


def finished(keeper: LeaseKeeper, *leases: bytes) -> None:
    for lease in leases:
        keeper.leases.buffered(lease)
        keeper.leases.started(lease)
        keeper.leases.scraping(lease)
        keeper.leases.finished(lease, 0)


def test_finished_requests_are_acked_in_one_call() -> None:
    keeper = make_keeper()
    finished(keeper, b"a", b"b")
    asyncio.run(keeper.ack())
    assert keeper.frontier.of("ack") == [([b"a", b"b"],)]  # type: ignore[attr-defined]
    assert keeper.stats.get_value("scheduler/acked") == 2 and keeper.leases.pending_acks() == 0


def test_an_ack_is_retried_through_an_outage() -> None:
    keeper = make_keeper()
    finished(keeper, b"a")
    keeper.frontier.fail("ack", times=3)  # type: ignore[attr-defined]
    asyncio.run(keeper.ack())
    assert keeper.frontier.of("ack") == [([b"a"],)]  # type: ignore[attr-defined]
    assert keeper.stats.get_value("redis/ack/retried") == 1


def test_stopped_during_an_outage_the_acks_stay_for_the_close() -> None:
    lifecycle = Lifecycle()
    keeper = make_keeper(lifecycle)
    finished(keeper, b"a")
    keeper.frontier.fail("ack", times=1000)  # type: ignore[attr-defined]
    lifecycle.stop()
    with pytest.raises(NodeStopping):
        asyncio.run(keeper.ack())
    assert keeper.leases.pending_acks() == 1  # requeued: a forced stop still releases it


def test_work_is_renewed_and_a_lease_without_a_request_is_given_back() -> None:
    keeper = make_keeper()
    keeper.leases.buffered(b"kept")
    keeper.leases.buffered(b"stray")
    keeper.buffer.append(Request("http://site.test/kept", meta={LEASE_META: b"kept"}))
    asyncio.run(keeper.renew())
    assert keeper.frontier.of("renew") == [([b"kept"],)]  # type: ignore[attr-defined]
    assert keeper.leases.returning() == [b"stray"] and keeper.stats.get_value("scheduler/stray_leases") == 1


def test_a_round_skips_its_renewal_while_redis_is_away_and_goes_on() -> None:
    lifecycle = Lifecycle()
    keeper = make_keeper(lifecycle)
    keeper.leases.buffered(b"kept")
    keeper.buffer.append(Request("http://site.test/kept", meta={LEASE_META: b"kept"}))
    keeper.frontier.fail("renew", times=1)  # type: ignore[attr-defined]

    async def main() -> None:
        task = asyncio.ensure_future(keeper.run())
        await fakes.until(lambda: keeper.frontier.of("renew"), "a renewal after the skipped one")  # type: ignore[attr-defined]
        lifecycle.stop()
        await fakes.ended(task)

    asyncio.run(main())
    assert keeper.stats.get_value("redis/heartbeat/degraded") == 1


def test_a_release_redis_refuses_is_kept_and_tried_again() -> None:
    keeper = make_keeper()
    keeper.leases.buffered(b"a")
    keeper.frontier.fail("release", times=1000)  # type: ignore[attr-defined]
    keeper.leases.give_back([b"a"])
    assert not asyncio.run(keeper.give_back(0.0))
    assert keeper.leases.returning() == [b"a"] and keeper.leases.in_redis() == 1  # held until Redis takes it
    keeper.frontier.fail("release", times=0)  # type: ignore[attr-defined]
    assert asyncio.run(keeper.give_back(0.0))  # the lease task's next round
    assert keeper.frontier.of("release") == [([b"a"],)]  # type: ignore[attr-defined]
    assert keeper.leases.in_redis() == 0


def test_at_close_what_never_finished_goes_back(caplog: pytest.LogCaptureFixture) -> None:
    lifecycle = Lifecycle()
    keeper = make_keeper(lifecycle)
    keeper.leases.buffered(b"running")
    keeper.leases.started(b"running")
    tasks = BackgroundTasks(fakes.crawler(keeper.stats), lifecycle)  # type: ignore[arg-type]
    lifecycle.stop_taking()
    with caplog.at_level(logging.ERROR, logger="distributed_crawler.core.lease_keeper"):
        asyncio.run(keeper.settle(tasks, memusage=False, masked_url="redis://test"))
    assert lifecycle.stopped
    assert keeper.frontier.of("release") == [([b"running"],)]  # type: ignore[attr-defined]
    assert keeper.leases.in_redis() == 0 and not caplog.records


def test_at_close_with_redis_away_one_line_says_what_stays_behind(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease_keeper, "RELEASE_SECONDS", 0.05)  # the close's try at a release, shortened from 5 s
    lifecycle = Lifecycle()
    keeper = make_keeper(lifecycle)
    keeper.leases.buffered(b"running")
    keeper.leases.started(b"running")
    keeper.frontier.fail("release", times=1000)  # type: ignore[attr-defined]
    tasks = BackgroundTasks(fakes.crawler(keeper.stats), lifecycle)  # type: ignore[arg-type]
    lifecycle.stop_taking()
    with caplog.at_level(logging.ERROR, logger="distributed_crawler.core.lease_keeper"):
        asyncio.run(keeper.settle(tasks, memusage=False, masked_url="redis://test"))
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.name for r in errors] == ["distributed_crawler.core.lease_keeper"]
    assert "Redis at redis://test unreachable at close" in errors[0].getMessage()
    assert "1 not given back" in errors[0].getMessage()
