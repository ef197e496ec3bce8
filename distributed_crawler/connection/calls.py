"""Calls that serve a sync and an asyncio redis-py client alike: await a reply only when it is
awaitable, drive a coroutine to its end with a sync client, convert a reply once it is there."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar, cast

T = TypeVar("T")


async def maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def server_time(client: Any) -> float:
    """Redis server time in seconds: the cluster's one clock (a sync or an asyncio client)."""
    # TIME answers [unix seconds, microseconds]; redis-py turns them into a tuple of two ints.
    seconds, micros = cast("tuple[int, int]", await maybe_await(client.time()))
    return seconds + micros / 1e6


def run_sync(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that only awaits sync-client results (it never really suspends)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("coroutine suspended: it was given an asyncio client")


def then(result: Any, convert: Callable[[Any], T]) -> T | Awaitable[T]:
    """`convert` the reply of a sync client now, or of an asyncio client once awaited."""
    if inspect.isawaitable(result):

        async def converted() -> T:
            return convert(await result)

        return converted()
    return convert(result)
