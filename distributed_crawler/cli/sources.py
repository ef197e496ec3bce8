"""`dcrawl sources SPIDER [--json] [--silent] [--coverage] [--sort ...] [--limit N] [--missing N] [--tag T] [--country C]`.

One line per news source (docs/monitoring.md "Sources"): articles per day over the kept days
(a sparkline), articles in that window, time since the last new article, publish-to-first-seen
lag p50/p95 (bucket edges), errors, and whether it is silent. A source in the registry
(docs/sources.md) is shown by its name, with its country and tags (`--tag`, `--country` keep those
sources only); the verbs `import`, `export`, `show`, `remove` manage the registry
(cli/source_registry.py). Every source also has its coverage (events/coverage.py): the URLs its
sitemaps and feeds listed over the last day, stored and missing by reason; `--coverage` shows that
view, with the missing URLs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from redis.exceptions import ResponseError
from rich.console import Console

from distributed_crawler.cli.output import listing_table, print_json
from distributed_crawler.cli.project import open_control
from distributed_crawler.cli.source_registry import VERBS, cmd_registry, read_registry, refusals_by_source
from distributed_crawler.connection.calls import run_sync, server_time
from distributed_crawler.connection.types import SyncRedis
from distributed_crawler.core.registry import SourceTable
from distributed_crawler.events.coverage import REASONS, WORDS, read_coverage
from distributed_crawler.events.sources import SORTS, SourcesConfig, read_sources, sort_sources, sparkline
from distributed_crawler.monitoring.nodes import duration

# what the table needs besides the sparkline: borders, a 12-wide source, the figures, the state
SOURCES_FIXED_WIDTH = 81
# the coverage view's columns of missing URLs, one a reason (events/coverage.py REASONS)
HEADERS = ("not fetched", "failed", "refused", "skipped", "not article", "near dup")


async def gather_sources(
    client: SyncRedis, config: SourcesConfig, spider: str, limit: int, missing: int = 0
) -> dict[str, Any]:
    """Each source's health and coverage (with up to *missing* missing URLs per reason)."""
    now = await server_time(client)
    healths = await read_sources(client, config, spider, now, limit)
    coverage = await read_coverage(client, config, spider, [h.source for h in healths], now, missing)
    rows = [{**h.as_dict(now, config.silent_min_hours), **coverage[h.source].as_dict()} for h in healths]
    return {"spider": spider, "time": round(now, 3), "count": len(rows), "sources": rows}


def _seconds(value: float | None, over: bool = False) -> str:
    if over:
        return "> 7d"
    return "-" if value is None else duration(value)


def with_registry(
    rows: list[dict[str, Any]], registry: SourceTable, refused: dict[str, dict[str, int]]
) -> list[dict[str, Any]]:
    """Each row with its registered source's `country` and `tags` ("" and [] when not registered);
    `refused` by reason: the source's own counts, and for a registered source the reasons counted
    only per host (a crawl from before the per-source counts, or with the change feed off)."""
    by_name = {s.source.name: s.source for s in registry.sites.values()}
    out = []
    for row in rows:
        source = by_name.get(row["source"]) or registry.by_name(row["source"])
        extra = {
            "country": source.country if source else "",
            "tags": list(source.tags) if source else [],
            "refused": {**(refused.get(source.name, {}) if source else {}), **row.get("refused", {})},
        }
        out.append({**row, **extra})
    return out


def matches(row: dict[str, Any], tags: list[str], countries: list[str]) -> bool:
    """Every `--tag` among the row's tags, and its country one of `--country` (when given)."""
    wanted = {t.lower() for t in tags}
    if wanted - {t.lower() for t in row["tags"]}:
        return False
    return not countries or row["country"] in {c.upper() for c in countries}


def cmd_sources(args: argparse.Namespace) -> int:
    if args.action is not None:
        return cmd_registry(args)
    if args.targets:
        raise ValueError(f"unknown verb {args.targets[0]!r}: dcrawl sources SPIDER [{'|'.join(VERBS)}] ...")
    if args.limit < 1:
        raise ValueError(f"--limit ({args.limit}) must be at least 1")
    if args.missing < 0:
        raise ValueError(f"--missing ({args.missing}) must be 0 or more URLs per reason")
    settings, client, keys = args.connect(args)
    config = SourcesConfig.from_settings(settings)
    try:
        data = run_sync(gather_sources(client, config, keys.spider, args.limit, args.missing))
    except ResponseError as exc:
        index = config.index_key(keys.spider)
        raise ValueError(
            f"cannot read {index} ({exc}); it should be a sorted set: check `redis-cli type {index}`, "
            f"delete it if it is not ours (the nodes rebuild it)"
        ) from None
    control = open_control(settings, client, keys)
    registry = read_registry(control)
    refused = refusals_by_source(control.frontier, registry)
    rows = with_registry(sort_sources(data["sources"], args.sort), registry, refused)
    if args.silent:
        rows = [r for r in rows if r["silent"]]
    if args.tag or args.country:
        rows = [r for r in rows if matches(r, args.tag, args.country)]
    data["sources"] = rows
    if args.json:
        print_json(data)
        return 0
    if not rows:
        what = (
            ("silent " if args.silent else "")
            + "source"
            + (" with that tag or country" if args.tag or args.country else "")
        )
        print(f"no {what} recorded for {keys.spider} in {config.index_key(keys.spider)}")
        return 0
    console = Console()
    if args.coverage:
        print_coverage(console, keys.spider, rows, config)
        return 0
    # 80 columns hold the source and every figure; the sparkline shows as many recent days as fit
    days = max(7, min(config.days, console.width - SOURCES_FIXED_WIDTH))
    table = listing_table(
        f"{keys.spider}: news sources, sorted by {args.sort} (articles per day)",
        ("source", f"last {days}d", f"{config.days}d", "since new", "lag p50", "lag p95", "errors refused", "state"),
        right=(f"{config.days}d", "since new", "lag p50", "lag p95", "errors refused"),
    )
    table.columns[1].no_wrap = table.columns[7].no_wrap = True
    table.columns[0].min_width, table.columns[7].min_width = 10, 6
    for r in rows:
        table.add_row(
            r["source"],
            sparkline(r["articles_per_day"][-days:]),
            f"{r['articles_28d']:,}",
            _seconds(r["since_last_seconds"]),
            _seconds(r["lag_p50_seconds"]),
            _seconds(r["lag_p95_seconds"], r["lag_over_max"]),
            f"{sum(r['errors_per_day']):,} {sum(r['refused'].values()):,}",
            _state(r),
        )
    console.print(table)
    return 0


def _state(row: dict[str, Any]) -> str:
    if row["silent"]:
        return "SILENT"
    if row["drift"]:
        return "DRIFT " + ",".join(row["drift"])
    return "LOW COVERAGE" if row["coverage_low"] else "ok"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def print_coverage(console: Console, spider: str, rows: list[dict[str, Any]], config: SourcesConfig) -> None:
    """The coverage view: per source, listed / stored / missing by reason, then the missing URLs."""
    rows = sorted(rows, key=lambda r: (r["coverage"] is None, r["coverage"] if r["coverage"] is not None else 0))
    hours = config.coverage_window / 3600
    table = listing_table(
        f"{spider}: coverage, URLs its sitemaps and feeds listed in the last {hours:g} h (lowest first)",
        ("source", "listed", "stored", "coverage", *HEADERS, "state"),
        right=("listed", "stored", "coverage", *HEADERS),
    )
    for r in rows:
        by = r["missing_by_reason"]
        table.add_row(
            r["source"],
            f"{r['listed']:,}",
            f"{r['stored']:,}",
            _percent(r["coverage"]),
            *(f"{by[reason]:,}" for reason in REASONS),
            "LOW" if r["coverage_low"] else "ok",
        )
    console.print(table)
    for r in rows:
        if r["missing_urls"]:
            shown = len(r["missing_urls"])
            console.print(f"{r['source']}: {r['missing']:,} missing ({shown} shown)", markup=False, highlight=False)
            for m in r["missing_urls"]:
                console.print(f"  {WORDS[m['reason']]:<16} {m['url']}", markup=False, highlight=False)
        if r["coverage_evicted"]:
            console.print(
                f"{r['source']}: {r['coverage_evicted']:,} listed URLs forgotten over SOURCE_COVERAGE_MAX_URLS "
                f"({config.coverage_max_urls:,}): raise it to judge them all",
                markup=False,
                highlight=False,
            )


def add_parser(command: Any, connect: Callable[[argparse.Namespace], tuple[Any, Any, Any]]) -> None:
    """Register `sources` with cli/main.py's `command(name, func, help, json_flag)` helper."""
    p = command(
        "sources", cmd_sources, "news sources: articles per day, last new article, lag, silence", json_flag=True
    )
    p.set_defaults(connect=connect)
    p.add_argument("spider")
    p.add_argument("action", nargs="?", choices=VERBS, help="manage the source registry (docs/sources.md)")
    p.add_argument("targets", nargs="*", help="import: FILE; export: [FILE]; show: NAME|DOMAIN; remove: NAME|DOMAIN...")
    p.add_argument("--no-seed", action="store_true", help="import: do not seed the new sources")
    p.add_argument("--by", help="import / remove: the user named in the audit (default: $USER)")
    p.add_argument(
        "--tag", action="append", default=[], help="only the sources with this tag (repeatable: all of them)"
    )
    p.add_argument("--country", action="append", default=[], help="only the sources of this country (repeatable)")
    p.add_argument("--silent", action="store_true", help="only the silent sources")
    p.add_argument(
        "--coverage", action="store_true", help="coverage: listed, stored and missing URLs by reason (docs/sources.md)"
    )
    p.add_argument("--missing", type=int, default=10, help="missing URLs shown per reason and source (default 10)")
    p.add_argument("--sort", choices=SORTS, default="health", help="health (default), lag, articles or last")
    p.add_argument("--limit", type=int, default=1000, help="most recently active sources read (default 1000)")
