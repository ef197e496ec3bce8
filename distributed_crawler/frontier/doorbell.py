"""The doorbell: the pub/sub channel (`{spider}:doorbell`) that wakes idle nodes when work arrives,
and its one message shape, `Ring` (written by lua/lib/doorbell.lua, the only Lua that publishes).

    "<queued> <shard hash tag> <push sequence>"

queued > 0: that much work was pushed (enqueue.lua) or made due (host_block.lua unblock,
host_due.lua, recrawl_move.lua) on the shard of that tag; the sequence is the counter after a
push, -1 when the ring is no push. queued 0: "drained" (host_pop.lua): a lease left no due host
after the pushes up to that sequence, so rings up to it need no lease from anyone.

Parsing is lenient: a message with fewer fields (nodes of an older release published "1" or a
bare count) is a ring for no particular shard, never stale; a message that is no text (a
subscription's confirmation) wakes the node like a ring. `PushesSeen` remembers, per shard, the
sequence a lease saw, which makes a later ring for an earlier push stale.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ring:
    """One doorbell message; None fields were absent or unreadable."""

    queued: int | None = None
    tag: str | None = None  # the shard's hash tag, without braces ("" = a key without one)
    seq: int | None = None  # the push sequence; None: no push named (never stale)

    @classmethod
    def parse(cls, message: object) -> Ring:
        """Any message the channel delivers (bytes, str, or a confirmation's number)."""
        text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
        if not isinstance(text, str):
            return cls()
        parts = text.split(" ")
        queued = _whole(parts[0])
        tag = parts[1] if len(parts) > 1 else None
        seq = _whole(parts[2]) if len(parts) > 2 else None
        return cls(queued, tag, seq)

    @property
    def drained(self) -> bool:
        """A lease's "drained" notice (not a ring: it wakes no one)."""
        return self.queued == 0 and self.seq is not None

    def text(self) -> str:
        """The message as lua/lib/doorbell.lua writes it."""
        return f"{self.queued or 0} {self.tag or ''} {-1 if self.seq is None else self.seq}"


def _whole(raw: str) -> int | None:
    return int(raw) if raw.isdigit() else None


class PushesSeen:
    """The highest push sequence one shard's leases are known to have seen: from this node's own
    leases (`leased`) and from other nodes' "drained" notices (`drained`)."""

    def __init__(self) -> None:
        self.seq: int | None = None

    def leased(self, seq: int | None) -> None:
        if seq is not None:
            self.seq = max(seq, self.seq or 0)

    def drained(self, ring: Ring) -> bool:
        """Remember a "drained" notice; False if `ring` is none."""
        if not ring.drained:
            return False
        self.leased(ring.seq)
        return True

    def stale(self, ring: Ring) -> bool:
        """A ring for a push a lease already saw: no lease for it."""
        return self.seq is not None and ring.seq is not None and ring.seq <= self.seq
