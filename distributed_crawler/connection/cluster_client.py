"""redis-py's asyncio Redis Cluster client, with its failover errors raised as connection errors.

Callers wait out connection errors (connection.TRANSIENT_ERRORS) and treat anything else as a bug;
during a cluster failover redis-py 8.1 also raises two other things that only mean "connection
lost": handled here, in the one place the cluster client is built (connection.RedisConfig).
"""

from __future__ import annotations

import asyncio
import os
import traceback
from typing import Any

import redis.asyncio.cluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError

_CONNECTION_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)

_REDIS_CONNECTION_MODULE = os.path.join("redis", "asyncio", "connection.py")


# Helper names must not shadow redis-py's own private methods (`_execute_command`, `_execute`):
# redis-py calls those with other arguments.
class AsyncClusterClient(redis.asyncio.cluster.RedisCluster):
    """redis-py's asyncio cluster client, except that a lost cluster is an outage like any other.

    When every node it knows is down, the client re-initializes and raises RedisClusterException
    (the class also used for programming errors such as cross-slot transactions), caused by the
    connection error. That cause decides: a ConnectionError, which callers wait out.
    """

    def __init__(self, *args: Any, max_commands: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # At most this many commands (or pipelines) at once, so a node's pool (max_connections)
        # is never exhausted: redis-py raises MaxConnectionsError there instead of waiting.
        self._command_slots = asyncio.Semaphore(max_commands) if max_commands else None

    async def initialize(self, *args: Any, **kwargs: Any) -> redis.asyncio.cluster.RedisCluster:
        try:
            return await super().initialize(*args, **kwargs)
        except RedisClusterException as exc:
            if isinstance(exc.__cause__, _CONNECTION_ERRORS):
                raise RedisConnectionError(str(exc)) from exc
            raise

    # The reply of any command: `Any` as redis-py's own execute_command, which its typed command
    # methods (`get`, `zadd`, ...) call and annotate; nothing of ours calls it with a reply type in mind.
    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if self._command_slots is None:
            return await self._lost_connection_guard(*args, **kwargs)
        async with self._command_slots:
            return await self._lost_connection_guard(*args, **kwargs)

    async def _lost_connection_guard(self, *args: Any, **kwargs: Any) -> Any:  # as execute_command
        try:
            return await super().execute_command(*args, **kwargs)
        except AttributeError as exc:
            if _closed_under_us(exc):
                raise RedisConnectionError(f"connection closed during a topology change ({exc})") from exc
            raise

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> AsyncClusterPipeline:
        if shard_hint:
            raise RedisClusterException("shard_hint is deprecated in cluster mode")
        # redis-py's typing declares _event_dispatcher abstract; ClusterPipeline.__init__ sets it
        return AsyncClusterPipeline(self, transaction)  # type: ignore[abstract]


class AsyncClusterPipeline(redis.asyncio.cluster.ClusterPipeline):
    async def execute(self, *args: Any, **kwargs: Any) -> list[Any]:  # one reply per command, any shape
        slots = getattr(self.cluster_client, "_command_slots", None)
        if slots is None:
            return await self._lost_connection_guard(*args, **kwargs)
        async with slots:
            return await self._lost_connection_guard(*args, **kwargs)

    async def _lost_connection_guard(self, *args: Any, **kwargs: Any) -> list[Any]:
        try:
            return await super().execute(*args, **kwargs)
        except AttributeError as exc:
            if _closed_under_us(exc):
                raise RedisConnectionError(f"connection closed during a topology change ({exc})") from exc
            raise


def _closed_under_us(exc: AttributeError) -> bool:
    """During a failover redis-py 8.1 can close a connection under a command being sent
    (`'NoneType' object has no attribute 'writelines'` inside its connection module): that is a
    lost connection. Any other AttributeError is a bug and stays one."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and frames[-1].filename.endswith(_REDIS_CONNECTION_MODULE)
