"""The second SIGINT/SIGTERM: give this node's leases back before Scrapy stops at once.

Scrapy's first signal starts a graceful stop (finish and ack what is in flight); its second one
stops the reactor immediately, skipping the scheduler's close. Without this guard the node's leases
would wait for `SCHEDULER_LEASE_SECONDS` before another node could take them.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)

# A Scrapy signal sent (synchronously, inside the signal handler) once the second stop signal gave
# this node's leases back: `client` (a sync Redis client, closed right after) and `leases_held`
# (what the node still holds: 0 when every lease went back). The heartbeat marks the node closed.
FORCED_STOP = object()


class SecondSignalGuard:
    """`on_first` runs at the first signal (a flag only: it runs inside a signal handler)."""

    def __init__(self, on_force: Callable[[], None], on_first: Callable[[], None] = lambda: None) -> None:
        self.on_force = on_force
        self.on_first = on_first
        self.received = 0
        self.forced = False

    def install(self) -> None:
        """Wrap the handlers installed now; re-wrapped after each signal (Scrapy swaps them)."""
        for sig in SIGNALS:
            previous = signal.getsignal(sig)
            if getattr(previous, "_dc_guard", None) is self:
                continue
            signal.signal(sig, self._handler(previous))

    def _handler(self, previous: Any) -> Callable[[int, Any], None]:
        def handler(signum: int, frame: Any) -> None:
            self.received += 1
            if self.received == 1:
                self.on_first()
            if self.received >= 2 and not self.forced:
                self.forced = True
                self.on_force()
            if callable(previous):
                previous(signum, frame)
                self.install()
            elif previous == signal.SIG_DFL:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        handler._dc_guard = self  # type: ignore[attr-defined]
        handler._dc_previous = previous  # type: ignore[attr-defined]
        return handler

    def uninstall(self) -> None:
        for sig in SIGNALS:
            current = signal.getsignal(sig)
            if getattr(current, "_dc_guard", None) is self:
                signal.signal(sig, current._dc_previous)  # type: ignore[union-attr]  # our handler (has _dc_guard)
