"""Extraction drift: the alert when a source's template change silently breaks its extraction.

Per source, lua/source_record.lua keeps the recent and the baseline share of new articles with a
date, with authors and with main text of normal length; `check_drift` (run by the one node that
holds the sources check, beside the silence check) raises `extraction_drift` once when a field
starts drifting (events/sources.py `SourceHealth.drifting`) and once when it recovers. The
`drift` field of the source's hash remembers what was alerted, and freezes those fields' baseline
in the Lua script until they recover.
"""

from __future__ import annotations

from typing import Any

from distributed_crawler.connection.types import AsyncRedis
from distributed_crawler.events.sources import SourceHealth, SourcesConfig, read_sources

EXTRACTION_DRIFT = "extraction_drift"
WORDS = {"date": "a publication date", "authors": "authors", "text": "main text of normal length"}


async def check_drift(
    client: AsyncRedis,
    config: SourcesConfig,
    spider: str,
    alerter: Any,
    now: float,
    healths: list[SourceHealth] | None = None,
) -> list[tuple[str, str, str]]:
    """Alert each field that started or stopped drifting; returns (source, field, state) alerted.
    *healths*: the sources as read for this check (else read here)."""
    alerted: list[tuple[str, str, str]] = []
    if healths is None:
        healths = await read_sources(client, config, spider, now, config.max_sources)
    for health in healths:
        drifting = set(health.drifting(config.drift_min_articles, config.drift_drop))
        was = set(health.drift_flag)
        if drifting == was:
            continue
        await client.hset(config.key_of(spider, health.source), "drift", ",".join(sorted(drifting)))
        for field in sorted(drifting ^ was):
            state = "drift" if field in drifting else "recovered"
            recent, baseline = health.quality.get(field, (0.0, 0.0))
            if state == "drift":
                message = (
                    f"source {health.source}: only {recent:.0%} of its recent new articles have {WORDS[field]}, "
                    f"against {baseline:.0%} usually; its template may have changed: check a page with "
                    f"`dcrawl extract URL` and give the source an `extraction` rule (docs/sources.md)"
                )
            else:
                message = f"source {health.source}: {WORDS[field]} extracted again ({recent:.0%} of recent articles)"
            details = {"source": health.source, "field": field, "state": state, "recent": round(recent, 3)}
            await alerter.alert(EXTRACTION_DRIFT, "-", message, now, baseline=round(baseline, 3), **details)
            alerted.append((health.source, field, state))
    return alerted
