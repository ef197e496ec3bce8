"""The frontier the settings name: SCHEDULER_QUEUE_CLASS picks the queue mode (a name of `MODES` or
the dotted path of an UnshardedFrontier subclass), FRONTIER_SHARDS how many of it, behind one
ShardedFrontier when more than one."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import load_object

from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.shard_parts import LeaseHomes
from distributed_crawler.frontier.sharded import ShardedFrontier
from distributed_crawler.frontier.shards import check_shards, shard_tags
from distributed_crawler.frontier.unsharded import UnshardedFrontier

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from distributed_crawler.frontier.base import Frontier
    from distributed_crawler.frontier.scripts import Scripts

# SCHEDULER_QUEUE_CLASS -> (frontier class, order passed to it). scrapy-redis names too, so a
# scrapy-redis project moves over unchanged (and their older aliases, still in scrapy-redis 0.9.1).
_SINGLE = "distributed_crawler.frontier.single.SingleQueueFrontier"
MODES: dict[str, tuple[str, str]] = {
    "host": ("distributed_crawler.frontier.host.HostFrontier", "host"),
    "priority": (_SINGLE, "priority"),
    "fifo": (_SINGLE, "fifo"),
    "lifo": (_SINGLE, "lifo"),
    "scrapy_redis.queue.PriorityQueue": (_SINGLE, "priority"),
    "scrapy_redis.queue.FifoQueue": (_SINGLE, "fifo"),
    "scrapy_redis.queue.LifoQueue": (_SINGLE, "lifo"),
    "scrapy_redis.queue.SpiderPriorityQueue": (_SINGLE, "priority"),
    "scrapy_redis.queue.SpiderQueue": (_SINGLE, "fifo"),
    "scrapy_redis.queue.SpiderStack": (_SINGLE, "lifo"),
}


def mode_class(raw: str) -> tuple[type[UnshardedFrontier], str]:
    """The frontier class and order of a SCHEDULER_QUEUE_CLASS value; ValueError names the choices."""
    path, order = MODES.get(raw, (raw, ""))
    try:
        cls = load_object(path) if "." in path else None
    except (ImportError, AttributeError, ValueError, NameError):
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, UnshardedFrontier)):
        raise ValueError(
            f"SCHEDULER_QUEUE_CLASS ({raw}) must be one of host (fair per-host frontier, the default), "
            "priority, fifo, lifo, or the dotted path of a distributed_crawler.frontier.unsharded.UnshardedFrontier "
            "subclass"
        )
    return cls, order or getattr(cls, "default_order", raw)


def frontier_from_settings(
    settings: BaseSettings, spider: str, client: AnyRedis | None, keys: SpiderKeys | None = None
) -> Frontier:
    """The frontier SCHEDULER_QUEUE_CLASS and FRONTIER_SHARDS name, for `spider`, on `client` (None: its
    keys only, until `bind`)."""
    read = SettingsReader(settings)
    frontier_cls, order = mode_class(read.str("SCHEDULER_QUEUE_CLASS"))
    shards = check_shards(read.raw("FRONTIER_SHARDS"))
    keys = keys or SpiderKeys.from_settings(settings, spider)
    layout = partial(SpiderKeys.from_settings, settings, spider)
    options = frontier_cls.options_from_settings(settings)
    if shards == 1:
        return frontier_cls(client, keys, order, shards=1, layout=layout, **options)
    parts = [frontier_cls(client, layout(tag), order, **options) for tag in shard_tags(spider, shards)]
    return ShardedFrontier(client, keys, parts, layout, LeaseHomes())


def frontier_for_mode(
    client: AnyRedis, keys: SpiderKeys, mode: str, scripts: Scripts | None = None, **options: Any
) -> UnshardedFrontier:
    """The frontier of a mode name on one tag (tools, tests): default options unless given."""
    frontier_cls, order = mode_class(mode)
    return frontier_cls(client, keys, order, scripts, **options)


def frontier_for_dedup(client: AnyRedis, keys: SpiderKeys) -> UnshardedFrontier:
    """A frontier for enqueue.lua's "add" / "check" only (the filter, no queue touched): any mode's
    layout does; the single queue's needs no per-host settings."""
    return frontier_for_mode(client, keys, "fifo")
