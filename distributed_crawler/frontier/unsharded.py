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

from distributed_crawler.connection.calls import bound, maybe_await
from distributed_crawler.connection.replies import reply_float, reply_int, reply_ints, reply_list
from distributed_crawler.connection.types import AnyRedis, AnyScript
from distributed_crawler.frontier.base import Frontier, HostControl, Leased, Moved, Placement, Reclaimed, RevisitRecord
from distributed_crawler.frontier.counts import CrawlCounts, crawl_counts
from distributed_crawler.frontier.deadletters import DeadLetters
from distributed_crawler.frontier.doorbell import PushesSeen, Ring
from distributed_crawler.frontier.enqueue import Dedup, Enqueuer, Entry, Pusher, push_entry
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
        self, client: AnyRedis | None, keys: SpiderKeys, order: str, scripts: Scripts | None = None, **options: Any
    ) -> None:
        self._client = client
        self.keys = keys
        self.order = order  # what the scripts call the queue type (ARGV "qtype")
        self._scripts = scripts
        self.options = options
        self.pushes_seen = PushesSeen()  # host mode: the push sequence its leases (or "drained" notices) saw

    @property
    def client(self) -> AnyRedis:
        return bound(self._client)

    @property
    def scripts(self) -> Scripts:
        """The scripts on this frontier's client, registered on first use (no client needed before)."""
        if self._scripts is None:
            self._scripts = Scripts.register(self.client)
        return self._scripts

    def bind(self, client: AnyRedis) -> UnshardedFrontier:
        return type(self)(client, self.keys, self.order, None, **self.options)

    @classmethod
    def options_from_settings(cls, settings: BaseSettings) -> dict[str, Any]:
        """Mode-specific configuration read from settings (checked: ValueError names the fix)."""
        return {}

    async def open_enqueuer(self, make_dedup: Callable[[str], Awaitable[Dedup]]) -> Pusher:
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
    async def push(
        self,
        action: str,
        entries: Sequence[Entry],
        dedup_mode: str,
        dedup_keys: Sequence[str],
        layers: int,
        handovers: Sequence[bytes | str] = (),
        doorbell: str | None = None,
    ) -> list[int]:
        """One enqueue.lua call: `action` push / add / check of `entries` (dedup and push in one
        atomic step), removing `handovers` from processing. Returns [code, r1, ...] (see enqueue.lua;
        frontier/enqueue.Enqueuer drives it). `doorbell` "" = ring none (default: the frontier's)."""
        ring = self.doorbell if doorbell is None else doorbell
        keys, argv = self._push_call(entries, dedup_keys[0])
        if any(push_entry(e).failed_cap is not None for e in entries):
            keys.append(self.keys.failed)  # the refused entries' dead letters: after the pending counter
        head: list[str | int] = [self.order, len(entries), ring, dedup_mode, layers, action]
        call = self.scripts.enqueue(keys=[*keys, *dedup_keys[1:]], args=[*head, *argv, *handovers])
        return reply_ints(await maybe_await(call), "enqueue.lua", 1)

    def _push_call(self, entries: Sequence[Entry], dedup_key: str) -> tuple[list[str], list[Any]]:
        raise NotImplementedError

    async def lease(self, count: int, lease_seconds: float, due_batch: int = 100) -> Leased:
        raise NotImplementedError

    async def renew(self, leases: Sequence[bytes | str], lease_seconds: float) -> int:
        call = self.scripts.renew(keys=[self.keys.processing], args=[lease_seconds, *leases])
        return reply_int(await maybe_await(call), "renew.lua")

    def acks_riding(self, leases: list[bytes], members: Sequence[str]) -> list[bytes]:
        return leases  # all: one frontier, one script

    async def ack(self, leases: Sequence[bytes | str]) -> int:
        return reply_int(await maybe_await(self.client.zrem(self.keys.processing, *leases)), "ZREM processing")

    async def ack_recorded(
        self, leases: Sequence[bytes | str], records: Sequence[tuple[bytes, RevisitRecord]]
    ) -> list[Any]:
        script, keys, args = self.recrawl_ack_call([record for _, record in records], leases)
        reply = reply_list(await maybe_await(script(keys=keys, args=args)), "recrawl_ack.lua", 1 + len(records))
        return reply[1:]

    def recrawl_ack_call(
        self, records: Sequence[RevisitRecord], leases: Sequence[bytes | str]
    ) -> tuple[AnyScript, list[str], list[Any]]:
        """recrawl_ack.lua with its KEYS and ARGV: the records, then the leases removed (a sharded
        frontier pipelines its shards' calls)."""
        k = self.keys
        args: list[Any] = [len(records)]
        for record in records:
            args += record.args
        return self.scripts.recrawl_ack, [k.processing, k.recrawl, k.recrawl_state], [*args, *leases]

    async def expire(self, leases: Sequence[bytes | str]) -> None:
        deadlines = {lease.encode() if isinstance(lease, str) else lease: 0 for lease in leases}
        await maybe_await(self.client.zadd(self.keys.processing, deadlines, xx=True))

    async def reclaim(self, max_deliveries: int, limit: int, failed_cap: int, node_id: str) -> Reclaimed:
        script, keys, args = self.reclaim_call(max_deliveries, limit, failed_cap, node_id)
        return reclaimed(await maybe_await(script(keys=keys, args=args)))

    def reclaim_call(
        self, max_deliveries: int, limit: int, failed_cap: int, node_id: str
    ) -> tuple[AnyScript, list[str], list[str | int]]:
        """The reclaim script with its KEYS and ARGV (a sharded frontier pipelines its shards' calls)."""
        keys, extra = self._reclaim_call()
        keys += [self.keys.solo, self.keys.deaths]  # always the last two (killed_worker)
        return self.scripts.reclaim, keys, [self.order, max_deliveries, limit, failed_cap, node_id, *extra]

    def _reclaim_call(self) -> tuple[list[str], list[str]]:
        raise NotImplementedError

    async def release(self, leases: Sequence[bytes | str]) -> int:
        raise NotImplementedError

    async def recrawl_move(self, script: AnyScript, limit: int, pending_seconds: float) -> Moved:
        k = self.keys
        call = script(
            keys=[k.recrawl, k.recrawl_state, self.index_key, k.seq, k.over_budget, k.pending, k.requests],
            args=[self.order, limit, f"{pending_seconds:.3f}", k.doorbell, k.host_queue(""), k.host("")],
        )
        return moved(await maybe_await(call))

    async def purge(self, target: str, scope: str, dead_letter: bool, failed_cap: int, node: str, now: float) -> int:
        raise ValueError(f"purge needs the per-host frontier (SCHEDULER_QUEUE_CLASS=host); this crawl uses {self.mode}")

    async def make_due(self, target: str, scope: str) -> int:
        return 0  # only the per-host frontier keeps a ready index

    # -- quarantine marks, dead letters --------------------------------------------------------------
    async def mark_solo(self, lease: bytes, node_id: str) -> None:
        await maybe_await(self.client.hset(self.keys.solo, lease, node_id))

    async def unmark_solo(self, leases: Sequence[bytes], deaths: Sequence[str] = ()) -> None:
        """Drop the quarantine mark of leases (and the death counts of payload hashes `deaths`)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hdel(self.keys.solo, *leases)
        if deaths:
            pipe.hdel(self.keys.deaths, *deaths)
        await maybe_await(pipe.execute())

    def dead_letters(self, node_id: str, cap: int) -> DeadLetters:
        return DeadLetters(self._client, self.keys.failed, node_id, cap, self.keys.processing)

    # -- figures -------------------------------------------------------------------------------------
    async def counts(self, seeds: bool = False, client: AnyRedis | None = None) -> CrawlCounts:
        return await crawl_counts(client or self.client, self.keys, seeds=seeds)

    async def size(self) -> int | None:
        return (await self.counts()).pending

    async def hosts(self, limit: int = 100) -> dict[str, int]:
        return {}  # no per-host queues

    async def flush(self) -> None:
        await flush_keys(self.client, self.keys)


def reclaimed(reply: object) -> Reclaimed:
    """reclaim.lua's reply: [requeued, dead]."""
    requeued, dead = reply_ints(reply, "reclaim.lua", 2)[:2]
    return Reclaimed(requeued, dead)


def moved(reply: object) -> Moved:
    """recrawl_move.lua's reply: [moved, dropped, seconds until the next is due ("-1": none), ended]."""
    items = reply_list(reply, "recrawl_move.lua", 4)
    due = reply_float(items[2], "recrawl_move.lua")
    n = [reply_int(items[i], "recrawl_move.lua") for i in (0, 1, 3)]
    return Moved(n[0], n[1], None if due < 0 else due, n[2])
