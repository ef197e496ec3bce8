"""Small fakes for unit tests of the scheduler's parts (core/intake.py, outbox.py, feeder.py,
lease_keeper.py): a frontier and an enqueuer that record their calls and fail on demand, a codec
of plain JSON, and the real RedisTrouble + RedisPolicy around them (the policy needs no Redis: it
runs the calls it is given), with backoffs short enough for a test."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import redis
from scrapy import Request
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from distributed_crawler.connection.policy import RedisPolicy
from distributed_crawler.core.lifecycle import Lifecycle
from distributed_crawler.core.trouble import RedisTrouble
from distributed_crawler.dedup.recent import RecentFingerprints
from distributed_crawler.frontier.base import Lease, Leased, Placement
from distributed_crawler.frontier.codec import PayloadError, UnserializableRequestError

DOWN = redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


class Calls:
    """Records each call by name; `fail(name, n)` makes the next n calls of `name` raise DOWN."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self._failing: dict[str, tuple[int, BaseException]] = {}

    def fail(self, name: str, times: int = 1, error: BaseException = DOWN) -> None:
        self._failing[name] = (times, error)

    def call(self, name: str, *args: Any) -> None:
        times, error = self._failing.get(name, (0, DOWN))
        if times > 0:
            self._failing[name] = (times - 1, error)
            raise error
        self.calls.append((name, args))

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [args for called, args in self.calls if called == name]


class FakeFrontier(Calls):
    """The frontier calls the parts make, answered from memory: `queue` is what a lease takes."""

    spider = "news"
    client = None
    doorbell = "{news}:doorbell"
    refused_key = "{news}:refused"
    sequence_key = "{news}:sequence"

    def __init__(self, queue: list[bytes] | None = None) -> None:
        super().__init__()
        self.queue = list(queue or [])
        self.reclaimed = (0, 0)

    def bind(self, client: Any) -> FakeFrontier:
        return self

    def placement(self, url: str) -> Placement:
        return Placement()

    def host_control(self) -> None:
        return None

    def expected_types(self) -> dict[str, tuple[str, ...]]:
        return {}

    def host_queue_key(self, host: str) -> str:
        return "{news}:queue:" + host

    def acks_riding(self, leases: list[bytes], members: list[str]) -> list[bytes]:
        return list(leases)

    def saw(self, data: Any) -> bool:
        return False

    def stale_ring(self, data: Any) -> bool:
        return False

    def woken(self, data: Any) -> None:
        return None

    async def lease(self, count: int, lease_seconds: float, due_batch: int = 100) -> Leased:
        self.call("lease", count)
        taken, self.queue = self.queue[:count], self.queue[count:]
        return Leased([Lease(m) for m in taken])

    async def ack(self, leases: list[bytes]) -> int:
        self.call("ack", list(leases))
        return len(leases)

    async def renew(self, leases: list[bytes], lease_seconds: float) -> int:
        self.call("renew", list(leases))
        return len(leases)

    async def release(self, leases: list[bytes]) -> int:
        self.call("release", list(leases))
        return len(leases)

    async def reclaim(self, max_deliveries: int, limit: int, failed_max: int, node_id: str) -> tuple[int, int]:
        self.call("reclaim")
        return self.reclaimed

    async def expire(self, leases: list[bytes]) -> None:
        self.call("expire", list(leases))

    async def mark_solo(self, lease: bytes, node_id: str) -> None:
        self.call("mark_solo", lease)

    async def unmark_solo(self, leases: list[bytes], deaths: list[str]) -> None:
        self.call("unmark_solo", list(leases))


class FakeEnqueuer(Calls):
    """The frontier's enqueue script: every entry new (1), or as `answers` says."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: Callable[[list[Any]], list[int]] = lambda entries: [1] * len(entries)

    async def run(self, action: str, entries: list[Any], handovers: Any = (), urls: Any = ()) -> list[int]:
        self.call(action, list(entries), list(handovers))
        return self.answers(list(entries))


class FakeDeadLetters(Calls):
    async def take(self, letters: list[str], leases: list[bytes]) -> None:
        self.call("take", list(letters), list(leases))

    async def undecodable(self, bad: list[tuple[bytes, str]]) -> None:
        self.call("undecodable", list(bad))


class FakeCodec:
    """Requests as {"url": ...}; a request with meta "unsendable" cannot be encoded."""

    def encode(self, request: Request, slot: str | None = None, again: bool = False) -> str:
        if "unsendable" in request.meta:
            raise UnserializableRequestError("meta['unsendable'] (object) is not JSON", "value")
        return json.dumps({"url": request.url})

    def decode(self, payload: str | bytes) -> Request:
        try:
            return Request(json.loads(payload)["url"])
        except (ValueError, KeyError, TypeError) as exc:
            raise PayloadError(f"not a request: {exc}", "format") from None


class FakeDupefilter:
    key = "{news}:dupefilter"

    def fingerprint_hex(self, request: Request) -> str:
        return hashlib.sha1(request.url.encode()).hexdigest()


def stats() -> MemoryStatsCollector:
    collector = MemoryStatsCollector(get_crawler())
    collector.open_spider()
    return collector


def crawler(collector: Any = None) -> Any:
    """A crawler with stats and no engine (nothing downloading)."""
    return SimpleNamespace(stats=collector if collector is not None else stats(), engine=None)


def trouble(frontier: Any, lifecycle: Lifecycle, collector: Any = None) -> RedisTrouble:
    """The node's real error handling (RedisTrouble, RedisPolicy) around the fake frontier."""
    policy = RedisPolicy("redis://test", collector, first_delay=0.001, max_delay=0.005, grace=0)
    return RedisTrouble(frontier, FakeDupefilter(), policy, RecentFingerprints(100), lifecycle)


async def until(condition: Callable[[], bool], what: str, rounds: int = 500) -> None:
    """Wait (bounded: rounds x 10 ms) for `condition`."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def ended(task: Awaitable[Any], timeout: float = 5) -> Any:
    return await asyncio.wait_for(task, timeout)
