"""`dcrawl hosts SPIDER [--json] [--limit N] [--scan N]`: the per-host frontier, hosts with the most pending first.

Reads `--scan` hosts (the due-soonest ones, the latest-due ones and the over-budget ones with the
most left; 0 = every host, walked with ZSCAN) and prints the `--limit` with the most pending:
pending, next due, blocked until and why, pages, budget, over budget, in-flight cap (docs/frontier.md);
then the hosts with the most requests refused (docs/security.md) or dropped at lease as expired
(reason `expired`, REQUEST_TTL, docs/frontier.md), per reason.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from distributed_crawler.cli.output import listing_table, print_json
from distributed_crawler.cli.project import open_frontier
from distributed_crawler.connection.calls import run_sync, server_time
from distributed_crawler.connection.types import SyncRedis
from distributed_crawler.core.control import decode_override, describe
from distributed_crawler.core.crawl_control import CrawlControl
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.monitoring.control import control_summary
from distributed_crawler.monitoring.hosts import (
    by_pending,
    by_refusals,
    host_totals,
    read_refusals,
    read_rows,
    sample_hosts,
    wrong_host_keys,
)
from distributed_crawler.monitoring.nodes import Skips, duration
from distributed_crawler.monitoring.status import control_figures, skip_lines

DEFAULT_SCAN = 10_000
DEFAULT_LIMIT = 50


async def gather_hosts(
    client: SyncRedis, keys: SpiderKeys, scan: int, limit: int, parts: list[SpiderKeys] | None = None
) -> dict[str, Any]:
    """What `dcrawl hosts --json` prints: totals, the rows shown, and what was skipped; summed over
    the frontier's shards (`parts`, the Frontier's `part_keys()`; default: the spider's keys)."""
    skips = Skips()
    now = await server_time(client)
    in_ready = due = over = 0
    rows: list[Any] = []
    refused: dict[str, dict[str, int]] = {}
    for part in dict.fromkeys([keys, *(parts or [])]) if parts else [keys]:
        wrong = await wrong_host_keys(client, part, skips)
        counted = await host_totals(client, part, now, wrong)
        in_ready, due, over = in_ready + counted[0], due + counted[1], over + counted[2]
        ready, over_hosts = await sample_hosts(client, part, wrong, scan, skips)
        rows += await read_rows(client, part, now, ready, over_hosts, skips)
        for host, reasons in (await read_refusals(client, part, skips)).items():
            for reason, n in reasons.items():
                refused.setdefault(host, {})[reason] = refused.get(host, {}).get(reason, 0) + n
    rows = by_pending(rows)
    return {
        "spider": keys.spider,
        "time": round(now, 3),
        "count": in_ready + over,
        "ready": due,
        "over_budget": over,
        "scanned": len(rows),
        "hosts": [{**r.as_json(), "refused": refused.get(r.host, {})} for r in rows[:limit]],
        "refused": by_refusals(refused)[:limit],
        **skips.as_json(),
    }


def render_hosts(data: dict[str, Any]) -> Table:
    shown = len(data["hosts"])
    title = (
        f"{data['spider']}: {data['count']:,} hosts ({data['ready']:,} due now, {data['over_budget']:,} over budget); "
        f"top {shown} by pending of {data['scanned']:,} read"
    )
    table = listing_table(
        title,
        ("host", "pending", "due in", "blocked until", "why", "pages", "budget", "over", "cap"),
        right=("pending", "due in", "pages", "budget", "over", "cap"),
    )
    for h in data["hosts"]:
        until = ""
        if h["blocked_until"] is not None:
            until = f"{time.strftime('%H:%M:%S', time.localtime(h['blocked_until']))} ({duration(h['blocked_for'])})"
        table.add_row(
            h["host"],
            f"{h['pending']:,}",
            "" if h["due_in"] is None else "now" if h["due_in"] <= 0 else f"{h['due_in']:.1f}s",
            until,
            h["why"][:80],
            f"{h['pages']:,}",
            "" if h["budget"] is None else f"{h['budget']:,}",
            "yes" if h["over_budget"] else "",
            "" if h["in_flight_cap"] is None else f"{h['in_flight_cap']:,}",
        )
    return table


def override_rows(control: CrawlControl, limit: int) -> list[dict[str, Any]]:
    """The operator's overrides (dcrawl host ... set/block), at most `limit`, blocks first."""
    rows = [
        {"target": target.decode("utf-8", "replace"), **(decode_override(raw) or {})}
        for target, raw in run_sync(control.overrides()).items()
    ]
    return sorted(rows, key=lambda r: (not r.get("until"), r["target"]))[:limit]


def render_overrides(data: dict[str, Any]) -> Table:
    table = listing_table(
        f"{data['spider']}: overrides (dcrawl host, dcrawl overrides)", ("target", "scope", "override")
    )
    for row in data["overrides"]:
        table.add_row(row["target"], str(row.get("scope", "")), describe(row))
    return table


def render_refused(data: dict[str, Any]) -> Table:
    table = listing_table(
        f"{data['spider']}: requests refused or expired, hosts with the most first (docs/security.md)",
        ("host", "refused", "reasons"),
        right=("refused",),
    )
    for row in data["refused"]:
        reasons = ", ".join(f"{reason} {n:,}" for reason, n in row["reasons"].items())
        table.add_row("(other hosts)" if row["host"] == "*" else row["host"], f"{row['total']:,}", reasons)
    return table


def cmd_hosts(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise ValueError(f"--limit ({args.limit}) must be at least 1")
    if args.scan < 0:
        raise ValueError(f"--scan ({args.scan}) must be >= 0 (0 = every host)")
    settings, client, keys = args.connect(args)
    frontier = open_frontier(settings, client, keys)
    parts = frontier.part_keys()
    data = run_sync(gather_hosts(client, keys, args.scan, args.limit, parts))
    control = CrawlControl.of(frontier)
    data["control"] = run_sync(control_summary(control, data["time"]))  # pause, overrides, operator blocks
    data["overrides"] = override_rows(control, args.limit)
    if args.json:
        print_json(data)
        return 0
    if not data["count"] and not data["hosts"]:
        print(
            f"no host queued for {keys.spider} (empty, or SCHEDULER_QUEUE_CLASS keeps no per-host queues; "
            f"see dcrawl status {keys.spider})"
        )
    else:
        Console().print(render_hosts(data))
    for label, text in control_figures(data["control"]):
        print(f"{label}: {text}")
    if data["overrides"]:
        Console().print(render_overrides(data))
    if data["refused"]:
        Console().print(render_refused(data))
    for line in skip_lines(data):
        print(f"dcrawl: {line}", file=sys.stderr)
    return 0


def add_parser(command: Any, connect: Callable[[argparse.Namespace], tuple[Any, Any, SpiderKeys]]) -> None:
    """Register `hosts` with cli/main.py's `command(name, func, help, json_flag)` helper and its `connect`."""
    p = command("hosts", cmd_hosts, "hosts of the frontier: pending, next due, blocks, budgets", json_flag=True)
    p.set_defaults(connect=connect)
    p.add_argument("spider")
    p.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help=f"hosts shown (default {DEFAULT_LIMIT})")
    p.add_argument(
        "--scan",
        type=int,
        default=DEFAULT_SCAN,
        help=f"hosts read to find the top by pending (default {DEFAULT_SCAN:,}; 0 = every host)",
    )
