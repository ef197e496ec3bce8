"""How much work the whole cluster has: what idle-close, the CLI and the demo all ask."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from distributed_crawler.queue.enqueue import maybe_await
from distributed_crawler.queue.keys import SpiderKeys
from distributed_crawler.queue.scripts import lua_source


@dataclass(frozen=True)
class CrawlCounts:
    seeds: int
    pending: int
    leased: int
    delayed: int
    failed: int
    hosts: int = 0  # host mode: hosts with pending requests (the ready zset; their requests are not in `pending`)

    @property
    def busy(self) -> bool:
        """Work exists somewhere: seeds, queued, leased (maybe by a dead node) or delayed."""
        return bool(self.seeds or self.pending or self.leased or self.delayed or self.hosts)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


async def crawl_counts(client: Any, keys: SpiderKeys) -> CrawlCounts:
    """Two round trips; works with sync and asyncio clients (await it either way)."""
    tagged = [keys.requests, keys.processing, keys.delayed, keys.failed, keys.ready]
    counts = client.register_script(lua_source("counts"))  # EVALSHA, not the source each poll
    pending, leased, delayed, failed, hosts = await maybe_await(counts(keys=tagged))
    (seeds,) = await maybe_await(counts(keys=[keys.start_urls]))
    return CrawlCounts(seeds, pending, leased, delayed, failed, hosts)
