"""Which leases this node holds and in what stage, when each may be acked, and which are renewed.

A lease is acked only when its outcome is safe in storage and in Redis: the scraper has finished
the response (items committed by the storage pipeline, child requests handed to the scheduler) and
the scheduler's outbox has pushed everything enqueued up to that moment. A redirect or retry hands
its lease over to the successor request instead, in the same Lua call that stores the successor.

A page's revisit record may ride with its ack (`record_with_ack`): it is written in the script that
removes the lease (lua/recrawl_ack.lua), so it costs no round trip of its own and a lease is never
acked without it; a lease given back or forgotten drops its record (the page is fetched again).

Only work is renewed (`renewable`): a held lease counts when its request is found where work is
(the prefetch buffer, the quarantine, the engine) or when it is finished and waits for its ack. A
lease whose request is found nowhere has nobody working on it: it moves to the leases being given
back, which are never renewed and stay counted until their release lands in Redis (`returned`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from enum import Enum
from typing import Any

from distributed_crawler.frontier.base import RevisitRecord

#: A revisit record waiting for its lease's ack, and what to do with the script's reply for it.
Rider = tuple[RevisitRecord, Callable[[Any], None]]


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
        self._returning: dict[bytes, None] = {}  # given back, the release not landed yet (ordered set)
        self._riders: dict[bytes, Rider] = {}  # lease -> the revisit record written with its ack

    def __len__(self) -> int:
        """Leases of requests this node works on (buffered, running); see also `in_redis`."""
        return len(self._held)

    def in_redis(self) -> int:
        """Every lease this node still holds in Redis: worked on, waiting for its ack, being given back."""
        return len(self._held) + len(self._ready) + len(self._returning)

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

    def held_back(self, lease: bytes) -> bool:
        """True if `lease` is mid-download: its request is held back on this node (core/held.py) and
        counts as buffered again (its host and backoff kept)."""
        if self._held.get(lease) is Stage.DOWNLOADING:
            self._held[lease] = Stage.BUFFERED
            return True
        return False

    def finished(self, lease: bytes, outbox_seq: int) -> None:
        """The outcome is recorded; ack once the outbox has pushed up to `outbox_seq`."""
        if self._held.pop(lease, None) is not None:
            self._hosts.pop(lease, None)
            self._ready.append((outbox_seq, lease))

    def record_with_ack(self, lease: bytes, record: RevisitRecord, on_reply: Callable[[Any], None]) -> bool:
        """Write `record` in the call that acks `lease` (its response is being scraped here);
        False if this node is not scraping it (then the caller writes the record itself)."""
        if self._held.get(lease) is not Stage.SCRAPING:
            return False
        self._riders[lease] = (record, on_reply)
        return True

    def riders(self, leases: Collection[bytes]) -> list[tuple[bytes, Rider]]:
        """The records to write with the ack of these leases (lease, rider), in their order."""
        return [(lease, self._riders[lease]) for lease in leases if lease in self._riders]

    def unacked(self) -> list[bytes]:
        """Every lease not yet acked: held, finished but waiting for the outbox, or being given back."""
        return [*self._held, *(lease for _, lease in self._ready), *self._returning]

    def forget(self, leases: list[bytes]) -> None:
        """Drop leases this node no longer holds in Redis (acked, expired on purpose, flushed)."""
        gone = set(leases)
        self._ready = [(seq, lease) for seq, lease in self._ready if lease not in gone]
        for lease in leases:
            self._held.pop(lease, None)
            self._hosts.pop(lease, None)
            self._returning.pop(lease, None)
            self._riders.pop(lease, None)

    # -- renewal and giving back ----------------------------------------------------------------
    def renewable(self, working: Collection[bytes]) -> tuple[list[bytes], list[bytes]]:
        """(leases to renew, strays). `working`: the leases of every request found where work is
        now. A held lease outside it has no request behind it (dropped, lost): a stray, moved to
        the leases being given back, never renewed again."""
        strays = [lease for lease in self._held if lease not in working]
        self.give_back(strays)
        return [*self._held, *(lease for _, lease in self._ready)], strays

    def give_back(self, leases: list[bytes]) -> None:
        """Nobody works on these any more: never renewed; held until `returned` (the release landed)."""
        gone = set(leases)
        if not gone:
            return
        self._ready = [(seq, lease) for seq, lease in self._ready if lease not in gone]
        for lease in leases:
            self._held.pop(lease, None)
            self._hosts.pop(lease, None)
            self._riders.pop(lease, None)
            self._returning[lease] = None

    def returning(self) -> list[bytes]:
        """Leases given back whose release has not landed yet (retried by the lease task)."""
        return list(self._returning)

    def returned(self, leases: list[bytes]) -> None:
        """Their release landed (or Redis no longer had them): this node holds them no more."""
        for lease in leases:
            self._returning.pop(lease, None)

    def take_ackable(self, flushed_seq: int, riders: bool = True) -> list[bytes]:
        """Leases whose children are all in Redis (pushed up to `flushed_seq`); `riders=False`:
        only those without a record to write with the ack (a push's script carries no record)."""
        ready = [lease for seq, lease in self._ready if seq <= flushed_seq and (riders or lease not in self._riders)]
        if ready:
            taken = set(ready)
            self._ready = [(seq, lease) for seq, lease in self._ready if lease not in taken]
        return ready

    def acked(self, leases: Collection[bytes]) -> None:
        """Their acks landed: their records were written with them."""
        for lease in leases:
            self._riders.pop(lease, None)

    def pending_acks(self) -> int:
        return len(self._ready)

    def requeue_acks(self, leases: list[bytes]) -> None:
        """An ack round trip failed: keep the leases ready for the next try."""
        self._ready[:0] = [(0, lease) for lease in leases]
