"""Whether a spider has a crawl on this Redis, and which spiders do: a typo in a spider's name must
not look like an empty crawl (`dcrawl status`) nor start a crawl nobody runs (`dcrawl seed`)."""

from __future__ import annotations

from typing import Any

from distributed_crawler.connection.types import SyncRedis
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.keyspace import key as spider_key
from distributed_crawler.monitoring.dashboard import discover_spiders


def has_crawl(client: SyncRedis, settings: Any, keys: SpiderKeys) -> bool:
    """Any key a crawl of this spider leaves: seeds, queue counts, leases, dead letters, stats,
    nodes (also ones gone), control, its change feed (one EXISTS each: the keys live on different
    Cluster slots)."""
    nodes_last, events = (spider_key(settings, name, keys.spider) for name in ("NODES_LAST_KEY", "EVENTS_KEY"))
    names = [
        keys.start_urls,
        keys.pending,
        keys.requests,
        keys.processing,
        keys.delayed,
        keys.failed,
        keys.stats,
        keys.nodes,
        nodes_last,
        keys.shards,
        keys.overrides,
        keys.paused,
        keys.audit,
        keys.recrawl,
        events,
    ]
    return any(client.exists(name) for name in names if name)


def unknown_spider(client: SyncRedis, settings: Any, keys: SpiderKeys, where: str) -> str | None:
    """None when the spider has a crawl here; else one line naming the spiders that do."""
    if has_crawl(client, settings, keys):
        return None
    others = [name for name in discover_spiders(client, settings) if name != keys.spider]
    there = f"spiders there: {', '.join(others[:20])}" if others else "no spider has a crawl there"
    return f"no crawl named {keys.spider!r} on {where} ({there})"
