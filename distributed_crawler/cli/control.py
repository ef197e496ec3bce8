"""Live control of a running crawl: `dcrawl host`, `dcrawl overrides`, `dcrawl audit` (docs/operations.md).

An override lives in Redis (the frontier's overrides hash), wins over the settings and reaches every
node at its next lease without a restart: in host mode the lease script reads it on the server
(delay, concurrency, max-pages, block). HOST may be a registered domain (`example.com`): the override
then applies to each of its subdomains, and says so (`scope`). Every action appends to the capped
audit stream, with the user ($USER or --by), the old and the new value.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console

from distributed_crawler.cli.output import listing_table, print_json
from distributed_crawler.cli.project import open_frontier
from distributed_crawler.core.traps import registered_domain
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.queue.base import Frontier
from distributed_crawler.queue.keys import SpiderKeys

BAD_INPUT = 2  # exit code of a refused argument
_HOST = re.compile(
    r"^(?:[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?::\d{1,5})?$"
)
_IPV6 = re.compile(r"^\[[0-9a-f:.]+\](?::\d{1,5})?$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
RENDER = ("on", "off", "auto")


class BadInput(ValueError):
    """A refused argument: one line, exit code 2."""


def parse_duration(raw: str) -> float:
    """`90s`, `15m`, `2h`, `1d` (or plain seconds) -> seconds."""
    match = _DURATION.match(raw.strip().lower())
    if not match or float(match.group(1)) <= 0:
        raise BadInput(f"duration ({raw}) must be a number with s, m, h or d, e.g. 90s, 15m, 2h, 1d")
    return float(match.group(1)) * UNITS[match.group(2)]


def parse_host(raw: str) -> tuple[str, str]:
    """(host, scope): a lowercased host[:port] and "domain" when it is a registered domain itself."""
    host = raw.strip().lower().rstrip(".")
    if not host or len(host) > 300 or not (_HOST.match(host) or _IPV6.match(host)) or "://" in raw:
        raise BadInput(f"host ({raw}) must be a host name like news.example.com or a domain like example.com")
    bare = host.strip("[]") if host.startswith("[") else host.split(":")[0]
    is_domain = "." in bare and ":" not in host and registered_domain(bare) == bare and not bare[-1].isdigit()
    return host, "domain" if is_domain else "host"


def _user(args: argparse.Namespace) -> str:
    if args.by:
        return str(args.by)
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def record(
    frontier: Frontier, settings: Any, action: str, target: str, old: Any, new: Any, by: str, source: str
) -> None:
    """One audit entry (action, target, old and new value, user, time, source)."""
    maxlen = SettingsReader(settings).int("AUDIT_MAXLEN", min=1)
    fields = {
        "action": action,
        "target": target,
        "old": json.dumps(old, sort_keys=True),
        "new": json.dumps(new, sort_keys=True),
        "by": by,
        "time": f"{time.time():.3f}",
        "source": source,
    }
    frontier.audit(fields, maxlen)


def _decode(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return {"garbage": raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)}
    return value if isinstance(value, dict) else {"garbage": str(value)}


def _known(frontier: Frontier, host: str) -> bool:
    hosts = frontier.host_control()
    if hosts is None:
        return True  # no per-host state to ask: nothing to note
    return bool(frontier.client.exists(hosts.host_state_key(host), frontier.host_queue_key(host)))


def cmd_host(args: argparse.Namespace, connect: Callable[[argparse.Namespace], tuple[Any, Any, Any]]) -> int:
    try:
        host, scope = parse_host(args.host)
        change = _change(args)
    except BadInput as exc:
        print(f"dcrawl: {exc}", file=sys.stderr)
        return BAD_INPUT
    settings, client, keys = connect(args)
    frontier = open_frontier(settings, client, keys)
    old = _decode(frontier.override(host))
    by = _user(args)
    if args.action == "show":
        return _show(args, frontier, host, scope, old)
    if args.action == "purge":
        node = f"cli:{by}"
        cap = SettingsReader(settings).int("SCHEDULER_FAILED_MAX", min=1)
        dropped = int(frontier.purge(host, scope, args.dead_letter, cap, node, time.time()))
        record(
            frontier, settings, "purge", host, None, {"dropped": dropped, "dead_letter": args.dead_letter}, by, "cli"
        )
        where = " (dead-lettered as purged)" if args.dead_letter else ""
        print(f"purged {dropped} pending request(s) of {scope} {host}{where}")
        return 0
    new = dict(old or {})
    new.pop("garbage", None)
    if args.action == "set":
        new.update(change)
    elif args.action == "block":
        new["until"] = (
            round(time.time() + args.seconds, 3) if args.seconds else round(time.time() + 10 * 365 * 86400, 3)
        )
        new["reason"] = args.reason or "blocked by an operator"
    elif args.action == "unblock":
        new.pop("until", None)
        new.pop("reason", None)
    control = {k: v for k, v in new.items() if k not in ("scope", "by", "at", "source")}
    if control:
        new.update({"scope": scope, "by": by, "at": round(time.time(), 3), "source": "cli"})
        frontier.write_override(host, json.dumps(new, sort_keys=True))
    else:
        frontier.write_override(host, None)
        new = {}
    record(frontier, settings, args.action, host, old, new or None, by, "cli")
    if not _known(frontier, host) and scope == "host":
        print(f"note: no request of {host} is known yet; the override applies once one comes")
    print(f"{args.action} {scope} {host}: {_describe(new) if new else 'no override left'}")
    return 0


def _change(args: argparse.Namespace) -> dict[str, Any]:
    """What `set` changes, checked; `block --for` parsed into args.seconds."""
    args.seconds = parse_duration(args.duration) if getattr(args, "duration", None) else None
    if args.action != "set":
        return {}
    change: dict[str, Any] = {}
    if args.delay is not None:
        if not args.delay >= 0:
            raise BadInput(f"--delay ({args.delay}) must be >= 0 seconds between two requests")
        change["delay"] = args.delay
    if args.concurrency is not None:
        if args.concurrency < 1:
            raise BadInput(f"--concurrency ({args.concurrency}) must be >= 1 request in flight")
        change["concurrency"] = args.concurrency
    if args.max_pages is not None:
        if args.max_pages < 0:
            raise BadInput(f"--max-pages ({args.max_pages}) must be >= 0")
        change["max_pages"] = args.max_pages
    if args.render is not None:
        change["render"] = args.render
    if not change:
        raise BadInput("set needs at least one of --delay, --concurrency, --max-pages, --render")
    return change


def _describe(o: dict[str, Any]) -> str:
    parts = [f"{k} {o[k]}" for k in ("delay", "concurrency", "max_pages", "render") if k in o]
    if "until" in o:
        parts.append(
            f"blocked until {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(o['until']))} ({o.get('reason', '')})"
        )
    return ", ".join(parts) or "none"


def _show(args: argparse.Namespace, frontier: Frontier, host: str, scope: str, override: dict | None) -> int:
    hosts = frontier.host_control()
    state = {}
    pending = None
    if hosts is not None:
        raw = frontier.client.hgetall(hosts.host_state_key(host))
        state = {k.decode(): v.decode("utf-8", "replace") for k, v in raw.items()}
        try:
            pending = int(frontier.client.zcard(frontier.host_queue_key(host)))
        except Exception:  # noqa: BLE001 - a queue key of the wrong type: shown as unknown
            pending = None
    out = {"host": host, "scope": scope, "override": override, "state": state, "pending": pending}
    if args.json:
        print_json(out)
        return 0
    console = Console()
    console.print(f"{scope} {host}: pending {pending if pending is not None else '?'}")
    console.print(f"override: {_describe(override) if override else 'none'}")
    if override:
        console.print(
            f"  set by {override.get('by', '?')} at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(override.get('at', 0)))}"
        )
    if state:
        console.print("state: " + ", ".join(f"{k} {v}" for k, v in sorted(state.items())))
    return 0


def cmd_overrides(args: argparse.Namespace, connect: Callable[[argparse.Namespace], tuple[Any, Any, Any]]) -> int:
    settings, client, keys = connect(args)
    frontier = open_frontier(settings, client, keys)
    rows = []
    for target, raw in sorted(frontier.overrides().items()):
        o = _decode(raw) or {}
        rows.append({"target": target.decode("utf-8", "replace"), **o})
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print(f"no overrides for {args.spider}")
        return 0
    table = listing_table(f"overrides of {args.spider}", ["target", "scope", "override", "by", "at"])
    for r in rows:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.get("at", 0))) if r.get("at") else ""
        table.add_row(r["target"], str(r.get("scope", "")), _describe(r), str(r.get("by", "")), at)
    Console().print(table)
    return 0


def cmd_audit(args: argparse.Namespace, connect: Callable[[argparse.Namespace], tuple[Any, Any, Any]]) -> int:
    since = "-"
    if args.since:
        try:
            since = str(int((time.time() - parse_duration(args.since)) * 1000))
        except BadInput as exc:
            print(f"dcrawl: {exc}", file=sys.stderr)
            return BAD_INPUT
    settings, client, keys = connect(args)
    frontier = open_frontier(settings, client, keys)
    entries = []
    for entry_id, fields in frontier.audit_entries(since):
        row = {k.decode(): v.decode("utf-8", "replace") for k, v in fields.items()}
        row["id"] = entry_id.decode()
        entries.append(row)
    if args.json:
        print_json(entries)
        return 0
    if not entries:
        print(f"no control actions recorded for {args.spider}")
        return 0
    table = listing_table(f"audit of {args.spider}", ["time", "action", "target", "old", "new", "by", "source"])
    for e in entries:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(e.get("time", 0) or 0)))
        table.add_row(
            when,
            e.get("action", ""),
            e.get("target", ""),
            e.get("old", ""),
            e.get("new", ""),
            e.get("by", ""),
            e.get("source", ""),
        )
    Console().print(table)
    return 0


def _spiders(args: argparse.Namespace, settings: Any, client: Any) -> list[str]:
    if args.all:
        from distributed_crawler.monitoring.dashboard import discover_spiders

        return discover_spiders(client, settings)
    if not args.spider:
        raise BadInput("name a SPIDER, or --all for every spider found in Redis")
    return [args.spider]


def cmd_pause(args: argparse.Namespace, connect: Callable[[argparse.Namespace], tuple[Any, Any, Any]]) -> int:
    """`dcrawl pause SPIDER [--drain] | --all` and `dcrawl resume SPIDER | --all`."""
    if not args.spider and not args.all:
        print("dcrawl: name a SPIDER, or --all for every spider found in Redis", file=sys.stderr)
        return BAD_INPUT
    args.spider = args.spider or ""
    settings, client, _ = connect(args)
    by = _user(args)
    names = _spiders(args, settings, client)
    if not names:
        print("no spider found in Redis")
        return 0
    for name in names:
        frontier = open_frontier(settings, client, SpiderKeys.from_settings(settings, name))
        old = frontier.pause_state()
        if args.command == "pause":
            drain = bool(getattr(args, "drain", False))
            frontier.pause(by, drain, "cli", time.time())
            new = frontier.pause_state()
            how = "workers finish what they hold" if drain else "workers give back what they have not started"
            print(f"paused {name}: nothing more is leased; {how}; `dcrawl resume {name}` to go on")
        else:
            frontier.resume()
            new = None
            print(f"resumed {name}" if old else f"{name} was not paused")
        record(frontier, settings, args.command, name, old, new, by, "cli")
    return 0


def add_parser(command: Callable[..., argparse.ArgumentParser], connect: Callable[..., Any]) -> None:
    p = command(
        "host",
        lambda a: cmd_host(a, connect),
        "live per-host control: set, block, unblock, purge, show",
        json_flag=True,
    )
    p.add_argument("spider")
    p.add_argument("host", help="a host (news.example.com) or a registered domain (example.com: every subdomain)")
    p.add_argument("action", choices=["set", "block", "unblock", "purge", "show"])
    p.add_argument("--delay", type=float, help="set: seconds between two requests of the host, all nodes together")
    p.add_argument("--concurrency", type=int, help="set: requests of the host in flight at once, all nodes")
    p.add_argument("--max-pages", type=int, dest="max_pages", help="set: pages of the host the crawl may fetch")
    p.add_argument("--render", choices=RENDER, help="set: render its pages in the browser: on, off or auto")
    p.add_argument("--for", dest="duration", help="block: how long (90s, 15m, 2h, 1d); default until unblock")
    p.add_argument("--reason", help="block: why (shown by dcrawl overrides and hosts)")
    p.add_argument(
        "--dead-letter", action="store_true", dest="dead_letter", help="purge: dead-letter them (reason purged)"
    )
    p.add_argument("--by", help="who does it, for the audit trail (default: $USER)")
    p = command(
        "overrides",
        lambda a: cmd_overrides(a, connect),
        "every per-host override: who, when, why, expiry",
        json_flag=True,
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
