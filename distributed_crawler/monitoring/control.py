"""The live control state of a crawl for `dcrawl status`, `dcrawl hosts`, the dashboard and
Prometheus: the pause (since, by, drain) and the operator's per-host overrides (a count, and the
blocks with their expiry). Read through the spider's CrawlControl; garbage in Redis is skipped."""

from __future__ import annotations

import json
from typing import Any

from redis.exceptions import ResponseError

from distributed_crawler.core.crawl_control import CrawlControl

BLOCKS_SHOWN = 20  # blocks listed by status; the count covers all
SCAN_MAX = 10_000  # overrides looked at for their blocks (the count is HLEN: exact)


async def control_summary(control: CrawlControl, now: float) -> dict[str, Any]:
    """{"paused": {since, by, drain, source} | None, "overrides": n, "blocked": n, "blocks": [...]}."""
    try:
        paused = await control.pause_state()
    except ResponseError:  # the pause key of another type: it still says someone paused
        paused = {"since": 0.0, "by": "unknown", "drain": False, "source": "unknown"}
    count = 0
    blocks: list[dict[str, Any]] = []
    try:
        count = await control.override_count()
        raw = await control.overrides() if count <= SCAN_MAX else {}
    except ResponseError:
        raw = {}
    for target, value in raw.items():
        try:
            o = json.loads(value)
            until = float(o.get("until", 0))
        except (ValueError, TypeError, AttributeError):
            continue
        if until > now:
            name = target.decode("utf-8", "replace") if isinstance(target, bytes) else str(target)
            blocks.append({"target": name, "until": round(until, 3), "reason": str(o.get("reason", ""))[:200]})
    blocks.sort(key=lambda b: b["until"])
    return {"paused": paused, "overrides": count, "blocked": len(blocks), "blocks": blocks[:BLOCKS_SHOWN]}
