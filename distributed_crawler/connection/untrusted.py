"""Everything a node reads from Redis is untrusted: shared helpers to survive it.

Redis is shared by people and programs (a manual `redis-cli`, an older version, scrapy-redis's
pickles). A malformed entry is quarantined with a reason or skipped with one log line per kind;
a key of the wrong Redis type is one ERROR line naming the key and its fix, and the node waits.
Nothing here ever decodes with pickle or evaluates anything.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from redis.exceptions import ResponseError

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.permissions import ACL_DOC, is_permission_error, what_was_denied
from distributed_crawler.connection.types import AnyRedis

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

    def skipped(self, kind: str, message: str, *args: Any, level: int = logging.WARNING, exc_info: Any = None) -> bool:
        """Record one skipped entry; returns True when this call logged it (the first of its kind)."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if self.counts[kind] == 1:
            self.log.log(level, message + " (logged once per kind)", *args, exc_info=exc_info)
            return True
        return False


async def wrong_type_keys(client: AnyRedis, expected: Mapping[str, tuple[str, ...]]) -> list[tuple[str, str, str]]:
    """Which of `expected` (key -> allowed Redis types) hold another type: (key, actual, allowed)."""
    wrong = []
    for key, allowed in expected.items():
        actual = text(await maybe_await(client.type(key))) or "none"
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


REASON_CHARS = 300  # an error message quoting untrusted data is capped like the data itself


def reason(exc: BaseException) -> str:
    """An exception as a dead letter's reason: type and message, capped (it may quote the data)."""
    return f"{type(exc).__name__}: {exc}"[:REASON_CHARS]


class WrongTypeLog:
    """One ERROR line per key of the wrong Redis type per episode, one line once it is fixed.

    "Fixed" is checked with TYPE (only while something is reported), not inferred from a call
    that happened to succeed without touching the key: no flapping log lines.
    """

    def __init__(self, what: str, log: logging.Logger | None = None) -> None:
        self.what = what
        self.log = log or logger
        self.reported: dict[str, float] = {}  # key -> since (monotonic)
        self._unknown = False

    async def check(
        self,
        client: AnyRedis,
        expected: Mapping[str, tuple[str, ...]],
        fixes: dict[str, str] | None = None,
        exc: BaseException | None = None,
    ) -> list[tuple[str, str, str]]:
        """After a WRONGTYPE: find the culprits among `expected` and log each new one once."""
        wrong = await wrong_type_keys(client, expected)
        for key, actual, allowed in wrong:
            if key not in self.reported:
                self.reported[key] = time.monotonic()
                self.log.error(
                    "%s (seen during %s)", wrong_type_message(key, actual, allowed, (fixes or {}).get(key)), self.what
                )
        if not wrong and not self._unknown:
            self._unknown = True  # e.g. a Bloom piece key, or the key was fixed meanwhile
            self.log.error(
                "Redis answered WRONGTYPE during %s (%s) but none of %s holds a wrong type now; "
                "the node retries with backoff",
                self.what,
                exc,
                ", ".join(expected),
            )
        return wrong

    async def resolved(self, client: AnyRedis, expected: Mapping[str, tuple[str, ...]]) -> None:
        """After a success: log the reported keys that now hold the right type (or nothing)."""
        self._unknown = False
        pending = {key: allowed for key, allowed in expected.items() if key in self.reported}
        if not pending:
            return
        still = {key for key, _, _ in await wrong_type_keys(client, pending)}
        for key in pending:
            # another task of this node may have resolved the key during the await above
            since = None if key in still else self.reported.pop(key, None)
            if since is not None:
                self.log.warning(
                    "Redis key %s is fixed after %.1fs; %s resumes", key, time.monotonic() - since, self.what
                )


class EpisodeLog:
    """A data error that keeps coming back: ERROR once (with its traceback) until the call works;
    with `every` (seconds), again at most that often while it keeps failing, saying for how long.

    A Redis ACL refusal met outside the node's policy (a component's own `except ResponseError`)
    is no bug: the line says so and where the rule is explained, without a traceback.
    """

    def __init__(self, log: logging.Logger | None = None, every: float | None = None) -> None:
        self.log = log or logger
        self.every = every
        self.failing: dict[str, float] = {}  # what -> since (monotonic)
        self._logged: dict[str, float] = {}  # what -> last ERROR (monotonic)

    def failed(self, what: str, message: str, *args: Any, exc_info: Any = None) -> bool:
        now = time.monotonic()
        since = self.failing.get(what)
        if since is None:
            self.failing[what] = now
        elif self.every is None or now - self._logged[what] < self.every:
            return False
        else:
            message, args, exc_info = message + " (failing for %.0fs)", (*args, now - since), None
        self._logged[what] = now
        if isinstance(exc_info, BaseException) and is_permission_error(exc_info):
            message += f"; the Redis user may not {what_was_denied(exc_info)}: add it to its ACL rule ({ACL_DOC})"
            exc_info = None
        self.log.error(message, *args, exc_info=exc_info)
        return True

    def ok(self, what: str) -> None:
        since = self.failing.pop(what, None)
        self._logged.pop(what, None)
        if since is not None:
            self.log.warning("%s works again after %.1fs", what, time.monotonic() - since)
