"""The cluster's status in one dict (DESIGN §7), and its rich rendering for `dcrawl status`.

`gather_status` is what `dcrawl status --json` prints and what the dashboard's JSON endpoint
serves, so the two always agree. It works with a sync client (`run_sync`) and an asyncio one.
"""

from __future__ import annotations

import json
import time
from typing import Any

from rich import box
from rich.columns import Columns
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text
from scrapy.settings import BaseSettings

from distributed_crawler.connection import TRANSIENT_ERRORS
from distributed_crawler.defaults import get_setting
from distributed_crawler.dupefilter import describe_dedup
from distributed_crawler.keys import SpiderKeys
from distributed_crawler.enqueue import maybe_await, run_sync
from distributed_crawler.nodes import (
    PROXY_POOL_KEY, NodeKeys, duration, proxy_health, read_history, read_nodes, read_totals, server_time,
)
from distributed_crawler.state import crawl_counts

RECENT = 20  # alerts and failures listed
FAILURE_FIELDS = ("url", "reason", "node", "time", "source", "attempts")


def _json_entries(raw: list[bytes], fields: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    entries = []
    for item in raw:
        try:
            entry = json.loads(item)
        except ValueError:
            entry = {"reason": "unreadable entry"}
        if not isinstance(entry, dict):
            entry = {"reason": "unreadable entry"}
        if fields is not None:
            entry = {k: entry[k] for k in fields if k in entry}
        entries.append(entry)
    return entries


async def gather_status(client: Any, settings: BaseSettings, spider: str, recent: int = RECENT) -> dict[str, Any]:
    """Queues, nodes, dedup, totals, last hour's history, recent alerts and failures of `spider`."""
    keys = SpiderKeys.from_settings(settings, spider)
    node_keys = NodeKeys.from_settings(settings, spider, keys)
    now = await server_time(client)
    counts = await crawl_counts(client, keys)
    nodes = await read_nodes(client, node_keys, now)
    totals = await read_totals(client, node_keys)
    dedup = await describe_dedup(client, keys.dupefilter)
    history = await read_history(client, node_keys, now)
    pipe = client.pipeline(transaction=False)
    pipe.lrange(node_keys.alerts, 0, recent - 1)
    pipe.lrange(keys.failed, 0, recent - 1)
    raw_alerts, raw_failures = await maybe_await(pipe.execute())
    proxy_key = str(settings.get("PROXY_POOL_KEY") or PROXY_POOL_KEY)
    proxies = await proxy_health(client, proxy_key)
    proxies["dead"] = int(await maybe_await(client.hlen(str(get_setting(settings, "PROXY_DEAD_KEY")))))
    alive = [n for n in nodes if n["alive"]]
    rate = round(sum(n["rate"] for n in alive), 1)
    if not counts.pending:
        eta: float | None = 0
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
        "nodes": nodes,
        "dedup": dedup,
        "totals": {
            "nodes_alive": len(alive),
            "nodes_dead": sum(1 for n in nodes if n["state"] == "dead"),
            **totals,
            "rate": rate,  # pages/min of the live nodes over the last minute
            "eta_seconds": eta,  # to drain the pending queue at that rate (None: no rate)
        },
        "proxies": proxies,
        "history": history,
        "alerts": _json_entries(raw_alerts),
        "failures": _json_entries(raw_failures, FAILURE_FIELDS),
    }


# -- rendering -------------------------------------------------------------------------------
def human_bytes(n: float) -> str:
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:.0f}{unit}" if unit in ("B", "K", "M") else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


STATE_STYLE = {"running": "green", "idle": "cyan", "draining": "yellow", "closed": "dim", "dead": "bold red"}


def render_status(status: dict[str, Any], title: str = "") -> Group:
    now = status["time"]
    t = status["totals"]
    figures = [
        ("pages/min", f"{t['rate']:.0f}"), ("pending", status["pending"]), ("leased", status["leased"]),
        ("delayed", status["delayed"]), ("failed", status["failed"]), ("seeds", status["seeds"]),
        ("seen", status["dedup"].get("count", 0)), ("pages", t["pages"]), ("items", t["items"]),
        ("errors", t["errors"]),
        ("drains in", duration(t["eta_seconds"]) if t["eta_seconds"] is not None else "?"),
        ("nodes", f"{t['nodes_alive']} alive" + (f", {t['nodes_dead']} dead" if t["nodes_dead"] else "")),
    ]
    proxies = status["proxies"]
    if proxies["total"] or proxies.get("dead"):
        dead = f", {proxies['dead']} dead" if proxies.get("dead") else ""
        figures.append(("proxies", f"{proxies['healthy']}/{proxies['total']} healthy{dead}"))
    parts: list[Any] = [
        Text(title or status["spider"], style="bold"),
        Columns([Text.assemble((f"{label} ", "dim"), (str(value), "bold")) for label, value in figures], padding=(0, 3)),
    ]
    if status["nodes"]:
        nodes = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        id_width = min(40, max(len(n["id"]) for n in status["nodes"]))
        for col in ("node", "state", "/min", "pages", "items", "errors", "flight", "leases", "RSS", "seen ago"):
            left = col in ("node", "state")
            nodes.add_column(col, justify="left" if left else "right", no_wrap=True, min_width=id_width if col == "node" else None)
        for n in status["nodes"]:
            nodes.add_row(
                n["id"], Text(n["state"], style=STATE_STYLE.get(n["state"], "")), f"{n['rate']:.0f}",
                str(n["pages"]), str(n["items"]), str(n["errors"]), str(n["in_flight"]), str(n["leases"]),
                human_bytes(n["rss"]) if n["rss"] else "", duration(max(0.0, now - n["last_seen"])),
            )
        parts.append(nodes)
    else:
        parts.append(Text("no node has reported yet", style="dim"))
    for a in status["alerts"][:5]:
        when = time.strftime("%H:%M:%S", time.localtime(a.get("time", 0)))
        parts.append(Text.assemble(("alert ", "bold red"), f"{when} {a.get('kind', '')} {a.get('node', '')}: {a.get('message', '')}"))
    return Group(*parts)


def status_now(client: Any, settings: BaseSettings, spider: str) -> dict[str, Any]:
    """`gather_status` on a sync client."""
    return run_sync(gather_status(client, settings, spider))


def watch_status(client: Any, settings: BaseSettings, spider: str, interval: float, as_json: bool, title: str) -> int:
    """Refresh the status every `interval` seconds until Ctrl-C; Redis outages are shown, not fatal."""
    if interval <= 0:
        raise ValueError(f"--interval ({interval}) must be > 0 seconds")
    console = Console()
    try:
        if as_json:  # one object a line, for scripts
            while True:
                try:
                    print(json.dumps(status_now(client, settings, spider), ensure_ascii=False), flush=True)
                except TRANSIENT_ERRORS as exc:
                    print(json.dumps({"spider": spider, "error": f"Redis unreachable: {exc}"}), flush=True)
                time.sleep(interval)
        with Live(console=console, auto_refresh=False, transient=False) as live:
            while True:
                try:
                    view: Any = render_status(status_now(client, settings, spider), title)
                except TRANSIENT_ERRORS as exc:
                    view = Text(f"Redis unreachable ({exc}); retrying every {interval:g}s", style="bold red")
                live.update(view, refresh=True)
                time.sleep(interval)
    except KeyboardInterrupt:
        return 0
