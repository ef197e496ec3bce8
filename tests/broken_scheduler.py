"""Test scheduler with a bug in its feeder: the one way left to kill a scheduler task (bad data in
Redis no longer does: the node waits for it to be fixed)."""

from __future__ import annotations

from typing import Any

from distributed_crawler.core.scheduler import RedisScheduler


class BuggyFeederScheduler(RedisScheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

        def wanted() -> int:
            raise RuntimeError("a bug in the feeder")

        self.feeder.wanted = wanted  # type: ignore[method-assign]
