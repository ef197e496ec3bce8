"""The per-host frontier (SCHEDULER_QUEUE_CLASS "host", the default; docs/frontier.md).

One queue per slot (`{spider}:q:<host>`, a zset, and its list `{spider}:q:<host>/` of the requests
of priority 0 in arrival order: lua/lib/host.lua), a ready index (`{spider}:hosts`: host -> server time it
may be served next), an over-budget index and a state hash per host (interval, Crawl-delay,
backoff, block, page budget, in-flight cap). Politeness is enforced at lease time by host_pop.lua
on server time; the middlewares feed it through `block_host` / `unblock_host` / `reset_host_backoff`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.lua import reply_text
from distributed_crawler.connection.replies import reply_bytes, reply_float, reply_int, reply_list
from distributed_crawler.frontier.base import HostControl, Lease, Leased, Placement
from distributed_crawler.frontier.config import FrontierConfig, slot_of
from distributed_crawler.frontier.enqueue import Entry, push_args, push_entry
from distributed_crawler.frontier.hoststate import read_hosts
from distributed_crawler.frontier.unsharded import UnshardedFrontier

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def _leased(reply: object) -> Leased:
    """host_pop.lua's reply: (lease, slot, backoff or code) triples, then the wait and the push sequence."""
    *flat, due, seq_reply = reply_list(reply, "host_pop.lua", 2)
    what = "host_pop.lua"
    triples = [
        (reply_bytes(flat[i], what), reply_text(flat[i + 1]), reply_int(flat[i + 2], what))
        for i in range(0, len(flat) - 2, 3)
    ]
    wait, seq = reply_float(due, what), reply_int(seq_reply, what)
    leases = [Lease(*t) for t in triples if t[0]]
    broken = [slot for lease, slot, code in triples if not lease and code == -1]
    expired = sum(1 for lease, _, code in triples if not lease and code == -2)
    return Leased(leases, None if wait < 0 else wait, broken, expired, None if seq < 0 else seq)


class HostFrontier(UnshardedFrontier):
    per_host: ClassVar[bool] = True
    default_order: ClassVar[str] = "host"

    @classmethod
    def options_from_settings(cls, settings: BaseSettings) -> dict[str, Any]:
        return {"config": FrontierConfig.from_settings(settings)}

    @property
    def config(self) -> FrontierConfig:
        return self.options.get("config") or FrontierConfig()

    @property
    def index_key(self) -> str:
        return self.keys.ready

    def placement(self, url: str) -> Placement:
        slot = slot_of(url, self.config)
        interval, budget, in_flight = self.config.limits(slot)
        return Placement(slot, interval, budget, in_flight)

    def host_control(self) -> HostControl:
        return self

    def host_state_key(self, slot: str) -> str:
        """The state hash of a slot (robots.txt writes its Crawl-delay there)."""
        return self.keys.host(slot)

    def host_keys(self, slot: str) -> tuple[str, str, str]:
        """(ready zset, state hash, doorbell channel) of a slot: what a script that blocks or lifts a
        block of the slot alongside keys of its own needs (lua/lib/block.lua; robots_claim.lua)."""
        return self.keys.ready, self.keys.host(slot), self.keys.doorbell

    def expected_types(self) -> dict[str, tuple[str, ...]]:
        return {self.keys.ready: ("zset",), self.keys.over_budget: ("zset",), **super().expected_types()}

    async def hosts(self, limit: int = 100) -> dict[str, int]:
        k = self.keys
        ready = await maybe_await(self.client.zrange(k.ready, 0, limit - 1))
        names = [reply_text(h) for h in reply_list(ready, "ZRANGE ready")]
        if len(names) < limit:  # hosts over budget keep requests too (not served)
            over = await maybe_await(self.client.zrange(k.over_budget, 0, limit - 1 - len(names)))
            names += [reply_text(h) for h in reply_list(over, "ZRANGE over budget")]
        sizes = [size for size, _ in await read_hosts(self.client, k, names, fields=())]
        for size in sizes:
            if isinstance(size, Exception):
                raise size
        return dict(zip(names, (int(n) for n in sizes)))

    def _prefixes(self) -> list[str]:
        """Host queue and host hash key prefixes (the templates end with %(host)s: FrontierConfig)."""
        return [self.keys.host_queue(""), self.keys.host("")]

    def _push_call(self, entries: Sequence[Entry], dedup_key: str) -> tuple[list[str], list[Any]]:
        k = self.keys
        argv: list[Any] = self._prefixes()
        for e in map(push_entry, entries):
            argv += push_args(e)
            argv += [e.slot or "", "" if e.interval is None else f"{e.interval:.6g}"]
            argv += ["" if n is None else n for n in (e.budget, e.in_flight)]  # None: leave as stored
        return [k.ready, k.seq, k.processing, k.delayed, dedup_key, k.over_budget, k.pending, k.requests], argv

    async def lease(self, count: int, lease_seconds: float, due_batch: int = 100) -> Leased:
        """host_pop.lua: due retries back to their hosts, then up to `count` leases from due hosts,
        with each lease's slot and backoff and the seconds until the next host is due."""
        k = self.keys
        result = self.scripts.host_pop(
            keys=[
                k.ready,
                k.processing,
                k.delayed,
                k.seq,
                k.over_budget,
                k.requests,
                k.pending,
                k.refused,
                k.overrides,
            ],
            args=[count, lease_seconds, due_batch, *self._prefixes(), k.host_in_flight(""), self.doorbell],
        )
        leased = _leased(await maybe_await(result))
        self.pushes_seen.leased(leased.seen)
        return leased

    def _reclaim_call(self) -> tuple[list[str], list[str]]:
        k = self.keys
        return [k.processing, k.ready, k.failed, k.seq, k.over_budget, k.pending, k.requests], self._prefixes()

    async def release(self, leases: Sequence[bytes | str]) -> int:
        k = self.keys
        call = self.scripts.release(
            keys=[k.processing, k.ready, k.seq, k.over_budget, k.pending, k.requests],
            args=[self.order, *self._prefixes(), *leases],
        )
        return reply_int(await maybe_await(call), "release.lua")

    async def purge(self, target: str, scope: str, dead_letter: bool, failed_cap: int, node: str, now: float) -> int:
        """lua/host_purge.lua: drop the pending requests of a host (scope "host") or of every host of a
        domain ("domain"), dead-lettered as `purged` when asked; returns how many."""
        k = self.keys
        call = self.scripts.host_purge(
            keys=[k.ready, k.over_budget, k.pending, k.failed, k.requests],
            args=[k.host_queue(""), target, scope, "1" if dead_letter else "0", failed_cap, node, f"{now:.3f}"],
        )
        return reply_int(await maybe_await(call), "host_purge.lua")

    async def make_due(self, target: str, scope: str) -> int:
        """lua/host_due.lua: the host (or every host of the domain) due now, after an override that
        held it back was lifted; returns how many hosts were made due."""
        k = self.keys
        call = self.scripts.host_due(keys=[k.ready], args=[target, scope, k.doorbell])
        return reply_int(await maybe_await(call), "host_due.lua")

    # -- politeness inputs (lua/host_block.lua) ----------------------------------------------------
    async def block_host(
        self, host: str, seconds: float | None, reason: str, base: float, cap: float, rand: float
    ) -> float:
        """Block `host` (a slot) for every node: `seconds` (Retry-After, capped by `cap`) or, when None,
        adaptive backoff (bo += 1, equal jitter from `rand` in [0, 1)). Returns the seconds it stays
        blocked (lua/host_block.lua)."""
        seconds_arg = "" if seconds is None else f"{max(0.0, seconds):.3f}"
        call = self.scripts.host_block(
            keys=[self.keys.ready, self.keys.host(host)],
            args=["block", host, seconds_arg, reason, base, cap, f"{rand:.6f}"],
        )
        return reply_float(await maybe_await(call), "host_block.lua")

    async def unblock_host(self, host: str, reason: str) -> bool:
        """Lift `host`'s block if it was set with exactly `reason` (True, and the doorbell rings so idle
        nodes pop it now), else leave it (False)."""
        k = self.keys
        call = self.scripts.host_block(keys=[k.ready, k.host(host)], args=["unblock", host, reason, k.doorbell])
        return reply_int(await maybe_await(call), "host_block.lua") == 1

    async def set_adaptive_delay(self, host: str, seconds: float) -> None:
        """The host's adaptive delay (DOMAIN_DELAY_FACTOR; host hash `ad`, 0 = none), read by the lease."""
        await maybe_await(self.client.hset(self.keys.host(host), "ad", f"{max(0.0, seconds):.3f}"))

    async def reset_host_backoff(self, host: str) -> None:
        """Backoff level of `host` back to 0 (a success after a block); its `until` stands."""
        await maybe_await(self.scripts.host_block(keys=[self.keys.ready, self.keys.host(host)], args=["reset"]))
