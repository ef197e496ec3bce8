"""`dcrawl events SPIDER [--json] [--follow] [--since ID|TIME] [--group NAME --consumer NAME] [--webhook]`.

Reads the change feed (`{spider}:events`, docs/events.md). Without `--group` it reads from
`--since` (a stream ID, an ISO time, or a duration back from now like `2h`; default: the start)
and, with `--follow`, blocks for new entries. With `--group NAME --consumer NAME` it reads as a
Redis consumer group (created at the stream's start if missing): each entry is acknowledged
(XACK) once printed, and entries another consumer left pending longer than `--claim-after`
seconds are taken over (XAUTOCLAIM), so a dead consumer loses nothing. `--webhook` runs the
webhook sink (events/webhook.py). Ctrl-C exits cleanly (0).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from redis.exceptions import ResponseError

from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.permissions import raise_if_denied
from distributed_crawler.events.feed import EventsConfig, dumps
from distributed_crawler.events.reading import ensure_group, read_group, read_plain

DEFAULT_CLAIM_AFTER = 60.0
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_STREAM_ID = re.compile(r"^\d+(-\d+)?$")


def since_to_id(since: str | None, now: float) -> str:
    """The exclusive start ID for XREAD/XRANGE: a stream ID as is, a time or duration as its ms."""
    since = (since or "").strip()
    if since in ("", "0", "0-0"):  # 0 is the stream's start, as in XREAD
        return "0-0"
    if _STREAM_ID.match(since) and (len(since) >= 12 or "-" in since):
        return since
    match = _DURATION.match(since)
    if match:
        return f"{int((now - float(match.group(1)) * _UNITS[match.group(2)]) * 1000)}-0"
    try:
        moment = datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--since ({since!r}) must be a stream ID (1733300000000-0), an ISO time "
            "(2026-12-04T10:00:00Z) or a duration back from now (90s, 30m, 2h, 1d)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return f"{int(moment.timestamp() * 1000)}-0"


def plain_line(entry: dict[str, Any]) -> str:
    when = entry.get("first_seen") or ""
    line = f"{entry['id']}  {entry.get('event', '?'):<8} v{entry.get('version', '?')}  {when}  {entry.get('url', '')}  {entry.get('title', '')}"
    diff = entry.get("diff")
    return f"{line}  [{diff_summary(diff)}]" if isinstance(diff, dict) else line


def diff_summary(diff: dict[str, Any]) -> str:
    """`+120 -8 chars, title changed, correction` (a changed event's diff, docs/events.md)."""
    parts = [f"+{diff.get('text_added', 0)} -{diff.get('text_removed', 0)} chars"]
    if diff.get("title_changed") is True:
        parts.append("title changed")
    if diff.get("correction") is True:
        parts.append("correction")
    return ", ".join(parts)


def cmd_events(args: argparse.Namespace) -> int:
    if not args.webhook and (args.group is None) != (args.consumer is None):
        raise ValueError("--group and --consumer go together: --group NAME --consumer NAME")
    settings, client, keys = args.connect(args)
    if args.webhook:
        from distributed_crawler.events.webhook import run_webhook_sink

        return run_webhook_sink(
            settings, client, keys.spider, args.consumer, RedisConfig.from_settings(settings).masked_url
        )
    stream = EventsConfig.from_settings(settings).stream(keys.spider)
    now = client.time()
    start = since_to_id(args.since, now[0] + now[1] / 1e6)
    out = sys.stdout
    count = 0
    try:
        if args.group:
            ensure_group(client, stream, args.group, start)
            for entry_id, entry in read_group(
                client, stream, args.group, args.consumer, args.follow, args.claim_after, lambda: False
            ):
                print(dumps(entry) if args.json else plain_line(entry), file=out, flush=args.follow)
                client.xack(stream, args.group, entry_id)
                count += 1
        else:
            for entry in read_plain(client, stream, start, args.follow, lambda: False):
                print(dumps(entry) if args.json else plain_line(entry), file=out, flush=args.follow)
                count += 1
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `dcrawl events news | head`: the reader left, entries up to here are acked
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except ResponseError as exc:
        raise_if_denied(exc)
        raise ValueError(f"cannot read {stream} ({exc}); check its type: redis-cli type {stream}") from None
    if not args.json and not args.follow:
        print(f"{count} events in {stream}" + (f" for group {args.group}" if args.group else ""), file=sys.stderr)
    return 0


def add_parser(command: Any, connect: Callable[[argparse.Namespace], tuple[Any, Any, Any]]) -> None:
    """Register `events` with cli/main.py's `command(name, func, help, json_flag)` helper."""
    p = command("events", cmd_events, "the change feed: new, changed and removed stored articles", json_flag=True)
    p.set_defaults(connect=connect)
    p.add_argument("spider")
    p.add_argument("--follow", action="store_true", help="wait for new events until Ctrl-C")
    p.add_argument("--since", help="stream ID, ISO time or duration back from now (2h); default: the start")
    p.add_argument("--group", help="read as this consumer group (created if missing); entries are acked")
    p.add_argument("--consumer", help="this reader's name in --group")
    p.add_argument(
        "--claim-after",
        type=float,
        default=DEFAULT_CLAIM_AFTER,
        help=f"take over entries pending this long at another consumer (s, default {DEFAULT_CLAIM_AFTER:.0f})",
    )
    p.add_argument("--webhook", action="store_true", help="run the webhook sink (EVENTS_WEBHOOK_URL)")
