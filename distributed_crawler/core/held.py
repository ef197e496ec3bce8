"""Requests this node holds back a moment with their leases, then serves before its buffer.

A downloader middleware that must delay a leased request it will send itself (robots.txt: a new
host's first request waits for the file this node fetches, then one interval of the host) gives a
copy back with `HOLD_META` (an awaitable) instead of handing it back to Redis: no push, no second
lease, and no concurrency slot held while it waits. Its lease stays this node's and is renewed
(core/lease_keeper.py counts held requests as work); at close or on a flush it is given back.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from distributed_crawler.meta import LEASE_META

if TYPE_CHECKING:
    from scrapy import Request

logger = logging.getLogger(__name__)


class HeldRequests:
    def __init__(self, buffer: deque[Request], ready: Callable[[], None]) -> None:
        self.buffer = buffer  # the feeder's: a request whose wait is over goes to its front
        self.ready = ready  # wakes the engine, which asks for the next request
        self._held: dict[asyncio.Future[Any], Request] = {}

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, request: Request, until: Awaitable[Any]) -> None:
        """Serve `request` once `until` is done (whatever its outcome)."""
        waiting = asyncio.ensure_future(until)
        self._held[waiting] = request
        waiting.add_done_callback(self._done)

    def _done(self, waiting: asyncio.Future[Any]) -> None:
        request = self._held.pop(waiting, None)
        if request is None or waiting.cancelled():  # dropped: its lease is given back by the caller
            return
        if waiting.exception() is not None:
            logger.debug("Holding %s ended with %r; it is served now", request.url, waiting.exception())
        self.buffer.appendleft(request)
        self.ready()

    def requests(self) -> list[Request]:
        return list(self._held.values())

    def drop(self) -> list[bytes]:
        """Stop holding every request (the node closes, the crawl is flushed): their leases."""
        held, self._held = self._held, {}
        for waiting in held:
            waiting.cancel()
        return [request.meta[LEASE_META] for request in held.values()]
