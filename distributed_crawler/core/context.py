"""One Redis face per node: the crawler-scoped `RedisContext` every component shares.

Scrapy shares `crawler.stats` and `crawler.signals` between components; the Redis connection is
shared the same way: `RedisContext.of(crawler)` is the one context of that crawler, holding the
`RedisConfig`, the node id, the spider's `SpiderKeys` and `Frontier`, and one asyncio client whose pool is bounded
by `REDIS_MAX_CONNECTIONS` (default 3): a command waits for a free connection instead of opening
one more, so a node holds at most that many connections plus one for the doorbell's pub/sub,
whatever `CONCURRENT_REQUESTS` is. It also holds the node's one `RedisPolicy` (what a call does
while Redis is away, one log line per outage, the `redis/*` stats): `RedisContext.of(crawler).policy`.

Clients are built lazily, inside the running asyncio loop, and closed once: when the last
component that `acquire()`d the context `release()`s it, or on `engine_stopped` at the latest.
"""

from __future__ import annotations

import logging
import re
import weakref
from typing import TYPE_CHECKING

from scrapy import signals

from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.policy import RedisPolicy
from distributed_crawler.connection.types import AsyncRedis
from distributed_crawler.core.access import node_needs, url_user
from distributed_crawler.core.node import node_id_from_settings
from distributed_crawler.defaults import get_setting
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.factory import frontier_from_settings, mode_class
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.unsharded import UnshardedFrontier

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

_CONTEXTS: weakref.WeakKeyDictionary[Crawler, RedisContext] = weakref.WeakKeyDictionary()


def max_connections_from_settings(settings: BaseSettings) -> int:
    value = int(get_setting(settings, "REDIS_MAX_CONNECTIONS"))
    if value < 1:
        raise ValueError(f"REDIS_MAX_CONNECTIONS ({value}) must be >= 1 (3 is plenty for one node)")
    return value


def client_name(node_id: str) -> str:
    """`dc:<node id>`, as `CLIENT LIST` shows it (CLIENT SETNAME takes no spaces)."""
    return "dc:" + re.sub(r"[^\w.:@-]", "_", node_id)


class RedisContext:
    def __init__(self, config: RedisConfig, node_id: str, max_connections: int, settings: BaseSettings) -> None:
        self.config = config
        self.node_id = node_id
        self.max_connections = max_connections
        self.settings = settings
        self.name = client_name(node_id)
        self._client: AsyncRedis | None = None
        self._pubsub_client: AsyncRedis | None = None
        self._keys: dict[str, SpiderKeys] = {}
        self._frontiers: dict[str, Frontier] = {}
        self._users = 0
        self._crawler: weakref.ref[Crawler] | None = None
        self._policy: RedisPolicy | None = None

    @classmethod
    def of(cls, crawler: Crawler) -> RedisContext:
        """The context of this crawler, made on first call (settings read and checked once)."""
        context = _CONTEXTS.get(crawler)
        if context is None:
            settings = crawler.settings
            context = cls(
                RedisConfig.from_settings(settings),
                node_id_from_settings(settings),
                max_connections_from_settings(settings),
                settings,
            )
            context._crawler = weakref.ref(crawler)
            crawler.signals.connect(context._engine_stopped, signal=signals.engine_stopped, weak=False)
            _CONTEXTS[crawler] = context
        return context

    @property
    def client(self) -> AsyncRedis:
        """The node's asyncio client (built on first use: call it inside the running loop)."""
        if self._client is None:
            self._client = self.config.async_client(max_connections=self.max_connections, client_name=self.name)
        return self._client

    @property
    def policy(self) -> RedisPolicy:
        """The node's Redis failure policy, counting into the crawler's stats (built on first use)."""
        if self._policy is None:
            crawler = self._crawler() if self._crawler is not None else None
            self._policy = RedisPolicy(self.config.masked_url, getattr(crawler, "stats", None), needs=self._acl_needs)
        return self._policy

    def _acl_needs(self) -> str:
        """The ACL rule this node needs, for the policy's line when Redis refuses a call."""
        crawler = self._crawler() if self._crawler is not None else None
        if crawler is None or crawler.spider is None:
            raise RuntimeError("no spider yet")
        needs = node_needs(self.settings, crawler.spider.name)
        return f"{needs.who} (user '{url_user(self.config)}') needs `{needs.rule}`"

    @property
    def pubsub_client(self) -> AsyncRedis:
        """A client for pub/sub only: a subscription holds its connection for good, so it gets
        its own (one connection), never one of `client`'s pool."""
        if self._pubsub_client is None:
            self._pubsub_client = self.config.async_client(max_connections=1, client_name=self.name + ":pubsub")
        return self._pubsub_client

    @property
    def keys(self) -> SpiderKeys:
        """The keys of the crawler's spider."""
        crawler = self._crawler() if self._crawler is not None else None
        if crawler is None or crawler.spider is None:
            raise RuntimeError("RedisContext.keys: the crawler has no spider yet; use keys_for(name)")
        return self.keys_for(crawler.spider.name)

    def keys_for(self, spider_name: str) -> SpiderKeys:
        keys = self._keys.get(spider_name)
        if keys is None:
            keys = self._keys[spider_name] = SpiderKeys.from_settings(self.settings, spider_name)
        return keys

    @property
    def frontier_class(self) -> type[UnshardedFrontier]:
        """The Frontier class SCHEDULER_QUEUE_CLASS picks (its capabilities, before any client exists)."""
        return mode_class(str(get_setting(self.settings, "SCHEDULER_QUEUE_CLASS")))[0]

    def new_frontier(self, spider_name: str) -> Frontier:
        """The spider's frontier on no client yet (the scheduler binds it at open)."""
        return frontier_from_settings(self.settings, spider_name, None, self.keys_for(spider_name))

    def frontier_for(self, spider_name: str) -> Frontier:
        """The spider's frontier on the node's client: one object, its scripts registered once."""
        frontier = self._frontiers.get(spider_name)
        if frontier is None or frontier.client is not self.client:
            keys = self.keys_for(spider_name)
            frontier = self._frontiers[spider_name] = frontier_from_settings(
                self.settings, spider_name, self.client, keys
            )
        return frontier

    # -- lifetime -------------------------------------------------------------------------------
    def acquire(self) -> RedisContext:
        """A component starts using the clients; it calls `release()` once done with them."""
        self._users += 1
        return self

    async def release(self) -> None:
        """A component is done; the last one out closes the clients (so does engine_stopped)."""
        self._users = max(0, self._users - 1)
        if self._users == 0:
            await self.aclose()

    async def aclose(self) -> None:
        """Close the clients; a later use builds new ones (a crawler opened again in tests)."""
        client, pubsub_client = self._client, self._pubsub_client
        self._client = self._pubsub_client = None
        for each in (client, pubsub_client):
            if each is not None:
                try:
                    await each.aclose()
                except Exception as exc:  # noqa: BLE001 - closing a dead connection: nothing to lose
                    logger.debug("Closing the Redis client failed: %r", exc)

    async def _engine_stopped(self) -> None:
        self._users = 0
        if self._policy is not None:
            self._policy.close()  # an outage still open is logged and counted
        await self.aclose()
