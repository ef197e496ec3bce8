"""The cluster's status in one dict (docs/architecture.md §9), and its rich rendering for `dcrawl status`.

`gather_status` is what `dcrawl status --json` prints and what the dashboard's JSON endpoint
serves, so the two always agree. It works with a sync client (`run_sync`) and an asyncio one.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from functools import partial
from typing import Any

from redis.exceptions import ResponseError
from rich import box
from rich.columns import Columns
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.live import Live
from rich.table import Table
from rich.text import Text
from scrapy.settings import BaseSettings

from distributed_crawler.connection.calls import maybe_await, run_sync
from distributed_crawler.connection.policy import Purpose, RedisPolicy, RedisUnreachable, is_transient
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.core.crawl_control import CrawlControl
from distributed_crawler.dedup.dupefilter import describe_dedup
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.events.summary import events_line, events_summary
from distributed_crawler.frontier.factory import frontier_from_settings
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.seedkey import SeedKey
from distributed_crawler.frontier.shards import check_shards
from distributed_crawler.keyspace import key as spider_key
from distributed_crawler.monitoring.control import control_summary
from distributed_crawler.monitoring.hosts import sharded_summary
from distributed_crawler.monitoring.nodes import (
    MAX_COUNT,
    NodeKeys,
    Skips,
    clean_json,
    duration,
    history_of,
    read_history,
    read_nodes,
    read_totals,
    server_time,
)
from distributed_crawler.news.counts import read_page_counts, read_robots_counts
from distributed_crawler.news.storing import PAGE_TYPES
from distributed_crawler.proxies.pool import ProxyPool, pool_keys
from distributed_crawler.recrawl.schedule import RevisitSchedule

RECENT = 20  # alerts and failures listed
FAILURE_FIELDS = ("url", "reason", "node", "time", "source", "attempts")
TEXT_FIELDS = ("url", "reason", "node", "source", "kind", "spider", "reporter", "message")
NUMBER_FIELDS = ("time", "attempts", "status")
ENTRY_TEXT_CHARS = 2000  # a dead letter's url or reason shown at most this long


def _clean_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A JSON entry with its known fields of the right type (text capped; time a finite number)."""
    out = clean_json(entry)
    for name in TEXT_FIELDS:
        if name in out:
            value = out[name]
            out[name] = (value if isinstance(value, str) else "" if value is None else json.dumps(value))[
                :ENTRY_TEXT_CHARS
            ]
    for name in NUMBER_FIELDS:
        if name in out and (isinstance(out[name], bool) or not isinstance(out[name], (int, float))):
            out[name] = None
    return out


def _json_entries(
    raw: list[bytes],
    fields: tuple[str, ...] | None = None,
    skips: Skips | None = None,
    key: str = "",
    needs: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """JSON objects of a list (with one of `needs`); anything else is skipped and counted."""
    entries = []
    for item in raw:
        try:
            entry = json.loads(item)
        except (ValueError, RecursionError):
            entry = None
        if not isinstance(entry, dict) or (needs and not any(isinstance(entry.get(n), str) for n in needs)):
            if skips is not None:
                skips.add(key)
            continue
        if fields is not None:
            entry = {k: entry[k] for k in fields if k in entry}
        entries.append(_clean_entry(entry))
    return entries


def _type_name(raw: Any) -> str:
    return (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)) or "none"


async def _check_types(client: AnyRedis, expected: dict[str, tuple[str, ...]], skips: Skips) -> set[str]:
    """Keys holding another Redis type than expected (recorded in `skips`); one round trip."""
    pipe = client.pipeline(transaction=False)
    names = list(expected)
    for key in names:
        pipe.type(key)
    actual = await maybe_await(pipe.execute())
    wrong = set()
    for key, raw in zip(names, actual):
        kind = _type_name(raw)
        if kind != "none" and kind not in expected[key]:
            skips.wrong_type(key, kind, "/".join(t for t in expected[key] if t != "MBbloom--") or expected[key][0])
            wrong.add(key)
    return wrong


async def _dedup_stats(client: AnyRedis, key: str, skips: Skips) -> dict[str, Any]:
    try:
        stats = await describe_dedup(client, key)
    except Exception as exc:  # a corrupt filter (DedupDataError, ValueError, WRONGTYPE...) is data, not our failure
        if is_transient(exc):
            raise  # an outage is the read's (READ: the caller stops with one line)
        skips.add(key)  # a filter whose meta does not read: its size is unknown, nodes say more
        return {"backend": "unreadable", "count": 0, "bytes": 0, "layers": 0, "error_rate": 0.0}
    return clean_json(stats)


def _summed(slices: list[dict[str, Any]]) -> dict[str, Any]:
    """The filter's figures over its slices (one per frontier shard): counts and bytes add up."""
    total = dict(slices[0])
    for more in slices[1:]:
        total["count"] = total.get("count", 0) + more.get("count", 0)
        total["bytes"] = total.get("bytes", 0) + more.get("bytes", 0)
    return total


NO_DEDUP = {"backend": "none", "count": 0, "bytes": 0, "layers": 0, "error_rate": 0.0}
TOP_LANGUAGE_HOSTS = 10


async def _page_counts(
    client: AnyRedis, stats_key: str, hosts_keys: tuple[str, str], wrong: set[str], skips: Skips
) -> dict[str, Any]:
    """Pages stored and not stored per page type, not stored per language and for their robots
    meta (`noindex`), with the hosts that had the most of each (news/counts.py); `hosts_keys`:
    LANGUAGE_SKIPPED_KEY and ROBOTS_META_SKIPPED_KEY."""
    raw = {} if stats_key in wrong else await skips.read(stats_key, "hash", {}, lambda: client.hgetall(stats_key))
    page_types, languages = read_page_counts(raw)
    robots = read_robots_counts(raw)
    language_hosts, robots_hosts = [await _top_hosts(client, key, wrong, skips) for key in hosts_keys]
    return {
        "page_types": {t: page_types.get(t, {"stored": 0, "skipped": 0}) for t in (*PAGE_TYPES, *sorted(page_types))},
        "languages": {"skipped": dict(sorted(languages.items(), key=lambda kv: -kv[1])), "top_hosts": language_hosts},
        "robots_meta": {  # only noindex keeps a page out: every host's count is of that reason
            "skipped": dict(sorted(robots.items(), key=lambda kv: -kv[1])),
            "top_hosts": [{**h, "reason": "noindex"} for h in robots_hosts],
        },
    }


async def _top_hosts(client: AnyRedis, key: str, wrong: set[str], skips: Skips) -> list[dict[str, Any]]:
    """The TOP_LANGUAGE_HOSTS hosts with the most pages not stored in a per-host zset (news/counts.py)."""
    top = (
        []
        if key in wrong
        else await skips.read(
            key, "zset", [], lambda: client.zrevrange(key, 0, TOP_LANGUAGE_HOSTS - 1, withscores=True)
        )
    )
    return [{"host": _type_name(h)[:253], "skipped": int(n)} for h, n in top if 0 < n < MAX_COUNT]


async def with_written_shards(client: AnyRedis, settings: BaseSettings, keys: SpiderKeys) -> BaseSettings:
    """The settings with the FRONTIER_SHARDS the frontier in Redis was written with (`{spider}:shards`)
    when it differs from this project's: a status read without the crawl's settings still counts every
    shard (it counted one before, silently). Garbage in the key is ignored (untrusted)."""
    try:
        raw = await maybe_await(client.get(keys.shards))
    except ResponseError:  # a key of another type: the layout check names it when a node starts
        return settings
    try:
        written = check_shards(raw.decode(errors="replace") if isinstance(raw, bytes) else raw)
    except ValueError:  # none written yet, or garbage
        return settings
    if written == check_shards(settings.get("FRONTIER_SHARDS", 1)):
        return settings
    copy = settings.copy()
    copy.set("FRONTIER_SHARDS", written, priority="cmdline")
    return copy


async def gather_status(client: AnyRedis, settings: BaseSettings, spider: str, recent: int = RECENT) -> dict[str, Any]:
    """Queues, nodes, dedup, totals, last hour's history, recent alerts and failures of `spider`.

    Nothing read can make it fail: unreadable entries are skipped and counted (`skipped`), keys of
    the wrong Redis type are read as empty and named with their fix (`wrong_type`), whether TYPE
    caught them or the read did (a key replaced in between: `Skips.read`).
    """
    keys = SpiderKeys.from_settings(settings, spider)
    settings = await with_written_shards(client, settings, keys)
    frontier = frontier_from_settings(settings, spider, client, keys)
    seed_key = SeedKey.from_settings(settings, spider)  # both AS_SET and AS_ZSET: ValueError, one line
    node_keys = NodeKeys.from_settings(settings, spider, keys)
    read = SettingsReader(settings)
    pool = ProxyPool(client, *pool_keys(settings))
    proxy_key, dead_key = pool.pool_key, pool.dead_key
    revisits = RevisitSchedule(client, frontier)
    language_key = spider_key(settings, "LANGUAGE_SKIPPED_KEY", spider)
    robots_key = spider_key(settings, "ROBOTS_META_SKIPPED_KEY", spider)
    skips = Skips()
    now = await server_time(client)
    wrong = await _check_types(
        client,
        {
            seed_key.key: (seed_key.kind,),
            seed_key.taken: ("zset",),
            **frontier.status_types(),
            keys.dupefilter: ("set", "hash", "MBbloom--"),
            node_keys.nodes: ("zset",),
            node_keys.last: ("hash",),
            node_keys.history: ("hash",),
            node_keys.stats: ("hash",),
            node_keys.alerts: ("list",),
            proxy_key: ("zset",),
            dead_key: ("hash",),
            **{keys.schedule: ("zset",) for keys in revisits.every_keys()},
            **{keys.state: ("hash",) for keys in revisits.every_keys()},
            language_key: ("zset",),
            robots_key: ("zset",),
        },
        skips,
    )
    counts = await frontier.counts(seeds=True)
    counts = replace(
        counts,
        **{  # counts.lua sizes any type: a wrong-type key holds no work of ours
            name: 0
            for name, key in {"seeds": seed_key.key, "seeds_taken": seed_key.taken, **frontier.count_keys()}.items()
            if key in wrong
        },
    )
    zero_totals = {"pages": 0, "items": 0, "errors": 0}
    nodes = (
        []
        if node_keys.nodes in wrong
        else await skips.read(node_keys.nodes, "zset", [], lambda: read_nodes(client, node_keys, now, skips))
    )
    totals = (
        zero_totals
        if node_keys.stats in wrong
        else await skips.read(node_keys.stats, "hash", zero_totals, lambda: read_totals(client, node_keys, skips))
    )
    slices = [await _dedup_stats(client, key, skips) for key in frontier.dupefilter_keys() if key not in wrong]
    dedup = _summed(slices) if slices else dict(NO_DEDUP)
    history = (
        None
        if node_keys.history in wrong
        else await skips.read(node_keys.history, "hash", None, lambda: read_history(client, node_keys, now))
    )
    if history is None:
        history = history_of({}, now)
    raw_alerts = (
        []
        if node_keys.alerts in wrong
        else await skips.read(node_keys.alerts, "list", [], lambda: client.lrange(node_keys.alerts, 0, recent - 1))
    )
    raw_failures = (
        []
        if keys.failed in wrong
        else await skips.read(keys.failed, "list", [], lambda: client.lrange(keys.failed, 0, recent - 1))
    )
    proxies = (
        {"total": 0, "healthy": 0}
        if proxy_key in wrong
        else await skips.read(proxy_key, "zset", {"total": 0, "healthy": 0}, pool.health)
    )
    proxies["dead"] = 0 if dead_key in wrong else int(await skips.read(dead_key, "hash", 0, pool.dead_count))
    hosts = await sharded_summary(client, frontier.part_keys(), now, skips, wrong)
    control = await control_summary(CrawlControl.of(frontier), now)
    no_recrawl = {"scheduled": 0, "due_now": 0, "due_next_hour": 0}
    recrawl = await revisits.summary(
        now, skip=wrong, read=lambda key, call: skips.read(key, "zset", dict(no_recrawl), call)
    )
    pages = await _page_counts(client, node_keys.stats, (language_key, robots_key), wrong, skips)
    alerts = _json_entries(raw_alerts, None, skips, node_keys.alerts, needs=("kind", "message"))
    failures = _json_entries(raw_failures, FAILURE_FIELDS, skips, keys.failed, needs=("url", "reason"))
    nodes = live_view(nodes, now, read.float("NODE_RETENTION_SECONDS", min=0), bool(control.get("paused")))
    alive = [n for n in nodes if n["alive"]]
    rate = round(sum(n["rate"] for n in alive), 1)
    if counts.pending is None or control.get("paused"):  # counter missing, or nothing leased: no ETA
        eta: float | None = None
    elif not counts.pending:
        eta = 0
    else:
        eta = round(counts.pending / rate * 60) if rate else None
    return {
        "spider": spider,
        "time": round(now, 3),
        "pending": counts.pending,
        "leased": counts.leased,
        "delayed": counts.delayed,
        "failed": counts.failed,
        "seeds": counts.seeds,
        "seeds_taken": counts.seeds_taken,
        "nodes": nodes,
        "dedup": dedup,
        "totals": {
            "nodes_alive": len(alive),
            "nodes_dead": sum(1 for n in nodes if n["state"] == "dead"),
            "nodes_stalled": sum(1 for n in nodes if n["state"] == "stalled"),
            **totals,
            "stored": stored_total(totals, pages["page_types"]),  # the one "stored" (stored_total)
            "rate": rate,  # pages/min of the live nodes over the last minute
            "eta_seconds": eta,  # to drain the pending queue at that rate (None: no rate)
        },
        "proxies": proxies,
        "recrawl": recrawl,  # the revisit schedule (docs/recrawl.md): scheduled, due_now, due_next_hour
        # page_types: {type: {stored, skipped}}; languages: {skipped: {code: n}, top_hosts};
        # robots_meta: {skipped: {"noindex": n}, top_hosts: [{host, skipped, reason}]}
        **pages,
        "hosts": hosts,  # the per-host frontier (monitoring/hosts.py): count, ready, blocked, over_budget, top
        "control": control,  # monitoring/control.py: paused, overrides, blocked, blocks
        "events": await events_summary(client, settings, spider),  # change feed (docs/events.md)
        "history": history,
        "alerts": alerts,
        "failures": failures,
        **skips.as_json(),  # "skipped": {key: entries}, "wrong_type": [{key, type, expected, fix, message}]
    }


def stored_total(totals: dict[str, Any], page_types: dict[str, dict[str, int]]) -> int:
    """Rows stored: items committed to STORAGE_URL (item_scraped fires after the commit). A news
    spider counts them per page type every few seconds, a fresher copy of the same count than the
    heartbeats' `items`; status, dashboard and the page-type figures all show this one number."""
    by_type = sum(c.get("stored", 0) for c in page_types.values())
    return by_type if by_type else int(totals.get("items", 0))


def live_view(nodes: list[dict[str, Any]], now: float, retention: float, paused: bool) -> list[dict[str, Any]]:
    """The node list as it is now: a node closed or dead for over NODE_RETENTION_SECONDS leaves it
    (its pages and items stay in the cluster totals); a live node of a paused crawl is `paused`."""
    shown = []
    for node in nodes:
        if not node["alive"] and retention and now - node["last_seen"] > retention:
            continue
        if paused and node["alive"] and node["state"] in ("running", "idle"):
            node = {**node, "state": "paused"}
        shown.append(node)
    return shown


def skip_lines(status: dict[str, Any]) -> list[str]:
    """The lines about what a status left out (one for skipped entries, one per wrong-type key)."""
    skips = Skips()
    for key, n in (status.get("skipped") or {}).items():
        skips.add(key, n)
    for w in status.get("wrong_type") or []:
        skips.wrong_type(w["key"], w["type"], w["expected"])
    return skips.lines()


# -- rendering -------------------------------------------------------------------------------
def human_bytes(n: float) -> str:
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:.0f}{unit}" if unit in ("B", "K", "M") else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


STATE_STYLE = {
    "running": "green",
    "idle": "cyan",
    "paused": "yellow",
    "stalled": "bold magenta",
    "draining": "yellow",
    "closed": "dim",
    "dead": "bold red",
}


def host_line(hosts: dict[str, Any]) -> str:
    """`1,204 (880 ready, 12 blocked, 3 over budget)`: the per-host frontier in one line."""
    blocked = f"{hosts['blocked']}{'' if hosts.get('blocked_exact', True) else '+'} blocked"
    return f"{hosts['count']:,} ({hosts['ready']:,} ready, {blocked}, {hosts['over_budget']:,} over budget)"


def page_types_line(status: dict[str, Any]) -> str:
    """`article 1,204/3, list 0/380, other 0/41`: pages stored / not stored per type ("" before any)."""
    counts = status.get("page_types") or {}
    if not any(c["stored"] or c["skipped"] for c in counts.values()):
        return ""
    return ", ".join(f"{t} {c['stored']:,}/{c['skipped']:,}" for t, c in counts.items())


def robots_meta_line(robots: dict[str, Any]) -> str:
    """`noindex 12 (a.example 9, b.example 3)`: pages not stored for their robots meta and the hosts
    with the most ("" before any)."""
    skipped = robots.get("skipped") or {}
    if not any(skipped.values()):
        return ""
    hosts = ", ".join(f"{h['host']} {h['skipped']:,}" for h in (robots.get("top_hosts") or [])[:3])
    return ", ".join(f"{why} {n:,}" for why, n in skipped.items()) + (f" ({hosts})" if hosts else "")


def pause_banner(spider: str, paused: dict[str, Any]) -> Text:
    """The first thing a paused crawl's status says, in reverse video."""
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(paused.get("since") or 0))
    how = "workers finish what they hold" if paused.get("drain") else "nothing is leased"
    return Text(
        f" PAUSED since {since} by {paused.get('by', '?')}: {how}; dcrawl resume {spider} ",
        style="bold black on yellow",
    )


def control_figures(control: dict[str, Any]) -> list[tuple[str, Any]]:
    """`paused since ... by ...` and the overrides, for the status table."""
    out: list[tuple[str, Any]] = []
    paused = control.get("paused")
    if paused:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(paused.get("since") or 0))
        drain = " (drain)" if paused.get("drain") else ""
        out.append(("state", f"paused since {since} by {paused.get('by', '?')}{drain}"))
    if control.get("overrides"):
        blocks = control.get("blocks") or []
        shown = ", ".join(
            f"{b['target']} until {time.strftime('%H:%M:%S', time.localtime(b['until']))}" for b in blocks[:3]
        )
        blocked = f"; {control.get('blocked', 0)} blocked: {shown}" if blocks else ""
        out.append(("overrides", f"{control['overrides']}{blocked} (dcrawl overrides)"))
    return out


def render_status(status: dict[str, Any], title: str = "") -> Group:
    now = status["time"]
    t = status["totals"]
    paused = (status.get("control") or {}).get("paused")
    figures = [
        ("pages/min", f"{t['rate']:.0f}"),
        ("pending", "unknown" if status["pending"] is None else status["pending"]),
        ("leased", status["leased"]),
        ("delayed", status["delayed"]),
        ("failed", status["failed"]),
        (
            "seeds",
            f"{status['seeds']}, {status['seeds_taken']} taken" if status.get("seeds_taken") else status["seeds"],
        ),
        ("seen", status["dedup"].get("count", 0)),
        ("pages", t["pages"]),
        ("stored", t.get("stored", t["items"])),
        ("errors", t["errors"]),
        ("drains in", "paused" if paused else duration(t["eta_seconds"]) if t["eta_seconds"] is not None else "?"),
        (
            "nodes",
            f"{t['nodes_alive']} alive"
            + (f", {t['nodes_stalled']} stalled" if t.get("nodes_stalled") else "")
            + (f", {t['nodes_dead']} dead" if t["nodes_dead"] else ""),
        ),
    ]
    proxies = status["proxies"]
    if proxies["total"] or proxies.get("dead"):
        dead = f", {proxies['dead']} dead" if proxies.get("dead") else ""
        figures.append(("proxies", f"{proxies['healthy']}/{proxies['total']} healthy{dead}"))
    hosts = status.get("hosts") or {}
    if hosts.get("count"):
        figures.append(("hosts", host_line(hosts)))
    figures += control_figures(status.get("control") or {})
    recrawl = status.get("recrawl") or {}
    if recrawl.get("scheduled"):
        figures.append(
            (
                "revisits",
                f"{recrawl['scheduled']:,} ({recrawl['due_now']:,} due now, {recrawl['due_next_hour']:,} next hour)",
            )
        )
    pages = page_types_line(status)
    if pages:
        figures.append(("page types (stored/skipped)", pages))
    events = events_line(status.get("events"))
    if events:
        figures.append(("events", events))
    languages = (status.get("languages") or {}).get("skipped") or {}
    if languages:
        figures.append(("not stored for language", ", ".join(f"{c} {n:,}" for c, n in list(languages.items())[:8])))
    robots = robots_meta_line(status.get("robots_meta") or {})
    if robots:
        figures.append(("not stored for robots meta", robots))
    parts: list[Any] = [
        Text(title or status["spider"], style="bold"),
        *([pause_banner(status["spider"], paused)] if paused else []),
        Columns(
            [Text.assemble((f"{label} ", "dim"), (str(value), "bold")) for label, value in figures], padding=(0, 3)
        ),
    ]
    if status["nodes"]:
        parts.append(NodeTable(status["nodes"], now))
    else:
        parts.append(Text("no node has reported yet", style="dim"))
    if hosts.get("top"):
        top = ", ".join(f"{h['host']} {h['pending']}" for h in hosts["top"][:5])
        parts.append(Text.assemble(("top hosts by pending ", "dim"), top))
    for h in hosts.get("blocked_hosts") or []:
        until = time.strftime("%H:%M:%S", time.localtime(h["blocked_until"]))
        parts.append(
            Text.assemble(
                ("blocked ", "yellow"), f"{h['host']} until {until} ({duration(h['blocked_for'])})", f": {h['why']}"
            )
        )
    for a in status["alerts"][:5]:
        when = time.strftime("%H:%M:%S", time.localtime(a["time"])) if a.get("time") else "--:--:--"
        parts.append(
            Text.assemble(
                ("alert ", "bold red"), f"{when} {a.get('kind', '')} {a.get('node', '')}: {a.get('message', '')}"
            )
        )
    for line in skip_lines(status):
        parts.append(Text(line, style="yellow"))
    return Group(*parts)


class NodeTable:
    """One row a node, sized to the terminal when drawn: every figure whole, the node id shortened
    (…) before anything else, and the optional columns (RSS, in flight, leases) only when they fit
    (80 columns: the figures that say how the crawl goes; wider: all of them)."""

    COLUMNS = ("node", "state", "/min", "pages", "stored", "errors", "flight", "leases", "RSS", "seen ago")
    OPTIONAL = ("RSS", "flight", "leases")  # dropped first, in this order, when the terminal is narrow
    ID_MIN = 12

    def __init__(self, nodes: list[dict[str, Any]], now: float) -> None:
        self.rows = [
            {
                "node": n["id"],
                "state": n["state"],
                "/min": f"{n['rate']:,.0f}",
                "pages": f"{n['pages']:,}",
                "stored": f"{n['items']:,}",
                "errors": f"{n['errors']:,}",
                "flight": f"{n['in_flight']:,}",
                "leases": f"{n['leases']:,}",
                "RSS": human_bytes(n["rss"]) if n["rss"] else "",
                "seen ago": duration(max(0.0, now - n["last_seen"])),
            }
            for n in nodes
        ]

    def _width(self, col: str) -> int:
        return max([len(col)] + [len(r[col]) for r in self.rows])

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        cols = list(self.COLUMNS)

        def figures_width() -> int:  # each column costs its width and 2 of padding
            return sum(self._width(c) + 2 for c in cols if c != "node") + 2

        for optional in self.OPTIONAL:
            if figures_width() + self.ID_MIN <= options.max_width:
                break
            cols.remove(optional)
        id_width = max(self.ID_MIN, min(self._width("node"), options.max_width - figures_width()))
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        for col in cols:
            if col == "node":
                table.add_column(col, no_wrap=True, overflow="ellipsis", width=id_width)
            else:
                left = col == "state"
                table.add_column(col, justify="left" if left else "right", no_wrap=True, min_width=self._width(col))
        for r in self.rows:
            table.add_row(*(Text(r[c], style=STATE_STYLE.get(r[c], "")) if c == "state" else r[c] for c in cols))
        yield table


def status_now(client: AnyRedis, settings: BaseSettings, spider: str) -> dict[str, Any]:
    """`gather_status` on a sync client."""
    return run_sync(gather_status(client, settings, spider))


def watch_status(
    client: AnyRedis,
    settings: BaseSettings,
    spider: str,
    interval: float,
    as_json: bool,
    title: str,
    policy: RedisPolicy,
) -> int:
    """Refresh the status every `interval` seconds until Ctrl-C; Redis outages are shown (READ's one
    line), not fatal: the watch goes on and shows the status again once Redis is back."""
    if interval <= 0:
        raise ValueError(f"--interval ({interval}) must be > 0 seconds")
    console = Console()
    try:
        if as_json:  # one object a line, for scripts
            while True:
                try:
                    status = policy.run_sync(Purpose.READ, partial(status_now, client, settings, spider))
                    print(json.dumps(status, ensure_ascii=False), flush=True)
                except RedisUnreachable as exc:
                    print(json.dumps({"spider": spider, "error": str(exc)}), flush=True)
                time.sleep(interval)
        with Live(console=console, auto_refresh=False, transient=False) as live:
            while True:
                try:
                    status = policy.run_sync(Purpose.READ, partial(status_now, client, settings, spider))
                    view: Any = render_status(status, title)
                except RedisUnreachable as exc:
                    view = Text(f"{exc}; retrying every {interval:g}s", style="bold red")
                live.update(view, refresh=True)
                time.sleep(interval)
    except KeyboardInterrupt:
        return 0
