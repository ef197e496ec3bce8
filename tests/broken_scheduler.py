"""Test scheduler with a bug in its feeder: the one way left to kill a scheduler task (bad data in
Redis does not: the node waits for it to be fixed)."""

from __future__ import annotations

from typing import Any

from distributed_crawler.core.scheduler import RedisScheduler, SchedulerParts


class BuggyFeederScheduler(RedisScheduler):
    def build_parts(self, *args: Any, **kwargs: Any) -> SchedulerParts:
        parts = super().build_parts(*args, **kwargs)

        def wanted() -> int:
            raise RuntimeError("a bug in the feeder")

        parts.feeder.wanted = wanted  # type: ignore[method-assign]
        return parts
