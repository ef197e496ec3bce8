"""The crawl's pause and the operator's overrides as this node sees them (docs/operations.md).

The pause lives in Redis (the crawl's CrawlControl, core/crawl_control.py), so it reaches every node and survives their
restarts. A node reads it, with the overrides hash and the source registry's version, in one round
trip every 1.5 s (REFRESH_SECONDS), never per page; the overrides go to the node's OverrideCache
(core/overrides.py), the registry (read again only when its version moved) to its SourceCache
(core/registry.py). While paused the feeder
leases nothing and, unless the pause says drain, gives back the requests it holds and has not
started; downloads already running finish. Heartbeats go on, and the node does not idle-close.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import cached_property
from typing import Any

from scrapy.utils.httpobj import urlparse_cached

from distributed_crawler.connection.policy import Purpose, RedisPolicy
from distributed_crawler.core.crawl_control import ControlState, CrawlControl
from distributed_crawler.core.lifecycle import Lifecycle
from distributed_crawler.core.overrides import OverrideCache
from distributed_crawler.core.registry import SourceCache
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.meta import HOST_SLOT_META, LEASE_META

logger = logging.getLogger(__name__)

REFRESH_SECONDS = 1.5  # a change reaches every node within 2 s; 2 nodes at ~90 pages/s each: +0.008 round trips/page
_UNKNOWN = object()


class PauseWatch:
    def __init__(
        self,
        frontier: Frontier,
        policy: RedisPolicy,
        overrides: OverrideCache | None = None,
        sources: SourceCache | None = None,
        wake: Sequence[asyncio.Event] = (),
        lifecycle: Lifecycle | None = None,
    ) -> None:
        self.frontier = frontier
        self.policy = policy
        self.overrides = overrides
        self.sources = sources
        self._refused_version: Any = _UNKNOWN  # the registry version whose read Redis refused (logged once)
        self.state: dict[str, Any] | None = None
        self.changed = asyncio.Event()
        self.wake = tuple(wake)  # set when the pause changes (the feeder's waits)
        self.lifecycle = lifecycle or Lifecycle()

    @cached_property
    def control(self) -> CrawlControl:
        """The crawl's pause, overrides and registry, on the frontier's client."""
        return CrawlControl.of(self.frontier)

    @property
    def paused(self) -> bool:
        return self.state is not None

    @property
    def drain(self) -> bool:
        return bool(self.state and self.state.get("drain"))

    def blocks(self, request: Any) -> bool:
        """Whether an operator's block (`dcrawl host ... block`) covers this buffered request's host:
        the lease script stops leasing it at once; this keeps what a node already holds from going."""
        if self.overrides is None or not self.overrides.table:
            return False
        override = self.overrides.get(request.meta.get(HOST_SLOT_META) or urlparse_cached(request).netloc)
        try:
            return bool(override) and float(override.get("until", 0)) > time.time()  # type: ignore[union-attr]
        except (TypeError, ValueError):
            return False

    async def refresh(self) -> None:
        async def read() -> ControlState:
            return await self.control.control_state()

        # a hint the node keeps while Redis is away (it cannot lease then anyway)
        read_back = await self.policy.run(Purpose.CACHE, read, default=_UNKNOWN)
        if read_back is _UNKNOWN:
            return
        state, overrides, sources_version = read_back
        if self.overrides is not None:
            self.overrides.update(overrides)
        if self.sources is not None and self.sources.stale(sources_version):
            await self._read_sources(sources_version)
        if state == self.state:
            return
        was, self.state = self.state, state
        if state is not None:
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state["since"]))
            logger.info(
                "Crawl paused since %s by %s%s: leasing nothing until `dcrawl resume %s`",
                since,
                state["by"],
                " (drain: finishing what this node holds)" if state["drain"] else "",
                self.control.spider,
            )
        elif was is not None:
            logger.info("Crawl resumed: leasing again")
        self.changed.set()
        for event in self.wake:
            event.set()

    async def _read_sources(self, version: Any) -> None:
        async def read() -> dict[bytes, bytes]:
            return await self.control.sources()

        async def refused(exc: BaseException) -> None:
            if version != self._refused_version:  # once per registry version, not every 1.5 s
                self._refused_version = version
                key = self.control.registry_keys()[0]
                logger.error(
                    "Source registry %s not read (%s): this node keeps its last copy; check it with "
                    "`redis-cli type '%s'` (a hash) and import the sources again",
                    key,
                    exc,
                    key,
                )

        raw = await self.policy.run(Purpose.CACHE, read, default=_UNKNOWN, on_error=refused)
        if raw is _UNKNOWN or self.sources is None:
            return  # read again at the next refresh (the version still differs)
        # off the event loop: a first read of 100,000 sources takes seconds (docs/benchmarks.md)
        await asyncio.to_thread(self.sources.update, version, raw)
        logger.info("Source registry: %d source(s) (version %s)", len(self.sources.table), version)

    async def run(self) -> None:
        while not self.lifecycle.stopped:
            await self.refresh()
            await asyncio.sleep(REFRESH_SECONDS)

    async def wait(self, timeout: float) -> None:
        """Sleep until the pause changes or `timeout` passes."""
        self.changed.clear()
        try:
            await asyncio.wait_for(self.changed.wait(), timeout)
        except TimeoutError:
            pass


async def give_back_buffer(buffer: Any, release: Callable[[list[bytes]], Awaitable[None]]) -> int:
    """Release every buffered (unstarted) request to the queue front; returns how many."""
    held = [r.meta[LEASE_META] for r in buffer]
    buffer.clear()
    if held:
        await release(held)  # never renewed from now on; held until Redis takes them back
    return len(held)
