"""Which leases this node holds and in what stage, and when each may be acked.

A lease is acked only when its outcome is safe in storage and in Redis: the scraper has finished
the response (items committed by the storage pipeline, child requests handed to the scheduler) and
the scheduler's outbox has pushed everything enqueued up to that moment. A redirect or retry hands
its lease over to the successor request instead, in the same Lua call that stores the successor.
"""

from __future__ import annotations

from enum import Enum


class Stage(Enum):
    BUFFERED = "buffered"  # popped into this node's prefetch buffer, not yet given to the engine
    DOWNLOADING = "downloading"  # handed to the engine; a new request carrying it is a successor
    SCRAPING = "scraping"  # callback running; requests carrying it are children, not successors


class LeaseTracker:
    def __init__(self) -> None:
        self._held: dict[bytes, Stage] = {}
        self._ready: list[tuple[int, bytes]] = []  # (outbox sequence to wait for, lease)
        # host mode: (slot, backoff level of its host when leased) of each lease held
        self._hosts: dict[bytes, tuple[str, int]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def holds(self, lease: bytes) -> bool:
        return lease in self._held

    def stage(self, lease: bytes) -> Stage | None:
        return self._held.get(lease)

    def held(self) -> list[bytes]:
        return list(self._held)

    def buffered(self, lease: bytes, host: tuple[str, int] | None = None) -> None:
        self._held[lease] = Stage.BUFFERED
        if host is not None:
            self._hosts[lease] = host

    def host(self, lease: bytes) -> tuple[str, int] | None:
        """Host mode: (slot, backoff level) of a lease this node holds, None otherwise."""
        return self._hosts.get(lease)

    def started(self, lease: bytes) -> None:
        if lease in self._held:
            self._held[lease] = Stage.DOWNLOADING

    def scraping(self, lease: bytes) -> None:
        if lease in self._held:
            self._held[lease] = Stage.SCRAPING

    def hand_over(self, lease: bytes) -> bool:
        """True if `lease` is mid-download: the request carrying it succeeds it (redirect, retry)."""
        if self._held.get(lease) is Stage.DOWNLOADING:
            del self._held[lease]
            self._hosts.pop(lease, None)
            return True
        return False

    def finished(self, lease: bytes, outbox_seq: int) -> None:
        """The outcome is recorded; ack once the outbox has pushed up to `outbox_seq`."""
        if self._held.pop(lease, None) is not None:
            self._hosts.pop(lease, None)
            self._ready.append((outbox_seq, lease))

    def unacked(self) -> list[bytes]:
        """Every lease not yet acked: held, or finished but waiting for the outbox."""
        return [*self._held, *(lease for _, lease in self._ready)]

    def forget(self, leases: list[bytes]) -> None:
        gone = set(leases)
        self._ready = [(seq, lease) for seq, lease in self._ready if lease not in gone]
        for lease in leases:
            self._held.pop(lease, None)
            self._hosts.pop(lease, None)

    def take_ackable(self, flushed_seq: int) -> list[bytes]:
        ready = [lease for seq, lease in self._ready if seq <= flushed_seq]
        if ready:
            self._ready = [(seq, lease) for seq, lease in self._ready if seq > flushed_seq]
        return ready

    def pending_acks(self) -> int:
        return len(self._ready)

    def requeue_acks(self, leases: list[bytes]) -> None:
        """An ack round trip failed: keep the leases ready for the next try."""
        self._ready[:0] = [(0, lease) for lease in leases]
