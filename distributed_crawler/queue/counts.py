"""How much work the whole cluster has: what idle-close, the CLI and the demo all ask."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from distributed_crawler.queue.enqueue import maybe_await
from distributed_crawler.queue.keys import SpiderKeys
from distributed_crawler.queue.scripts import lua_source
from distributed_crawler.queue.seedkey import taken_key


@dataclass(frozen=True)
class CrawlCounts:
    seeds: int
    pending: int
    leased: int
    delayed: int
    failed: int
    hosts: int = 0  # host mode: hosts with pending requests (the ready zset; their requests are not in `pending`)
    seeds_taken: int = 0  # seeds a node took and has not yet pushed to the frontier (queue/seedkey.py)

    @property
    def busy(self) -> bool:
        """Work exists somewhere: seeds (maybe taken by a dead node), queued, leased or delayed."""
        return bool(self.seeds or self.seeds_taken or self.pending or self.leased or self.delayed or self.hosts)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


async def crawl_counts(client: Any, keys: SpiderKeys) -> CrawlCounts:
    """Two round trips; works with sync and asyncio clients (await it either way)."""
    tagged = [keys.requests, keys.processing, keys.delayed, keys.failed, keys.ready]
    counts = client.register_script(lua_source("counts"))  # EVALSHA, not the source each poll
    pending, leased, delayed, failed, hosts = await maybe_await(counts(keys=tagged))
    seeds, taken = await maybe_await(counts(keys=[keys.start_urls, taken_key(keys.start_urls)]))
    return CrawlCounts(seeds, pending, leased, delayed, failed, hosts, taken)


@dataclass(frozen=True)
class QueueSize:
    """Requests of one spider waiting in Redis (any queue mode), as the scheduler reports them."""

    queued: int = 0  # in the queue(s), ready to be leased (hosts over budget not counted)
    delayed: int = 0  # retries waiting for their backoff
    leased: int = 0  # being crawled by some node (may still push children)
    hosts_ready: int = 0  # host mode: hosts with pending requests; more than were summed: `queued` is a floor

    @property
    def scheduled(self) -> int:
        """What scrapy-redis's `len(queue)` means: requests waiting, not the ones being crawled."""
        return self.queued + self.delayed

    @property
    def pending(self) -> bool:
        """Work somewhere in the cluster that may still reach this node's scheduler."""
        return bool(self.queued or self.delayed or self.leased or self.hosts_ready)


QUEUE_SIZE_MAX_HOSTS = 10_000  # host mode sums this many hosts' queues at most (one ZCARD each)


async def queue_size(client: Any, keys: SpiderKeys, max_hosts: int = QUEUE_SIZE_MAX_HOSTS) -> QueueSize:
    """One round trip (EVALSHA); works with sync and asyncio clients (await it either way)."""
    script = client.register_script(lua_source("queue_size"))
    queued, delayed, leased, _, hosts_ready = await maybe_await(
        script(keys=[keys.requests, keys.delayed, keys.ready, keys.processing], args=[keys.host_queue(""), max_hosts])
    )
    return QueueSize(int(queued), int(delayed), int(leased), int(hosts_ready))
