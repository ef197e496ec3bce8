"""FRONTIER_SHARDS: where a host's part of the frontier lives (docs/frontier.md "Shards").

Each shard has its own Redis Cluster hash tag, so a crawl's frontier spreads over every master.
Shard i's tag is the first `<spider>~<i>.<j>` (j = 0, 1, ...) whose Cluster slot (CRC16 of the tag)
falls in [i * 16384 / N, (i + 1) * 16384 / N): the N tags' slots spread evenly over 0..16383, so
consecutive shards land on different masters of an evenly sliced Cluster. Deterministic from the
spider name and N: every node and `dcrawl` compute the same tags. One shard is today's layout:
the tag is the spider name itself (`{news}`).

A host's shard is a stable hash of its politeness slot (the frontier's `slot_of`: the host[:port],
or the closest DOMAIN_RATE_LIMITS domain), so everything about one host (its queue, its state hash,
its in-flight set, its slice of the dedup filter, its pending count) lives on one shard and every
script stays atomic on one node.
"""

from __future__ import annotations

import hashlib
from functools import cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

MAX_SHARDS = 1024
MAX_TRIES = 1_000_000  # candidates per shard: a range of 16384/1024 = 16 slots needs ~1,000 on average


def check_shards(value: object) -> int:
    """FRONTIER_SHARDS as an int in 1..MAX_SHARDS, else ValueError with the fix."""
    if isinstance(value, bool) or not str(value).strip().isdigit() or not 1 <= int(str(value)) <= MAX_SHARDS:
        raise ValueError(
            f"FRONTIER_SHARDS ({value!r}) must be a whole number from 1 to {MAX_SHARDS}: 1 on one Redis, "
            "one or more per master on a Redis Cluster (docs/frontier.md)"
        )
    return int(str(value))


def slot_of_tag(tag: str) -> int:
    """The Cluster slot of keys tagged `{tag}`."""
    return int(key_slot(tag.encode()))


@cache
def shard_tags(spider: str, shards: int) -> tuple[str, ...]:
    """The hash tag of each shard (without braces): `spider` itself for one shard."""
    if shards == 1:
        return (spider,)
    tags = []
    for i in range(shards):
        low = i * REDIS_CLUSTER_HASH_SLOTS // shards
        high = (i + 1) * REDIS_CLUSTER_HASH_SLOTS // shards
        for j in range(MAX_TRIES):
            tag = f"{spider}~{i}.{j}"
            if low <= slot_of_tag(tag) < high:
                tags.append(tag)
                break
        else:  # pragma: no cover - CRC16 reaches every range long before
            raise RuntimeError(f"no hash tag for shard {i} of {shards} found")
    return tuple(tags)


def shard_of(slot: str, shards: int) -> int:
    """The shard of a host (its politeness slot): stable across processes, Python versions and nodes."""
    if shards == 1:
        return 0
    digest = hashlib.blake2b(slot.lower().encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards
