"""The frontier as one object: `Frontier` and the factory that picks its class from SCHEDULER_QUEUE_CLASS.

A frontier alone knows its Redis keys, their types, the KEYS/ARGV of its Lua scripts and how a
request is placed (docs/frontier.md). The scheduler, the CLI, the dashboard and the middlewares
talk to it and never branch on the queue mode: they ask its capabilities (`per_host`).

One class per queue mode (queue/host.py, queue/single.py). SCHEDULER_QUEUE_CLASS names a mode of
`MODES` or the dotted path of a Frontier subclass, so a third mode is one new class.

With a sync client the script methods return values; with an asyncio client, awaitables
(`maybe_await` either way): the CLI and the nodes share the same code.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

from scrapy.settings import Settings
from scrapy.utils.misc import load_object

from distributed_crawler.defaults import SettingsReader
from distributed_crawler.queue.counts import CrawlCounts, crawl_counts
from distributed_crawler.queue.deadletters import DeadLetters
from distributed_crawler.queue.enqueue import Dedup, Enqueuer, Entry, PushEntry, maybe_await
from distributed_crawler.queue.keys import SpiderKeys
from distributed_crawler.queue.scripts import Scripts, lua_source, then
from distributed_crawler.queue.shards import check_shards, shard_tags

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


# SCHEDULER_QUEUE_CLASS -> (Frontier class, order passed to it). scrapy-redis names too, so a
# scrapy-redis project moves over unchanged (and their older aliases, still in scrapy-redis 0.9.1).
MODES: dict[str, tuple[str, str]] = {
    "host": ("distributed_crawler.queue.host.HostFrontier", "host"),
    "priority": ("distributed_crawler.queue.single.SingleQueueFrontier", "priority"),
    "fifo": ("distributed_crawler.queue.single.SingleQueueFrontier", "fifo"),
    "lifo": ("distributed_crawler.queue.single.SingleQueueFrontier", "lifo"),
    "scrapy_redis.queue.PriorityQueue": ("distributed_crawler.queue.single.SingleQueueFrontier", "priority"),
    "scrapy_redis.queue.FifoQueue": ("distributed_crawler.queue.single.SingleQueueFrontier", "fifo"),
    "scrapy_redis.queue.LifoQueue": ("distributed_crawler.queue.single.SingleQueueFrontier", "lifo"),
    "scrapy_redis.queue.SpiderPriorityQueue": ("distributed_crawler.queue.single.SingleQueueFrontier", "priority"),
    "scrapy_redis.queue.SpiderQueue": ("distributed_crawler.queue.single.SingleQueueFrontier", "fifo"),
    "scrapy_redis.queue.SpiderStack": ("distributed_crawler.queue.single.SingleQueueFrontier", "lifo"),
}


class Lease(NamedTuple):
    """One leased member (bytes exactly as stored: acks match them byte for byte), its slot and the
    slot's backoff level ("" and 0 when the frontier keeps no per-host state)."""

    lease: bytes
    slot: str = ""
    backoff: int = 0


def ring_part(message: bytes | str | None, n: int) -> str | None:
    """Field `n` of a doorbell message ("<queued> <hash tag> <sequence>"), None if it has none."""
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
    if not isinstance(text, str):
        return None  # not a doorbell message (a subscription's confirmation carries a number)
    parts = text.split(" ")
    return parts[n] if len(parts) > n else None


class Leased(NamedTuple):
    leases: list[Lease]
    next_due: float | None = None  # seconds until the next host is due; None = none waits (or no hosts)
    broken: list[str] = []  # hosts dropped from ready: their queue key holds the wrong Redis type
    expired: int = 0  # requests dropped at lease: their expiry (REQUEST_TTL / meta expires_at) had passed
    seen: int | None = None  # host mode: the push sequence when it ran (pushes up to it were seen)


@dataclass(frozen=True)
class Placement:
    """Where a request goes: its slot and the slot's limits (per-host frontiers), else nothing."""

    slot: str | None = None
    interval: float | None = None
    budget: int | None = None
    in_flight: int | None = None


def _control_reply(replies: list[Any]) -> tuple[Any, Any, Any]:
    """(pause, overrides, registry version) of control_state's pipeline. A registry version that is
    not a string (garbage in the key) reads as none: the pause and the overrides still come through;
    `dcrawl sources SPIDER import` names the key to fix."""
    for reply in replies[:2]:
        if isinstance(reply, Exception):
            raise reply
    version = replies[2]
    return decode_pause(replies[0]), replies[1], None if isinstance(version, Exception) else version


class FrontierLayoutError(ValueError):
    """FRONTIER_SHARDS differs from the layout the frontier in Redis was written with."""


def decode_pause(raw: Any) -> dict[str, Any] | None:
    """A pause as stored; garbage still means paused (someone set the key), by an unknown user."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        value = None
    if not isinstance(value, dict):
        return {"since": 0.0, "by": "unknown", "drain": False, "source": "unknown"}
    since = value.get("since")
    return {
        "since": float(since) if isinstance(since, (int, float)) else 0.0,
        "by": str(value.get("by", "unknown"))[:100],
        "drain": value.get("drain") is True,
        "source": str(value.get("source", "unknown"))[:20],
    }


class HostControl(Protocol):
    """The politeness inputs of a frontier with per-host state (lua/host_block.lua)."""

    def block_host(
        self, host: str, seconds: float | None, reason: str, base: float, cap: float, rand: float
    ) -> Any: ...
    def unblock_host(self, host: str, reason: str) -> Any: ...
    def reset_host_backoff(self, host: str) -> Any: ...
    def set_adaptive_delay(self, host: str, seconds: float) -> Any: ...
    def host_state_key(self, slot: str) -> str: ...


def mode_class(raw: str) -> tuple[type[Frontier], str]:
    """The Frontier class and order of a SCHEDULER_QUEUE_CLASS value; ValueError names the choices."""
    path, order = MODES.get(raw, (raw, ""))
    try:
        cls = load_object(path) if "." in path else None
    except (ImportError, AttributeError, ValueError, NameError):
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, Frontier)):
        raise ValueError(
            f"SCHEDULER_QUEUE_CLASS ({raw}) must be one of host (fair per-host frontier, the default), "
            "priority, fifo, lifo, or the dotted path of a distributed_crawler.queue.base.Frontier subclass"
        )
    return cls, order or getattr(cls, "default_order", raw)


class Frontier:
    """One spider's frontier in Redis: push, lease, ack, renew, reclaim, release, size, hosts, flush."""

    per_host: ClassVar[bool] = False  # keeps per-host state (host hash, blocks, politeness at lease)
    default_order: ClassVar[str] = ""
    seen: int | None = None  # host mode: the push sequence the last lease (or a "drained" notice) saw

    def __init__(
        self, client: Any, keys: SpiderKeys, order: str, scripts: Scripts | None = None, **options: Any
    ) -> None:
        self.client = client
        self.keys = keys
        self.order = order  # what the scripts call the queue type (ARGV "qtype")
        self._scripts = scripts
        self.options = options

    @property
    def scripts(self) -> Scripts:
        """The scripts on this frontier's client, registered on first use (no client needed before)."""
        if self._scripts is None:
            self._scripts = Scripts.register(self.client)
        return self._scripts

    def bind(self, client: Any) -> Frontier:
        """The same frontier on another client (a node's sync client for a forced stop, the CLI)."""
        return type(self)(client, self.keys, self.order, None, **self.options)

    # -- building --------------------------------------------------------------------------
    @classmethod
    def from_settings(
        cls, settings: BaseSettings, spider: str, client: Any, keys: SpiderKeys | None = None
    ) -> Frontier:
        """The frontier SCHEDULER_QUEUE_CLASS names, for `spider`, on `client` (scripts registered once)."""
        read = SettingsReader(settings)
        frontier_cls, order = mode_class(read.str("SCHEDULER_QUEUE_CLASS"))
        shards = check_shards(read.raw("FRONTIER_SHARDS"))
        keys = keys or SpiderKeys.from_settings(settings, spider)
        layout = partial(SpiderKeys.from_settings, settings, spider)
        options = frontier_cls.options_from_settings(settings)
        if shards == 1:
            return frontier_cls(client, keys, order, shards=1, layout=layout, **options)
        parts = [frontier_cls(client, layout(tag), order, **options) for tag in shard_tags(spider, shards)]
        sharded: type[Frontier] = load_object("distributed_crawler.queue.sharded.ShardedFrontier")
        return sharded(client, keys, order, shards=shards, layout=layout, parts=parts, home={}, **options)

    @classmethod
    def options_from_settings(cls, settings: BaseSettings) -> dict[str, Any]:
        """Mode-specific configuration read from settings (checked: ValueError names the fix)."""
        return {}

    @staticmethod
    def open(client: Any, keys: SpiderKeys, mode: str, scripts: Scripts | None = None, **options: Any) -> Frontier:
        """The frontier of a mode name (tests, tools): default options unless given."""
        frontier_cls, order = mode_class(mode)
        return frontier_cls(client, keys, order, scripts, **options)

    @staticmethod
    def for_dedup(client: Any, keys: SpiderKeys) -> Frontier:
        """A frontier for enqueue.lua's "add" / "check" only (the filter, no queue touched): any
        mode's layout does; the single queue's needs no per-host settings."""
        return Frontier.open(client, keys, "fifo")

    async def open_enqueuer(self, make_dedup: Callable[[str], Awaitable[Dedup]]) -> Any:
        """The Enqueuer of this frontier, its dedup opened by `make_dedup(key)` for its filter key (a
        sharded frontier opens one per shard: every shard has its slice of the filter)."""
        return Enqueuer(self, await make_dedup(self.keys.dupefilter))

    def each_shard(self) -> list[Frontier]:
        """The frontier of each shard (one: this one); what is kept per shard (the revisit schedule)
        is read and summed over these."""
        return [self]

    def shard_for(self, url: str) -> Frontier:
        """The frontier of the shard that holds `url`'s host (one shard: this one)."""
        return self

    def part_keys(self) -> list[SpiderKeys]:
        """The keys of each shard (one: the spider's): what monitoring/hosts.py reads and sums."""
        return [self.keys]

    def dupefilter_keys(self) -> list[str]:
        """The dedup filter's keys the frontier's scripts use (one per shard)."""
        return [self.keys.dupefilter]

    def stale_ring(self, message: bytes | str | None) -> bool:
        """A doorbell ring ("<queued> <tag> <sequence>", enqueue.lua) for a push that a lease
        (this node's last one, or one that drained the queue) already saw: no lease for it."""
        seq = ring_part(message, 2)
        seen = self.seen
        return seen is not None and seq is not None and seq.isdigit() and int(seq) <= seen

    def saw(self, message: bytes | str | None) -> bool:
        """A "drained" notice ("0 <tag> <sequence>", host_pop.lua): a lease left no due work after
        the pushes up to that sequence; True if `message` is one (then remembered, not a ring)."""
        seq = ring_part(message, 2)
        if ring_part(message, 0) != "0" or seq is None or not seq.isdigit():
            return False
        self.seen = max(int(seq), self.seen or 0)
        return True

    def woken(self, message: bytes | str | None = None) -> None:
        """The doorbell rang with `message` (enqueue.lua: "<queued> <hash tag>"): work was pushed
        somewhere (a sharded frontier asks that shard again, or every shard for another message)."""

    def with_mode(self, mode: str) -> Frontier:
        """Another mode on the same client and keys, reusing the registered scripts."""
        return Frontier.open(self.client, self.keys, mode, self._scripts, **self.options)

    # -- the layout in Redis ------------------------------------------------------------------
    @property
    def shards(self) -> int:
        """FRONTIER_SHARDS: how many shards (hash tags) the frontier is spread over."""
        return int(self.options.get("shards", 1))

    async def check_layout(self) -> None:
        """Refuse to run on a frontier written with another FRONTIER_SHARDS (its requests would sit
        on tags no node reads); record ours when the frontier is empty. One line names the fix."""
        raw = await maybe_await(self.client.get(self.keys.shards))
        text = raw.decode() if isinstance(raw, bytes) else raw
        written = int(text) if isinstance(text, str) and text.isdigit() and int(text) >= 1 else None
        if written == self.shards:
            return
        if (written or 1) != self.shards and await self._holds_work(written or 1):
            raise FrontierLayoutError(
                f"FRONTIER_SHARDS ({self.shards}) differs from the {written or 1} shard(s) the frontier of "
                f"{self.spider} in Redis was written with ({self.keys.shards}); start with FRONTIER_SHARDS="
                f"{written or 1}, or let the crawl drain (or flush it) first: resharding a frontier is not supported"
            )
        revisits = "" if (written or 1) == self.shards else await self._revisits_kept(written or 1)
        if revisits:
            raise FrontierLayoutError(
                f"FRONTIER_SHARDS ({self.shards}) differs from the {written or 1} shard(s) the frontier of "
                f"{self.spider} in Redis was written with ({self.keys.shards}); start with FRONTIER_SHARDS="
                f"{written or 1}, or delete the revisit schedule written with it ({revisits}) to start revisits "
                "over: resharding a frontier is not supported"
            )
        await maybe_await(self.client.set(self.keys.shards, self.shards))

    def _layout_keys(self, shards: int) -> list[SpiderKeys]:
        """The keys of each shard of the frontier as written with `shards` shards."""
        layout = self.options.get("layout") or partial(SpiderKeys.from_settings, Settings(), self.spider)
        return [layout(tag if shards > 1 else "") for tag in shard_tags(self.spider, shards)]

    async def _holds_work(self, shards: int) -> bool:
        """Whether the frontier as written with `shards` shards holds requests (waiting, leased, delayed)."""
        for keys in self._layout_keys(shards):
            counts = await crawl_counts(self.client, keys, seeds=False)
            if counts.pending is None or counts.pending or counts.leased or counts.delayed:
                return True
        return False

    async def _revisits_kept(self, shards: int) -> str:
        """How to delete the revisit schedule of the layout with `shards` shards when it holds URLs
        ("" = it holds none): it lives on those shards' tags, so another count would orphan it."""
        ours = {part.keys.recrawl for part in self.each_shard()}
        found = [
            keys
            for keys in self._layout_keys(shards)
            if keys.recrawl not in ours and await maybe_await(self.client.exists(keys.recrawl, keys.recrawl_state))
        ]
        if not found:
            return ""
        if shards == 1:
            return f"redis-cli del '{found[0].recrawl}' '{found[0].recrawl_state}'"
        return f"redis-cli --scan --pattern '{{{self.spider}~*}}:recrawl*' | xargs redis-cli del"

    # -- what callers may ask ---------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self.order

    @property
    def spider(self) -> str:
        return self.keys.spider

    @property
    def doorbell(self) -> str:
        """Pub/sub channel the scripts PUBLISH to when work was pushed (one subscription per node)."""
        return self.keys.doorbell

    @property
    def sequence_key(self) -> str:
        """The counter that orders pushes inside a priority (named in an operator's fix)."""
        return self.keys.seq

    @property
    def refused_key(self) -> str:
        """Hash "<reason> <host>" -> requests refused or expired (`dcrawl hosts` reads it)."""
        return self.keys.refused

    @property
    def index_key(self) -> str:
        """The key a node logs as "its queue" (the ready index or the single queue)."""
        return self.keys.requests

    def placement(self, url: str) -> Placement:
        """Where a request for `url` goes (per-host frontiers: its slot and limits)."""
        return Placement()

    def domain_hosts_key(self, domain: str) -> str:
        """The set of hosts a registered domain was allowed (DOMAIN_MAX_HOSTS, core/traps.py)."""
        return self.keys.domain_hosts(domain)

    def host_tag(self, url: str) -> str:
        """The hash tag (without braces) of the shard holding `url`'s host: what else is kept per
        host (the robots.txt cache) carries it, so it lives on the host's master. One shard: the
        spider's own tag."""
        return self.keys.tag or self.keys.spider

    @staticmethod
    def entry(fingerprint: str, dont_filter: bool, member: str, delay: float, placement: Placement) -> Entry:
        """A push entry for `push` (the placement's slot and limits travel with it when it has one)."""
        p = placement
        return PushEntry(fingerprint, dont_filter, member, delay, p.slot, p.interval, p.budget, p.in_flight)

    def host_queue_key(self, slot: str) -> str:
        """The queue key of one slot (named when it holds the wrong type)."""
        return self.keys.host_queue(slot)

    def host_control(self) -> HostControl | None:
        """Blocks and backoff per host (429/503/Retry-After, Crawl-delay), or None when the frontier
        keeps no per-host state (the middlewares then leave politeness to themselves)."""
        return None

    def expected_types(self) -> dict[str, tuple[str, ...]]:
        """Every key the frontier's scripts touch that a node checks, with the Redis types it needs."""
        return {
            self.keys.processing: ("zset",),
            self.keys.delayed: ("zset",),
            self.keys.seq: ("string",),
            self.keys.failed: ("list",),
        }

    def status_types(self) -> dict[str, tuple[str, ...]]:
        """Keys `dcrawl status` checks before reading (any mode's: a switch of mode leaves the other's)."""
        return {
            self.keys.requests: ("zset", "list"),
            self.keys.pending: ("string",),
            self.keys.processing: ("zset",),
            self.keys.delayed: ("zset",),
            self.keys.failed: ("list",),
            self.keys.ready: ("zset",),
            self.keys.over_budget: ("zset",),
        }

    def count_keys(self) -> dict[str, str]:
        """CrawlCounts field -> the key it is read from (a key of the wrong type counts as none)."""
        k = self.keys
        return {"pending": k.pending, "leased": k.processing, "delayed": k.delayed, "failed": k.failed}

    # -- the scripts ----------------------------------------------------------------------------
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
        queue/enqueue.Enqueuer drives it). `doorbell` "" = ring none (default: the frontier's)."""
        ring = self.doorbell if doorbell is None else doorbell
        keys, argv = self._push_call(entries, dedup_keys[0])
        head = [self.order, len(entries), ring, dedup_mode, layers, action]
        return self.scripts.enqueue(keys=[*keys, *dedup_keys[1:]], args=[*head, *argv, *handovers])

    def _push_call(self, entries: Sequence[Entry], dedup_key: str) -> tuple[list[str], list[Any]]:
        raise NotImplementedError

    def lease(self, count: int, lease_seconds: float, due_batch: int = 100) -> Any:
        """Move up to `due_batch` due retries back, then lease up to `count` requests -> Leased."""
        raise NotImplementedError

    def pop(self, count: int, lease_seconds: float, due_batch: int = 100) -> Any:
        """`lease` as a flat list: the leased members, then b"" for each expired request dropped."""
        return then(
            self.lease(count, lease_seconds, due_batch), lambda p: [x.lease for x in p.leases] + [b""] * p.expired
        )

    def renew(self, leases: Sequence[bytes | str], lease_seconds: float) -> Any:
        """Extend the leases still held (never re-creates one); returns how many were extended."""
        return self.scripts.renew(keys=[self.keys.processing], args=[lease_seconds, *leases])

    def acks_riding(self, leases: list[bytes], members: Sequence[str]) -> list[bytes]:
        """Of finished `leases`, the ones a push of `members` may remove in its own script (all:
        one frontier, one script)."""
        return leases

    def ack(self, leases: Sequence[bytes | str]) -> Any:
        """Remove finished leases (the request is done: its items committed, its links pushed)."""
        return self.client.zrem(self.keys.processing, *leases)

    def expire(self, leases: Sequence[bytes | str]) -> Any:
        """Let leases expire now (only those still held), so the next reclaim counts a delivery."""
        return self.client.zadd(self.keys.processing, dict.fromkeys(leases, 0), xx=True)

    def reclaim(self, max_deliveries: int, limit: int, failed_cap: int, node_id: str) -> Any:
        """Requeue expired leases (front of their priority) or dead-letter them: (requeued, dead)."""
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
        """Give leases back to the front of the queue without counting a delivery; returns how many."""
        raise NotImplementedError

    def recrawl_move(self, script: Any, limit: int, pending_seconds: float) -> Any:
        """recrawl_move.lua: push up to `limit` due revisits of this frontier's schedule into it ->
        [moved, dropped, seconds until the next is due ("-1": none scheduled), ended]."""
        k = self.keys
        return script(
            keys=[k.recrawl, k.recrawl_state, self.index_key, k.seq, k.over_budget, k.pending, k.requests],
            args=[self.order, limit, f"{pending_seconds:.3f}", k.doorbell, k.host_queue(""), k.host("")],
        )

    # -- live control (dcrawl host / overrides / audit; docs/operations.md) ----------------------
    def overrides(self) -> Any:
        """Every override: {host or domain: raw JSON} (the lease reads the same hash in host mode)."""
        return self.client.hgetall(self.keys.overrides)

    def override(self, target: str) -> Any:
        return self.client.hget(self.keys.overrides, target)

    def write_override(self, target: str, value: str | None) -> Any:
        """Set (JSON) or drop (None) the override of a host or a registered domain."""
        if value is None:
            return self.client.hdel(self.keys.overrides, target)
        return self.client.hset(self.keys.overrides, target, value)

    def purge(self, target: str, scope: str, dead_letter: bool, failed_cap: int, node: str, now: float) -> Any:
        """Drop a host's pending requests: the per-host frontier's (one queue per host) only."""
        raise ValueError(f"purge needs the per-host frontier (SCHEDULER_QUEUE_CLASS=host); this crawl uses {self.mode}")

    def make_due(self, target: str, scope: str) -> Any:
        """After an override that held a host back is lifted (unblock, unset): its hosts due now.
        Only the per-host frontier keeps a ready index; the single-queue modes have nothing to do."""
        return 0

    def pause(self, by: str, drain: bool, source: str, now: float) -> Any:
        """Pause the crawl for every node (they lease nothing until `resume`); survives restarts."""
        value = json.dumps({"since": round(now, 3), "by": by, "drain": drain, "source": source})
        return self.client.set(self.keys.paused, value)

    def resume(self) -> Any:
        """Lift the pause; returns how many keys were removed (0: it was not paused)."""
        return self.client.delete(self.keys.paused)

    def pause_state(self) -> Any:
        """The pause as a dict ({since, by, drain, source}), or None when the crawl runs."""
        return then(self.client.get(self.keys.paused), decode_pause)

    def overrides_key(self) -> str:
        """The overrides hash the nodes read (a sharded frontier: its first shard's copy)."""
        return self.keys.overrides

    def control_state(self) -> Any:
        """(pause, {target: raw override}, registry version) in one round trip: what a node reads
        every 1.5 s (the registry itself only when its version moved: `sources`)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.get(self.keys.paused)
        pipe.hgetall(self.overrides_key())
        pipe.get(self.keys.sources_version)
        return then(pipe.execute(raise_on_error=False), _control_reply)

    def registry_keys(self) -> tuple[str, str]:
        """The source registry's hash and its version counter (what a wrong-type message names)."""
        return self.keys.sources, self.keys.sources_version

    # -- the source registry (dcrawl sources SPIDER import / remove; docs/sources.md) -------------
    def sources(self) -> Any:
        """Every registered source: {site: raw JSON}."""
        return self.client.hgetall(self.keys.sources)

    def write_sources(self, put: dict[str, str], drop: Sequence[str] = ()) -> Any:
        """Set and remove registry entries and move its version, all or nothing (lua/registry_write.lua:
        nodes see all of an import or none of it); returns the new version."""
        script = self.client.register_script(lua_source("registry_write"))
        args: list[str | int] = [len(put)]
        for site, value in put.items():
            args += [site, value]
        return script(keys=[self.keys.sources, self.keys.sources_version], args=[*args, *drop])

    def audit(self, fields: dict[str, str], maxlen: int) -> Any:
        """Append one control action to the capped audit stream."""
        return self.client.xadd(self.keys.audit, fields, maxlen=maxlen, approximate=True)

    def audit_many(self, entries: Sequence[dict[str, str]], maxlen: int) -> Any:
        """Append many control actions (an import of a source registry) in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for fields in entries:
            pipe.xadd(self.keys.audit, fields, maxlen=maxlen, approximate=True)
        return pipe.execute()

    def audit_entries(self, since: str = "-", count: int = 1000) -> Any:
        return self.client.xrange(self.keys.audit, min=since, count=count)

    # -- quarantine (a redelivered request run alone, reclaim.lua's killed_worker) --------------
    def mark_solo(self, lease: bytes, node_id: str) -> Any:
        return self.client.hset(self.keys.solo, lease, node_id)

    def unmark_solo(self, leases: Sequence[bytes], deaths: Sequence[str] = ()) -> Any:
        """Drop the quarantine mark of leases (and the death counts of payload hashes `deaths`)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hdel(self.keys.solo, *leases)
        if deaths:
            pipe.hdel(self.keys.deaths, *deaths)
        return pipe.execute()

    # -- dead letters ---------------------------------------------------------------------------
    def dead_letters(self, node_id: str, cap: int) -> DeadLetters:
        """The failed list, writing with the lease removal from this frontier's processing set."""
        return DeadLetters(self.client, self.keys.failed, node_id, cap, self.keys.processing)

    # -- figures -----------------------------------------------------------------------------------
    async def counts(self, seeds: bool = False, client: Any = None) -> CrawlCounts:
        """How much work the crawl has (the pending counter the scripts keep: one read, no scan)."""
        return await crawl_counts(client or self.client, self.keys, seeds=seeds)

    async def size(self) -> int | None:
        """Requests waiting, exact in every mode (None = unknown: the counter is missing)."""
        return (await self.counts()).pending

    async def hosts(self, limit: int = 100) -> dict[str, int]:
        """Up to `limit` hosts with waiting requests -> how many wait (the due-soonest first; {} when
        the frontier keeps no per-host queues). The count of hosts is `counts().hosts` (no scan)."""
        return {}

    async def flush(self) -> None:
        """Delete the frontier's keys: queue(s), leases, retries, counts, per-host state (seeds,
        dead letters and the dupefilter are not the frontier's: dedup.flush_crawl resets the filter)."""
        k = self.keys
        await maybe_await(self.client.delete(*k.crawl_state(), k.ready, k.over_budget, k.refused, k.solo, k.deaths))
        for pattern in self.scan_patterns():
            found = self.client.scan_iter(match=pattern, count=1000)
            batch = [key async for key in found] if hasattr(found, "__aiter__") else list(found)
            for i in range(0, len(batch), 1000):
                await maybe_await(self.client.delete(*batch[i : i + 1000]))

    def scan_patterns(self) -> list[str]:
        """Patterns of the frontier's per-host keys (a flush finds them with SCAN); any mode's."""
        k = self.keys
        return [k.host_queue("*"), k.host("*"), k.host_in_flight("*"), k.domain_hosts("*")]
