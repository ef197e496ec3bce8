"""The redis-py clients this package calls, named once so a signature says which kind it takes
instead of `Any`: replies are then checked by mypy against redis-py's own annotations."""

from __future__ import annotations

from typing import TypeAlias

import redis
import redis.asyncio
from redis.asyncio.client import Pipeline as AsyncPipeline
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterPipeline as AsyncClusterPipeline
from redis.asyncio.cluster import ClusterPubSub
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.client import Pipeline
from redis.cluster import ClusterPipeline, RedisCluster
from redis.commands.core import AsyncScript, Script

SyncRedis: TypeAlias = "redis.Redis | RedisCluster"
AsyncRedis: TypeAlias = "redis.asyncio.Redis | AsyncRedisCluster"
AnyRedis: TypeAlias = "SyncRedis | AsyncRedis"
AnyPipeline: TypeAlias = "Pipeline | ClusterPipeline | AsyncPipeline | AsyncClusterPipeline"
AnyScript: TypeAlias = "Script | AsyncScript"  # register_script on a sync / an asyncio client
AsyncPubSub: TypeAlias = "PubSub | ClusterPubSub"  # the doorbell's subscription (connection/clients.py)
