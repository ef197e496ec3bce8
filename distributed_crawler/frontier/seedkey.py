"""The seed key of one spider, decided once from settings: its name, its Redis type, how seeds are
pushed, taken, acked and counted (`dcrawl seed`, the spider, `dcrawl status`, the importer).

A take moves a batch into the key's *taken* zset (lua/seed_take.lua) instead of popping it: a
node killed between the take and the push of the seeds' requests to the frontier leaves its seeds
there, and once their lease (`SEED_LEASE_SECONDS`, server time; a live node renews it) is over any
node's next take puts them back. The node removes its holds (`done`) only after the frontier has
the requests.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.crc import key_slot
from scrapy.settings import BaseSettings

from distributed_crawler.connection.calls import maybe_await, server_time
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.keyspace import key as spider_key

KINDS = ("list", "set", "zset")
PIPELINE_CHUNK = 1000  # members per RPUSH/SADD/ZADD in one pipeline
TAKEN_SUFFIX = ":taken"


def seed_kind(settings: BaseSettings) -> str:
    """`list`, `set` (REDIS_START_URLS_AS_SET) or `zset` (REDIS_START_URLS_AS_ZSET); both: ValueError."""
    read = SettingsReader(settings)
    as_set, as_zset = read.bool("REDIS_START_URLS_AS_SET"), read.bool("REDIS_START_URLS_AS_ZSET")
    if as_set and as_zset:
        raise ValueError(
            "REDIS_START_URLS_AS_SET (True) and REDIS_START_URLS_AS_ZSET (True) must not both be set; "
            "keep the one that matches the seed key (set: SADD, zset: ZADD by priority) and set the other to False"
        )
    return "set" if as_set else "zset" if as_zset else "list"


def _hash_tag(key: str) -> str:
    """Redis Cluster's hash tag of `key` (the text in its first `{...}`), "" when it has none."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return key[start + 1 : end] if end > start + 1 else ""


def taken_key(key: str) -> str:
    """The taken zset of seed key `key`, on the same Cluster slot: `key:taken` when the key has a
    hash tag (the tag is kept), else `{key}:taken` (Redis hashes an untagged name whole, which is
    the tag here). A name that cannot share the slot this way: ValueError naming the fix."""
    taken = f"{key}{TAKEN_SUFFIX}" if _hash_tag(key) else f"{{{key}}}{TAKEN_SUFFIX}"
    if key_slot(taken.encode()) != key_slot(key.encode()):
        raise ValueError(
            f"REDIS_START_URLS_KEY ({key}) must have a hash tag like {{news}} or no braces at all; rename the seed key"
        )
    return taken


@dataclass(frozen=True)
class Taken:
    """One take: the raw seeds with the holds that keep them until `done`, and how many expired
    holds (a dead node's seeds) it put back first."""

    seeds: list[bytes]
    holds: list[bytes]
    reclaimed: int


@dataclass(frozen=True)
class SeedKey:
    key: str
    kind: str  # list | set | zset
    lease_seconds: float
    taken: str

    @classmethod
    def from_settings(cls, settings: BaseSettings, spider: str, key: str | None = None) -> SeedKey:
        """The seed key of `spider` (`key`: a spider's own `redis_key`, already filled in)."""
        read = SettingsReader(settings)
        name = key if key is not None else spider_key(settings, "REDIS_START_URLS_KEY", spider)
        if not name.strip():
            raise ValueError("REDIS_START_URLS_KEY ('') must not be empty; set it to e.g. %(spider)s:start_urls")
        # 0: the request lease's length; a live node renews its holds, so only a dead node's wait it out
        lease = read.float("SEED_LEASE_SECONDS") or read.float("SCHEDULER_LEASE_SECONDS")
        if not lease > 0:
            raise ValueError(f"SEED_LEASE_SECONDS ({lease}) must be > 0, or 0 for SCHEDULER_LEASE_SECONDS")
        return cls(name, seed_kind(settings), lease, taken_key(name))

    def push(self, pipe: Any, members: Sequence[bytes], priorities: Sequence[int]) -> None:
        """Queue the push of `members` on a pipeline, as the spider takes them (RPUSH, SADD, or
        ZADD with score = priority: ZPOPMAX takes the highest first)."""
        for i in range(0, len(members), PIPELINE_CHUNK):
            chunk = members[i : i + PIPELINE_CHUNK]
            if self.kind == "list":
                pipe.rpush(self.key, *chunk)
            elif self.kind == "set":
                pipe.sadd(self.key, *chunk)
            else:
                pipe.zadd(self.key, dict(zip(chunk, priorities[i : i + PIPELINE_CHUNK])))

    async def take(self, client: AnyRedis, n: int, prefix: str) -> Taken:
        """Up to `n` seeds, each held in the taken zset until `done` (a sync or an asyncio client).
        `prefix` names the taker (node id; no newline); a per-call counter keeps holds unique."""
        prefix = f"{prefix.replace(chr(10), ' ')}:{os.urandom(6).hex()}:"
        script = client.register_script(lua_source("seed_take"))
        reply = await maybe_await(
            script(keys=[self.key, self.taken], args=[self.kind, n, int(self.lease_seconds * 1000), prefix])
        )
        holds = [bytes(h) for h in reply[1:]]
        return Taken([h.split(b"\n", 2)[2] for h in holds], holds, int(reply[0]))

    async def done(self, client: AnyRedis, holds: Sequence[bytes]) -> None:
        """The seeds of `holds` are in the frontier (or refused there): forget them."""
        if holds:
            await maybe_await(client.zrem(self.taken, *holds))

    async def renew(self, client: AnyRedis, holds: Sequence[bytes]) -> None:
        """Push the deadline of `holds` a lease further (server time): a node alive but slow to
        hand its seeds over (the engine backed out, Redis away) keeps them. A hold already put
        back is not added again (ZADD XX)."""
        if holds:
            deadline = (await server_time(client) + self.lease_seconds) * 1000
            await maybe_await(client.zadd(self.taken, dict.fromkeys(holds, deadline), xx=True))

    async def count(self, client: AnyRedis) -> tuple[int, int]:
        """(waiting, taken): seeds in the key, and seeds held by nodes (any key type: never WRONGTYPE)."""
        counts = client.register_script(lua_source("counts"))
        waiting, taken = await maybe_await(counts(keys=[self.key, self.taken]))
        return int(waiting), int(taken)
