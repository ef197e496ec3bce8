"""How much work the whole cluster has: the one count that idle-close, the scheduler, the CLI, the
heartbeat, Prometheus and the dashboard all read (docs/frontier.md "Counting").

`pending` is the counter the Lua scripts keep (SCHEDULER_PENDING_KEY, lua/lib/queue.lua): exact in
every queue mode and one GET however many hosts wait. None = unknown: the counter is missing (a
frontier written before it existed, with more hosts than a script rebuilds it for at once).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from distributed_crawler.connection.batch import run_scripts
from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.replies import reply_ints
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.seedkey import taken_key


@dataclass(frozen=True)
class CrawlCounts:
    seeds: int = 0
    pending: int | None = 0  # requests waiting in the queue(s), any mode; None = unknown
    leased: int = 0
    delayed: int = 0
    failed: int = 0
    hosts: int = 0  # host mode: hosts in ready (due or waiting out their interval / block)
    single_queue: int = 0  # of `pending`, the entries in the single queue (SCHEDULER_QUEUE_KEY)
    seeds_taken: int = 0  # seeds a node took and has not yet pushed to the frontier (frontier/seedkey.py)

    @property
    def frontier_busy(self) -> bool:
        """Work in the frontier: unknown, leased (maybe by a dead node), delayed, a host in ready or
        the single queue. Requests parked in hosts over budget are pending but no work (they are
        not served): in host mode work means a host in ready."""
        return self.pending is None or bool(self.leased or self.delayed or self.hosts or self.single_queue)

    @property
    def busy(self) -> bool:
        """Work exists somewhere: seeds (maybe taken by a dead node) or the frontier."""
        return bool(self.seeds or self.seeds_taken) or self.frontier_busy

    @property
    def scheduled(self) -> int:
        """What scrapy-redis's `len(queue)` means: requests waiting (unknown counts 0), not the leased."""
        return (self.pending or 0) + self.delayed

    def as_dict(self) -> dict[str, int | None]:
        return asdict(self)


def _tagged(keys: SpiderKeys) -> list[str]:
    return [keys.pending, keys.processing, keys.delayed, keys.failed, keys.ready, keys.requests, keys.over_budget]


def _args(keys: SpiderKeys) -> list[Any]:
    # ARGV: the counter, the single queue, ready, over-budget (KEYS indices), the host queue prefix
    return [1, 6, 5, 7, keys.host_queue("")]


def _frontier_counts(reply: object, waiting: int = 0, taken: int = 0) -> CrawlCounts:
    pending, leased, delayed, failed, hosts, single = reply_ints(reply, "counts.lua", 6)[:6]
    return CrawlCounts(waiting, None if pending < 0 else pending, leased, delayed, failed, hosts, single, taken)


async def shard_counts(client: AnyRedis, shards: list[SpiderKeys]) -> list[CrawlCounts]:
    """counts.lua of every shard: one round trip per Redis server (connection/batch.py run_scripts)."""
    script = client.register_script(lua_source("counts"))
    replies = await run_scripts(client, [(script, _tagged(k), _args(k)) for k in shards])
    return [_frontier_counts(reply) for reply in replies]


async def crawl_counts(client: AnyRedis, keys: SpiderKeys, seeds: bool = True) -> CrawlCounts:
    """Two round trips (one without `seeds`: the seed key and its taken zset); works with sync and asyncio clients (await it either way)."""
    counts = client.register_script(lua_source("counts"))  # EVALSHA, not the source each poll
    reply = await maybe_await(counts(keys=_tagged(keys), args=_args(keys)))
    waiting, taken = 0, 0
    if seeds:
        seed_reply = await maybe_await(counts(keys=[keys.start_urls, taken_key(keys.start_urls)]))
        waiting, taken = reply_ints(seed_reply, "counts.lua (seeds)", 2)[:2]
    return _frontier_counts(reply, waiting, taken)
