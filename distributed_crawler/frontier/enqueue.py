"""One call of enqueue.lua for a batch: dedup (set, RedisBloom or bitmap Bloom) and push.

Shared by the scheduler's outbox (async client), `request_seen`, the CLI and the benchmark (sync
clients, through `run_sync`): the same coroutine serves both (connection/calls.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from redis.exceptions import ResponseError

from distributed_crawler.connection.policy import is_transient
from distributed_crawler.connection.untrusted import is_wrong_type

if TYPE_CHECKING:
    from distributed_crawler.connection.types import AnyRedis

__all__ = ["Entry", "Enqueuer", "PushEntry", "Pusher", "push_args", "push_entry", "refused_entry"]


class PushEntry(NamedTuple):
    """One request for enqueue.lua; the per-host fields travel only to a per-host frontier."""

    fingerprint: str  # hex; "" = no dedup
    dont_filter: bool
    member: str  # the queue member (frontier/envelope.py)
    delay: float = 0.0  # seconds; > 0 = parked in delayed (a retry with backoff)
    slot: str | None = None  # per-host: the politeness slot (None or "" = read from the payload)
    interval: float | None = None  # per-host: seconds between two requests of the slot (None = as stored)
    budget: int | None = None  # per-host: DOMAIN_MAX_PAGES of the slot (None = as stored, -1 = none)
    in_flight: int | None = None  # per-host: DOMAIN_MAX_IN_FLIGHT of the slot (None = as stored, -1 = none)
    failed_cap: int | None = None  # a refused request: `member` is its dead letter; the failed list's cap


def refused_entry(fingerprint: str, letter: str, failed_cap: int) -> PushEntry:
    """A refused request for enqueue.lua: its fingerprint added to the filter and, if new (or no
    fingerprint: always), its dead letter written, in the push's script call."""
    return PushEntry(fingerprint, False, letter, failed_cap=failed_cap)


def push_args(e: PushEntry) -> list[Any]:
    """The four values enqueue.lua reads of every entry (a refused one: "r", its cap, its letter)."""
    if e.failed_cap is not None:
        return [e.fingerprint, "r", e.failed_cap, e.member]
    return [e.fingerprint, "1" if e.dont_filter else "0", f"{e.delay:.3f}" if e.delay > 0 else "0", e.member]


Entry = PushEntry


def push_entry(entry: Sequence[Any]) -> PushEntry:
    """`entry` as a PushEntry (a plain tuple in its field order is accepted: scripts and tests)."""
    return entry if isinstance(entry, PushEntry) else PushEntry(*entry)


MAX_FIXES = 20  # layer additions / layout refreshes in one call before giving up (never expected)
CODE_CORRUPT = 3  # enqueue.lua: the dupefilter's meta hash is not a layout it can use


class Dedup(Protocol):
    """A dedup store as the enqueue script sees it (swappable: set, RedisBloom, bitmap).

    Owned here, by its consumer; dedup/dupefilter.py implements it (imports go down the stack).
    """

    mode: str
    key: str

    def script_keys(self) -> tuple[list[str], int]: ...
    async def prepare(self, client: AnyRedis) -> None: ...
    async def fix(self, client: AnyRedis, code: int) -> None: ...
    async def stats(self, client: AnyRedis) -> dict[str, Any]: ...


class PushTarget(Protocol):
    """What an Enqueuer needs of a frontier on one tag (frontier/unsharded.py): its client and its
    enqueue script."""

    @property
    def client(self) -> AnyRedis: ...

    async def push(
        self,
        action: str,
        entries: Sequence[Entry],
        dedup_mode: str,
        dedup_keys: Sequence[str],
        layers: int,
        handovers: Sequence[bytes | str] = (),
        doorbell: str | None = None,
    ) -> list[int]: ...


class Pusher(Protocol):
    """What `Frontier.open_enqueuer` hands out: an Enqueuer, or a sharded frontier's (frontier/shard_parts.py)."""

    async def run(
        self, action: str, entries: Sequence[Entry], handovers: Sequence[bytes] = (), urls: Sequence[str] = ()
    ) -> list[int]: ...


class DedupError(RuntimeError):
    """A dedup backend cannot be used as configured; the message says what to change."""


class DedupDataError(DedupError):
    """The filter's data in Redis is unusable (wrong type, corrupt meta hash): nodes wait, one ERROR line."""


class Enqueuer:
    """Drives the frontier's enqueue script for a batch, growing or rereading the dedup filter as asked."""

    def __init__(self, frontier: PushTarget, dedup: Dedup, doorbell: str | None = None) -> None:
        """`doorbell`: "" = ring none (the CLI's pushes, a check), None = the frontier's channel."""
        self.frontier = frontier
        self.dedup = dedup
        self.doorbell = doorbell

    @property
    def client(self) -> AnyRedis:
        return self.frontier.client

    async def run(
        self, action: str, entries: Sequence[Entry], handovers: Sequence[bytes] = (), urls: Sequence[str] = ()
    ) -> list[int]:
        """`action` push / add / check; one 0/1 per entry (1 = new). Grows the filter as needed.
        `urls` (an entry's URL): what routes a member-less entry on a sharded frontier (frontier/sharded.py)."""
        results: list[int] = []
        pending = list(entries)
        for _ in range(MAX_FIXES):
            dedup_keys, layers = self.dedup.script_keys()
            try:
                code, *done = await self.frontier.push(
                    action, pending, self.dedup.mode, dedup_keys, layers, handovers, self.doorbell
                )
            except ResponseError as exc:
                await self._explain(exc)
                raise
            results += done
            if code == 0:
                return results
            if code == CODE_CORRUPT:
                raise DedupDataError(corrupt_message(self.dedup.key, "enqueue.lua cannot read its layers"))
            pending = pending[len(done) :]
            await self.dedup.fix(self.client, code)
        raise DedupDataError(corrupt_message(self.dedup.key, f"enqueue.lua kept asking for {MAX_FIXES} layout fixes"))

    async def _explain(self, exc: ResponseError) -> None:
        """A script error on a bitmap filter: reread its layout, which raises DedupDataError if corrupt."""
        if self.dedup.mode == "bitmap" and not is_transient(exc) and not is_wrong_type(exc):
            await self.dedup.fix(self.client, 2)


def corrupt_message(key: str, why: str) -> str:
    """The one ERROR line for a corrupt Bloom meta hash: what, and the command that fixes it."""
    spider = key.split(":", 1)[0].strip("{}")
    return (
        f"Bloom filter meta hash {key} is corrupt ({why}); no request can be deduplicated and nodes wait: "
        f"inspect it with `redis-cli hgetall '{key}'`, then `dcrawl dedup reset {spider}` (forgets the seen "
        f"URLs) or `dcrawl dedup rebuild {spider}`"
    )
