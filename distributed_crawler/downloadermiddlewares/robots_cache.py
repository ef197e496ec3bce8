"""The cluster's robots.txt cache in Redis, one script a step: claim (read the copy, or take the
fetch) and store (the entry, the lock, the Crawl-delay and the host's block together). The claims
of the requests that reach the middleware in one turn of the event loop (a leased batch starting)
go in one round trip, and so do the stores made within STORE_LINGER of each other
(connection/batch.py `Coalescer`): a node meeting many hosts it has no parser for pays one round trip
for a batch of them, not one each.

`RobotsCache` owns the KEYS/ARGV order of lua/robots_claim.lua and lua/robots_store.lua. In host
mode both scripts also block or lift the host's block, whose keys live on the host's shard like the
cache key (`Frontier.host_tag`); when a custom ROBOTS_CACHE_KEY (or a slot that is not the URL's
host) puts them on different Cluster slots, the block goes in a call of its own instead
(lua/host_block.lua), as every script call keeps its keys in one slot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from redis.crc import key_slot

from distributed_crawler.connection.batch import Coalescer
from distributed_crawler.connection.lua import lua_source, reply_text
from distributed_crawler.connection.types import AsyncRedis
from distributed_crawler.connection.untrusted import text
from distributed_crawler.frontier.base import Frontier, HostControl
from distributed_crawler.keyspace import fill

HIT, CLAIMED, PENDING = "hit", "claimed", "pending"
STORE_LINGER = 0.02  # seconds a store waits for others (the held request waits a whole interval anyway)


def cache_key(template: str, tag: str, netloc: str) -> str:
    """ROBOTS_CACHE_KEY of a host (`netloc`: host[:port], lower case); `tag`: the host's shard tag
    (`Frontier.host_tag`), the spider's name with one shard."""
    return fill(template, tag, host=netloc.lower())


def lock_key(cache: str) -> str:
    """The lock the node fetching a host's robots.txt holds (`SET NX EX`), beside its cache key."""
    return f"{cache}:lock"


@dataclass(frozen=True)
class Claim:
    """What robots_claim.lua said: `verdict` hit / claimed / pending; `entry` the cached entry (hit);
    `blocked`: the host is blocked until robots.txt is cached (host mode)."""

    verdict: str
    entry: dict[str, Any] | None = None
    blocked: bool = False


class RobotsCache:
    def __init__(
        self,
        client: AsyncRedis,
        key_template: str,
        spider: str,
        frontier: Frontier | None,
        hosts: HostControl | None,
        lock_seconds: int,
        wait_seconds: float,
        reason: str,
    ) -> None:
        self.client = client
        self.key_template = key_template
        self.spider = spider
        self.frontier = frontier
        self.hosts = hosts
        self.lock_seconds = lock_seconds
        self.wait_seconds = wait_seconds  # longest a host stays blocked for its robots.txt
        self.reason = reason  # of that block: only a block with this reason is lifted
        self._claim = client.register_script(lua_source("robots_claim"))
        self._store = client.register_script(lua_source("robots_store"))
        self._claims = Coalescer(client)
        self._stores = Coalescer(client, STORE_LINGER)

    def key(self, netloc: str) -> str:
        """On the host's frontier shard (its master), as the rest of what is kept per host."""
        tag = self.frontier.host_tag(f"http://{netloc}/") if self.frontier is not None else self.spider
        return cache_key(self.key_template, tag, netloc)

    def _host_keys(self, key: str, slot: str) -> tuple[str, str, str] | None:
        """(ready, host hash, doorbell) when the scripts may block `slot` in the same call (host mode,
        same Cluster slot as the cache key), else None."""
        if self.hosts is None:
            return None
        ready, state, doorbell = self.hosts.host_keys(slot)
        same = key_slot(key.encode()) == key_slot(ready.encode()) == key_slot(state.encode())
        return (ready, state, doorbell) if same else None

    async def claim(self, netloc: str, slot: str) -> Claim:
        """The cached entry, or the lock (this node fetches), or another node's (it fetches); in host
        mode the host is blocked for `wait_seconds` on a miss. One script call, in the round trip of
        the claims made meanwhile."""
        key = self.key(netloc)
        host_keys = self._host_keys(key, slot)
        keys = [key, lock_key(key), *(host_keys[:2] if host_keys else ())]
        args: list[str | float] = [self.lock_seconds, slot, f"{self.wait_seconds:.3f}", self.reason]
        verdict, *rest = await self._claims.call(self._claim, keys, args)
        verdict = reply_text(verdict)
        if verdict == HIT:
            try:
                entry = json.loads(text(rest[0]))
            except (ValueError, IndexError):
                entry = None
            if isinstance(entry, dict):
                return Claim(HIT, entry)
            verdict = PENDING  # the script checked it is a JSON object: not reached
        blocked = host_keys is not None
        if not blocked and self.hosts is not None:  # on another slot: a call of its own
            await self.hosts.block_host(slot, self.wait_seconds, self.reason, 1.0, 60.0, 0.5)
            blocked = True
        return Claim(CLAIMED if verdict == CLAIMED else PENDING, None, blocked)

    async def store(
        self,
        netloc: str,
        slot: str,
        entry: dict[str, Any],
        ttl: int,
        crawl_delay: float | None,
        lift: bool,
        holding: bool,
    ) -> float:
        """Share the entry, release the lock, write the Crawl-delay and (`lift`: an entry that allows
        something) lift the host's block; `holding`: this node sends one request of the host itself
        one interval from now. Returns the host's interval (s), 0 without host mode. One script call,
        in the round trip of the stores made within STORE_LINGER."""
        key = self.key(netloc)
        host_keys = self._host_keys(key, slot)
        delay = "" if crawl_delay is None or crawl_delay <= 0 else f"{crawl_delay:.3f}"
        keys = [key, lock_key(key)]
        args: list[Any] = [json.dumps(entry), ttl]
        if host_keys is not None:
            ready, state, doorbell = host_keys
            keys += [ready, state]
            args += [delay, slot, self.reason if lift else "", doorbell, "1" if holding else "0"]
        gap = float(reply_text(await self._stores.call(self._store, keys, args)) or 0)
        if host_keys is None and self.hosts is not None:  # on another slot: calls of their own
            state_key = self.hosts.host_state_key(slot)
            if delay:
                await self.client.hset(state_key, "cd", delay)
            else:
                await self.client.hdel(state_key, "cd")
            if lift:
                await self.hosts.unblock_host(slot, self.reason)
        return gap
