"""The `coverage_low` alert: a source whose sitemaps and feeds list more than the crawl stores.

Run by the one node that holds the sources check (events/extension.py), beside the silence and
drift checks: for each source, the share of its URLs listed over the last SOURCE_COVERAGE_WINDOW
(a day) that were stored, leaving out those listed within SOURCE_COVERAGE_GRACE and not fetched
yet (events/coverage.py). Below SOURCE_COVERAGE_MIN, with at least SOURCE_COVERAGE_MIN_LISTED
judged, it alerts once; back at or above it, once more (`recovered`). The `coverage_low` field of
the source's hash remembers what was alerted; with too few URLs judged the state is kept.
"""

from __future__ import annotations

from typing import Any

from distributed_crawler.connection.types import AsyncRedis
from distributed_crawler.events.coverage import WORDS, Coverage, read_coverage
from distributed_crawler.events.sources import SourcesConfig

COVERAGE_LOW = "coverage_low"


def message(cov: Coverage, low: bool, minimum: float) -> str:
    ratio = cov.judged_ratio() or 0.0
    if not low:
        return f"source {cov.source}: coverage back to {ratio:.0%} of {cov.judged} listed URLs"
    reasons = ", ".join(f"{WORDS[r]} {n}" for r, n in cov.judged_by_reason().items() if n)
    return (
        f"source {cov.source}: only {cov.stored} of {cov.judged} URLs its sitemaps and feeds listed were "
        f"stored ({ratio:.0%}, under SOURCE_COVERAGE_MIN {minimum:.0%}); missing: {reasons}; "
        f"`dcrawl sources SPIDER --coverage` lists them"
    )


async def check_coverage(
    client: AsyncRedis, config: SourcesConfig, spider: str, alerter: Any, now: float, sources: list[str] | None = None
) -> list[tuple[str, bool]]:
    """Alert each source whose coverage fell below the minimum or came back; returns (source, low).
    *sources*: the ones this check covers (else every source kept)."""
    if sources is None:
        names = await client.zrevrange(config.index_key(spider), 0, config.max_sources - 1)
        sources = [n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n) for n in names]
    changed: list[tuple[str, bool]] = []
    for source, cov in (await read_coverage(client, config, spider, sources, now)).items():
        low = cov.is_low(config.coverage_min, config.coverage_min_listed)
        if low is None or low == cov.low_flag:
            continue
        await client.hset(config.key_of(spider, source), "coverage_low", "1" if low else "0")
        details = {
            "source": source,
            "state": "low" if low else "recovered",
            "listed": cov.judged,
            "stored": cov.stored,
            "coverage": round(cov.judged_ratio() or 0.0, 3),
            "missing": cov.judged_by_reason(),
        }
        await alerter.alert(COVERAGE_LOW, "-", message(cov, low, config.coverage_min), now, **details)
        changed.append((source, low))
    return changed
