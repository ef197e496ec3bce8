"""The parts a sharded frontier (frontier/sharded.py) hands out: the map of where its leases came
from, its Enqueuer (each entry to its shard's enqueue script), its dead letters (on the lease's
shard first) and the politeness inputs of a host (on the host's shard).

They see the sharded frontier through `Shards`, the routing it offers, so this module does not
import it back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

from distributed_crawler.connection.calls import is_async
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.frontier.base import HostControl
from distributed_crawler.frontier.deadletters import DeadLetters
from distributed_crawler.frontier.enqueue import Enqueuer, Entry, push_entry
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.shards import shard_of
from distributed_crawler.frontier.unsharded import UnshardedFrontier

HOME_MAX = 100_000  # leases remembered with their shard (a node holds a few hundred; beyond: read from the payload)


async def _all(calls: Sequence[Awaitable[Any]], concurrent: bool) -> list[Any]:
    """Await `calls` together on an asyncio client (one round trip of latency for all shards);
    one by one on a sync client (they never suspend)."""
    if concurrent:
        return list(await asyncio.gather(*calls))
    return [await call for call in calls]


class LeaseHomes:
    """Which shard each of this node's leases came from (remembered at lease, bounded), so acks,
    renewals and releases go straight to it; a lease not remembered is routed by its payload.
    Shared by the bound copies of one frontier (the node's asyncio client and its sync one)."""

    def __init__(self) -> None:
        self._home: dict[bytes, int] = {}

    def remember(self, lease: bytes, shard: int) -> None:
        if len(self._home) < HOME_MAX:
            self._home[lease] = shard

    def get(self, lease: bytes | str) -> int | None:
        return self._home.get(lease.encode() if isinstance(lease, str) else lease)

    def forget(self, leases: Sequence[bytes | str]) -> None:
        for lease in leases:
            self._home.pop(lease.encode() if isinstance(lease, str) else lease, None)


class Shards(Protocol):
    """What the parts below need of a sharded frontier: its parts and how it routes."""

    keys: SpiderKeys
    parts: list[UnshardedFrontier]

    @property
    def client(self) -> AnyRedis: ...

    homes: LeaseHomes

    def shard_of_member(self, member: bytes | str) -> int: ...
    def shard_of_url(self, url: str) -> int: ...
    def by_shard(self, leases: Sequence[bytes | str]) -> dict[int, list[bytes | str]]: ...
    def pushed_to(self, shard: int) -> None: ...


class ShardedEnqueuer:
    """Enqueuer for a sharded frontier: each entry to its shard's enqueue script (with that shard's
    dedup slice; a refused entry's dead letter to that shard's failed list, moved to the spider's by
    the reclaim round); leases handed over are removed on their own shard after the successors
    (and dead letters) are in."""

    def __init__(self, frontier: Shards, enqueuers: list[Enqueuer]) -> None:
        self.frontier = frontier
        self.enqueuers = enqueuers

    async def run(
        self, action: str, entries: Sequence[Entry], handovers: Sequence[bytes] = (), urls: Sequence[str] = ()
    ) -> list[int]:
        """As Enqueuer.run; `urls`: an entry without a member (add / check) goes to its URL's shard."""
        groups: dict[int, list[int]] = {}
        entries = [push_entry(entry) for entry in entries]
        for n, entry in enumerate(entries):
            if entry.failed_cap is not None:  # a dead letter: on its URL's shard, with that URL's dedup slice
                shard = self.frontier.shard_of_url(letter_url(entry.member))
            elif entry.member:
                shard = self.frontier.shard_of_member(entry.member)
            elif n < len(urls):
                shard = self.frontier.shard_of_url(urls[n])
            else:
                raise ValueError("a sharded frontier routes an entry without a member by its URL: pass urls")
            groups.setdefault(shard, []).append(n)
        handed = {
            i: [x for x in group if isinstance(x, bytes)] for i, group in self.frontier.by_shard(handovers).items()
        }
        results = [0] * len(entries)
        calls = [  # a successor on its predecessor's shard: one atomic step; the shards in parallel
            self.enqueuers[shard].run(action, [entries[n] for n in indices], handed.pop(shard, []))
            for shard, indices in groups.items()
        ]
        done_by_shard = await _all(calls, is_async(self.frontier.client))
        for shard, indices, done in zip(groups, groups.values(), done_by_shard):
            for n, result in zip(indices, done):
                results[n] = result
            if any(r for n, r in zip(indices, done) if entries[n].failed_cap is None):
                self.frontier.pushed_to(shard)
        for shard, leases in handed.items():  # on another shard: removed once the successors are stored
            await self.enqueuers[shard].run(action, [], leases)
        self.frontier.homes.forget(handovers)  # gone from processing with the pushes above
        return results


def letter_url(letter: str) -> str:
    """A dead letter's URL (frontier/deadletters.py failure_entry, made by this node): its routing."""
    try:
        decoded = json.loads(letter)
    except ValueError:
        return ""
    url = decoded.get("url") if isinstance(decoded, dict) else None
    return url if isinstance(url, str) else ""


class ShardedDeadLetters(DeadLetters):
    """Dead letters that replace leases go to the leases' shard (one transaction on one node) and
    are moved to the spider's list by the reclaim round; the others go straight to the spider's."""

    def __init__(self, frontier: Shards, node_id: str, cap: int) -> None:
        super().__init__(None, frontier.keys.failed, node_id, cap, frontier.keys.processing)
        self.frontier = frontier

    @property
    def client(self) -> AnyRedis:
        return self.frontier.client

    async def take(self, entries: list[str], leases: list[bytes]) -> None:
        if not leases:
            await self.push(entries)
            return
        groups = self.frontier.by_shard(leases)
        for n, (i, group) in enumerate(groups.items()):
            part = self.frontier.parts[i]
            letters = DeadLetters(self.client, part.keys.failed, self.node_id, self.cap, part.keys.processing)
            await letters.take(entries if n == 0 else [], [lease for lease in group if isinstance(lease, bytes)])
        self.frontier.homes.forget(leases)

    async def undecodable(self, bad: list[tuple[bytes, str]], processing_key: str = "", source: str = "queue") -> None:
        for i, group in self.frontier.by_shard([lease for lease, _ in bad]).items():
            part = self.frontier.parts[i]
            letters = DeadLetters(self.client, part.keys.failed, self.node_id, self.cap, part.keys.processing)
            await letters.undecodable([(lease, why) for lease, why in bad if lease in group], "", source)
        self.frontier.homes.forget([lease for lease, _ in bad])


class ShardedHosts:
    """Blocks and backoff of a host, on its shard."""

    def __init__(self, frontier: Shards) -> None:
        self.frontier = frontier

    def _on(self, host: str) -> HostControl:
        control = self.frontier.parts[shard_of(host, len(self.frontier.parts))].host_control()
        assert control is not None
        return control

    async def block_host(
        self, host: str, seconds: float | None, reason: str, base: float, cap: float, rand: float
    ) -> float:
        return await self._on(host).block_host(host, seconds, reason, base, cap, rand)

    async def unblock_host(self, host: str, reason: str) -> bool:
        return await self._on(host).unblock_host(host, reason)

    async def reset_host_backoff(self, host: str) -> None:
        await self._on(host).reset_host_backoff(host)

    def host_state_key(self, slot: str) -> str:
        return self._on(slot).host_state_key(slot)

    def host_keys(self, slot: str) -> tuple[str, str, str]:
        return self._on(slot).host_keys(slot)

    async def set_adaptive_delay(self, host: str, seconds: float) -> None:
        await self._on(host).set_adaptive_delay(host, seconds)
