"""`spider.server`: the project's own synchronous Redis client, built the scrapy-redis way.

scrapy-redis hands spiders `server = redis_cls.from_url(url, **params)`: `redis_cls` from
`REDIS_PARAMS` (a class or a dotted path; default `redis.StrictRedis`), its defaults
(`socket_timeout` 30, `socket_connect_timeout` 30, `retry_on_timeout`, `encoding` utf-8) under
`REDIS_PARAMS`. Project code keeps using it for its own keys (`self.server.lpush(...)`). Our
components never use it: they share the node's asyncio client (core/context.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object

from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.params import ADDRESS_PARAMS, redis_params
from distributed_crawler.connection.types import SyncRedis

# scrapy-redis 0.9.1's defaults.REDIS_PARAMS
SERVER_DEFAULTS: dict[str, Any] = {
    "socket_timeout": 30,
    "socket_connect_timeout": 30,
    "retry_on_timeout": True,
    "encoding": "utf-8",
}


def server_class(params: dict[str, Any]) -> Callable[..., SyncRedis]:
    """REDIS_PARAMS["redis_cls"]: a class, or the dotted path of one; default redis.StrictRedis."""
    cls = params.get("redis_cls") or redis.StrictRedis
    if isinstance(cls, str):
        try:
            cls = load_object(cls)
        except (ImportError, NameError, ValueError, AttributeError) as exc:
            raise ValueError(f"REDIS_PARAMS redis_cls ({params['redis_cls']}) cannot be imported ({exc})") from None
    if not callable(cls):
        raise ValueError(f"REDIS_PARAMS redis_cls ({cls!r}) must be a Redis client class or its dotted path")
    return cls


def server_from_settings(settings: BaseSettings) -> SyncRedis:
    """The project's client: REDIS_PARAMS's redis_cls on our effective URL (REDIS_URL, else
    REDIS_HOST/PORT/DB); under REDIS_CLUSTER / REDIS_SENTINELS our sync client of that topology."""
    config = RedisConfig.from_settings(settings)
    if config.cluster or config.sentinels:
        return config.sync_client()
    params = {**SERVER_DEFAULTS, **redis_params(settings)}
    cls = server_class(params)
    kwargs = {k: v for k, v in params.items() if k != "redis_cls" and k not in ADDRESS_PARAMS}
    if hasattr(cls, "from_url"):
        return cls.from_url(config.url, **kwargs)
    return cls(url=config.url, **kwargs)
