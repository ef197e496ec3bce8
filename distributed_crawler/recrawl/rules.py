"""Which URLs are revisited and how often: `RECRAWL_RULES` and `meta["recrawl"]` (docs/recrawl.md).

`RECRAWL_RULES` maps a regex (searched in the URL) to seconds (a fixed interval) or to
`[min_seconds, max_seconds]` (an adaptive one); the first rule that matches wins, a URL that
matches none is never revisited. `meta={"recrawl": seconds | [min, max] | 0}` on a request wins
over the rules (0 or None: never).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from distributed_crawler.defaults import SettingsReader
from distributed_crawler.meta import RECRAWL_META

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.settings import BaseSettings

MAX_INTERVAL = 10 * 365 * 86400.0  # ten years: anything longer is a typo
Interval = tuple[float, float]  # (min seconds, max seconds)


class RuleError(ValueError):
    """A revisit interval that is not seconds > 0 or [min, max] with 0 < min <= max."""


def parse_interval(value: Any, where: str) -> Interval | None:
    """seconds -> (s, s); [min, max] -> (min, max); 0 / None / False -> None (never)."""
    if (
        value is None
        or value is False
        or (isinstance(value, int | float) and not isinstance(value, bool) and value == 0)
    ):
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        low = high = float(value)
    elif (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        low, high = float(value[0]), float(value[1])
    else:
        raise RuleError(f"{where} ({value!r}) must be seconds or [min_seconds, max_seconds]")
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high <= MAX_INTERVAL):
        raise RuleError(f"{where} ({value!r}) must have 0 < min <= max <= {MAX_INTERVAL:.0f} seconds")
    return low, high


@dataclass(frozen=True)
class RecrawlConfig:
    """RECRAWL_* settings, read and checked once (a bad value fails at start with the fix)."""

    rules: tuple[tuple[re.Pattern[str], Interval], ...] = ()
    factor: float = 2.0  # RECRAWL_INTERVAL_FACTOR: unchanged -> x factor, changed -> / factor
    pending_seconds: float = 3600.0  # RECRAWL_PENDING_SECONDS: a moved URL is sent again if no result by then
    move_batch: int = 500  # RECRAWL_MOVE_BATCH: due URLs one move call puts into the frontier
    poll_seconds: float = 1.0  # RECRAWL_POLL_SECONDS: longest wait between two looks at the schedule
    sources: tuple[str, ...] = field(default=(), compare=False)  # the patterns as written, for messages

    @classmethod
    def from_settings(cls, settings: BaseSettings | dict[str, Any]) -> RecrawlConfig:
        read = SettingsReader(settings)
        rules = []
        for pattern, value in read.dict("RECRAWL_RULES").items():
            try:
                compiled = re.compile(str(pattern))
            except re.error as exc:
                raise ValueError(
                    f"RECRAWL_RULES pattern {pattern!r} is not a regex ({exc}); fix or remove it"
                ) from None
            interval = parse_interval(value, f"RECRAWL_RULES[{pattern!r}]")
            if interval is None:
                raise ValueError(
                    f"RECRAWL_RULES[{pattern!r}] ({value!r}) must be seconds > 0 or [min, max]; "
                    "remove the rule to never revisit those URLs"
                )
            rules.append((compiled, interval))
        return cls(
            rules=tuple(rules),
            factor=read.float("RECRAWL_INTERVAL_FACTOR", min=1),
            pending_seconds=read.float("RECRAWL_PENDING_SECONDS", above=0),
            move_batch=read.int("RECRAWL_MOVE_BATCH", min=1),
            poll_seconds=read.float("RECRAWL_POLL_SECONDS", above=0),
            sources=tuple(str(p) for p in read.dict("RECRAWL_RULES")),
        )

    def interval_for_url(self, url: str) -> Interval | None:
        """The first matching rule's interval, None = never revisited."""
        for pattern, interval in self.rules:
            if pattern.search(url):
                return interval
        return None

    def interval_for(self, request: Request) -> Interval | None:
        """`meta["recrawl"]` when set (a malformed one counts as absent), else the rules."""
        if RECRAWL_META in request.meta:
            try:
                return parse_interval(request.meta[RECRAWL_META], f'meta["{RECRAWL_META}"]')
            except RuleError:
                return self.interval_for_url(request.url)
        return self.interval_for_url(request.url)
