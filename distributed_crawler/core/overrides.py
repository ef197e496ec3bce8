"""The operator's per-host overrides as this node sees them (`dcrawl host ... set/block`).

In host mode the lease script applies delay, concurrency, max-pages and blocks on the server; what
a node decides itself (render on/off/auto; in the single-queue modes also delay, concurrency and
blocks, in the politeness middleware) comes from this copy, which the scheduler's control watch
(core/pause.py) refreshes every 1.5 s in the same round trip as the pause: never a round trip
per page. An override reaches every node within 2 s.
"""

from __future__ import annotations

import json
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

_CACHES: weakref.WeakKeyDictionary[Any, OverrideCache] = weakref.WeakKeyDictionary()


def closest_override(table: dict[str, dict[str, Any]], host: str) -> dict[str, Any] | None:
    """The override of `host` (host[:port]), else of its closest parent domain."""
    host = host.lower().rstrip(".")
    if host in table:
        return table[host]
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    labels = name.split(".")
    for i in range(len(labels)):
        found = table.get(".".join(labels[i:]))
        if found is not None:
            return found
    return None


class OverrideCache:
    """The node's copy of the overrides hash, one per crawler."""

    def __init__(self) -> None:
        self.table: dict[str, dict[str, Any]] = {}

    @classmethod
    def of(cls, crawler: Crawler) -> OverrideCache:
        cache = _CACHES.get(crawler)
        if cache is None:
            cache = _CACHES[crawler] = cls()
        return cache

    def get(self, host: str) -> dict[str, Any] | None:
        """The override of a host (host[:port]) or of its closest parent domain, as last read."""
        return closest_override(self.table, host) if self.table else None

    def update(self, raw: dict[Any, Any]) -> None:
        """A fresh read of the overrides hash; entries that are not JSON objects are skipped."""
        table = {}
        for target, value in (raw or {}).items():
            try:
                decoded = json.loads(value)
            except (TypeError, ValueError):
                continue
            if isinstance(decoded, dict):
                name = target.decode("utf-8", "replace") if isinstance(target, bytes) else str(target)
                table[name] = decoded
        self.table = table
