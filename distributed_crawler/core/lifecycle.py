"""Where a node's scheduler is in its life, one object its parts share.

Two steps, in this order: `closing` (lease nothing more: the first stop signal, or the close
itself) and `stopped` (every background loop ends; a cancel that redis-py swallows cannot keep
one alive, since each loop checks this too). Between the two the outbox still pushes and the lease
task still acks what the engine finished; once stopped, a Redis call fails fast with NodeStopping
instead of retrying, so its work stays leased or queued (and expires back to the crawl).
"""

from __future__ import annotations


class Lifecycle:
    def __init__(self) -> None:
        self.closing = False
        self.stopped = False

    def stop_taking(self) -> None:
        """Lease nothing more (the feeder's loop ends; work held is finished or given back)."""
        self.closing = True

    def stop(self) -> None:
        """End every background loop (closing too: a loop that ends now is no failure)."""
        self.closing = True
        self.stopped = True
