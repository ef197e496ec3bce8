"""Near-duplicate articles across URLs and sites: a SimHash of the main text, looked up in Redis.

The 64-bit SimHash (the `simhash` library) of a text's word 3-grams changes in few bits when a
few words change. Two fingerprints within Hamming distance d share one of d + 1 blocks exactly
(pigeonhole), so the index keeps one bucket per block value and compares only the fingerprints
in this article's d + 1 buckets (lua/near_duplicate.lua, atomic for the whole cluster). Memory
per article: 8 bytes per bucket plus one field mapping the fingerprint to its URL (docs/news.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from simhash import Simhash

from distributed_crawler.connection.untrusted import text as decoded
from distributed_crawler.queue.scripts import lua_source

BITS = 64
SHINGLE = 3
MAX_DISTANCE = 7  # 8 blocks of 8 bits: beyond, buckets hold too many fingerprints to scan
_WORDS = re.compile(r"\w+", re.UNICODE)


def fingerprint(text: str, min_words: int) -> int | None:
    """The SimHash of the text's word 3-grams, or None for a text too short to compare."""
    words = _WORDS.findall(text.lower())
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
    This class owns the script's KEYS/ARGV order.
    """

    def __init__(self, client: Any, key: str, max_distance: int) -> None:
        if not 0 <= max_distance <= MAX_DISTANCE:
            raise ValueError(f"NEAR_DUPLICATE_DISTANCE ({max_distance}) must be between 0 and {MAX_DISTANCE}")
        self.key = key
        self.max_distance = max_distance
        self._script = client.register_script(lua_source("near_duplicate"))

    def script_keys(self, value: int) -> list[str]:
        n = self.max_distance + 1
        return [f"{self.key}:urls", *(f"{self.key}:{n}.{i}:{v:x}" for i, v in blocks(value, self.max_distance))]

    async def check_add(self, value: int, url: str) -> Match | None:
        """The stored original this article is a near-duplicate of; None = it is an original now."""
        original, dist = await self._script(
            keys=self.script_keys(value),
            args=[value >> 32, value & 0xFFFFFFFF, url, self.max_distance],
        )
        original = decoded(original)
        return Match(original, int(dist)) if original else None
