"""The frontier's layout in Redis: FRONTIER_SHARDS as written (`{spider}:shards`), checked at start,
and the keys of one hash tag's frontier, deleted by a flush.

A node or `dcrawl` refuses to run on a frontier written with another count, whose requests would
sit on hash tags no node reads.

Resharding is not supported: the check records the count when the frontier is empty and names
the fix (the count it was written with, or drain / flush first) in one line otherwise.
"""

from __future__ import annotations

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.frontier.base import Frontier, FrontierLayoutError
from distributed_crawler.frontier.counts import crawl_counts
from distributed_crawler.frontier.keys import SpiderKeys


async def check_layout(frontier: Frontier) -> None:
    """Refuse to run on a frontier written with another FRONTIER_SHARDS; record ours when the
    frontier is empty. One line names the fix."""
    client, keys, shards = frontier.client, frontier.keys, frontier.shards
    raw = await maybe_await(client.get(keys.shards))
    text = raw.decode() if isinstance(raw, bytes) else raw
    written = int(text) if isinstance(text, str) and text.isdigit() and int(text) >= 1 else None
    if written == shards:
        return
    was = written or 1
    differs = (
        f"FRONTIER_SHARDS ({shards}) differs from the {was} shard(s) the frontier of {frontier.spider} in Redis "
        f"was written with ({keys.shards}); start with FRONTIER_SHARDS={was}"
    )
    if was != shards and await _holds_work(frontier, was):
        raise FrontierLayoutError(
            f"{differs}, or let the crawl drain (or flush it) first: resharding a frontier is not supported"
        )
    revisits = "" if was == shards else await _revisits_kept(frontier, was)
    if revisits:
        raise FrontierLayoutError(
            f"{differs}, or delete the revisit schedule written with it ({revisits}) to start revisits "
            "over: resharding a frontier is not supported"
        )
    await maybe_await(client.set(keys.shards, shards))


async def _holds_work(frontier: Frontier, shards: int) -> bool:
    """Whether the frontier as written with `shards` shards holds requests (waiting, leased, delayed)."""
    for keys in frontier.layout_keys(shards):
        counts = await crawl_counts(frontier.client, keys, seeds=False)
        if counts.pending is None or counts.pending or counts.leased or counts.delayed:
            return True
    return False


async def _revisits_kept(frontier: Frontier, shards: int) -> str:
    """How to delete the revisit schedule of the layout with `shards` shards when it holds URLs
    ("" = it holds none): it lives on those shards' tags, so another count would orphan it."""
    ours = {part.keys.recrawl for part in frontier.each_shard()}
    found = []
    for keys in frontier.layout_keys(shards):
        if keys.recrawl in ours:
            continue
        held: int = await maybe_await(frontier.client.exists(keys.recrawl, keys.recrawl_state))
        if held:
            found.append(keys)
    if not found:
        return ""
    if shards == 1:
        return f"redis-cli del '{found[0].recrawl}' '{found[0].recrawl_state}'"
    return f"redis-cli --scan --pattern '{{{frontier.spider}~*}}:recrawl*' | xargs redis-cli del"


async def flush_keys(client: AnyRedis, keys: SpiderKeys) -> None:
    """Delete the frontier keys of one tag: queue(s), leases, retries, counts, per-host state (seeds,
    dead letters and the dupefilter are not the frontier's: dedup.flush_crawl resets the filter)."""
    k = keys
    await maybe_await(client.delete(*k.crawl_state(), k.ready, k.over_budget, k.refused, k.solo, k.deaths))
    for pattern in (k.host_queue("*"), k.host("*"), k.host_in_flight("*"), k.domain_hosts("*")):
        found = client.scan_iter(match=pattern, count=1000)
        batch = [key async for key in found] if hasattr(found, "__aiter__") else list(found)
        for i in range(0, len(batch), 1000):
            await maybe_await(client.delete(*batch[i : i + 1000]))
