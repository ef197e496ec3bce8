"""The redis-py clients this package calls, named once so a signature says which kind it takes
instead of `Any`: replies are then checked by mypy against redis-py's own annotations."""

from __future__ import annotations

from typing import TypeAlias

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

SyncRedis: TypeAlias = "redis.Redis | RedisCluster"
AsyncRedis: TypeAlias = "redis.asyncio.Redis | AsyncRedisCluster"
AnyRedis: TypeAlias = "SyncRedis | AsyncRedis"
