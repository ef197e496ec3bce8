"""Everything a node reads from Redis is untrusted: shared helpers to survive it.

Redis is shared by people and programs (a manual `redis-cli`, an older version, scrapy-redis's
pickles). A malformed entry is quarantined with a reason or skipped with one log line per kind;
a key of the wrong Redis type is one ERROR line naming the key and its fix, and the node waits.
Nothing here ever decodes with pickle or evaluates anything.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from redis.exceptions import ResponseError

logger = logging.getLogger(__name__)

PREVIEW_BYTES = 300  # raw payload kept with a dead letter (never decoded beyond UTF-8 with replace)


def preview(raw: bytes | str | None, limit: int = PREVIEW_BYTES) -> str:
    """A readable, capped copy of untrusted bytes (invalid UTF-8 replaced, never unpickled)."""
    if raw is None:
        return ""
    if isinstance(raw, bytes):
        return raw[:limit].decode("utf-8", "replace")
    return str(raw)[:limit]


def text(value: Any, default: str = "") -> str:
    """Bytes or str from Redis as str (invalid UTF-8 replaced); anything else -> default."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    return default


def finite(value: Any, default: float = 0.0) -> float:
    """A number read from Redis: NaN, ±inf, non-numeric and missing all become `default`."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def is_wrong_type(exc: BaseException) -> bool:
    """A WRONGTYPE reply (a key holds another Redis type than ours), from a command or a script."""
    return isinstance(exc, ResponseError) and "WRONGTYPE" in str(exc)


class OnceLog:
    """Logs each kind of bad data once per process (then counts it silently)."""

    def __init__(self, log: logging.Logger | None = None) -> None:
        self.log = log or logger
        self.counts: dict[str, int] = {}

    def skipped(self, kind: str, message: str, *args: Any, level: int = logging.WARNING) -> bool:
        """Record one skipped entry; returns True when this call logged it (the first of its kind)."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if self.counts[kind] == 1:
            self.log.log(level, message + " (logged once per kind)", *args)
            return True
        return False


async def wrong_type_keys(client: Any, expected: dict[str, tuple[str, ...]]) -> list[tuple[str, str, str]]:
    """Which of `expected` (key -> allowed Redis types) hold another type: (key, actual, allowed)."""
    wrong = []
    for key, allowed in expected.items():
        actual = text(await client.type(key)) or "none"
        if actual != "none" and actual not in allowed:
            wrong.append((key, actual, "/".join(allowed)))
    return wrong


def wrong_type_message(key: str, actual: str, allowed: str, fix: str | None = None) -> str:
    """The one ERROR line for a key of the wrong type: what it holds, what we need, what to run."""
    fix = fix or f"redis-cli del '{key}'"
    return (
        f"Redis key {key} holds a {actual}, not a {allowed} as this crawler needs; nodes wait until it "
        f"is fixed: inspect it with `redis-cli type '{key}'`, then remove it with `{fix}`"
    )
