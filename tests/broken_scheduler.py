"""Test scheduler with a bug in its feeder: the one way left to kill a scheduler task (bad data in
Redis no longer does: the node waits for it to be fixed, issue 12)."""

from __future__ import annotations

from distributed_crawler.core.scheduler import RedisScheduler


class BuggyFeederScheduler(RedisScheduler):
    def _wanted(self) -> int:
        raise RuntimeError("a bug in the feeder")
