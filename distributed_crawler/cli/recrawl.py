"""`dcrawl schedule SPIDER [--json]` and `dcrawl recrawl SPIDER (--all | --pattern REGEX)` (docs/recrawl.md).

`schedule` shows the revisit schedule: how many URLs, how many due now and in the next hour, and
the next ones with their interval. `recrawl` starts a new pass without forgetting anything: the
scheduled URLs that match become due now (the nodes move them into the frontier), and every stored
URL that matches (the `items` table of STORAGE_URL, or `--from`) and is not scheduled is pushed once,
bypassing the seen-filter. Both walk their sources in batches: memory stays bounded.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from redis.exceptions import ResponseError
from rich.console import Console
from rich.table import Table
from scrapy import Request

from distributed_crawler.cli.output import listing_table, print_json
from distributed_crawler.cli.project import open_enqueuer, open_frontier
from distributed_crawler.connection.calls import run_sync, server_time
from distributed_crawler.dedup.fingerprint import CanonicalFingerprinter, FingerprintConfig
from distributed_crawler.frontier.base import placed_entry
from distributed_crawler.frontier.codec import RequestCodec, allowed_classes
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.monitoring.nodes import duration
from distributed_crawler.recrawl.schedule import FINGERPRINT_CHARS, RecrawlKeys, RevisitSchedule, sync_client
from distributed_crawler.redact import mask_url
from distributed_crawler.storage.backends import StorageBackend, StorageError, open_storage

BATCH = 500
DEFAULT_LIMIT = 20


def gather_schedule(schedule: RevisitSchedule, spider: str, limit: int) -> dict[str, Any]:
    """What `dcrawl schedule --json` prints: the summary (every shard) and the `limit` URLs due soonest."""
    now = run_sync(server_time(schedule.client))
    summary = run_sync(schedule.summary(now))
    upcoming, unreadable = [], 0
    for fp, due, state in run_sync(schedule.soonest(limit)):
        if state is None or state.url is None:
            unreadable += 1
            continue
        upcoming.append(
            {
                "url": state.url,
                "due_in": round(due - now, 1),
                "interval": state.interval,
                "etag": state.etag or None,
                "last_modified": state.last_modified or None,
                "revisits": state.step,  # made since the first fetch
                "ends_in": round(state.ends - now, 1) if state.ends else None,  # None: never leaves
                "fingerprint": fp,
            }
        )
    return {"spider": spider, "time": round(now, 3), **summary, "next": upcoming, "unreadable": unreadable}


def render_schedule(data: dict[str, Any]) -> Table:
    title = (
        f"{data['spider']}: {data['scheduled']:,} URLs scheduled for revisits "
        f"({data['due_now']:,} due now, {data['due_next_hour']:,} in the next hour)"
    )
    table = listing_table(title, ("url", "due in", "interval", "validators"), right=("due in", "interval"))
    for row in data["next"]:
        validators = ", ".join(
            v for v in ("ETag" if row["etag"] else "", "Last-Modified" if row["last_modified"] else "") if v
        )
        table.add_row(
            row["url"], "now" if row["due_in"] <= 0 else duration(row["due_in"]), duration(row["interval"]), validators
        )
    return table


def cmd_schedule(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise ValueError(f"--limit ({args.limit}) must be at least 1")
    settings, client, keys = args.connect(args)
    schedule = RevisitSchedule(client, open_frontier(settings, client, keys))
    try:
        data = gather_schedule(schedule, args.spider, args.limit)
    except ResponseError as exc:
        raise ValueError(f"cannot read the schedule ({str(exc)[:200]}); check {schedule.where}") from None
    if args.json:
        print_json(data)
        return 0
    if not data["scheduled"]:
        print(f"nothing scheduled for revisits in {schedule.where} (set RECRAWL_RULES; see docs/recrawl.md)")
    else:
        Console().print(render_schedule(data))
    if data["unreadable"]:
        print(f"dcrawl: skipped {data['unreadable']} unreadable entries of {schedule.where}", file=sys.stderr)
    return 0


def _matcher(args: argparse.Namespace) -> Callable[[str], bool]:
    if args.all:
        return lambda url: True
    try:
        pattern = re.compile(args.pattern)
    except re.error as exc:
        raise ValueError(f"--pattern {args.pattern!r} is not a regex ({exc})") from None
    return lambda url: pattern.search(url) is not None


def _batches(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def make_scheduled_due(schedule: RevisitSchedule, matches: Callable[[str], bool]) -> int:
    """Every scheduled URL that matches, on every shard, becomes due now (server time); returns how many."""
    now = run_sync(server_time(schedule.client))
    due = 0
    for batch in _batches(schedule.iter_states(), BATCH):
        chosen: dict[RecrawlKeys, list[str]] = {}
        for keys, fp, state in batch:
            if state is not None and state.url and matches(state.url):
                chosen.setdefault(keys, []).append(fp)
        due += run_sync(schedule.make_due(chosen, now))
    return due


def queue_stored(
    settings: Any,
    schedule: RevisitSchedule,
    keys: SpiderKeys,
    backend: StorageBackend,
    matches: Callable[[str], bool],
) -> int:
    """Push every stored URL that matches and is not scheduled (the schedule moves those), bypassing
    the seen-filter; returns how many. One request a URL, with the spider's default callback."""
    frontier = schedule.frontier
    enqueuer = open_enqueuer(settings, sync_client(schedule.client), keys)
    fingerprinter = CanonicalFingerprinter(FingerprintConfig.from_settings(settings))
    codec = RequestCodec(None, allowed_classes(settings))
    queued = 0
    for urls in backend.iter_urls(batch=BATCH):
        chosen = [url for url in urls if matches(url)]
        if not chosen:
            continue
        requests = [Request(url, dont_filter=True) for url in chosen]  # queued again on purpose: each push its own
        fps = [fingerprinter.fingerprint(r).hex()[:FINGERPRINT_CHARS] for r in requests]
        entries: list[Any] = []
        for request, in_schedule in zip(requests, run_sync(schedule.scheduled(chosen, fps))):
            if in_schedule:
                continue
            placement = frontier.placement(request.url)
            member = make_member(codec.encode(request, slot=placement.slot), request.priority)
            entries.append(placed_entry("", True, member, 0.0, placement))
        if entries:
            run_sync(enqueuer.run("push", entries))
            queued += len(entries)
    return queued


def cmd_recrawl(args: argparse.Namespace) -> int:
    settings, client, keys = args.connect(args)
    matches = _matcher(args)
    schedule = RevisitSchedule(client, open_frontier(settings, client, keys))
    source = args.source or settings.get("STORAGE_URL")
    try:  # before anything changes: a bad source leaves the schedule as it was
        backend = open_storage(source)
    except StorageError as exc:
        raise ValueError(f"{exc} (or pass --from STORAGE_URL)") from None
    try:
        due = make_scheduled_due(schedule, matches)
        queued = queue_stored(settings, schedule, keys, backend, matches)
    finally:
        backend.close()
    what = "every URL" if args.all else f"URLs matching {args.pattern!r}"
    print(
        f"recrawl of {what}: {due:,} scheduled URLs due now, {queued:,} stored URLs queued "
        f"(from {mask_url(source)}); watch with `dcrawl status {args.spider}`"
    )
    return 0


def add_parser(command: Any, connect: Callable[[argparse.Namespace], tuple[Any, Any, SpiderKeys]]) -> None:
    """Register `schedule` and `recrawl` with cli/main.py's `command(...)` helper and its `_connect`."""
    p = command("schedule", cmd_schedule, "the revisit schedule: what is due, and when", json_flag=True)
    p.set_defaults(connect=connect)
    p.add_argument("spider")
    p.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help=f"URLs listed (default {DEFAULT_LIMIT})")
    p = command("recrawl", cmd_recrawl, "start a new pass: scheduled and stored URLs fetched once more")
    p.set_defaults(connect=connect)
    p.add_argument("spider")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every scheduled and stored URL")
    which.add_argument("--pattern", help="only URLs this regex matches (searched anywhere in the URL)")
    p.add_argument("--from", dest="source", help="the STORAGE_URL whose urls are queued (default: the project's)")
