"""`dcrawl host`, `dcrawl overrides`, `dcrawl pause` / `resume`, `dcrawl audit` (docs/operations.md).

The actions themselves are core/control.py's (shared with the dashboard); this module parses the
arguments and prints. Bad input is one line and exit code 2.
"""

from __future__ import annotations

import argparse
import getpass
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console

from distributed_crawler.cli.output import listing_table, print_json
from distributed_crawler.cli.project import open_control
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.lua import reply_text
from distributed_crawler.connection.types import SyncRedis
from distributed_crawler.core.control import (
    RENDER,
    BadInput,
    HostChange,
    audit_words,
    decode_override,
    describe,
    host_action,
    known_host,
    parse_duration,
    parse_host,
    pause_action,
)
from distributed_crawler.core.crawl_control import CrawlControl
from distributed_crawler.frontier.keys import SpiderKeys

BAD_INPUT = 2  # exit code of a refused argument
Connect = Callable[[argparse.Namespace], tuple[Any, Any, Any]]


def user(args: argparse.Namespace) -> str:
    if getattr(args, "by", None):
        return str(args.by)
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _refused(exc: BadInput) -> int:
    print(f"dcrawl: {exc}", file=sys.stderr)
    return BAD_INPUT


def cmd_host(args: argparse.Namespace, connect: Connect) -> int:
    try:
        host, scope = parse_host(args.host)
        if args.action in ("set", "unset", "block", "unblock", "purge"):
            change = HostChange.of(
                args.action, args.delay, args.concurrency, args.max_pages, args.render, args.duration, args.reason
            )
    except BadInput as exc:
        return _refused(exc)
    settings, client, keys = connect(args)
    control = open_control(settings, client, keys)
    if args.action == "show":
        return _show(args, control, host, scope, client)
    if args.action == "purge":
        change = HostChange({"dead_letter": args.dead_letter})
    _, now, dropped = host_action(control, settings, host, args.action, change, user(args), "cli")
    if dropped is not None:
        where = " (dead-lettered as purged)" if args.dead_letter else ""
        print(f"purged {dropped} pending request(s) of {scope} {host}{where}")
        return 0
    if args.action == "unset":
        removed = ", ".join(change.cleared) if change.cleared else "every override"
        print(f"unset {scope} {host}: {removed} removed; now {describe(now) if now else 'no override left'}")
        return 0
    if scope == "host" and not known_host(control, host):
        print(f"note: no request of {host} is known yet; the override applies once one comes")
    print(f"{args.action} {scope} {host}: {describe(now) if now else 'no override left'}")
    return 0


def _show(args: argparse.Namespace, control: CrawlControl, host: str, scope: str, client: SyncRedis) -> int:
    override = decode_override(run_sync(control.override(host)))
    frontier = control.frontier
    hosts = frontier.host_control()
    state: dict[str, str] = {}
    pending = None
    if hosts is not None:
        raw = client.hgetall(hosts.host_state_key(host))
        state = {reply_text(k): reply_text(v) for k, v in raw.items()}
        queue = frontier.host_queue_key(host)  # and its list, `queue/` (lua/lib/host.lua host_list)
        kinds = (client.type(queue), client.type(queue + "/"))
        if kinds[0] in (b"zset", b"none") and kinds[1] in (b"list", b"none") and kinds != (b"none", b"none"):
            pending = int(client.zcard(queue)) + int(client.llen(queue + "/"))
    out = {"host": host, "scope": scope, "override": override, "state": state, "pending": pending}
    if args.json:
        print_json(out)
        return 0
    console = Console()
    console.print(f"{scope} {host}: pending {pending if pending is not None else '?'}")
    console.print(f"override: {describe(override)}")
    if override and override.get("at"):
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(override["at"])))
        console.print(f"  set by {override.get('by', '?')} at {at} from {override.get('source', '?')}")
    for line in host_state_words(state, time.time()):
        console.print(line, markup=False, highlight=False)
    return 0


def _num(state: dict[str, str], name: str) -> float:
    try:
        value = float(state.get(name, ""))
    except ValueError:
        return 0.0
    return value if math.isfinite(value) else 0.0


def host_state_words(state: dict[str, str], now: float) -> list[str]:
    """The host hash (lua/lib/host.lua: iv, cd, ad, bo, cap, pages, max, until, why) in words."""
    if not state:
        return ["state: nothing recorded yet (no request of it leased)"]
    pace = []
    for name, words in (("iv", "{}s between two requests"), ("cd", "Crawl-delay {}s"), ("ad", "adaptive delay {}s")):
        if _num(state, name) > 0:
            pace.append(words.format(f"{_num(state, name):g}"))
    if _num(state, "cap") > 0:
        pace.append(f"at most {int(_num(state, 'cap'))} in flight")
    if _num(state, "bo") > 0:
        pace.append(f"backoff level {int(_num(state, 'bo'))}")
    lines = ["pace: " + (", ".join(pace) if pace else "no delay")]
    pages = int(_num(state, "pages"))
    budget = int(_num(state, "max")) if "max" in state and _num(state, "max") >= 0 else None
    lines.append(f"pages: {pages:,} fetched" + (f" of a budget of {budget:,}" if budget is not None else ""))
    until, why = _num(state, "until"), "".join(c for c in state.get("why", "") if c.isprintable())
    if until > now:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(until))
        lines.append(f"blocked until {at}" + (f": {why}" if why else ""))
    elif why:
        lines.append(f"not blocked (last block: {why})")
    known = {"iv", "cd", "ad", "cap", "bo", "pages", "max", "until", "why"}
    other = {k: v for k, v in state.items() if k not in known}
    if other:
        lines.append("other fields: " + ", ".join(f"{k} {v[:40]}" for k, v in sorted(other.items())))
    return lines


def cmd_overrides(args: argparse.Namespace, connect: Connect) -> int:
    settings, client, keys = connect(args)
    rows = []
    for target, raw in sorted(run_sync(open_control(settings, client, keys).overrides()).items()):
        rows.append({"target": target.decode("utf-8", "replace"), **(decode_override(raw) or {})})
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print(f"no overrides for {args.spider}")
        return 0
    table = listing_table(f"overrides of {args.spider}", ["target", "scope", "override", "by", "at"])
    for r in rows:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(r["at"]))) if r.get("at") else ""
        table.add_row(r["target"], str(r.get("scope", "")), describe(r), str(r.get("by", "")), at)
    Console().print(table)
    return 0


def cmd_pause(args: argparse.Namespace, connect: Connect) -> int:
    """`dcrawl pause SPIDER [--drain] | --all` and `dcrawl resume SPIDER | --all`."""
    if not args.spider and not args.all:
        return _refused(BadInput("name a SPIDER, or --all for every spider found in Redis"))
    args.spider = args.spider or ""
    settings, client, _ = connect(args)
    if args.all:
        from distributed_crawler.monitoring.dashboard import discover_spiders

        names = discover_spiders(client, settings)
    else:
        names = [args.spider]
    if not names:
        print("no spider found in Redis")
    drain = bool(getattr(args, "drain", False))
    for name in names:
        control = open_control(settings, client, SpiderKeys.from_settings(settings, name))
        old = pause_action(control, settings, args.command, drain, user(args), "cli")
        if args.command == "pause":
            how = "workers finish what they hold" if drain else "workers give back what they have not started"
            print(f"paused {name}: nothing more is leased; {how}; `dcrawl resume {name}` to go on")
        else:
            print(f"resumed {name}" if old else f"{name} was not paused")
    return 0


def cmd_audit(args: argparse.Namespace, connect: Connect) -> int:
    since = "-"
    if args.since:
        try:
            since = str(int((time.time() - parse_duration(args.since)) * 1000))
        except BadInput as exc:
            return _refused(exc)
    settings, client, keys = connect(args)
    entries = []
    for entry_id, fields in run_sync(open_control(settings, client, keys).audit_entries(since)):
        row = {k.decode(): v.decode("utf-8", "replace") for k, v in fields.items()}
        row["id"] = entry_id.decode()
        entries.append(row)
    if args.json:
        print_json(entries)
        return 0
    if not entries:
        print(f"no control actions recorded for {args.spider}")
        return 0
    zone = time.strftime("%Z")
    table = listing_table(f"audit of {args.spider}", [f"time ({zone})", "action", "target", "change", "by", "from"])
    for e in entries:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(e.get("time") or 0)))
        action = e.get("action", "")
        change = f"{audit_words(action, e.get('old', ''))} -> {audit_words(action, e.get('new', ''))}"
        table.add_row(when, action, e.get("target", ""), change, e.get("by", ""), e.get("source", ""))
    Console().print(table)
    return 0


def add_parser(command: Callable[..., argparse.ArgumentParser], connect: Connect) -> None:
    p = command(
        "host",
        lambda a: cmd_host(a, connect),
        "live per-host control: set, unset, block, unblock, purge, show",
        json_flag=True,
    )
    p.add_argument("spider")
    p.add_argument("host", help="a host (news.example.com) or a registered domain (example.com: every subdomain)")
    p.add_argument("action", choices=["set", "unset", "block", "unblock", "purge", "show"])
    # each takes a value for set; for unset a bare flag names what to remove (no flag: everything)
    p.add_argument(
        "--delay", nargs="?", const=True, help="set: seconds between two requests of the host, all workers together"
    )
    p.add_argument(
        "--concurrency",
        nargs="?",
        const=True,
        help="set: requests of the host in flight at once, all workers together",
    )
    p.add_argument(
        "--max-pages", dest="max_pages", nargs="?", const=True, help="set: pages of the host the crawl may fetch"
    )
    p.add_argument("--render", nargs="?", const=True, help=f"set: render its pages in the browser: {', '.join(RENDER)}")
    p.add_argument("--for", dest="duration", help="block: how long (90s, 15m, 2h, 1d); default until unblock")
    p.add_argument("--reason", help="block: why (shown by dcrawl overrides and status)")
    p.add_argument("--dead-letter", action="store_true", dest="dead_letter", help="purge: dead-letter them (purged)")
    p.add_argument("--by", help="who does it, for the audit trail (default: $USER)")
    p = command(
        "overrides", lambda a: cmd_overrides(a, connect), "every per-host override: who, when, why, expiry", True
    )
    p.add_argument("spider")
    for name, help_text in (
        ("pause", "pause a crawl: workers lease nothing (state in Redis, survives restarts)"),
        ("resume", "resume a paused crawl"),
    ):
        p = command(name, lambda a: cmd_pause(a, connect), help_text)
        p.add_argument("spider", nargs="?")
        p.add_argument("--all", action="store_true", help="every spider found in Redis")
        p.add_argument("--by", help="who does it, for the audit trail (default: $USER)")
        if name == "pause":
            p.add_argument("--drain", action="store_true", help="workers finish what they hold (default: give it back)")
    p = command("audit", lambda a: cmd_audit(a, connect), "the control actions taken on a crawl", json_flag=True)
    p.add_argument("spider")
    p.add_argument("--since", help="only the last 90s, 15m, 2h, 1d ...")
