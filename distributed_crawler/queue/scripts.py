"""The Lua scripts of `distributed_crawler/lua/`, and the facade that owns the queue scripts' KEYS/ARGV.

redis-py's `register_script` sends EVALSHA and falls back to EVAL on NOSCRIPT, so scripts survive
a restart or failover that empties the script cache.

A script whose header has a line `-- uses: NAME (...)` gets `lua/lib/NAME.lua` prepended by
`lua_source`: the result is still one script text, one SHA, one EVALSHA per call.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any, NamedTuple, TypeVar

from distributed_crawler.queue.keys import SpiderKeys

T = TypeVar("T")
# fingerprint hex ("" = no dedup), dont_filter, queue member[, delay in seconds: > 0 = to delayed
# [, host mode: slot ("" = from the payload), interval s, page budget and in-flight cap (None = leave
# as stored, -1 = none)]]
Entry = (
    tuple[str, bool, str]
    | tuple[str, bool, str, float]
    | tuple[str, bool, str, float, str, float | None, int | None, int | None]
)


class HostLease(NamedTuple):
    """One lease of a host-mode pop: the member, its host (slot) and the host's backoff level."""

    lease: bytes
    slot: str
    backoff: int


class HostPop(NamedTuple):
    leases: list[HostLease]
    next_due: float | None  # seconds until the next host is due; None = no host waits
    broken: list[str] = []  # hosts dropped from ready: their queue key holds the wrong Redis type
    expired: int = 0  # requests dropped at lease: their expiry (REQUEST_TTL / meta expires_at) had passed


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _host_pop(reply: list[Any]) -> HostPop:
    *flat, due = reply
    triples = [(flat[i], _text(flat[i + 1]), int(flat[i + 2])) for i in range(0, len(flat) - 2, 3)]
    wait = float(due)
    leases = [HostLease(*t) for t in triples if t[0]]
    broken = [slot for lease, slot, code in triples if not lease and code == -1]
    expired = sum(1 for lease, _, code in triples if not lease and code == -2)
    return HostPop(leases, None if wait < 0 else wait, broken, expired)


_USES = re.compile(r"^-- uses: (\w+)", re.MULTILINE)


def _read(path: str) -> str:
    return resources.files("distributed_crawler").joinpath("lua", path).read_text()


@cache
def lua_source(name: str) -> str:
    """The text sent to Redis for `lua/NAME.lua`: its declared preludes (lua/lib/) first."""
    source = _read(f"{name}.lua")
    preludes = [_read(f"lib/{lib}.lua") for lib in dict.fromkeys(_USES.findall(source))]
    return "".join(preludes) + source


def _then(result: Any, convert: Callable[[Any], T]) -> T | Awaitable[T]:
    """`convert` the reply of a sync client now, or of an asyncio client once awaited."""
    if inspect.isawaitable(result):

        async def converted() -> T:
            return convert(await result)

        return converted()
    return convert(result)


@dataclass(frozen=True)
class QueueScripts:
    """enqueue / pop / renew / reclaim / release of one spider's queue: the only place that knows
    their KEYS and ARGV order (see each script's header in lua/).

    With a sync client the methods return values; with an asyncio client, awaitables.
    """

    client: Any
    keys: SpiderKeys
    queue_type: str  # "host" | "priority" | "fifo" | "lifo"
    _pop: Any
    _renew: Any
    _reclaim: Any
    _release: Any
    _enqueue: Any
    _host_pop: Any  # lua/host_pop.lua: the "host" queue type's pop
    _host_block: Any  # lua/host_block.lua (politeness inputs: 429/503/Retry-After, backoff reset)

    @classmethod
    def register(cls, client: Any, keys: SpiderKeys, queue_type: str) -> QueueScripts:
        """Register the queue scripts on `client` (once: reuse the result, or `with_queue_type`)."""
        scripts = {
            f"_{name}": client.register_script(lua_source(name))
            for name in ("pop", "renew", "reclaim", "release", "enqueue", "host_block", "host_pop")
        }
        return cls(client, keys, queue_type, **scripts)

    def with_queue_type(self, queue_type: str) -> QueueScripts:
        """The same registered scripts driving another queue type (tests, the CLI)."""
        return replace(self, queue_type=queue_type)

    @property
    def host_mode(self) -> bool:
        return self.queue_type == "host"

    def _prefixes(self) -> list[str]:
        """Host queue and host hash key prefixes (the templates end with %(host)s: FrontierConfig)."""
        return [self.keys.host_queue(""), self.keys.host("")]

    def pop(self, count: int, lease_seconds: float, due_batch: int = 100) -> Any:
        """Move up to `due_batch` due retries back to the queue, then lease up to `count` members.

        Returns the leases (bytes "<deliveries>:<priority>:<json>", deliveries counted up by one) and
        b"" for each expired request dropped (never leased). In host mode the hosts are dropped:
        `pop_hosts` keeps them.
        """
        if self.host_mode:
            return _then(
                self.pop_hosts(count, lease_seconds, due_batch),
                lambda p: [h.lease for h in p.leases] + [b""] * p.expired,
            )
        k = self.keys
        return self._pop(
            keys=[k.requests, k.processing, k.delayed, k.seq, k.pending, k.refused],
            args=[self.queue_type, count, lease_seconds, due_batch],
        )

    def pop_hosts(self, count: int, lease_seconds: float, due_batch: int = 100) -> Any:
        """host_pop.lua: due retries back to their hosts, then up to `count` leases from due hosts.

        Returns a HostPop: (lease, slot, backoff) per lease and the seconds until the next host is due.
        """
        k = self.keys
        result = self._host_pop(
            keys=[k.ready, k.processing, k.delayed, k.seq, k.over_budget, k.requests, k.pending, k.refused],
            args=[count, lease_seconds, due_batch, *self._prefixes(), self.keys.host_in_flight("")],
        )
        return _then(result, _host_pop)

    def renew(self, leases: Sequence[bytes | str], lease_seconds: float) -> Any:
        """Extend the leases still held (never re-creates one); returns how many were extended."""
        return self._renew(keys=[self.keys.processing], args=[lease_seconds, *leases])

    def reclaim(self, max_deliveries: int, limit: int, failed_cap: int, node_id: str) -> Any:
        """Requeue expired leases (front of their priority) or dead-letter them: (requeued, dead)."""
        k = self.keys
        if self.host_mode:
            keys = [k.processing, k.ready, k.failed, k.seq, k.over_budget, k.pending, k.requests]
            extra = self._prefixes()
        else:
            keys, extra = [k.processing, k.requests, k.failed, k.seq, k.pending], []
        keys += [k.solo, k.deaths]  # always the last two (killed_worker)
        result = self._reclaim(keys=keys, args=[self.queue_type, max_deliveries, limit, failed_cap, node_id, *extra])
        return _then(result, lambda reply: (int(reply[0]), int(reply[1])))

    def release(self, leases: Sequence[bytes | str]) -> Any:
        """Give leases back to the front of the queue without counting a delivery; returns how many."""
        k = self.keys
        if self.host_mode:
            return self._release(
                keys=[k.processing, k.ready, k.seq, k.over_budget, k.pending, k.requests],
                args=[self.queue_type, *self._prefixes(), *leases],
            )
        return self._release(keys=[k.processing, k.requests, k.seq, k.pending], args=[self.queue_type, *leases])

    def enqueue(
        self,
        action: str,
        entries: Sequence[Entry],
        dedup_mode: str,
        dedup_keys: Sequence[str],
        layers: int,
        doorbell: str = "",
        handovers: Sequence[bytes | str] = (),
    ) -> Any:
        """One enqueue.lua call: `action` push / add / check of `entries`, removing `handovers` from
        processing. Returns [code, r1, ...] (see enqueue.lua; queue/enqueue.Enqueuer drives it)."""
        k = self.keys
        argv: list[Any] = [self.queue_type, len(entries), doorbell, dedup_mode, layers, action]
        if self.host_mode:
            argv += self._prefixes()
        for entry in entries:
            delay = entry[3] if len(entry) > 3 else 0
            argv += [entry[0], "1" if entry[1] else "0", f"{delay:.3f}" if delay > 0 else "0", entry[2]]
            if self.host_mode:
                slot, interval, budget, cap = (*entry[4:8], None, None, None, None)[:4]  # missing: leave as stored
                argv += [slot or "", "" if interval is None else f"{interval:.6g}"]
                argv += ["" if n is None else n for n in (budget, cap)]
        if self.host_mode:
            keys = [k.ready, k.seq, k.processing, k.delayed, dedup_keys[0], k.over_budget, k.pending, k.requests]
        else:
            keys = [k.requests, k.seq, k.processing, k.delayed, dedup_keys[0], k.pending]
        keys += dedup_keys[1:]
        return self._enqueue(keys=keys, args=[*argv, *handovers])

    def block_host(self, host: str, seconds: float | None, reason: str, base: float, cap: float, rand: float) -> Any:
        """Block `host` (a slot) for every node: `seconds` (Retry-After, capped by `cap`) or, when None,
        adaptive backoff (bo += 1, equal jitter from `rand` in [0, 1)). Returns the seconds it stays
        blocked (str/bytes, see lua/host_block.lua)."""
        seconds_arg = "" if seconds is None else f"{max(0.0, seconds):.3f}"
        return self._host_block(
            keys=[self.keys.ready, self.keys.host(host)],
            args=["block", host, seconds_arg, reason, base, cap, f"{rand:.6f}"],
        )

    def unblock_host(self, host: str, reason: str) -> Any:
        """Lift `host`'s block if it was set with exactly `reason` ("1", and the doorbell rings so idle
        nodes pop it now), else leave it ("0")."""
        k = self.keys
        return self._host_block(keys=[k.ready, k.host(host)], args=["unblock", host, reason, k.doorbell])

    def reset_host_backoff(self, host: str) -> Any:
        """Backoff level of `host` back to 0 (a success after a block); its `until` stands."""
        return self._host_block(keys=[self.keys.ready, self.keys.host(host)], args=["reset"])
