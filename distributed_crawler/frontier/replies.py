"""What the frontier's script calls answer, parsed from their Redis replies (frontier/base.py
re-exports them: they are part of the `Frontier` Protocol)."""

from __future__ import annotations

from typing import NamedTuple


class Lease(NamedTuple):
    """One leased member (bytes exactly as stored: acks match them byte for byte), its slot and the
    slot's backoff level ("" and 0 when the frontier keeps no per-host state)."""

    lease: bytes
    slot: str = ""
    backoff: int = 0


class Leased(NamedTuple):
    leases: list[Lease]
    next_due: float | None = None  # seconds until the next host is due; None = none waits (or no hosts)
    broken: list[str] = []  # hosts dropped from ready: their queue key holds the wrong Redis type
    expired: int = 0  # requests dropped at lease: their expiry (REQUEST_TTL / meta expires_at) had passed
    seen: int | None = None  # host mode: the push sequence when it ran (pushes up to it were seen)


class Reclaimed(NamedTuple):
    requeued: int  # expired leases back to the front of their priority
    dead: int  # expired leases dead-lettered (delivered max_deliveries times)


class Moved(NamedTuple):
    """What recrawl_move.lua did."""

    moved: int  # due URLs pushed into the frontier
    dropped: int  # unreadable states removed
    next_due: float | None  # seconds until the next URL is due; None = the schedule is empty
    ended: int = 0  # URLs past their end whose last visit never reported back, removed
