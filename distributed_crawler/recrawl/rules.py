"""Which URLs are revisited and how often: `RECRAWL_RULES` and `meta["recrawl"]` (docs/recrawl.md).

`RECRAWL_RULES` maps a regex (searched in the URL) to seconds (a fixed interval), to
`[min_seconds, max_seconds]` (an adaptive one), or to `{"interval": either, "horizon": seconds}`
(revisits end that long after the first fetch); the first rule that matches wins.
`meta={"recrawl": seconds | [min, max] | 0}` on a request wins over the rules (0 or None: never).
A URL no rule matches is revisited only if it is an article: `ARTICLE_REVISITS` (seconds after its
first fetch, then it leaves the schedule).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from distributed_crawler.defaults import SettingsReader
from distributed_crawler.meta import ARTICLE_REVISIT_META, RECRAWL_META

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.settings import BaseSettings

MAX_INTERVAL = 10 * 365 * 86400.0  # ten years: anything longer is a typo
Interval = tuple[float, float]  # (min seconds, max seconds)
MAX_ARTICLE_REVISITS = 20  # more fixed revisits than this is a schedule that should be a rule


class Revisit(NamedTuple):
    """How one URL is revisited: an adaptive interval (rules, meta), optionally ending `horizon`
    seconds after its first fetch, or a fixed plan of seconds after its first fetch (articles)."""

    interval: Interval
    horizon: float = 0.0  # 0 = the rule never ends
    plan: tuple[float, ...] = ()  # ARTICLE_REVISITS: the visits after the first, then it ends
    article: bool = False  # on the article plan (an empty plan ends it)


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


def parse_rule(value: Any, where: str) -> tuple[Interval, float]:
    """A RECRAWL_RULES value: seconds, [min, max], or {"interval": either, "horizon": seconds}."""
    horizon = 0.0
    if isinstance(value, dict):
        unknown = set(value) - {"interval", "horizon"}
        if unknown or "interval" not in value:
            raise RuleError(f'{where} ({value!r}) must be {{"interval": seconds or [min, max], "horizon": seconds}}')
        horizon_value = value.get("horizon", 0)
        if (
            isinstance(horizon_value, bool)
            or not isinstance(horizon_value, int | float)
            or not (0 <= horizon_value <= MAX_INTERVAL)
        ):
            raise RuleError(f"{where} horizon ({horizon_value!r}) must be seconds >= 0 (0 = never ends)")
        horizon, value = float(horizon_value), value["interval"]
    interval = parse_interval(value, where)
    if interval is None:
        raise RuleError(
            f"{where} ({value!r}) must be seconds > 0 or [min, max]; remove the rule to never revisit those URLs"
        )
    return interval, horizon


def parse_article_revisits(value: Any) -> tuple[float, ...]:
    """ARTICLE_REVISITS: a list (or JSON / comma-separated text) of increasing seconds > 0; [] = never."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text) if text.startswith("[") else [float(v) for v in text.split(",") if v.strip()]
        except ValueError:
            value = text
    numbers = isinstance(value, list | tuple) and all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value
    )
    if not numbers or len(value) > MAX_ARTICLE_REVISITS:
        raise ValueError(
            f"ARTICLE_REVISITS ({value!r}) must be a list of at most {MAX_ARTICLE_REVISITS} seconds after an "
            "article's first fetch, e.g. [3600, 21600, 86400] ([] = never revisit articles)"
        )
    plan = tuple(float(v) for v in value)
    if any(v <= 0 or v > MAX_INTERVAL for v in plan) or any(b <= a for a, b in zip(plan, plan[1:])):
        raise ValueError(f"ARTICLE_REVISITS ({value!r}) must be increasing seconds, each > 0 and <= {MAX_INTERVAL:.0f}")
    return plan


@dataclass(frozen=True)
class RecrawlConfig:
    """RECRAWL_* settings, read and checked once (a bad value fails at start with the fix)."""

    rules: tuple[tuple[re.Pattern[str], Revisit], ...] = ()
    article_revisits: tuple[float, ...] = (3600.0, 21600.0, 86400.0)  # ARTICLE_REVISITS
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
            interval, horizon = parse_rule(value, f"RECRAWL_RULES[{pattern!r}]")
            rules.append((compiled, Revisit(interval, horizon)))
        return cls(
            rules=tuple(rules),
            article_revisits=parse_article_revisits(read.raw("ARTICLE_REVISITS")),
            factor=read.float("RECRAWL_INTERVAL_FACTOR", min=1),
            pending_seconds=read.float("RECRAWL_PENDING_SECONDS", above=0),
            move_batch=read.int("RECRAWL_MOVE_BATCH", min=1),
            poll_seconds=read.float("RECRAWL_POLL_SECONDS", above=0),
            sources=tuple(str(p) for p in read.dict("RECRAWL_RULES")),
        )

    def revisit_for_url(self, url: str) -> Revisit | None:
        """The first matching rule, None = no rule."""
        for pattern, revisit in self.rules:
            if pattern.search(url):
                return revisit
        return None

    def revisit_for(self, request: Request) -> Revisit | None:
        """`meta["recrawl"]` when set (a malformed one counts as absent), else the rules, else the
        article plan for a request a first fetch found to be an article; None = never revisited."""
        if RECRAWL_META in request.meta:
            try:
                interval = parse_interval(request.meta[RECRAWL_META], f'meta["{RECRAWL_META}"]')
                return None if interval is None else Revisit(interval)
            except RuleError:
                pass
        rule = self.revisit_for_url(request.url)
        if rule is None and request.meta.get(ARTICLE_REVISIT_META) is True:
            return self.article_revisit()
        return rule

    def article_revisit(self) -> Revisit:
        """The plan of an article no rule matches (an empty plan ends a scheduled one at its next record)."""
        first = self.article_revisits[0] if self.article_revisits else 1.0
        return Revisit((first, first), 0.0, self.article_revisits, article=True)
