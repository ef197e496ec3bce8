"""`dcrawl`: operate the cluster from a shell (docs/architecture.md §9).

Every command takes `--redis-url` (default: env REDIS_URL, then the project settings); read
commands take `--json`. Failures print one line and exit non-zero.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from functools import partial
from typing import Any

from redis.exceptions import ResponseError
from rich.console import Console
from scrapy import Request

from distributed_crawler.cli import (
    control,
    events,
    extract,
    hosts,
    import_scrapy_redis,
    recrawl,
    replay,
    seed,
    sources,
    versions,
)
from distributed_crawler.cli.known import unknown_spider
from distributed_crawler.cli.output import listing_table, print_json
from distributed_crawler.cli.project import (
    CliError,
    connect,
    explain_denial,
    open_dupefilter,
    open_enqueuer,
    open_frontier,
    project_settings,
)
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.clients import RedisConfig, RedisUnavailable
from distributed_crawler.connection.permissions import PermissionDenied
from distributed_crawler.connection.policy import RedisPolicy
from distributed_crawler.connection.types import SyncRedis
from distributed_crawler.connection.untrusted import preview, text, wrong_type_message
from distributed_crawler.core.scheduler import SchedulerConfig
from distributed_crawler.dedup.dupefilter import describe_dedup, reset_dedup
from distributed_crawler.frontier.codec import payload_url
from distributed_crawler.frontier.deadletters import fresh_payload
from distributed_crawler.frontier.enqueue import PushEntry
from distributed_crawler.frontier.envelope import MAX_PRIORITY, make_member
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.monitoring.nodes import Skips, clean_json
from distributed_crawler.monitoring.status import NO_DEDUP, render_status, status_now, watch_status
from distributed_crawler.redact import mask_url
from distributed_crawler.storage.backends import open_storage


def cmd_status(args: argparse.Namespace) -> int:
    settings, client, keys = connect(args)
    where = RedisConfig.from_settings(project_settings(args)).masked_url
    title = f"{args.spider} @ {where}"
    if args.watch:
        return watch_status(client, settings, args.spider, args.interval, args.json, title, RedisPolicy(where))
    status = status_now(client, settings, args.spider)
    missing = unknown_spider(client, settings, keys, where)
    if missing:  # said on stderr, so --json stays one object; exit 1, a typo is not an empty crawl
        print(f"dcrawl: {missing}; a crawl shows here once seeded (dcrawl seed {args.spider} URL)", file=sys.stderr)
    if args.json:
        print_json(status)
        return 1 if missing else 0
    Console().print(render_status(status, title))
    return 1 if missing else 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from distributed_crawler.monitoring.dashboard import serve

    settings = project_settings(args)
    RedisConfig.from_settings(settings).check_reachable()
    return serve(settings, args.host, args.port, args.spider)


FAILED_TEXT_FIELDS = ("url", "reason", "node", "source")
MAX_REQUEUE_PAYLOAD = 1024 * 1024  # a dead letter's request payload larger than this stays in failed


def read_dead_letter(item: bytes) -> tuple[dict[str, Any], bool]:
    """One `{spider}:failed` entry as a dict, and whether it was readable (a JSON object).

    An unreadable entry (not JSON, not an object, not UTF-8, pickle) is shown as an
    "unreadable dead letter" with a capped preview of its bytes; it is never decoded further.
    """
    try:
        entry = json.loads(item)
    except (ValueError, RecursionError):
        entry = None
    if not isinstance(entry, dict):
        return {"url": "", "reason": "unreadable dead letter", "raw": preview(item, 200)}, False
    entry = clean_json(entry)
    for name in FAILED_TEXT_FIELDS:
        if name in entry and not isinstance(entry[name], str):
            entry[name] = "" if entry[name] is None else json.dumps(entry[name])[:2000]
    entry.setdefault("url", "")
    entry.setdefault("reason", "no reason recorded")
    return entry, True


def _failed_entries(client: SyncRedis, key: str, count: int) -> tuple[list[bytes], list[dict[str, Any]], int, str]:
    """Raw entries, decoded entries, how many were unreadable, and a wrong-type message ('' if none)."""
    kind = text(client.type(key)) or "none"
    if kind not in ("list", "none"):
        return [], [], 0, wrong_type_message(key, kind, "list")
    skips = Skips()
    raw = run_sync(skips.read(key, "list", [], lambda: client.lrange(key, 0, count)))
    if skips.wrong:  # replaced by another type since TYPE answered
        return [], [], 0, skips.lines()[0]
    decoded = [read_dead_letter(item) for item in raw]
    return raw, [e for e, _ in decoded], sum(1 for _, ok in decoded if not ok), ""


def cmd_failed(args: argparse.Namespace) -> int:
    settings, client, keys = connect(args)
    raw, entries, unreadable, wrong = _failed_entries(client, keys.failed, -1 if args.requeue else args.limit - 1)
    if wrong:
        print(f"dcrawl: {wrong}", file=sys.stderr)
        if args.json:
            print_json([])
        return 0
    note = (
        (
            f"{unreadable} unreadable {'entry' if unreadable == 1 else 'entries'} in {keys.failed} "
            "(not a JSON object; shown as 'unreadable dead letter', kept by --requeue)"
        )
        if unreadable
        else ""
    )
    if args.requeue:
        return _requeue(settings, client, keys, raw, entries)
    if args.json:
        print_json(entries)
        if note:
            print(f"dcrawl: {note}", file=sys.stderr)
        return 0
    table = listing_table(
        f"{keys.failed}: {run_sync(Skips().read(keys.failed, 'list', '?', lambda: client.llen(keys.failed)))} entries "
        f"(showing {len(entries)})",
        ("url", "reason", "status", "attempts", "node"),
    )
    for e in entries:
        table.add_row(
            str(e.get("url", ""))[:500],
            str(e.get("reason", ""))[:500],
            str(e.get("status") or "")[:20],
            str(e.get("attempts", ""))[:20],
            str(e.get("node", ""))[:100],
        )
    Console().print(table)
    if note:
        print(note)
    return 0


def requeue_member(entry: dict[str, Any]) -> str | None:
    """The queue member a dead letter goes back as, or None when it carries no runnable request.

    Only entries the scheduler dead-lettered after delivery (reclaim, retry, poison) carry a
    request; their payload must be a request payload (frontier/codec.py) with an http(s) URL, their
    priority an integer.
    """
    if entry.get("source") not in ("reclaim", "retry", "poison"):
        return None
    payload = entry.get("payload")
    if not isinstance(payload, str) or not payload or len(payload) > MAX_REQUEUE_PAYLOAD:
        return None
    url = payload_url(payload)
    if url is None or not url.startswith(("http://", "https://")):
        return None
    priority = entry.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, (int, float)):
        return None
    if isinstance(priority, float) and not (math.isfinite(priority) and priority.is_integer()):
        return None
    if abs(priority) > MAX_PRIORITY:
        return None
    return make_member(fresh_payload(payload), int(priority))


def _requeue(settings: Any, client: SyncRedis, keys: SpiderKeys, raw: list[bytes], entries: list[dict]) -> int:
    """Failures that carry a request payload go back to the queue (fresh delivery and retry counts)."""
    # No fingerprint: the entries are already in the filter and must be pushed anyway.
    enqueuer = open_enqueuer(settings, client, keys)
    requeued = kept = 0
    for item, entry in zip(raw, entries):
        member = requeue_member(entry)
        if member is None:
            kept += 1
            continue
        try:
            run_sync(enqueuer.run("push", [PushEntry("", True, member)]))
        except ResponseError as exc:  # e.g. a queue or sequence key holding garbage: stop, keep the rest
            print(
                f"requeued {requeued}; stopped: Redis refused the push ({str(exc)[:200]}); the entries stay in "
                f"{keys.failed}; see `dcrawl status {keys.spider}` for keys holding bad data",
                file=sys.stderr,
            )
            return 1
        client.lrem(keys.failed, 1, item)  # type: ignore[arg-type]  # redis-py annotates the value as str; bytes go as they are
        requeued += 1
    print(
        f"requeued {requeued}; kept {kept} that carry no request (rejected seeds, undecodable payloads, unreadable entries)"
    )
    return 0


def cmd_reclaim(args: argparse.Namespace) -> int:
    settings, client, keys = connect(args)
    config = SchedulerConfig.from_settings(settings)
    requeued, dead = run_sync(
        open_frontier(settings, client, keys).reclaim(config.max_deliveries, 100_000, config.failed_max, "dcrawl")
    )
    print(f"requeued {requeued} expired leases; dead-lettered {dead}")
    return 0


def cmd_dedup(args: argparse.Namespace) -> int:
    settings, client, keys = connect(args)
    if args.action == "stats":
        skips = Skips()  # the filter replaced by another type after describe_dedup's TYPE
        slices = [
            run_sync(skips.read(key, "set/hash", dict(NO_DEDUP), partial(describe_dedup, client, key)))
            for key in open_frontier(settings, client, keys).dupefilter_keys()  # one per frontier shard
        ]
        stats = dict(slices[0])
        stats["count"], stats["bytes"] = sum(s["count"] for s in slices), sum(s["bytes"] for s in slices)
        for line in skips.lines():
            print(f"dcrawl: {line}", file=sys.stderr)
        stats["bytes_per_item"] = round(stats["bytes"] / stats["count"], 3) if stats["count"] else None
        stats["key"] = keys.dupefilter
        if args.json:
            print_json(stats)
        else:
            for name, value in stats.items():
                print(f"{name:>15}: {value}")
        return 0
    if args.action == "check":
        if not args.url:
            raise CliError("dedup check needs a URL")
        df, _ = open_dupefilter(settings, client, keys)
        enqueuer = open_enqueuer(settings, client, keys, df)
        fingerprint = df.fingerprint_hex(Request(args.url))
        (new,) = run_sync(enqueuer.run("check", [PushEntry(fingerprint, False, "")], (), [args.url]))
        print("new" if new else "seen")
        return 0
    if args.action == "reset":
        if not args.yes and input(f"Delete the filter {keys.dupefilter} (every seen URL is forgotten)? [y/N] ") != "y":
            print("not reset")
            return 1
        filters = open_frontier(settings, client, keys).dupefilter_keys()
        print(f"deleted {sum(run_sync(reset_dedup(client, key)) for key in filters)} keys")
        return 0
    # rebuild: reset, then add every stored URL (the seed's periodic clean-up)
    if not args.source:
        raise CliError("dedup rebuild needs --from STORAGE_URL")
    for key in open_frontier(settings, client, keys).dupefilter_keys():
        run_sync(reset_dedup(client, key))
    df, _ = open_dupefilter(settings, client, keys)
    enqueuer = open_enqueuer(settings, client, keys, df)
    backend = open_storage(args.source)
    added = 0
    try:
        for urls in backend.iter_urls(batch=1000):
            entries = [PushEntry(df.fingerprint_hex(Request(url)), False, "") for url in urls]
            added += sum(run_sync(enqueuer.run("add", entries, (), list(urls))))
    finally:
        backend.close()
    print(f"rebuilt {keys.dupefilter} from {mask_url(args.source)}: {added} URLs")
    return 0


def cmd_proxies(args: argparse.Namespace) -> int:
    """The shared proxy pool: add, list, remove, reset (docs/proxies.md). Never prints a password."""
    from distributed_crawler.proxies.pool import (
        ProxyConfig,
        ProxyPool,
        match_proxies,
        parse_proxies,
        read_proxy_file,
    )

    settings = project_settings(args)
    redis_config = RedisConfig.from_settings(settings)
    redis_config.check_reachable()
    config = ProxyConfig.from_settings(settings)
    pool = ProxyPool.from_config(redis_config.sync_client(), config)
    if args.action == "add":
        given = list(args.proxies) + (read_proxy_file(args.file) if args.file else [])
        if not given:
            raise CliError("proxies add needs proxy URLs or --file FILE")
        proxies = parse_proxies(given, "proxies add")
        added = run_sync(pool.add(proxies))
        print(f"added {added} of {len(proxies)} to {config.pool_key} ({len(proxies) - added} already there)")
        return 0
    entries, notes = _proxy_entries(pool)
    for note in notes:
        print(f"dcrawl: {note}", file=sys.stderr)
    if args.action == "list":
        shown = [{**e, "url": mask_url(e["url"])[:300]} for e in entries]
        summary = {
            "pool_key": config.pool_key,
            "dead_key": config.dead_key,
            "healthy": sum(1 for e in entries if e["state"] == "healthy"),
            "failing": sum(1 for e in entries if e["state"] == "failing"),
            "dead": sum(1 for e in entries if e["state"] == "dead"),
        }
        if args.json:
            print_json({**summary, "proxies": shown})
            return 0
        table = listing_table(
            f"{config.pool_key}: {summary['healthy']} healthy, {summary['failing']} failing, "
            f"{summary['dead']} dead ({config.dead_key})",
            ("proxy", "state", "score", "last error", "dead since"),
        )
        for e in shown:
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["since"])) if e["since"] else ""
            table.add_row(
                e["url"], e["state"], "" if e["score"] is None else f"{e['score']:g}", e["error"] or "", since
            )
        Console().print(table)
        return 0
    known = [e["url"] for e in entries]
    if args.action == "reset" and not args.proxies:
        print(f"reset {run_sync(pool.reset(None))} proxies to the initial score (dead ones back in the pool)")
        return 0
    if not args.proxies:
        raise CliError(f"proxies {args.action} needs proxy URLs (as listed, or host:port)")
    matched, missing = match_proxies(list(args.proxies), known)
    if missing:
        raise CliError(f"not in the pool: {', '.join(mask_url(m) for m in missing)}; see dcrawl proxies list")
    if args.action == "remove":
        print(f"removed {run_sync(pool.remove(matched))} from {config.pool_key} and {config.dead_key}")
    else:
        print(f"reset {run_sync(pool.reset(matched))} proxies to the initial score")
    return 0


def _proxy_entries(pool: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The pool's readable entries, and one line per key of a wrong type or with unreadable members."""
    listing = run_sync(pool.listing())
    notes = [wrong_type_message(key, kind, expected) for key, kind, expected in _wrong_pool_keys(pool, listing)]
    for key, n in listing.skipped.items():
        if n:
            notes.append(f"skipped {n} unreadable {'entry' if n == 1 else 'entries'} in {key}")
    return listing.entries, notes


def _wrong_pool_keys(pool: Any, listing: Any) -> list[tuple[str, str, str]]:
    expected = {pool.pool_key: "zset", pool.dead_key: "hash"}
    return [(key, kind, expected[key]) for key, kind in listing.wrong.items()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dcrawl", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, func: Any, help: str, json_flag: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help)
        p.add_argument("--redis-url", help="default: env REDIS_URL, then the project settings")
        if json_flag:
            p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=func)
        return p

    seed.add_parser(command)
    p = command("status", cmd_status, "queues, leases, failures and nodes of a spider", json_flag=True)
    p.add_argument("spider")
    p.add_argument("--watch", action="store_true", help="refresh until Ctrl-C (with --json: one object a line)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes with --watch")
    p = command(
        "dashboard",
        cmd_dashboard,
        "serve a live web page and JSON of every spider (control buttons with DASHBOARD_TOKEN)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (0 = any free port; the URL is printed)")
    p.add_argument("--spider", help="show only this spider (default: every spider found in Redis)")
    p = command("failed", cmd_failed, "list dead letters, or --requeue them", json_flag=True)
    p.add_argument("spider")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--requeue", action="store_true", help="push failed requests back to the queue")
    p = command("proxies", cmd_proxies, "the shared proxy pool: add, list (health), remove, reset", json_flag=True)
    p.add_argument("action", choices=["add", "list", "remove", "reset"])
    p.add_argument("proxies", nargs="*", help="proxy URLs (remove/reset also take host:port or the masked URL)")
    p.add_argument("--file", help="for add: a file with one proxy URL a line (# comments)")
    hosts.add_parser(command, connect)
    events.add_parser(command, connect)
    sources.add_parser(command, connect)
    recrawl.add_parser(command, connect)
    import_scrapy_redis.add_parser(command, connect)
    extract.add_parser(command)
    versions.add_parser(command)
    replay.add_parser(command)
    control.add_parser(command, connect)
    p = command("reclaim", cmd_reclaim, "return expired leases to the queue now")
    p.add_argument("spider")
    p = command("dedup", cmd_dedup, "the seen-URL filter: stats, check URL, reset, rebuild --from", json_flag=True)
    p.add_argument("action", choices=["stats", "check", "reset", "rebuild"])
    p.add_argument("spider")
    p.add_argument("url", nargs="?", help="for check")
    p.add_argument("--from", dest="source", help="for rebuild: the STORAGE_URL whose urls are re-added")
    p.add_argument("--yes", action="store_true", help="for reset: do not ask")
    return parser


def read_policy(args: argparse.Namespace) -> RedisPolicy:
    """READ for a whole command: Redis gone midway is one line and exit code 1, not a traceback."""
    try:
        where = RedisConfig.from_settings(project_settings(args)).masked_url
    except ValueError:
        where = "REDIS_URL"  # a bad setting: the command itself says what is wrong with it
    return RedisPolicy(where)


# A command's trailing list of values (`seed SPIDER URL...`, `proxies add URL...`).
TRAILING_LISTS = ("urls", "proxies", "targets")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """As argparse, but `dcrawl seed news --new URL` works: argparse fills a `nargs="*"` list before
    the flag and refuses the values after it; those values join the command's list."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        target = next((name for name in TRAILING_LISTS if isinstance(getattr(args, name, None), list)), None)
        if target is None or any(value.startswith("-") for value in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        getattr(args, target).extend(extra)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        with read_policy(args).reading():
            code = args.func(args)
        sys.stdout.flush()  # here, so a reader that left is met below and not at interpreter exit
        return code
    except PermissionDenied as exc:
        print(f"dcrawl: {explain_denial(args) or exc}", file=sys.stderr)
        return 1
    except (CliError, RedisUnavailable, ValueError) as exc:
        print(f"dcrawl: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `dcrawl status --json | head`: the reader left; as for any Unix filter
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit flush
        return 0


if __name__ == "__main__":
    sys.exit(main())
