"""core/leases.py + core/lease_keeper.py: a node renews only the leases of work it has, and a release
Redis refuses is retried under the node's policy, the leases never renewed meanwhile nor forgotten."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any
from unittest.mock import AsyncMock

import pytest
import redis
import redis.asyncio as aioredis
from scrapy import Request, Spider
from scrapy.settings import Settings
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from distributed_crawler.connection.policy import RedisPolicy
from distributed_crawler.core import lease_keeper
from distributed_crawler.core.feeder import Held
from distributed_crawler.core.lease_keeper import LeaseKeeper
from distributed_crawler.core.leases import LeaseTracker
from distributed_crawler.core.lifecycle import Lifecycle
from distributed_crawler.core.quarantine import Quarantine
from distributed_crawler.core.scheduler import RedisScheduler
from distributed_crawler.core.scheduler_config import SchedulerConfig
from distributed_crawler.core.stall import StallClock
from distributed_crawler.core.trouble import RedisTrouble
from distributed_crawler.dedup.recent import RecentFingerprints
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.meta import LEASE_META
from tests.scheduler_parts import parts_without_redis
from tests.test_queue_scripts import KEYS_T, PROC, Q, enqueue, pop, scripts  # noqa: F401 - scripts is a fixture


def test_only_work_is_renewed_and_a_lease_without_a_request_is_given_back() -> None:
    leases = LeaseTracker()
    for lease in (b"buffered", b"running", b"lost", b"done"):
        leases.buffered(lease)
    leases.started(b"running")
    leases.started(b"done")
    leases.finished(b"done", 0)  # waits for its ack: still work
    renewing, strays = leases.renewable({b"buffered", b"running"})
    assert sorted(renewing) == [b"buffered", b"done", b"running"]
    assert strays == [b"lost"]
    assert leases.returning() == [b"lost"] and leases.in_redis() == 4 and len(leases) == 2
    # never renewed again, even once its request turns up (it is being given back)
    assert b"lost" not in leases.renewable({b"buffered", b"running", b"lost"})[0]
    leases.returned([b"lost"])
    assert leases.in_redis() == 3 and leases.returning() == []


def test_given_back_leases_are_neither_work_nor_acked() -> None:
    leases = LeaseTracker()
    leases.buffered(b"a")
    leases.started(b"a")
    leases.finished(b"a", 0)
    leases.give_back([b"a"])  # e.g. a forced stop gave it back before its ack went
    assert leases.take_ackable(10) == [] and leases.pending_acks() == 0
    assert leases.unacked() == [b"a"]  # a forced stop still releases it


def test_stall_clock_counts_holding_with_nothing_in_flight_outside_outages() -> None:
    clock = StallClock(limit=4)
    assert clock.observe(held=2, in_flight=0, now=0.0) is None
    assert clock.observe(held=2, in_flight=0, now=4.0) is None  # not longer than a lease yet
    assert clock.observe(held=2, in_flight=0, now=4.5) is True and clock.seconds(5.0) == 5.0
    assert clock.observe(held=2, in_flight=0, now=6.0) is None  # one change, one line
    assert clock.observe(held=2, in_flight=1, now=7.0) is False and clock.seconds(7.0) == 0.0
    assert clock.observe(held=0, in_flight=0, now=20.0) is None  # holds nothing: idle, not stalled
    clock.observe(held=1, in_flight=0, now=20.0)
    assert clock.observe(held=1, in_flight=0, now=30.0, outage=True) is None  # Redis away: its own line
    assert clock.observe(held=1, in_flight=0, now=34.0) is None  # the clock restarted after the outage


# -- against a real redis-server -------------------------------------------------------------------
@pytest.fixture
def aclient(redis_url: str) -> Iterator[Any]:
    yield aioredis.Redis.from_url(redis_url)


def make_keeper(frontier: Frontier, leases: LeaseTracker, buffer: deque[Request]) -> LeaseKeeper:
    stats = MemoryStatsCollector(get_crawler())
    policy = RedisPolicy("redis://test", stats, first_delay=0.01, max_delay=0.05, grace=0)
    lifecycle = Lifecycle()
    trouble = RedisTrouble(frontier, SimpleNamespace(key="{t}:dupefilter"), policy, RecentFingerprints(10), lifecycle)
    outbox = SimpleNamespace(flushed_seq=0, entries=[], handovers=lambda: [])
    quarantine = SimpleNamespace(request=None, lease=None)
    config = SchedulerConfig.from_settings(Settings({"SCHEDULER_LEASE_SECONDS": 30}))
    held = Held(buffer=buffer)
    return LeaseKeeper(config, frontier, trouble, leases, outbox, quarantine, held, list, stats, "n1", lifecycle)  # type: ignore[arg-type]


def leased(scripts: Frontier, n: int) -> list[bytes]:  # noqa: F811
    enqueue(scripts, "priority", [(f"http://a.test/{i}", 0) for i in range(n)])
    return [m.encode() for m in pop(scripts, "priority", n, lease=30)]


def test_renew_extends_the_leases_of_work_only(
    scripts: Frontier,  # noqa: F811
    redis_client: redis.Redis,
    aclient: Any,
) -> None:
    kept, lost = leased(scripts, 2)
    leases = LeaseTracker()
    leases.buffered(kept)
    leases.buffered(lost)
    buffer = deque([Request("http://a.test/0", meta={LEASE_META: kept})])  # `lost`'s request is gone
    frontier = frontier_for_mode(aclient, KEYS_T, "priority")
    keeper = make_keeper(frontier, leases, buffer)
    redis_client.zadd(PROC, {kept: 1, lost: 1}, xx=True)  # old deadlines: renewal is what moves them

    async def main() -> None:
        await keeper.renew()
        await aclient.aclose()

    asyncio.run(main())
    now = float(redis_client.time()[0])
    assert redis_client.zscore(PROC, kept) > now + 20  # renewed
    assert redis_client.zscore(PROC, lost) == 1  # not renewed: left to expire or given back
    assert leases.returning() == [lost]
    assert keeper.stats.get_value("scheduler/stray_leases") == 1


def test_a_refused_release_is_retried_and_never_renewed_meanwhile(
    scripts: Frontier,  # noqa: F811
    redis_client: redis.Redis,
    aclient: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lease_keeper, "RELEASE_SECONDS", 0.2)  # a short try, so the test does not wait 5 s
    (lease,) = leased(scripts, 1)
    leases = LeaseTracker()
    leases.buffered(lease)
    frontier = frontier_for_mode(aclient, KEYS_T, "priority")
    keeper = make_keeper(frontier, leases, deque())
    redis_client.zadd(PROC, {lease: 1}, xx=True)

    async def main() -> None:
        redis_client.config_set("maxmemory", "1")  # full: release.lua's first write is refused
        try:
            await keeper.release([lease])
            assert redis_client.zscore(PROC, lease) == 1, "refused, so still leased in Redis"
            assert leases.returning() == [lease] and leases.in_redis() == 1, "forgotten while still held"
            await keeper.renew()  # Redis refuses it too; what matters is that it is not even asked
            assert not await keeper.give_back(0.1)  # a later round, Redis still full
        finally:
            redis_client.config_set("maxmemory", "0")
        assert redis_client.zscore(PROC, lease) == 1, "a lease being given back was renewed"
        assert await keeper.give_back(1.0)  # the next round of the lease task, Redis has room again
        await aclient.aclose()

    asyncio.run(main())
    assert redis_client.zcard(PROC) == 0
    assert redis_client.zcard(Q) == 1  # back in the queue, no delivery counted
    assert leases.in_redis() == 0 and leases.returning() == []
    assert keeper.stats.get_value("redis/ack/retried") >= 1  # through the node's policy, as an ack


def test_a_node_giving_leases_back_counts_as_empty_for_the_quarantine() -> None:
    """A redelivered request waits for the node to be empty; leases being given back (a release
    Redis refused) are no work of the node's, so they never keep it waiting (it crawled nothing
    more after a full Redis when they did)."""
    leases = LeaseTracker()
    buffer: deque[Request] = deque()
    quarantine = Quarantine(None, None, leases, buffer, get_crawler(), "n1")  # type: ignore[arg-type]
    leases.buffered(b"suspect")
    assert not quarantine.node_empty()
    leases.give_back([b"suspect"])  # its release was refused: retried by the lease task
    assert quarantine.node_empty() and leases.in_redis() == 1


class _Spider(Spider):
    name = "news"

    def parse(self, response: object) -> None:
        return None


def test_a_busy_node_whose_release_redis_refuses_keeps_crawling_and_renews_no_stray(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The full-Redis stall, step by step: a busy node leases a redelivered request, gives it back
    (it runs alone later) and Redis refuses the release. That lease is never renewed, the node is
    empty once its own work is done (the quarantine's drain ends), and the release lands later."""
    monkeypatch.setattr(lease_keeper, "RELEASE_SECONDS", 0.2)  # a short try, so the test does not wait 5 s
    crawler = get_crawler(_Spider, settings_dict={"ADDONS": {"distributed_crawler.Addon": 0}, "NODE_ID": "n1"})
    crawler.spider = _Spider.from_crawler(crawler)
    node = RedisScheduler.from_crawler(crawler)
    parts = parts_without_redis(node)  # what open() builds
    released: list[bytes] = []

    async def full(leases: list[bytes]) -> int:
        raise redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'")

    async def room(leases: list[bytes]) -> int:
        released.extend(leases)
        return len(leases)

    node.frontier.renew = AsyncMock(return_value=1)  # type: ignore[method-assign]
    node.frontier.release = full  # type: ignore[method-assign]
    busy = make_member(parts.intake.codec.encode(Request("http://site.test/busy")), 0, 1).encode()
    suspect = make_member(parts.intake.codec.encode(Request("http://site.test/again")), 0, 2).encode()

    async def main() -> None:
        await parts.feeder.accept([busy])
        work = node.next_request()  # the engine takes it: the node is busy
        assert work is not None and work.meta[LEASE_META] == busy
        parts.keeper.in_engine = lambda: [work]  # what internals.requests_in_progress sees in a crawl
        await parts.feeder.accept([suspect])  # redelivered: given back, the node drains first
        assert parts.quarantine.draining and node.leases.returning() == [suspect]
        await parts.keeper.renew()
        renewed = node.frontier.renew.await_args.args[0]  # type: ignore[attr-defined]
        assert renewed == [busy], "only work is renewed, never a lease being given back"
        parts.keeper.in_engine = list  # its response scraped, its lease acked
        node.leases.finished(busy, 0)
        assert node.leases.take_ackable(parts.outbox.flushed_seq) == [busy]
        node.leases.forget([busy])
        await parts.quarantine.step()
        assert not parts.quarantine.draining, "the node waits for good on a lease it gives back"
        node.frontier.release = room
        assert await parts.keeper.give_back(0.0)  # the lease task's next round
        assert released == [suspect] and node.leases_held == 0

    asyncio.run(main())
