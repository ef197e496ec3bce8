"""core/feeder.py with fakes (no Redis): it leases what the downloader can start soon into the
buffer, dead-letters what does not decode (one line per kind), waits through an outage (LEASE:
nothing leased, nothing lost), gives its buffer back on a pause, and ends once the node closes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from distributed_crawler.connection.policy import RedisPolicy
from distributed_crawler.core.feeder import Feeder, Held
from distributed_crawler.core.leases import LeaseTracker, Stage
from distributed_crawler.core.lifecycle import Lifecycle
from distributed_crawler.core.pause import PauseWatch
from distributed_crawler.core.quarantine import Quarantine
from distributed_crawler.core.scheduler_config import SchedulerConfig
from distributed_crawler.dedup.recent import RecentFingerprints
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.meta import LEASE_META
from tests import scheduler_fakes as fakes


def member(n: int, deliveries: int = 1) -> bytes:
    return make_member(f'{{"url": "http://site.test/{n}"}}', 0, deliveries).encode()


class Node:
    """A feeder on a fake frontier, with what it shares with the rest of the scheduler."""

    def __init__(self, queue: list[bytes], prefetch: int = 4) -> None:
        self.lifecycle = Lifecycle()
        self.frontier = fakes.FakeFrontier(queue)
        self.stats = fakes.stats()
        self.crawler = fakes.crawler(self.stats)
        self.trouble = fakes.trouble(self.frontier, self.lifecycle, self.stats)
        self.leases = LeaseTracker()
        self.held = Held()
        self.released: list[bytes] = []
        self.dead_letters = fakes.FakeDeadLetters()
        quarantine = Quarantine(self.frontier, self.trouble, self.leases, self.held.buffer, self.crawler, "n1")  # type: ignore[arg-type]
        self.pause = PauseWatch(self.frontier, RedisPolicy("redis://test"), wake=(self.held.want_more,))  # type: ignore[arg-type]
        self.feeder = Feeder(
            SchedulerConfig(prefetch=prefetch, poll_max_seconds=0.05),
            self.frontier,  # type: ignore[arg-type]
            fakes.FakeCodec(),  # type: ignore[arg-type]
            self.trouble,
            self.leases,
            quarantine,
            self.pause,
            self.dead_letters,  # type: ignore[arg-type]
            self.release,
            self.held,
            RecentFingerprints(100),
            self.crawler,
            self.lifecycle,
        )

    async def release(self, leases: list[bytes]) -> None:
        self.leases.give_back(leases)
        self.released += leases

    def run(self, body: Callable[[], Awaitable[Any]]) -> None:
        """The feeder's loop beside `body()`, then the close: its loop ends on its own."""

        async def main() -> None:
            task = asyncio.ensure_future(self.feeder.run())
            try:
                await body()
            finally:
                self.lifecycle.stop_taking()
                self.feeder.wake()
                await fakes.ended(task)

        asyncio.run(main())


def test_it_leases_what_the_downloader_can_start_soon_and_serves_it_in_order() -> None:
    node = Node([member(n) for n in range(10)], prefetch=4)

    async def body() -> None:
        await fakes.until(lambda: len(node.held.buffer) == 5, "the first lease")  # prefetch + a quarter

    node.run(body)
    assert node.frontier.of("lease") == [(5,)]  # one lease: the buffer is full, no hoarding
    first = node.feeder.take()
    assert first is not None and first.url == "http://site.test/0"
    assert node.leases.stage(first.meta[LEASE_META]) is Stage.DOWNLOADING
    assert node.stats.get_value("scheduler/leased") == 5


def test_what_does_not_decode_is_dead_lettered_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    node = Node([])
    bad = [make_member("not json", 0, 1).encode(), make_member("still not", 0, 1).encode()]
    with caplog.at_level(logging.WARNING, logger="distributed_crawler.core.feeder"):
        asyncio.run(node.feeder.accept([*bad, member(1)]))
    ((letters,),) = node.dead_letters.of("undecodable")
    assert [lease for lease, _ in letters] == bad
    assert [r.name for r in caplog.records] == ["distributed_crawler.core.feeder"]
    assert "dcrawl failed news" in caplog.records[0].getMessage()
    assert [r.url for r in node.held.buffer] == ["http://site.test/1"]


def test_through_an_outage_it_waits_and_leases_once_redis_answers() -> None:
    node = Node([member(1)])
    node.frontier.fail("lease", times=3)

    async def body() -> None:
        await fakes.until(lambda: len(node.held.buffer) == 1, "the lease after the outage")

    node.run(body)
    assert node.stats.get_value("redis/lease/waited") == 1 and node.frontier.queue == []


def test_a_pause_gives_the_buffer_back_and_leases_nothing() -> None:
    node = Node([member(n) for n in range(3)])

    async def body() -> None:
        await fakes.until(lambda: len(node.held.buffer) == 3, "the lease")
        leases_before = len(node.frontier.of("lease"))
        node.pause.state = {"by": "ops", "since": 0, "drain": False}  # what refresh() reads from Redis
        node.held.want_more.set()
        await fakes.until(lambda: not node.held.buffer, "the buffer given back")
        assert node.feeder.take() is None
        assert len(node.frontier.of("lease")) == leases_before

    node.run(body)
    assert node.released == [member(n) for n in range(3)]
    assert node.stats.get_value("scheduler/released_on_pause") == 3


def test_once_the_node_closes_the_loop_ends_without_a_lease() -> None:
    node = Node([])

    async def body() -> None:
        await fakes.until(lambda: node.frontier.of("lease"), "a first (empty) lease")

    node.run(body)  # closes: stop_taking + wake, and the loop ends on its own (no cancel)
    leases = len(node.frontier.of("lease"))
    node.frontier.queue = [member(1)]
    asyncio.run(asyncio.wait_for(node.feeder.run(), 1))  # closing: returns at once
    assert len(node.frontier.of("lease")) == leases and not node.held.buffer
