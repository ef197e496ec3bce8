"""core/intake.py with fakes (no Redis): what a request the engine enqueues becomes (an outbox entry,
a local duplicate dropped, a refusal's dead letter, a codec refusal), and mark_seen through the
node's policy (a Redis error: retried; the node stopped: nothing recorded)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from scrapy import Request

from distributed_crawler.connection.policy import NodeStopping
from distributed_crawler.core.admission import Admission, Refusal
from distributed_crawler.core.intake import Intake
from distributed_crawler.core.leases import LeaseTracker
from distributed_crawler.core.lifecycle import Lifecycle
from distributed_crawler.core.outbox import Outbox
from distributed_crawler.core.refusals import RefusalLog
from distributed_crawler.core.scheduler_config import SchedulerConfig
from distributed_crawler.core.traps import DomainHosts
from distributed_crawler.dedup.recent import RecentFingerprints
from distributed_crawler.frontier.envelope import split_member
from distributed_crawler.meta import LEASE_META
from tests import scheduler_fakes as fakes


def no_private(request: Request) -> Refusal | None:
    return Refusal("private_address", "10.0.0.1 is private") if "10.0.0.1" in request.url else None


def make_intake(lifecycle: Lifecycle | None = None) -> Intake:
    lifecycle = lifecycle or Lifecycle()
    frontier, stats, leases = fakes.FakeFrontier(), fakes.stats(), LeaseTracker()
    trouble = fakes.trouble(frontier, lifecycle, stats)
    refusals = RefusalLog(stats, "n1")
    outbox = Outbox(
        frontier,  # type: ignore[arg-type]
        trouble,
        fakes.FakeEnqueuer(),  # type: ignore[arg-type]
        100,  # the failed list's cap
        leases,
        refusals,
        DomainHosts(lambda domain: "{news}:domain:" + domain, 0),
        stats,
        lifecycle,
        on_pushed=lambda n: None,
    )
    return Intake(
        SchedulerConfig(domain_max_hosts=0),
        frontier,  # type: ignore[arg-type]
        fakes.FakeCodec(),  # type: ignore[arg-type]
        trouble,
        leases,
        outbox,
        RecentFingerprints(100),
        fakes.FakeDupefilter(),
        Admission([no_private]),
        refusals,
        stats,
    )


def entries(intake: Intake) -> list[Any]:
    return [entry for _, entry in intake.outbox.entries]


def test_a_new_link_goes_to_the_outbox_once_and_a_repeat_stops_here() -> None:
    intake = make_intake()
    assert intake.enqueue(Request("http://site.test/a", priority=3))
    (entry,) = entries(intake)
    envelope = split_member(entry.member)
    assert envelope.payload == '{"url": "http://site.test/a"}' and envelope.priority == 3
    assert entry.handover is None and not entry.refused
    assert not intake.enqueue(Request("http://site.test/a"))  # this node sent it lately
    assert intake.already_sent(Request("http://site.test/a"))
    assert intake.enqueue(Request("http://site.test/a", dont_filter=True))
    assert len(entries(intake)) == 2
    assert intake.stats.get_value("dupefilter/filtered_locally") == 2


def test_a_successor_takes_its_predecessors_lease_to_redis() -> None:
    intake = make_intake()
    intake.leases.buffered(b"lease-1")
    intake.leases.started(b"lease-1")
    assert intake.enqueue(Request("http://site.test/a", meta={LEASE_META: b"lease-1"}))
    assert entries(intake)[0].handover == b"lease-1"
    assert len(intake.leases) == 0  # handed over: removed in Redis with the successor's push


def test_a_refused_link_becomes_a_dead_letter_in_the_outbox() -> None:
    intake = make_intake()
    assert not intake.enqueue(Request("http://10.0.0.1/admin"))
    (entry,) = entries(intake)
    assert entry.member == "" and '"reason": "private_address"' in entry.refused
    assert intake.stats.get_value("dc/refused/private_address") == 1


def test_a_request_the_codec_refuses_is_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    intake = make_intake()
    with caplog.at_level(logging.ERROR, logger="distributed_crawler.core.intake"):
        for i in range(3):
            assert not intake.enqueue(Request(f"http://site.test/{i}", meta={"unsendable": object()}))
    assert [r.name for r in caplog.records] == ["distributed_crawler.core.intake"]
    assert "meta['unsendable']" in caplog.records[0].getMessage()
    assert intake.stats.get_value("scheduler/unserializable/value") == 3 and not entries(intake)


def test_mark_seen_is_retried_through_an_outage() -> None:
    intake = make_intake()
    enqueuer = intake.outbox.enqueuer
    enqueuer.fail("add", times=2)  # type: ignore[attr-defined]
    new = asyncio.run(intake.mark_seen([Request("http://site.test/canonical")]))
    assert new == [True] and len(enqueuer.of("add")) == 1  # type: ignore[attr-defined]
    assert intake.stats.get_value("redis/push/retried") == 1  # one outage, counted once
    assert not intake.enqueue(Request("http://site.test/canonical"))  # in the recent cache now


def test_mark_seen_while_the_node_stops_records_nothing() -> None:
    lifecycle = Lifecycle()
    intake = make_intake(lifecycle)
    intake.outbox.enqueuer.fail("add", times=1000)  # type: ignore[attr-defined]
    lifecycle.stop()
    with pytest.raises(NodeStopping):
        asyncio.run(intake.mark_seen([Request("http://site.test/canonical")]))
    assert intake.enqueue(Request("http://site.test/canonical"))  # not in the recent cache
