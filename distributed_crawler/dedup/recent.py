"""Fingerprints this node sent to the shared filter lately: a duplicate link stops here.

A news page links its home, sections and neighbours again and again: ~5 of every 6 requests a
node schedules are duplicates (bench/e2e.py: 26,250 filtered for 5,279 enqueued), and sending
each one to Redis costs a JSON encoding, an outbox slot and an enqueue.lua check. A fingerprint
this node already sent is in the cluster filter (enqueue.lua marks it seen once its request is
stored, or it was seen before), so the node can drop the request at once, as plain Scrapy's
in-memory filter does. The shared filter stays the authority: a fingerprint not found here goes
to Redis as before. Bounded (oldest forgotten first), and emptied when the filter is flushed,
when the node takes a redelivered request and when Redis comes back after an outage: a failover
can lose writes Redis acknowledged, and a page fetched again must be able to queue its links again.
"""

from __future__ import annotations


class RecentFingerprints:
    """An insertion-ordered set of at most `size` fingerprints (0 = off: remembers nothing)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._seen: dict[str, None] = {}

    def __contains__(self, fingerprint: str) -> bool:
        return fingerprint in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def add(self, fingerprint: str) -> None:
        if self.size <= 0 or fingerprint in self._seen:
            return
        if len(self._seen) >= self.size:
            del self._seen[next(iter(self._seen))]  # dicts keep insertion order: the oldest
        self._seen[fingerprint] = None

    def clear(self) -> None:
        self._seen.clear()
