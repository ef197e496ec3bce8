"""One shared queue for the whole crawl (SCHEDULER_QUEUE_CLASS priority / fifo / lifo, scrapy-redis's).

`{spider}:requests` is a zset (priority; FIFO within equal priority by the sequence counter) or a
list (fifo / lifo). No per-host state: politeness, when wanted, is the middleware's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.replies import reply_bytes, reply_int, reply_list
from distributed_crawler.frontier.base import Lease, Leased
from distributed_crawler.frontier.enqueue import Entry, push_args, push_entry
from distributed_crawler.frontier.unsharded import UnshardedFrontier


def _leased(reply: object) -> Leased:
    members = [reply_bytes(m, "pop.lua") for m in reply_list(reply, "pop.lua")]
    return Leased([Lease(m) for m in members if m], None, [], sum(1 for m in members if not m))


class SingleQueueFrontier(UnshardedFrontier):
    default_order: ClassVar[str] = "priority"

    def expected_types(self) -> dict[str, tuple[str, ...]]:
        queue = ("zset",) if self.order == "priority" else ("list",)
        return {self.keys.requests: queue, **super().expected_types()}

    def _push_call(self, entries: Sequence[Entry], dedup_key: str) -> tuple[list[str], list[Any]]:
        k = self.keys
        argv: list[Any] = []
        for e in map(push_entry, entries):
            argv += push_args(e)
        return [k.requests, k.seq, k.processing, k.delayed, dedup_key, k.pending], argv

    async def lease(self, count: int, lease_seconds: float, due_batch: int = 100) -> Leased:
        """pop.lua: due retries back to the queue, then up to `count` leases (b"" = expired, dropped)."""
        k = self.keys
        result = self.scripts.pop(
            keys=[k.requests, k.processing, k.delayed, k.seq, k.pending, k.refused],
            args=[self.order, count, lease_seconds, due_batch],
        )
        return _leased(await maybe_await(result))

    def _reclaim_call(self) -> tuple[list[str], list[str]]:
        k = self.keys
        return [k.processing, k.requests, k.failed, k.seq, k.pending], []

    async def release(self, leases: Sequence[bytes | str]) -> int:
        k = self.keys
        call = self.scripts.release(keys=[k.processing, k.requests, k.seq, k.pending], args=[self.order, *leases])
        return reply_int(await maybe_await(call), "release.lua")
