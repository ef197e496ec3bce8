"""A dict that forgets: at most `max_entries` keys (least recently used out first), each kept at
most `ttl` seconds after it was last set or read (0 = no idle expiry).

Why: a worker of a wide crawl meets hundreds of thousands of hosts, a few pages each. Whatever it
keeps per host (a robots.txt parser, a response-time average, a block end) must be bounded by how
many hosts it works on at once, not by how many it has ever met, or its memory grows with the
crawl (docs/settings.md, "Per-host state in a worker"). Forgetting is always safe for the users of
this class: what they keep is a copy or a hint, read again from Redis or measured again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, overload

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")


class BoundedDict(Generic[K, V]):
    """LRU map with an optional idle expiry; `len`, `in`, `get`, `[]=`, `pop` like a dict."""

    def __init__(self, max_entries: int, ttl: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries ({max_entries}) must be >= 1")
        self.max_entries = max_entries
        self.ttl = ttl
        self._clock = clock
        self._data: OrderedDict[K, tuple[float, V]] = OrderedDict()  # key -> (last touched, value)
        self.evicted = 0  # keys forgotten for room or idleness, for stats and tests

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return self._live(key) is not None

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._data))

    @overload
    def get(self, key: K) -> V | None: ...

    @overload
    def get(self, key: K, default: V | D) -> V | D: ...

    def get(self, key: K, default: object = None) -> object:
        found = self._live(key)
        if found is None:
            return default
        self._data[key] = (self._clock(), found[1])
        self._data.move_to_end(key)
        return found[1]

    def __getitem__(self, key: K) -> V:
        if self._live(key) is None:
            raise KeyError(key)
        return self.get(key)  # type: ignore[return-value]

    def __setitem__(self, key: K, value: V) -> None:
        now = self._clock()
        self._data[key] = (now, value)
        self._data.move_to_end(key)
        self._expire(now)
        while len(self._data) > self.max_entries:
            self._data.popitem(last=False)
            self.evicted += 1

    def pop(self, key: K, default: V | None = None) -> V | None:
        found = self._data.pop(key, None)
        return default if found is None else found[1]

    def __bool__(self) -> bool:
        return bool(self._data)

    def values(self) -> list[V]:
        return [value for _, value in self._data.values()]

    def items(self) -> list[tuple[K, V]]:
        return [(key, value) for key, (_, value) in self._data.items()]

    def clear(self) -> None:
        self._data.clear()

    def _live(self, key: object) -> tuple[float, V] | None:
        found = self._data.get(key)  # type: ignore[arg-type]
        if found is None:
            return None
        if self.ttl and self._clock() - found[0] > self.ttl:
            del self._data[key]  # type: ignore[arg-type]
            self.evicted += 1
            return None
        return found

    def _expire(self, now: float) -> None:
        """Drop idle keys from the old end: the order is least recently touched first."""
        if not self.ttl:
            return
        while self._data:
            key, (touched, _) = next(iter(self._data.items()))
            if now - touched <= self.ttl:
                return
            del self._data[key]
            self.evicted += 1
