"""The one way this package calls Redis: a coroutine (`async def ... -> RealType`). It awaits an
asyncio client's replies and takes a sync client's as they come (`maybe_await`), so the same
coroutine also serves a sync client: `run_sync` drives it to its end without an event loop (the
CLI, `__len__` and the release in a signal handler, where Scrapy's API is synchronous)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar, cast

from distributed_crawler.connection.types import AnyRedis

T = TypeVar("T")


async def maybe_await(value: Awaitable[T] | T) -> T:
    """The reply of a command: awaited from an asyncio client, as it is from a sync one. (A
    coroutine of ours is awaited, never passed here: it is always one.)"""
    if inspect.isawaitable(value):
        return cast("T", await value)
    return value


def is_async(client: AnyRedis) -> bool:
    """An asyncio client (its commands are coroutines), as opposed to a sync one."""
    return inspect.iscoroutinefunction(getattr(client, "execute_command", None))


def bound(client: AnyRedis | None) -> AnyRedis:
    """The client of an object built on none yet (a frontier for its keys only) until it is bound."""
    if client is None:
        raise RuntimeError("no Redis client yet: bind(client) it first")
    return client


async def server_time(client: AnyRedis) -> float:
    """Redis server time in seconds: the cluster's one clock (a sync or an asyncio client)."""
    # TIME answers [unix seconds, microseconds]; redis-py turns them into a tuple of two ints.
    seconds, micros = cast("tuple[int, int]", await maybe_await(client.time()))
    return seconds + micros / 1e6


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that only awaits sync-client results (it never really suspends)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return cast("T", done.value)
    coro.close()
    raise RuntimeError("coroutine suspended: it was given an asyncio client")
