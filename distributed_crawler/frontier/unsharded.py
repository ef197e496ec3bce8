"""`UnshardedFrontier`: the frontier on one hash tag, what the queue modes share (frontier/host.py,
frontier/single.py implement its script calls). A sharded frontier holds one per shard.

A queue mode is one subclass: `default_order`, its keys in `expected_types`, its script calls
(`_push_call`, `lease`, `_reclaim_call`, `release`) and, with per-host state, `per_host = True`
and `host_control()`; SCHEDULER_QUEUE_CLASS names it (frontier/factory.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from scrapy.settings import Settings

from distributed_crawler.connection.calls import then
from distributed_crawler.frontier.base import Frontier, HostControl, Placement, RevisitRecord
from distributed_crawler.frontier.counts import CrawlCounts, crawl_counts
from distributed_crawler.frontier.deadletters import DeadLetters
from distributed_crawler.frontier.doorbell import PushesSeen, Ring
from distributed_crawler.frontier.enqueue import Dedup, Enqueuer, Entry
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.layout import check_layout, flush_keys
from distributed_crawler.frontier.scripts import Scripts
from distributed_crawler.frontier.shards import shard_tags

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


class UnshardedFrontier:
    """One spider's frontier on one hash tag (implements the `Frontier` Protocol)."""

    per_host: ClassVar[bool] = False  # keeps per-host state (host hash, blocks, politeness at lease)
    default_order: ClassVar[str] = ""

    def __init__(
        self, client: Any, keys: SpiderKeys, order: str, scripts: Scripts | None = None, **options: Any
    ) -> None:
        self.client = client
        self.keys = keys
        self.order = order  # what the scripts call the queue type (ARGV "qtype")
        self._scripts = scripts
        self.options = options
        self.pushes_seen = PushesSeen()  # host mode: the push sequence its leases (or "drained" notices) saw

    @property
    def scripts(self) -> Scripts:
        """The scripts on this frontier's client, registered on first use (no client needed before)."""
        if self._scripts is None:
            self._scripts = Scripts.register(self.client)
        return self._scripts

    def bind(self, client: Any) -> UnshardedFrontier:
        return type(self)(client, self.keys, self.order, None, **self.options)

    @classmethod
    def options_from_settings(cls, settings: BaseSettings) -> dict[str, Any]:
        """Mode-specific configuration read from settings (checked: ValueError names the fix)."""
        return {}

    async def open_enqueuer(self, make_dedup: Callable[[str], Awaitable[Dedup]]) -> Any:
        return Enqueuer(self, await make_dedup(self.keys.dupefilter))

    # -- one shard: itself -------------------------------------------------------------------------
    def each_shard(self) -> list[Frontier]:
        return [self]

    def shard_for(self, url: str) -> Frontier:
        return self

    def part_keys(self) -> list[SpiderKeys]:
        return [self.keys]

    def dupefilter_keys(self) -> list[str]:
        return [self.keys.dupefilter]

    @property
    def shards(self) -> int:
        return int(self.options.get("shards", 1))

    async def check_layout(self) -> None:
        await check_layout(self)

    def layout_keys(self, shards: int) -> list[SpiderKeys]:
        layout = self.options.get("layout") or partial(SpiderKeys.from_settings, Settings(), self.spider)
        return [layout(tag if shards > 1 else "") for tag in shard_tags(self.spider, shards)]

    # -- the doorbell ------------------------------------------------------------------------------
    def stale_ring(self, ring: Ring) -> bool:
        return self.pushes_seen.stale(ring)

    def saw(self, ring: Ring) -> bool:
        return self.pushes_seen.drained(ring)

    def woken(self, ring: Ring | None = None) -> None:
        """Nothing to do: one shard, asked at every lease."""

    # -- what callers may ask ----------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self.order

    @property
    def spider(self) -> str:
        return self.keys.spider

    @property
    def doorbell(self) -> str:
        return self.keys.doorbell

    @property
    def sequence_key(self) -> str:
        return self.keys.seq

    @property
    def refused_key(self) -> str:
        return self.keys.refused

    @property
    def index_key(self) -> str:
        return self.keys.requests

    def placement(self, url: str) -> Placement:
        return Placement()

    def domain_hosts_key(self, domain: str) -> str:
        return self.keys.domain_hosts(domain)

    def host_tag(self, url: str) -> str:
        return self.keys.tag or self.keys.spider

    def host_queue_key(self, slot: str) -> str:
        return self.keys.host_queue(slot)

    def host_control(self) -> HostControl | None:
        return None

    def expected_types(self) -> dict[str, tuple[str, ...]]:
        k = self.keys
        return {k.processing: ("zset",), k.delayed: ("zset",), k.seq: ("string",), k.failed: ("list",)}

    def status_types(self) -> dict[str, tuple[str, ...]]:
        k = self.keys
        zsets = dict.fromkeys((k.processing, k.delayed, k.ready, k.over_budget), ("zset",))
        return {k.requests: ("zset", "list"), k.pending: ("string",), k.failed: ("list",), **zsets}

    def count_keys(self) -> dict[str, str]:
        k = self.keys
        return {"pending": k.pending, "leased": k.processing, "delayed": k.delayed, "failed": k.failed}

    # -- the scripts -------------------------------------------------------------------------------
    def push(
        self,
        action: str,
        entries: Sequence[Entry],
        dedup_mode: str,
        dedup_keys: Sequence[str],
        layers: int,
        handovers: Sequence[bytes | str] = (),
        doorbell: str | None = None,
    ) -> Any:
        """One enqueue.lua call: `action` push / add / check of `entries` (dedup and push in one
        atomic step), removing `handovers` from processing. Returns [code, r1, ...] (see enqueue.lua;
        frontier/enqueue.Enqueuer drives it). `doorbell` "" = ring none (default: the frontier's)."""
        ring = self.doorbell if doorbell is None else doorbell
        keys, argv = self._push_call(entries, dedup_keys[0])
        head = [self.order, len(entries), ring, dedup_mode, layers, action]
        return self.scripts.enqueue(keys=[*keys, *dedup_keys[1:]], args=[*head, *argv, *handovers])

    def _push_call(self, entries: Sequence[Entry], dedup_key: str) -> tuple[list[str], list[Any]]:
        raise NotImplementedError

    def lease(self, count: int, lease_seconds: float, due_batch: int = 100) -> Any:
        raise NotImplementedError

    def renew(self, leases: Sequence[bytes | str], lease_seconds: float) -> Any:
        return self.scripts.renew(keys=[self.keys.processing], args=[lease_seconds, *leases])

    def acks_riding(self, leases: list[bytes], members: Sequence[str]) -> list[bytes]:
        return leases  # all: one frontier, one script

    def ack(self, leases: Sequence[bytes | str]) -> Any:
        return self.client.zrem(self.keys.processing, *leases)

    def ack_recorded(self, leases: Sequence[bytes | str], records: Sequence[tuple[bytes, RevisitRecord]]) -> Any:
        script, keys, args = self.recrawl_ack_call([record for _, record in records], leases)
        return then(script(keys=keys, args=args), lambda reply: list(reply[1:]))

    def recrawl_ack_call(
        self, records: Sequence[RevisitRecord], leases: Sequence[bytes | str]
    ) -> tuple[Any, list[str], list[Any]]:
        """recrawl_ack.lua with its KEYS and ARGV: the records, then the leases removed (a sharded
        frontier pipelines its shards' calls)."""
        k = self.keys
        args: list[Any] = [len(records)]
        for record in records:
            args += record.args
        return self.scripts.recrawl_ack, [k.processing, k.recrawl, k.recrawl_state], [*args, *leases]

    def expire(self, leases: Sequence[bytes | str]) -> Any:
        return self.client.zadd(self.keys.processing, dict.fromkeys(leases, 0), xx=True)

    def reclaim(self, max_deliveries: int, limit: int, failed_cap: int, node_id: str) -> Any:
        script, keys, args = self.reclaim_call(max_deliveries, limit, failed_cap, node_id)
        return then(script(keys=keys, args=args), lambda reply: (int(reply[0]), int(reply[1])))

    def reclaim_call(self, max_deliveries: int, limit: int, failed_cap: int, node_id: str) -> tuple[Any, Any, Any]:
        """The reclaim script with its KEYS and ARGV (a sharded frontier pipelines its shards' calls)."""
        keys, extra = self._reclaim_call()
        keys += [self.keys.solo, self.keys.deaths]  # always the last two (killed_worker)
        return self.scripts.reclaim, keys, [self.order, max_deliveries, limit, failed_cap, node_id, *extra]

    def _reclaim_call(self) -> tuple[list[str], list[str]]:
        raise NotImplementedError

    def release(self, leases: Sequence[bytes | str]) -> Any:
        raise NotImplementedError

    def recrawl_move(self, script: Any, limit: int, pending_seconds: float) -> Any:
        """-> [moved, dropped, seconds until the next is due ("-1": none scheduled), ended]."""
        k = self.keys
        return script(
            keys=[k.recrawl, k.recrawl_state, self.index_key, k.seq, k.over_budget, k.pending, k.requests],
            args=[self.order, limit, f"{pending_seconds:.3f}", k.doorbell, k.host_queue(""), k.host("")],
        )

    def purge(self, target: str, scope: str, dead_letter: bool, failed_cap: int, node: str, now: float) -> Any:
        raise ValueError(f"purge needs the per-host frontier (SCHEDULER_QUEUE_CLASS=host); this crawl uses {self.mode}")

    def make_due(self, target: str, scope: str) -> Any:
        return 0  # only the per-host frontier keeps a ready index

    # -- quarantine marks, dead letters --------------------------------------------------------------
    def mark_solo(self, lease: bytes, node_id: str) -> Any:
        return self.client.hset(self.keys.solo, lease, node_id)

    def unmark_solo(self, leases: Sequence[bytes], deaths: Sequence[str] = ()) -> Any:
        """Drop the quarantine mark of leases (and the death counts of payload hashes `deaths`)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hdel(self.keys.solo, *leases)
        if deaths:
            pipe.hdel(self.keys.deaths, *deaths)
        return pipe.execute()

    def dead_letters(self, node_id: str, cap: int) -> DeadLetters:
        return DeadLetters(self.client, self.keys.failed, node_id, cap, self.keys.processing)

    # -- figures -------------------------------------------------------------------------------------
    async def counts(self, seeds: bool = False, client: Any = None) -> CrawlCounts:
        return await crawl_counts(client or self.client, self.keys, seeds=seeds)

    async def size(self) -> int | None:
        return (await self.counts()).pending

    async def hosts(self, limit: int = 100) -> dict[str, int]:
        return {}  # no per-host queues

    async def flush(self) -> None:
        await flush_keys(self.client, self.keys)
