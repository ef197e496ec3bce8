"""The scheduler's background tasks: started together, none may end on its own (a death closes the
node loudly, its work stays leased), stopped with a bound."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from distributed_crawler.core.lifecycle import Lifecycle

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class BackgroundTasks:
    def __init__(self, crawler: Crawler, lifecycle: Lifecycle) -> None:
        self.crawler = crawler
        self.lifecycle = lifecycle  # a task ending while the node closes is expected
        self.tasks: dict[str, asyncio.Task] = {}

    def start(self, coroutines: dict[str, Coroutine[Any, Any, None]]) -> None:
        loop = asyncio.get_running_loop()
        for name, coroutine in coroutines.items():
            task = self.tasks[name] = loop.create_task(coroutine, name=f"dc-{name}")
            task.add_done_callback(self._died)

    def alive(self, name: str) -> bool:
        task = self.tasks.get(name)
        return task is not None and not task.done()

    async def finish(self, name: str, wake: Callable[[], None], timeout: float = 2.0) -> None:
        """Let a loop that checks `lifecycle.closing` end on its own, cancelling it only after `timeout`: a
        cancel while its Redis call is in flight would lose what the call did (leases taken that
        the node never hears of, so never given back until they expire)."""
        task = self.tasks.get(name)
        if task is None or task.done():
            return
        wake()
        _, stuck = await asyncio.wait([task], timeout=timeout)
        for late in stuck:
            late.cancel()

    def failure(self, *names: str) -> str | None:
        """What killed the first of `names` that died of an error, or None."""
        for name in names:
            task = self.tasks.get(name)
            if task is not None and task.done() and not task.cancelled() and task.exception():
                return f"scheduler task {task.get_name()} failed: {task.exception()!r}"
        return None

    async def stop(self, timeout: float = 5) -> None:
        for task in self.tasks.values():
            task.cancel()
        if not self.tasks:
            return
        _, stuck = await asyncio.wait(self.tasks.values(), timeout=timeout)
        if stuck:
            logger.warning("Scheduler tasks did not stop in %s s: %s", timeout, ", ".join(t.get_name() for t in stuck))

    def _died(self, task: asyncio.Task) -> None:
        """A background task must never end on its own: stop this node loudly (work stays leased)."""
        if task.cancelled() or self.lifecycle.closing:
            return
        logger.error(
            "Scheduler task %s stopped: %r; closing this node (its leases return to the queue "
            "after SCHEDULER_LEASE_SECONDS)",
            task.get_name(),
            task.exception(),
            exc_info=task.exception(),
        )
        asyncio.ensure_future(self._close_node())

    async def _close_node(self) -> None:
        """Close the spider once the engine runs: a close while it is still opening (a task that
        died at once) would be undone by its start, leaving a node that never ends."""
        engine = self.crawler.engine
        for _ in range(600):  # bounded: 60 s
            if engine.running:
                break
            await asyncio.sleep(0.1)
        await engine.close_spider_async(reason="scheduler_error")
