"""Health of every news source: articles per day, last new article, publish lag, silence.

A source is the registered domain of an article's host (core/traps.py `registered_domain`; an IP
address is its own source). Each source is one Redis hash of fixed buckets (lua/source_record.lua
writes it, in the same pipelined call as the batch's change events), and `{spider}:sources`
indexes them by last activity; `SOURCES_MAX` caps how many are kept (the least recently active
are dropped by the periodic check). Everything here reads those keys or decides from them.

Silent rule: a source that had articles is *silent* once nothing new arrived for
max(3 x its median gap between arrivals, SOURCE_SILENT_MIN_HOURS).

Drift rule (a changed template): for each of date, authors, main text of normal length, the share
of the source's new articles that have it moves fast (recent articles) and slow (its baseline);
a field *drifts* once the source has had SOURCE_DRIFT_MIN_ARTICLES articles, the field is usual
for it (baseline >= 0.5) and the recent share fell below baseline x (1 - SOURCE_DRIFT_DROP).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.keyspace import default, fill

#: Upper edges (seconds) of the publish-to-first-seen lag buckets; the last bucket is open.
LAG_EDGES: tuple[int, ...] = (30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400, 172800, 604800)
#: Gap buckets are log2 of seconds: bucket i holds gaps in [2**i, 2**(i+1)).
GAP_BUCKETS = 25
SILENCE_FACTOR = 3
QUALITY_FIELDS = ("date", "authors", "text")  # what an article's extraction is judged on
REFUSED_REASONS_MAX = 33  # x:<reason> fields read (lua/source_record.lua keeps 32 + x:other)
USUAL_SHARE = 0.5  # a field counts for drift only when at least this share of the source's articles has it


@dataclass(frozen=True)
class SourcesConfig:
    key: str = default("SOURCES_KEY")
    source_key: str = default("SOURCE_KEY")
    days: int = 28
    max_sources: int = 100_000
    silent_min_hours: float = 6.0
    check_seconds: float = 60.0
    drift_min_articles: int = 20
    drift_drop: float = 0.5
    drift_text_chars: int = 500
    coverage_key: str = default("SOURCE_COVERAGE_KEY")
    coverage_min: float = 0.9
    coverage_window: float = 86400.0
    coverage_grace: float = 3600.0
    coverage_min_listed: int = 10
    coverage_max_urls: int = 1000

    @classmethod
    def from_settings(cls, settings: Any) -> SourcesConfig:
        read = SettingsReader(settings)
        return cls(
            key=read.str("SOURCES_KEY"),
            source_key=read.str("SOURCE_KEY"),
            days=read.int("SOURCE_DAYS", min=1, max=366),
            max_sources=read.int("SOURCES_MAX", min=1),
            silent_min_hours=read.float("SOURCE_SILENT_MIN_HOURS", above=0, hint="hours"),
            check_seconds=read.float("SOURCE_CHECK_SECONDS", above=0, hint="seconds"),
            drift_min_articles=read.int("SOURCE_DRIFT_MIN_ARTICLES", min=1),
            drift_drop=read.float("SOURCE_DRIFT_DROP", above=0, max=1, hint="a share, e.g. 0.5"),
            drift_text_chars=read.int("SOURCE_DRIFT_TEXT_CHARS", min=1),
            coverage_key=read.str("SOURCE_COVERAGE_KEY"),
            coverage_min=read.float("SOURCE_COVERAGE_MIN", min=0, max=1, hint="a share, e.g. 0.9"),
            coverage_window=read.float("SOURCE_COVERAGE_WINDOW", above=0, hint="seconds"),
            coverage_grace=read.float("SOURCE_COVERAGE_GRACE", min=0, hint="seconds"),
            coverage_min_listed=read.int("SOURCE_COVERAGE_MIN_LISTED", min=1),
            coverage_max_urls=read.int("SOURCE_COVERAGE_MAX_URLS", min=1),
        )

    def index_key(self, spider: str) -> str:
        return fill(self.key, spider)

    def key_of(self, spider: str, source: str) -> str:
        return fill(self.source_key, spider, source=source)

    def check_lock(self, spider: str) -> str:
        """The lock one node takes per SOURCE_CHECK_SECONDS to check sources for silence."""
        return self.index_key(spider) + ":check"

    def coverage_key_of(self, spider: str, source: str) -> str:
        """One source's coverage set (events/coverage.py)."""
        return fill(self.coverage_key, spider, source=source)


def lag_bucket(seconds: float) -> int:
    """Index of the lag bucket holding *seconds* (negative lags, clock skew, count as 0)."""
    return bisect.bisect_left(LAG_EDGES, max(0.0, seconds))


def lag_seconds(published_at: str | None, first_seen: str | None) -> float | None:
    """Publish-to-first-seen lag, when `published_at` has a time of day (a bare date has none)."""
    if not published_at or not first_seen or "T" not in published_at:
        return None
    try:
        published = datetime.fromisoformat(published_at)
        seen = datetime.fromisoformat(first_seen)
    except ValueError:
        return None
    if published.tzinfo is None:
        published = published.replace(tzinfo=UTC)
    if seen.tzinfo is None:
        seen = seen.replace(tzinfo=UTC)
    return (seen - published).total_seconds()


def percentile_edge(counts: Mapping[int, int], edges: tuple[int, ...], fraction: float) -> float | None:
    """The upper edge of the bucket holding the *fraction* quantile (None: no samples; inf: open bucket)."""
    total = sum(counts.values())
    if total <= 0:
        return None
    rank = fraction * total
    seen = 0
    for index in sorted(counts):
        seen += counts[index]
        if seen >= rank:
            return float(edges[index]) if index < len(edges) else math.inf
    return math.inf


def median_gap(gaps: Mapping[int, int]) -> float | None:
    """Median gap (s) from the log2 histogram: the geometric middle of the median's bucket."""
    edges = tuple(2 ** (i + 1) for i in range(GAP_BUCKETS))
    edge = percentile_edge(gaps, edges, 0.5)
    return None if edge is None else edge / math.sqrt(2)


@dataclass(frozen=True)
class SourceHealth:
    """One source read from its hash (every field bounded, untrusted values ignored)."""

    source: str
    per_day: tuple[int, ...]  # articles per day, oldest first, today last
    errors_per_day: tuple[int, ...]
    refusals_per_day: tuple[int, ...]
    articles: int
    first: float | None
    last: float | None
    lag_p50: float | None
    lag_p95: float | None
    lag_counts: dict[int, int]
    median_gap: float | None
    silent_flag: bool
    quality: dict[str, tuple[float, float]] = field(default_factory=dict)  # field -> (recent, baseline) share
    judged: int = 0  # new articles whose extraction was judged
    drift_flag: tuple[str, ...] = ()  # the fields the nodes' check alerted as drifting
    refused: dict[str, int] = field(default_factory=dict)  # reason -> requests the crawler refused itself
    coverage_flag: bool = False  # the nodes' check alerted coverage_low (events/coverage_alert.py)

    def drifting(self, min_articles: int, drop: float) -> tuple[str, ...]:
        """The fields whose recent share fell sharply below this source's own baseline."""
        if self.judged < min_articles:
            return ()
        return tuple(
            f
            for f, (recent, baseline) in self.quality.items()
            if baseline >= USUAL_SHARE and recent < baseline * (1 - drop)
        )

    def silent_after(self, min_hours: float) -> float:
        """Seconds without a new article after which this source is silent."""
        floor = min_hours * 3600.0
        return floor if self.median_gap is None else max(SILENCE_FACTOR * self.median_gap, floor)

    def is_silent(self, now: float, min_hours: float) -> bool:
        return self.last is not None and now - self.last > self.silent_after(min_hours)

    def as_dict(self, now: float, min_hours: float) -> dict[str, Any]:
        def finite(value: float | None) -> float | None:
            return None if value is None or not math.isfinite(value) else round(value, 1)

        return {
            "source": self.source,
            "articles_per_day": list(self.per_day),
            "articles_28d": sum(self.per_day),
            "errors_per_day": list(self.errors_per_day),
            "refusals_per_day": list(self.refusals_per_day),
            "articles": self.articles,
            "last_new": self.last,
            "since_last_seconds": None if self.last is None else round(max(0.0, now - self.last), 1),
            "lag_p50_seconds": finite(self.lag_p50),
            "lag_p95_seconds": finite(self.lag_p95),
            "lag_over_max": self.lag_p95 is not None and not math.isfinite(self.lag_p95),
            "median_gap_seconds": finite(self.median_gap),
            "silent_after_seconds": round(self.silent_after(min_hours), 1),
            # the rule under this reader's SOURCE_SILENT_MIN_HOURS, or the nodes' check flagged it
            # (their setting) and no new article came since
            "silent": self.is_silent(now, min_hours) or self.silent_flag,
            "alerted": self.silent_flag,
            "extraction": {f: {"recent": round(r, 3), "baseline": round(b, 3)} for f, (r, b) in self.quality.items()},
            "drift": list(self.drift_flag),  # fields alerted as drifting by the nodes' check
            # requests of the source the crawler refused itself, by reason (robots_txt, out_of_scope,
            # traps, ...): not errors of the source (core/refusals.py)
            "refused": dict(sorted(self.refused.items())),
            "coverage_low": self.coverage_flag,
        }


def _int(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def parse_source(source: str, fields: Mapping[Any, Any], now: float, days: int) -> SourceHealth:
    """A `SourceHealth` from the raw hash; fields that do not parse are skipped, never fatal."""
    today = int(now // 86400)
    daily: dict[str, list[int]] = {p: [0] * days for p in "aer"}
    lags: dict[int, int] = {}
    gaps: dict[int, int] = {}
    refused: dict[str, int] = {}
    plain: dict[str, Any] = {}
    for raw_name, raw_value in fields.items():
        name = raw_name.decode("utf-8", "replace") if isinstance(raw_name, bytes) else str(raw_name)
        value = raw_value.decode("utf-8", "replace") if isinstance(raw_value, bytes) else raw_value
        prefix, _, rest = name.partition(":")
        number = _int(value)
        index = _int(rest)
        if prefix in daily and index is not None and number is not None:
            offset = today - index
            if 0 <= offset < days:
                daily[prefix][days - 1 - offset] += number
        elif prefix == "l" and index is not None and number is not None and index <= len(LAG_EDGES):
            lags[index] = number
        elif prefix == "g" and index is not None and number is not None and index < GAP_BUCKETS:
            gaps[index] = number
        elif prefix == "x" and rest and number is not None and len(refused) < REFUSED_REASONS_MAX:
            refused[rest[:40]] = number
        else:
            plain[name] = value

    def stamp(name: str) -> float | None:
        try:
            value = float(plain.get(name))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
        return value if math.isfinite(value) and value > 0 else None

    return SourceHealth(
        source=source,
        per_day=tuple(daily["a"]),
        errors_per_day=tuple(daily["e"]),
        refusals_per_day=tuple(daily["r"]),
        articles=_int(plain.get("n")) or 0,
        first=stamp("first"),
        last=stamp("last"),
        lag_p50=percentile_edge(lags, LAG_EDGES, 0.5),
        lag_p95=percentile_edge(lags, LAG_EDGES, 0.95),
        lag_counts=lags,
        median_gap=median_gap(gaps),
        silent_flag=str(plain.get("silent", "0")) == "1",
        quality=_quality(plain),
        judged=_int(plain.get("q:n")) or 0,
        drift_flag=tuple(f for f in str(plain.get("drift") or "").split(",") if f in QUALITY_FIELDS),
        refused=refused,
        coverage_flag=str(plain.get("coverage_low", "0")) == "1",
    )


def _quality(plain: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    out = {}
    for f in QUALITY_FIELDS:
        try:
            recent, baseline = float(plain[f"q:{f}:fast"]), float(plain[f"q:{f}:slow"])
        except (KeyError, TypeError, ValueError):
            continue
        if 0 <= recent <= 1 and 0 <= baseline <= 1:
            out[f] = (recent, baseline)
    return out


def sparkline(per_day: tuple[int, ...] | list[int]) -> str:
    """Articles per day as block characters, one a day (text: terminals and HTML alike)."""
    blocks = " ▁▂▃▄▅▆▇█"
    top = max(per_day, default=0)
    if top <= 0:
        return blocks[1] * len(per_day)
    return "".join(blocks[max(1, math.ceil(8 * n / top))] if n else blocks[0] for n in per_day)


SORTS = ("health", "lag", "articles", "last")


def sort_sources(rows: list[dict[str, Any]], by: str) -> list[dict[str, Any]]:
    """health: silent first, then the longest relative silence; lag: worst p95 first;
    articles: most in 28 days first; last: the longest without a new article first."""
    inf = math.inf
    if by == "lag":
        return sorted(rows, key=lambda r: -(inf if r["lag_over_max"] else (r["lag_p95_seconds"] or -1)))
    if by == "articles":
        return sorted(rows, key=lambda r: -r["articles_28d"])
    if by == "last":
        return sorted(rows, key=lambda r: -(r["since_last_seconds"] if r["since_last_seconds"] is not None else -1))

    def health(r: dict[str, Any]) -> tuple[int, float]:
        since = r["since_last_seconds"]
        ratio = 0.0 if since is None else since / max(r["silent_after_seconds"], 1.0)
        return (0 if r["silent"] else 1, -ratio)

    return sorted(rows, key=health)


def members(reply: object, key: str) -> list[bytes | str]:
    """The members of a ZRANGE reply without scores."""
    if not isinstance(reply, list) or not all(isinstance(m, (bytes, str)) for m in reply):
        raise ValueError(f"{key}: expected a list of members from ZRANGE, got {reply!r:.80}")
    return reply


async def read_sources(
    client: AnyRedis, config: SourcesConfig, spider: str, now: float, limit: int = 1000
) -> list[SourceHealth]:
    """The most recently active *limit* sources (a sync or asyncio client), one pipelined round trip."""
    index = config.index_key(spider)
    names = await maybe_await(client.zrevrange(index, 0, limit - 1))
    sources = [n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n) for n in members(names, index)]
    return await read_named_sources(client, config, spider, sources, now)


async def read_named_sources(
    client: AnyRedis, config: SourcesConfig, spider: str, sources: list[str], now: float
) -> list[SourceHealth]:
    """These sources' health (a sync or asyncio client), one pipelined round trip; a source without
    a hash reads as one that never published."""
    if not sources:
        return []
    pipe = client.pipeline(transaction=False)
    for source in sources:
        pipe.hgetall(config.key_of(spider, source))
    replies = await maybe_await(pipe.execute(raise_on_error=False))
    return [
        parse_source(source, reply, now, config.days)
        for source, reply in zip(sources, replies, strict=True)
        if isinstance(reply, dict)
    ]
