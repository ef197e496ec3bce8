"""The frontier's API: the `Frontier` Protocol and the values it hands out.

A frontier alone knows its Redis keys, their types, the KEYS/ARGV of its Lua scripts and how a
request is placed (docs/frontier.md). The scheduler, the CLI, the dashboard and the middlewares
talk to it and never branch on the queue mode or on sharding: they ask its capabilities
(`host_control()`, `each_shard()`).

Three kinds implement it: `UnshardedFrontier` (frontier/unsharded.py) and its queue modes
(frontier/host.py, frontier/single.py) on one hash tag, and `ShardedFrontier` (frontier/sharded.py), which
holds one of those per shard and is no subclass of them: a method it lacks is a type error, never
a call against the unsharded keys. frontier/factory.py builds the one the settings name.

Every method that calls Redis is a coroutine with a real return type: core/ awaits it on the node's
asyncio client; with a sync client (the CLI, `__len__`, the release in a signal handler) it never
suspends and `run_sync` drives it (connection/calls.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from distributed_crawler.frontier.enqueue import Dedup, Entry, PushEntry, Pusher
from distributed_crawler.frontier.replies import Lease, Leased, Moved, Reclaimed

if TYPE_CHECKING:
    from distributed_crawler.connection.types import AnyRedis, AnyScript
    from distributed_crawler.frontier.counts import CrawlCounts
    from distributed_crawler.frontier.deadletters import DeadLetters
    from distributed_crawler.frontier.doorbell import Ring
    from distributed_crawler.frontier.keys import SpiderKeys

__all__ = [
    "Frontier",
    "FrontierLayoutError",
    "HostControl",
    "Lease",
    "Leased",
    "Moved",
    "Placement",
    "Reclaimed",
    "RevisitRecord",
    "placed_entry",
]


class RevisitRecord(NamedTuple):
    """A fetched page's revisit record, written in the script that acks its lease (lua/recrawl_ack.lua):
    `url` places it on its host's shard, `args` are recrawl_record.lua's 11 ARGV (recrawl/schedule.py
    alone builds them)."""

    url: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Placement:
    """Where a request goes: its slot and the slot's limits (per-host frontiers), else nothing."""

    slot: str | None = None
    interval: float | None = None
    budget: int | None = None
    in_flight: int | None = None


def placed_entry(fingerprint: str, dont_filter: bool, member: str, delay: float, placement: Placement) -> Entry:
    """A push entry for an Enqueuer (the placement's slot and limits travel with it when it has one)."""
    p = placement
    return PushEntry(fingerprint, dont_filter, member, delay, p.slot, p.interval, p.budget, p.in_flight)


class FrontierLayoutError(ValueError):
    """FRONTIER_SHARDS differs from the layout the frontier in Redis was written with (frontier/layout.py)."""


class HostControl(Protocol):
    """The politeness inputs of a frontier with per-host state (lua/host_block.lua)."""

    async def block_host(
        self, host: str, seconds: float | None, reason: str, base: float, cap: float, rand: float
    ) -> float: ...
    async def unblock_host(self, host: str, reason: str) -> bool: ...
    async def reset_host_backoff(self, host: str) -> None: ...
    async def set_adaptive_delay(self, host: str, seconds: float) -> None: ...
    def host_state_key(self, slot: str) -> str: ...
    def host_keys(self, slot: str) -> tuple[str, str, str]: ...


class Frontier(Protocol):
    """One spider's frontier in Redis: push (through its enqueuer), lease, ack, renew, reclaim,
    release, counts, hosts, flush."""

    keys: SpiderKeys  # the spider's (a sharded frontier's parts have their shard's)

    # -- what it is ------------------------------------------------------------------------------
    @property
    def client(self) -> AnyRedis:
        """Its client (RuntimeError on a frontier built on none, for its keys, until `bind`)."""

    @property
    def mode(self) -> str: ...
    @property
    def spider(self) -> str: ...
    @property
    def shards(self) -> int:
        """FRONTIER_SHARDS: how many shards (hash tags) the frontier is spread over."""

    @property
    def doorbell(self) -> str:
        """The pub/sub channel its scripts ring (frontier/doorbell.py; one subscription per node)."""

    @property
    def sequence_key(self) -> str:
        """The counter that orders pushes inside a priority (named in an operator's fix)."""

    @property
    def refused_key(self) -> str:
        """Hash "<reason> <host>" -> requests refused or expired (`dcrawl hosts` reads it)."""

    @property
    def index_key(self) -> str:
        """The key a node logs as "its queue" (the ready index or the single queue)."""

    def bind(self, client: AnyRedis) -> Frontier:
        """The same frontier on another client (a node's sync client for a forced stop, the CLI)."""

    async def check_layout(self) -> None:
        """frontier/layout.py: refuse a frontier written with another FRONTIER_SHARDS."""

    def layout_keys(self, shards: int) -> list[SpiderKeys]:
        """The keys of each shard of this spider's frontier as written with `shards` shards."""

    # -- its shards ------------------------------------------------------------------------------
    def each_shard(self) -> list[Frontier]:
        """The frontier of each shard (one: itself); what is kept per shard is read and summed over these."""

    def shard_for(self, url: str) -> Frontier:
        """The frontier of the shard that holds `url`'s host (one shard: itself)."""

    def part_keys(self) -> list[SpiderKeys]:
        """The keys of each shard (one: the spider's): what monitoring/hosts.py reads and sums."""

    def dupefilter_keys(self) -> list[str]:
        """The dedup filter's keys its scripts use (one per shard)."""

    # -- where a request goes ----------------------------------------------------------------------
    def placement(self, url: str) -> Placement:
        """Where a request for `url` goes (per-host frontiers: its slot and limits)."""

    def domain_hosts_key(self, domain: str) -> str:
        """The set of hosts a registered domain was allowed (DOMAIN_MAX_HOSTS, core/traps.py)."""

    def host_tag(self, url: str) -> str:
        """The hash tag (without braces) of the shard holding `url`'s host: what else is kept per
        host (the robots.txt cache) carries it, so it lives on the host's master."""

    def host_queue_key(self, slot: str) -> str:
        """The queue key of one slot (named when it holds the wrong type)."""

    def host_control(self) -> HostControl | None:
        """Blocks and backoff per host (429/503/Retry-After, Crawl-delay), or None when the frontier
        keeps no per-host state (the middlewares then leave politeness to themselves)."""

    # -- the keys a node checks --------------------------------------------------------------------
    def expected_types(self) -> dict[str, tuple[str, ...]]:
        """Every key its scripts touch that a node checks, with the Redis types it needs."""

    def status_types(self) -> dict[str, tuple[str, ...]]:
        """Keys `dcrawl status` checks before reading (any mode's: a switch of mode leaves the other's)."""

    def count_keys(self) -> dict[str, str]:
        """CrawlCounts field -> the key it is read from (a key of the wrong type counts as none)."""

    # -- the doorbell (frontier/doorbell.py) ----------------------------------------------------------
    def stale_ring(self, ring: Ring) -> bool:
        """A ring for a push a lease already saw (this node's last one, or one that drained the queue)."""

    def saw(self, ring: Ring) -> bool:
        """Remember a "drained" notice; False if `ring` is none."""

    def woken(self, ring: Ring | None = None) -> None:
        """The doorbell rang: work was pushed (a sharded frontier asks the rung shard again)."""

    # -- the scripts -------------------------------------------------------------------------------
    async def open_enqueuer(self, make_dedup: Callable[[str], Awaitable[Dedup]]) -> Pusher:
        """Its Enqueuer (frontier/enqueue.py), the dedup opened by `make_dedup(key)` for each filter key."""

    async def lease(self, count: int, lease_seconds: float, due_batch: int = 100) -> Leased:
        """Move up to `due_batch` due retries back, then lease up to `count` requests."""

    async def renew(self, leases: Sequence[bytes | str], lease_seconds: float) -> int:
        """Extend the leases still held (never re-creates one); returns how many were extended."""

    def acks_riding(self, leases: list[bytes], members: Sequence[str]) -> list[bytes]:
        """Of finished `leases`, the ones a push of `members` may remove in its own script."""

    async def ack(self, leases: Sequence[bytes | str]) -> int:
        """Remove finished leases (the request is done: its items committed, its links pushed)."""

    async def ack_recorded(
        self, leases: Sequence[bytes | str], records: Sequence[tuple[bytes, RevisitRecord]]
    ) -> list[Any]:
        """Remove finished `leases`, writing the revisit records of some of them (lease, record) in the
        same script as their ack, never after it (lua/recrawl_ack.lua) -> each record's reply, in order
        (recrawl_record.lua's, or ["err", message] when Redis refused it: the lease is acked anyway)."""

    async def expire(self, leases: Sequence[bytes | str]) -> None:
        """Let leases expire now (only those still held), so the next reclaim counts a delivery."""

    async def reclaim(self, max_deliveries: int, limit: int, failed_cap: int, node_id: str) -> Reclaimed:
        """Requeue expired leases (front of their priority) or dead-letter them."""

    async def release(self, leases: Sequence[bytes | str]) -> int:
        """Give leases back to the front of the queue without counting a delivery; returns how many."""

    async def recrawl_move(self, script: AnyScript, limit: int, pending_seconds: float) -> Moved:
        """recrawl_move.lua (`script`, registered by recrawl/): push up to `limit` due revisits of its schedule into it."""

    async def purge(self, target: str, scope: str, dead_letter: bool, failed_cap: int, node: str, now: float) -> int:
        """Drop a host's (or a domain's hosts') pending requests: per-host frontiers only; returns how many."""

    async def make_due(self, target: str, scope: str) -> int:
        """The host (or the domain's hosts) due now, after an override that held it back was lifted."""

    # -- quarantine marks (a redelivered request run alone, reclaim.lua's killed_worker) -----------
    async def mark_solo(self, lease: bytes, node_id: str) -> None: ...
    async def unmark_solo(self, leases: Sequence[bytes], deaths: Sequence[str] = ()) -> None: ...
    def dead_letters(self, node_id: str, cap: int) -> DeadLetters:
        """The failed list, writing with the lease removal from the lease's processing set."""

    # -- figures -----------------------------------------------------------------------------------
    async def counts(self, seeds: bool = False, client: AnyRedis | None = None) -> CrawlCounts:
        """How much work the crawl has (the pending counter the scripts keep: one read, no scan)."""

    async def size(self) -> int | None:
        """Requests waiting, exact in every mode (None = unknown: the counter is missing)."""

    async def hosts(self, limit: int = 100) -> dict[str, int]:
        """Up to `limit` hosts with waiting requests -> how many wait, the due-soonest first."""

    async def flush(self) -> None:
        """Delete the frontier's keys (seeds, dead letters and the dupefilter are not the frontier's)."""
