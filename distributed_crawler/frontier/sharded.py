"""FRONTIER_SHARDS > 1: one frontier of the queue mode per shard, each on its own hash tag
(frontier/shards.py), composed into one that implements the Frontier Protocol (it subclasses none of
them: every member is written here, so none can run against the spider's unsharded keys).

A request goes to the shard of its host (its slot), with its dedup check+add, in one script on one
node. Leases remember their shard (this node leased them), so acks, renewals and releases go
straight to it. A lease walks the shards from a rotating start and skips shards that were empty
until the doorbell rings for that shard (`woken`: enqueue.lua names the shard's hash tag), their
next host or retry is due, or a safety recheck: one round trip per batch while work is spread, no
polling loop over empty shards. A ring counter per shard keeps a push that lands while a lease
finds the shard empty from being missed. Figures are sums over the shards. Dead letters written
with a lease removal land in the lease's shard first (one transaction on one node) and are moved
to the spider's `{spider}:failed` by the reclaim round.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis.exceptions import RedisError

from distributed_crawler.connection.batch import run_scripts
from distributed_crawler.connection.calls import bound, is_async, maybe_await
from distributed_crawler.connection.lua import is_cluster
from distributed_crawler.connection.replies import reply_bytes, reply_list
from distributed_crawler.connection.types import AnyRedis, AnyScript
from distributed_crawler.frontier.base import (
    Frontier,
    HostControl,
    Lease,
    Leased,
    Moved,
    Placement,
    Reclaimed,
    RevisitRecord,
)
from distributed_crawler.frontier.codec import payload_slot, payload_url
from distributed_crawler.frontier.counts import CrawlCounts, crawl_counts, shard_counts
from distributed_crawler.frontier.deadletters import DeadLetters
from distributed_crawler.frontier.doorbell import Ring
from distributed_crawler.frontier.enqueue import Dedup, Enqueuer, Pusher
from distributed_crawler.frontier.envelope import split_member
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.layout import check_layout, flush_keys
from distributed_crawler.frontier.shard_parts import LeaseHomes, ShardedDeadLetters, ShardedEnqueuer, ShardedHosts
from distributed_crawler.frontier.shards import shard_of, shard_tags
from distributed_crawler.frontier.unsharded import UnshardedFrontier, reclaimed
from distributed_crawler.urlhost import url_host

RECHECK_SECONDS = 10.0  # an empty shard not rung is asked again after this (a safety net: pushes ring it)
T = TypeVar("T")

MOVE_BATCH = 500  # dead letters moved from a shard to the spider's failed list per reclaim round


def _tag(key: str) -> str:
    """The hash tag of a key (`{news~0.3}:processing` -> `news~0.3`)."""
    return key.partition("{")[2].partition("}")[0]


async def _all_settled(calls: Sequence[Awaitable[T]], concurrent: bool) -> list[T | BaseException]:
    """As `_all`, with a Redis error of one call as its result instead of raised."""
    if concurrent:
        return list(await asyncio.gather(*calls, return_exceptions=True))
    replies: list[T | BaseException] = []
    for call in calls:
        try:
            replies.append(await call)
        except RedisError as exc:
            replies.append(exc)
    return replies


class ShardedFrontier:
    """The `Frontier` of FRONTIER_SHARDS > 1: one UnshardedFrontier per shard (`parts`) and the
    lease-home map; the spider's own keys (`keys`) only for what is the spider's: its dead letters,
    seeds, doorbell and the FRONTIER_SHARDS record."""

    def __init__(
        self,
        client: AnyRedis | None,
        keys: SpiderKeys,
        parts: Sequence[UnshardedFrontier],
        layout: Callable[[str], SpiderKeys],
        homes: LeaseHomes,
    ) -> None:
        self._client = client
        self.keys = keys
        self.parts = list(parts)
        self.layout = layout
        self.homes = homes
        self._empty_until = [0.0] * len(self.parts)
        self._rings = [0] * len(self.parts)  # doorbell rings per shard: a ring during a lease wins
        self._tags = {_tag(part.keys.processing): i for i, part in enumerate(self.parts)}
        self._next = 0

    @property
    def client(self) -> AnyRedis:
        return bound(self._client)

    def bind(self, client: AnyRedis) -> ShardedFrontier:
        parts = [part.bind(client) for part in self.parts]
        return ShardedFrontier(client, self.keys, parts, self.layout, self.homes)

    @property
    def mode(self) -> str:
        return self.parts[0].mode

    @property
    def spider(self) -> str:
        return self.keys.spider

    @property
    def shards(self) -> int:
        return len(self.parts)

    @property
    def doorbell(self) -> str:
        return self.keys.doorbell  # one channel for every shard: the ring names the shard

    @property
    def refused_key(self) -> str:
        return self.parts[0].refused_key

    async def check_layout(self) -> None:
        await check_layout(self)

    def layout_keys(self, shards: int) -> list[SpiderKeys]:
        return [self.layout(tag if shards > 1 else "") for tag in shard_tags(self.spider, shards)]

    # -- routing ---------------------------------------------------------------------------------
    def shard_of_url(self, url: str) -> int:
        slot = self.parts[0].placement(url).slot
        return shard_of(slot if slot is not None else url_host(url), len(self.parts))

    def shard_of_member(self, member: bytes | str) -> int:
        """A member's shard: where this node leased it, else from its payload's slot or URL."""
        home = self.homes.get(member)
        if home is not None:
            return home
        raw = member.encode() if isinstance(member, str) else member
        try:
            payload = split_member(raw).payload  # either format (frontier/codec.py)
        except ValueError:
            return 0  # not ours to route (garbage): shard 0 dead-letters it
        slot, url = payload_slot(payload), payload_url(payload)
        if slot is not None:
            return shard_of(slot, len(self.parts))
        # a compact payload names no slot when it is its URL's host: placed as the push placed it
        return self.shard_of_url(url) if url is not None else 0

    def by_shard(self, leases: Sequence[bytes | str]) -> dict[int, list[bytes | str]]:
        """`leases` grouped by their shard."""
        groups: dict[int, list[bytes | str]] = {}
        for lease in leases:
            groups.setdefault(self.shard_of_member(lease), []).append(lease)
        return groups

    # -- what callers may ask ---------------------------------------------------------------------
    @property
    def index_key(self) -> str:
        return f"{self.parts[0].index_key} (+{len(self.parts) - 1} shards)"

    @property
    def sequence_key(self) -> str:
        return self.parts[0].sequence_key

    def placement(self, url: str) -> Placement:
        return self.parts[0].placement(url)

    def domain_hosts_key(self, domain: str) -> str:
        """On the registered domain's shard (its hosts are on any shard; the set is one key)."""
        return self.parts[shard_of(domain, len(self.parts))].domain_hosts_key(domain)

    def host_tag(self, url: str) -> str:
        return self.parts[self.shard_of_url(url)].host_tag(url)

    def host_control(self) -> HostControl | None:
        return ShardedHosts(self) if self.parts[0].host_control() is not None else None

    def host_queue_key(self, slot: str) -> str:
        return self.parts[shard_of(slot, len(self.parts))].host_queue_key(slot)

    def expected_types(self) -> dict[str, tuple[str, ...]]:
        return {key: kinds for part in self.parts for key, kinds in part.expected_types().items()}

    def status_types(self) -> dict[str, tuple[str, ...]]:
        return {key: kinds for part in self.parts for key, kinds in part.status_types().items()}

    def count_keys(self) -> dict[str, str]:
        return {}  # summed over shards: a wrong-type key of one shard is named in `wrong_type`, not zeroed

    def each_shard(self) -> list[Frontier]:
        return list(self.parts)

    def shard_for(self, url: str) -> Frontier:
        return self.parts[self.shard_of_url(url)]

    def part_keys(self) -> list[SpiderKeys]:
        return [part.keys for part in self.parts]

    def dupefilter_keys(self) -> list[str]:
        return [part.keys.dupefilter for part in self.parts]

    def _rung(self, ring: Ring) -> int | None:
        return None if ring.tag is None else self._tags.get(ring.tag)

    def stale_ring(self, ring: Ring) -> bool:
        shard = self._rung(ring)
        return shard is not None and self.parts[shard].stale_ring(ring)

    def saw(self, ring: Ring) -> bool:
        if ring.queued != 0:
            return False
        shard = self._rung(ring)
        return shard is None or self.parts[shard].saw(ring)

    def woken(self, ring: Ring | None = None) -> None:
        shard = None if ring is None else self._rung(ring)
        for i in range(len(self.parts)) if shard is None else (shard,):
            self.pushed_to(i)

    def pushed_to(self, shard: int) -> None:
        """Work was pushed to `shard`: ask it again at the next lease."""
        self._empty_until[shard] = 0.0
        self._rings[shard] += 1

    # -- the scripts ------------------------------------------------------------------------------
    async def open_enqueuer(self, make_dedup: Callable[[str], Awaitable[Dedup]]) -> Pusher:
        enqueuers = [Enqueuer(part, await make_dedup(part.keys.dupefilter), self.doorbell) for part in self.parts]
        return ShardedEnqueuer(self, enqueuers)

    async def lease(self, count: int, lease_seconds: float, due_batch: int = 100) -> Leased:
        leases: list[Lease] = []
        broken: list[str] = []
        expired = 0
        now = time.monotonic()
        n = len(self.parts)
        start, self._next = self._next, (self._next + 1) % n
        for step in range(n):
            i = (start + step) % n
            if self._empty_until[i] > now:
                continue
            rings = self._rings[i]
            got = await self.parts[i].lease(count - len(leases), lease_seconds, due_batch)
            for lease in got.leases:
                self.homes.remember(lease.lease, i)
            leases += got.leases
            broken += got.broken
            expired += got.expired
            if not got.leases and not got.expired and self._rings[i] == rings:
                wait = got.next_due if got.next_due is not None else RECHECK_SECONDS
                self._empty_until[i] = now + min(wait, RECHECK_SECONDS)
            if len(leases) + expired >= count:
                break
        later = [until - now for until in self._empty_until if until > now]
        return Leased(leases, min(later) if later and not leases else None, broken, expired)

    def acks_riding(self, leases: list[bytes], members: Sequence[str]) -> list[bytes]:
        """Only the leases on a shard the push writes to (else the push would cost a call more)."""
        shards = {self.shard_of_member(member) for member in members}
        return [lease for lease in leases if self.shard_of_member(lease) in shards]

    async def renew(self, leases: Sequence[bytes | str], lease_seconds: float) -> int:
        return sum([await self.parts[i].renew(group, lease_seconds) for i, group in self.by_shard(leases).items()])

    async def ack(self, leases: Sequence[bytes | str]) -> int:
        done = sum([await self.parts[i].ack(group) for i, group in self.by_shard(leases).items()])
        self.homes.forget(leases)
        return done

    async def expire(self, leases: Sequence[bytes | str]) -> None:
        for i, group in self.by_shard(leases).items():
            await self.parts[i].expire(group)
        self.homes.forget(leases)  # the reclaim round hands them back to their shard's queue

    async def release(self, leases: Sequence[bytes | str]) -> int:
        done = sum([await self.parts[i].release(group) for i, group in self.by_shard(leases).items()])
        self.homes.forget(leases)
        return done

    async def ack_recorded(
        self, leases: Sequence[bytes | str], records: Sequence[tuple[bytes, RevisitRecord]]
    ) -> list[Any]:
        """Each shard's leases and the records of its URLs in one script per shard, one round trip
        for them all; a record whose URL lives on another shard than its lease (a slot that is not
        the URL's host) is written first, in calls of its own, so it still lands before its ack."""
        replies: list[Any] = [None] * len(records)
        apart: dict[int, list[int]] = {}  # shard of the URL -> records written before the acks
        riding: dict[int, list[int]] = {}  # shard -> records acked with their lease
        for i, (lease, record) in enumerate(records):
            home, place = self.shard_of_member(lease), self.shard_of_url(record.url)
            (riding.setdefault(home, []) if home == place else apart.setdefault(place, [])).append(i)
        groups = self.by_shard(leases)
        first: dict[int, tuple[list[int], list[bytes | str]]] = {shard: (ids, []) for shard, ids in apart.items()}
        then_acks = {shard: (riding.get(shard, []), groups.get(shard, [])) for shard in {*groups, *riding}}
        for phase in (first, then_acks):
            if not phase:
                continue
            calls = [
                self.parts[shard].recrawl_ack_call([records[i][1] for i in picked], acked)
                for shard, (picked, acked) in phase.items()
            ]
            for (picked, _), reply in zip(phase.values(), await run_scripts(self.client, calls)):
                for i, one in zip(picked, reply_list(reply, "recrawl_ack.lua", 1 + len(picked))[1:]):
                    replies[i] = one
        self.homes.forget(leases)
        return replies

    async def reclaim(self, max_deliveries: int, limit: int, failed_cap: int, node_id: str) -> Reclaimed:
        calls = [part.reclaim_call(max_deliveries, limit, failed_cap, node_id) for part in self.parts]
        replies = [reclaimed(r) for r in await run_scripts(self.client, calls)]  # one round trip for every shard
        await self.move_dead_letters(failed_cap)
        return Reclaimed(sum(r.requeued for r in replies), sum(r.dead for r in replies))

    async def move_dead_letters(self, cap: int) -> int:
        """Dead letters the shards' scripts wrote -> the spider's failed list (oldest first; a crash
        between the push and the trim leaves a copy in both, never none)."""
        moved = 0
        parts = [part for part in self.parts if part.keys.failed != self.keys.failed]
        if not is_cluster(self.client):  # which shards hold any: one pipelined round trip
            pipe = self.client.pipeline(transaction=False)
            for part in parts:
                pipe.llen(part.keys.failed)
            lengths = reply_list(await maybe_await(pipe.execute()), "LLEN failed")
            parts = [part for part, n in zip(parts, lengths) if n]
        for part in parts:
            got = reply_list(await maybe_await(self.client.lrange(part.keys.failed, -MOVE_BATCH, -1)), "LRANGE failed")
            entries = [reply_bytes(entry, "LRANGE failed") for entry in got]
            if not entries:
                continue
            await maybe_await(self.client.lpush(self.keys.failed, *reversed(entries)))
            await maybe_await(self.client.ltrim(self.keys.failed, 0, cap - 1))
            await maybe_await(self.client.ltrim(part.keys.failed, 0, -len(entries) - 1))
            moved += len(entries)
        return moved

    async def recrawl_move(self, script: AnyScript, limit: int, pending_seconds: float) -> Moved:
        """Due revisits of every shard into that shard's queues (each shard's schedule holds its own
        hosts' URLs: one script on one node), up to `limit` per shard, the shards' calls sent
        together. A shard that refuses (a key of the wrong type) does not stop the others; its
        error is raised once they have moved theirs."""
        calls = [part.recrawl_move(script, limit, pending_seconds) for part in self.parts]
        settled = await _all_settled(calls, is_async(self.client))
        refused = [reply for reply in settled if isinstance(reply, BaseException)]
        if refused:
            raise refused[0]
        replies = [reply for reply in settled if not isinstance(reply, BaseException)]
        dues = [reply.next_due for reply in replies if reply.next_due is not None]
        return Moved(
            sum(reply.moved for reply in replies),
            sum(reply.dropped for reply in replies),
            min(dues) if dues else None,
            sum(reply.ended for reply in replies),
        )

    async def mark_solo(self, lease: bytes, node_id: str) -> None:
        await self.parts[self.shard_of_member(lease)].mark_solo(lease, node_id)

    async def unmark_solo(self, leases: Sequence[bytes], deaths: Sequence[str] = ()) -> None:
        paired = dict(zip(leases, deaths))
        for i, group in self.by_shard(leases).items():
            chosen = [lease for lease in group if isinstance(lease, bytes)]
            gone = [paired[lease] for lease in chosen if lease in paired]
            await self.parts[i].unmark_solo(chosen, gone)

    def dead_letters(self, node_id: str, cap: int) -> DeadLetters:
        return ShardedDeadLetters(self, node_id, cap)

    # -- figures ----------------------------------------------------------------------------------
    async def counts(self, seeds: bool = False, client: AnyRedis | None = None) -> CrawlCounts:
        each = await shard_counts(client or self.client, [part.keys for part in self.parts])
        base = await crawl_counts(client or self.client, self.keys, seeds=seeds)  # seeds, the spider's failed list
        pending = [c.pending for c in each]
        return CrawlCounts(
            seeds=base.seeds,
            pending=None if any(p is None for p in pending) else sum(p or 0 for p in pending),
            leased=sum(c.leased for c in each),
            delayed=sum(c.delayed for c in each),
            failed=base.failed + sum(c.failed for c in each),
            hosts=sum(c.hosts for c in each),
            single_queue=sum(c.single_queue for c in each),
            seeds_taken=base.seeds_taken,
        )

    async def size(self) -> int | None:
        return (await self.counts()).pending

    async def hosts(self, limit: int = 100) -> dict[str, int]:
        found: dict[str, int] = {}
        for part in self.parts:
            found.update(await part.hosts(limit))
        return dict(sorted(found.items(), key=lambda kv: -kv[1])[:limit])

    async def flush(self) -> None:
        for part in self.parts:
            await part.flush()
        await flush_keys(self.client, self.keys)  # what an unsharded layout left on the spider's tag

    # -- an operator's actions on a host: on every shard (a domain's hosts are on any of them)
    async def make_due(self, target: str, scope: str) -> int:
        return sum([await part.make_due(target, scope) for part in self.parts])

    async def purge(self, target: str, scope: str, dead_letter: bool, failed_cap: int, node: str, now: float) -> int:
        return sum([await part.purge(target, scope, dead_letter, failed_cap, node, now) for part in self.parts])
