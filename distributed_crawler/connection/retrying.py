"""One way to wait out Redis: retry a call on a transient error, with backoff and jitter.

An outage is logged once per episode (`OutageLog`); any other error goes to `on_error`, which logs
it (a key of the wrong type, a corrupt key: the node waits, issue 12) or re-raises it (a bug).
Without `on_error` such errors propagate. Loops whose tries must stay bounded (a release at
close, a dead letter) do not use this.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from distributed_crawler.connection.clients import TRANSIENT_ERRORS, OutageLog

T = TypeVar("T")


async def retry_transient(
    call: Callable[[], Awaitable[T]],
    *,
    outage: OutageLog,
    stopped: Callable[[], bool],
    max_delay: float = 5.0,
    first_delay: float = 0.1,
    on_error: Callable[[BaseException], Awaitable[None]] | None = None,
    on_ok: Callable[[], Awaitable[None]] | None = None,
) -> T:
    """`await call()` until it succeeds; raise CancelledError once `stopped()` (work stays put)."""
    delay = first_delay
    while not stopped():
        try:
            result = await call()
        except TRANSIENT_ERRORS as exc:
            outage.failed(exc)
        except Exception as exc:
            if on_error is None:
                raise
            await on_error(exc)  # re-raises what is a bug
        else:
            outage.ok()
            if on_ok is not None:
                await on_ok()
            return result
        await asyncio.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, max_delay)
    raise asyncio.CancelledError
