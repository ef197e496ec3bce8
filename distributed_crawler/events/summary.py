"""The change feed's lines in `dcrawl status` (and its --json `events` object): stream length,
the webhook sink's delivery stats, how many sources are tracked. Reads only; never fails."""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import ResponseError

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.events.feed import EventsConfig
from distributed_crawler.events.sources import SourcesConfig, read_sources, sort_sources
from distributed_crawler.keyspace import key as spider_key

logger = logging.getLogger(__name__)

_NUMBERS = ("delivered", "failed_attempts", "pending", "lag")
TOP_READ = 100
TOP_SHOWN = 15


async def events_summary(client: AnyRedis, settings: Any, spider: str) -> dict[str, Any]:
    """`{"stream", "length", "webhook": {delivered, failed_attempts, pending, lag, ...} | None, "sources"}`."""
    config = EventsConfig.from_settings(settings)
    stream = config.stream(spider)
    hook_key = spider_key(settings, "EVENTS_WEBHOOK_STATS_KEY", spider)
    sources = SourcesConfig.from_settings(settings)
    pipe = client.pipeline(transaction=False)
    pipe.xlen(stream)
    pipe.hgetall(hook_key)
    pipe.zcard(sources.index_key(spider))
    length, hook, count = await maybe_await(pipe.execute(raise_on_error=False))
    webhook: dict[str, Any] | None = None
    if isinstance(hook, dict) and hook:
        webhook = {}
        for raw_name, raw_value in hook.items():
            name = raw_name.decode("utf-8", "replace") if isinstance(raw_name, bytes) else str(raw_name)
            value = raw_value.decode("utf-8", "replace") if isinstance(raw_value, bytes) else str(raw_value)
            if name in _NUMBERS:
                webhook[name] = int(value) if value.lstrip("-").isdigit() else None
            else:
                webhook[name] = value[:300]
    now_s, now_us = await maybe_await(client.time())
    now = now_s + now_us / 1e6
    try:
        read = await read_sources(client, sources, spider, now, TOP_READ)
    except ResponseError:  # the index holds another type: no sources shown
        read = []
    rows = sort_sources([h.as_dict(now, sources.silent_min_hours) for h in read], "health")
    top = [
        {
            k: r[k]
            for k in (
                "source",
                "articles_per_day",
                "articles_28d",
                "since_last_seconds",
                "lag_p95_seconds",
                "silent",
                "drift",
                "coverage_low",
            )
        }
        for r in rows[:TOP_SHOWN]
    ]
    return {
        "enabled": config.enabled,
        "stream": stream,
        "length": length if isinstance(length, int) else None,
        "webhook": webhook,
        "sources": count if isinstance(count, int) else None,
        # the least healthy of the TOP_READ most recently active sources (the dashboard's panel)
        "top_sources": top,
        "silent_sources": sum(1 for r in rows if r["silent"]),
    }


def events_line(summary: dict[str, Any] | None) -> str:
    """`12,345 in {news}:events; webhook 12,300 delivered, 45 pending, 3 failed tries` ('' = nothing)."""
    if not summary or not summary.get("length") and not summary.get("webhook"):
        return ""
    line = f"{summary.get('length') or 0:,} in {summary['stream']}"
    hook = summary.get("webhook")
    if hook:
        line += (
            f"; webhook {hook.get('delivered') or 0:,} delivered, {hook.get('pending') or 0:,} pending, "
            f"{hook.get('failed_attempts') or 0:,} failed tries"
        )
    if summary.get("sources"):
        silent = summary.get("silent_sources") or 0
        line += f"; {summary['sources']:,} sources" + (f", {silent} silent" if silent else "") + " (dcrawl sources)"
    return line
