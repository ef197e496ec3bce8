"""A Sentinel connection pool that follows a failover within a second, not at the next reconnect.

redis-py asks Sentinel for the master only when it opens a connection, and closes connections to
an old master only once it learns of a new one. A master that is demoted while alive (a manual
`SENTINEL FAILOVER`, a network partition) keeps accepting writes on the open connections until
Sentinel reconfigures it, up to ~10 s later, and those writes are discarded when it resyncs from
the new master. Asking Sentinel again at most every `SENTINEL_CHECK_SECONDS` while the pool is in
use moves the connections over as soon as Sentinel has switched (redis-py's `get_master_address`
closes the idle connections to the old master; busy ones are closed when they are given back).
"""

from __future__ import annotations

import time
from typing import Any

import redis.asyncio.sentinel
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

SENTINEL_CHECK_SECONDS = 1.0


class FollowingSentinelPool(redis.asyncio.sentinel.SentinelConnectionPool, redis.asyncio.BlockingConnectionPool):
    """Also a blocking pool: at `max_connections` a command waits for a free connection (up to
    `timeout` seconds, then ConnectionError, an outage) instead of opening one more."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("max_connections", 2**31)  # unbounded unless asked (redis-py's default)
        super().__init__(*args, **kwargs)
        self._next_check = 0.0

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        now = time.monotonic()
        if self.is_master and now >= self._next_check:
            self._next_check = now + SENTINEL_CHECK_SECONDS
            try:
                await self.get_master_address()
            except (RedisConnectionError, RedisTimeoutError, OSError):
                pass  # no answer now (MasterNotFoundError included): the command itself will tell
        connection: AbstractConnection = await super().get_connection(*args, **kwargs)  # unannotated in redis-py
        return connection
