"""Near-duplicate articles across URLs and sites: a SimHash of the main text, looked up in Redis.

The 64-bit SimHash (the `simhash` library) of a text's word 3-grams changes in few bits when a
few words change. Two fingerprints within Hamming distance d share one of d + 1 blocks exactly
(pigeonhole), so the index keeps one bucket per block value and compares only the fingerprints
in this article's d + 1 buckets (lua/near_duplicate.lua, atomic for the whole cluster). Memory
per article: 8 bytes per bucket plus one field mapping the fingerprint to its URL (docs/news.md).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

from simhash import Simhash

from distributed_crawler.connection.calls import maybe_await, server_time
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.connection.untrusted import text as decoded

BITS = 64
SHINGLE = 3
MAX_DISTANCE = 7  # 8 blocks of 8 bits: beyond, buckets hold too many fingerprints to scan
MAX_WORDS = 20_000  # words of a text fingerprinted (its start): SimHash's cost stays bounded on any page
_WORDS = re.compile(r"\w+", re.UNICODE)


def fingerprint(text: str, min_words: int) -> int | None:
    """The SimHash of the word 3-grams of the text's first MAX_WORDS words (None: too short to compare)."""
    words = [match.group() for _, match in zip(range(MAX_WORDS), _WORDS.finditer(text.lower()))]
    if len(words) < max(min_words, 1):
        return None
    shingles = [" ".join(words[i : i + SHINGLE]) for i in range(max(1, len(words) - SHINGLE + 1))]
    return int(Simhash(shingles, f=BITS).value)


def without_title(text: str, title: str | None) -> str:
    """The text minus a leading headline: a syndicated copy often has its own headline or none."""
    first, _, rest = text.partition("\n")
    return rest if title and rest and first.strip().lower() == title.strip().lower() else text


def distance(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def blocks(value: int, max_distance: int) -> list[tuple[int, int]]:
    """(block index, block value): `max_distance + 1` blocks covering the 64 bits."""
    n = max_distance + 1
    out = []
    start = 0
    for i in range(n):
        width = BITS // n + (1 if i < BITS % n else 0)
        out.append((i, (value >> (BITS - start - width)) & ((1 << width) - 1)))
        start += width
    return out


@dataclass(frozen=True)
class Match:
    original: str  # URL of the article first stored with a fingerprint this close
    distance: int


class NearDuplicateIndex:
    """The cluster's fingerprints of stored articles (`NEAR_DUPLICATE_KEY`, the spider's hash slot).

    Keys: `<key>:urls` (hash: fingerprint -> URL) and `<key>:<blocks>.<i>:<value>` (buckets).
    With a window (`NEAR_DUPLICATE_WINDOW`) they live in generations `<key>:g<n>:...`, n = Redis
    server time // window: an article is looked up in the current and the previous generation and
    stored in the current one, whose keys expire when it stops being read. So a fingerprint is
    remembered between one and two windows, and memory holds two windows of articles at most.
    This class owns the script's KEYS/ARGV order.
    """

    def __init__(self, client: AnyRedis, key: str, max_distance: int, window: float = 0.0) -> None:
        if not 0 <= max_distance <= MAX_DISTANCE:
            raise ValueError(f"NEAR_DUPLICATE_DISTANCE ({max_distance}) must be between 0 and {MAX_DISTANCE}")
        self.key = key
        self.max_distance = max_distance
        self.window = window
        self._client = client
        self._clock_offset: float | None = None  # Redis server time minus this node's clock
        self._script = client.register_script(lua_source("near_duplicate"))

    def generations(self, now: float) -> tuple[list[str], int]:
        """Key prefixes to read, the current one first, and when the current one expires (0 = never)."""
        if self.window <= 0:
            return [self.key], 0
        n = int(now // self.window)
        return [f"{self.key}:g{n}", f"{self.key}:g{n - 1}"], math.ceil((n + 2) * self.window)

    def script_keys(self, value: int, prefixes: list[str] | None = None) -> list[str]:
        n = self.max_distance + 1
        buckets = [f"{n}.{i}:{v:x}" for i, v in blocks(value, self.max_distance)]
        return [
            key for prefix in prefixes or [self.key] for key in (f"{prefix}:urls", *(f"{prefix}:{b}" for b in buckets))
        ]

    async def check_add(self, value: int, url: str, now: float | None = None) -> Match | None:
        """The stored original this article is a near-duplicate of; None = it is an original now.

        `now` (server time) picks the generation; by default the node's clock corrected once by
        the server's, so a node with a wrong clock still writes where the others read.
        """
        if now is None:
            now = time.time() + await self._offset() if self.window > 0 else 0.0
        prefixes, expire_at = self.generations(now)
        original, dist = await self._script(
            keys=self.script_keys(value, prefixes),
            args=[value >> 32, value & 0xFFFFFFFF, url, self.max_distance, self.max_distance + 2, expire_at],
        )
        original = decoded(original)
        return Match(original, int(dist)) if original else None

    async def lookup(self, value: int, url: str, now: float | None = None) -> Match | None:
        """What `check_add` would answer, writing nothing (dcrawl extract): the closest stored
        article within the distance that is not `url`, read bucket by bucket (a sync or an asyncio
        client). Not atomic: an article stored meanwhile may be missed, which a preview can afford."""
        if now is None:
            now = time.time() + await self._offset() if self.window > 0 else 0.0
        prefixes, _ = self.generations(now)
        keys = self.script_keys(value, prefixes)
        per_generation = self.max_distance + 2
        best: Match | None = None
        for first in range(0, len(keys), per_generation):
            urls, buckets = keys[first], keys[first + 1 : first + per_generation]
            for bucket in buckets:
                raw = await maybe_await(self._client.get(bucket))
                raw = raw if isinstance(raw, bytes) else b""
                for pos in range(0, len(raw) - 7, 8):
                    entry = raw[pos : pos + 8]
                    d = distance(int.from_bytes(entry, "big"), value)
                    if d <= self.max_distance and (best is None or d < best.distance):
                        original = decoded(await maybe_await(self._client.hget(urls, entry)))
                        if original and original != url:
                            best = Match(original, d)
        return best

    async def _offset(self) -> float:
        if self._clock_offset is None:
            self._clock_offset = await server_time(self._client) - time.time()
        return self._clock_offset
