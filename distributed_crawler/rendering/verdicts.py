"""The verdicts PLAYWRIGHT_AUTO learns, shared by every node through one Redis hash.

`PLAYWRIGHT_AUTO_KEY` (`{spider}:render:verdicts`, in the spider's hash slot) maps a host and URL
shape (auto.url_shape) to `samples:added`: how many pages of that shape were rendered because they
looked script-built, and on how many rendering added content. A shape is *learning* until it has
PLAYWRIGHT_AUTO_SAMPLES samples; then it is *plain* when rendering added content on fewer than
1 in 10 of them (its pages stay plain HTTP) and *render* otherwise. The hash holds at most
MAX_VERDICTS fields (lua/render_verdict.lua evicts a random one). A node keeps what it read for
CACHE_SECONDS (one HGET per shape and interval, not per page).

Values are untrusted: anything but `samples:added` (0 <= added <= samples) is ignored (the shape
counts as learning; the next sample rewrites it) and counted as `render/auto/bad_verdict`.
To make the cluster learn again: `redis-cli del '{news}:render:verdicts'`.
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial
from typing import Any

from redis.exceptions import ResponseError

from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.policy import Purpose, RedisPolicy
from distributed_crawler.connection.types import AsyncRedis
from distributed_crawler.connection.untrusted import OnceLog

logger = logging.getLogger(__name__)

MAX_VERDICTS = 50_000  # fields of the hash (~5 MB at most)
CACHE_SECONDS = 10.0
CACHE_ENTRIES = 10_000
PLAIN_BELOW = 0.1  # a learnt shape is plain when rendering added content on fewer than this share
LEARNING, PLAIN, RENDER = "learning", "plain", "render"
_UNREAD = object()  # Redis did not answer (not: the field is absent)
_VALUE = re.compile(rb"^(\d{1,10}):(\d{1,10})$")


@dataclass(frozen=True)
class Verdict:
    samples: int = 0
    added: int = 0

    def state(self, min_samples: int) -> str:
        if self.samples < min_samples:
            return LEARNING
        return PLAIN if self.added < PLAIN_BELOW * self.samples else RENDER


def parse_verdict(raw: Any) -> Verdict | None:
    """`b"samples:added"` -> Verdict; None for anything else (absent or garbage)."""
    if isinstance(raw, str):
        raw = raw.encode()
    if not isinstance(raw, bytes):
        return None
    match = _VALUE.match(raw)
    if match is None:
        return None
    samples, added = int(match.group(1)), int(match.group(2))
    return Verdict(samples, added) if added <= samples else None


class VerdictStore:
    """Reads and records verdicts; a Redis failure makes a shape count as learning (never fatal)."""

    def __init__(self, client: AsyncRedis, key: str, stats: Any, policy: RedisPolicy) -> None:
        self.client = client
        self.key = key
        self.stats = stats
        self._record = client.register_script(lua_source("render_verdict"))
        self._cache: OrderedDict[str, tuple[float, Verdict]] = OrderedDict()
        self.policy = policy
        self._bad = OnceLog(logger)

    def _remember(self, field: str, verdict: Verdict) -> Verdict:
        self._cache[field] = (time.monotonic() + CACHE_SECONDS, verdict)
        self._cache.move_to_end(field)
        while len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)
        return verdict

    async def get(self, field: str) -> Verdict:
        cached = self._cache.get(field)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        refused: list[BaseException] = []
        # CACHE: Redis away or refusing -> the shape counts as learning
        raw = await self.policy.run(
            Purpose.CACHE,
            partial(self.client.hget, self.key, field),
            default=_UNREAD,
            on_error=partial(self._refused, refused),
        )
        if raw is _UNREAD or refused:
            return Verdict()
        verdict = parse_verdict(raw)
        if verdict is None and raw is not None:
            self.stats.inc_value("render/auto/bad_verdict")
            self._bad.skipped(
                "value",
                "Auto rendering verdict %r of %s in %s is not 'samples:added' (%r); ignored, the next sample rewrites it",
                field,
                field.split("|", 1)[0],
                self.key,
                raw[:80] if isinstance(raw, bytes) else type(raw).__name__,
            )
        return self._remember(field, verdict or Verdict())

    async def record(self, field: str, added: bool) -> Verdict | None:
        """Add one sample; returns the shape's verdict after it (None if Redis did not take it)."""
        record = partial(self._record, keys=[self.key], args=[field, int(added), MAX_VERDICTS])
        raw = await self.policy.run(Purpose.CACHE, record, on_error=partial(self._refused, []))
        verdict = parse_verdict(raw)
        return None if verdict is None else self._remember(field, verdict)

    async def _refused(self, refused: list[BaseException], exc: BaseException) -> None:
        if not isinstance(exc, ResponseError):
            raise exc
        refused.append(exc)
        self.stats.inc_value("render/auto/redis_refused")
        self._bad.skipped(
            "refused",
            "Redis refused the auto rendering verdicts in %s (%s): pages that look script-built are "
            "rendered without learning; remove the key if it is not a hash (redis-cli del)",
            self.key,
            str(exc)[:200],
        )
