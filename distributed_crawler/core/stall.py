"""`StallClock`: how long this node has held leases with nothing in flight.

A node that holds leases while no request of it is downloading or scraping keeps that work from
every other node. For a moment that is normal (a buffer waiting for the engine, acks on their way);
for longer than a lease it is a stall: shown as the node state `stalled` (`dcrawl status`, the
dashboard), alerted once, and one WARNING line in the node's log (core/lease_keeper.py). While
Redis is away the clock does not run: the outage has its own line, and nothing can move anyway.
"""

from __future__ import annotations


class StallClock:
    def __init__(self, limit: float) -> None:
        self.limit = limit  # seconds of holding with nothing in flight that make a stall
        self.since: float | None = None  # monotonic start of the current holding with nothing in flight
        self.stalled = False

    def observe(self, held: int, in_flight: int, now: float, outage: bool = False) -> bool | None:
        """Record the node now; True when it just became stalled, False when a stall just ended,
        None when nothing changed."""
        if held and not in_flight and not outage:
            if self.since is None:
                self.since = now
        else:
            self.since = None
        stalled = self.since is not None and now - self.since > self.limit
        if stalled == self.stalled:
            return None
        self.stalled = stalled
        return stalled

    def seconds(self, now: float) -> float:
        """How long the node has been stalled: holding with nothing in flight (0 if not stalled)."""
        return now - self.since if self.stalled and self.since is not None else 0.0
