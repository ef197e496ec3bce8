"""Which nodes work on a spider, and how they do: heartbeats written and read back in server time.

Keys (all share the spider's hash tag, so they live in one Redis Cluster slot):

| key | type | what |
|---|---|---|
| `{spider}:nodes` | zset | node id -> last heartbeat (Redis server time) |
| `{spider}:node:<id>` | hash | the node's latest fields; expires after ~3 heartbeat intervals |
| `{spider}:nodes:last` | hash | node id -> JSON of its latest fields (accounting of dead and closed nodes) |
| `{spider}:nodes:alerted` | hash | node id -> when its death was alerted (so one live node alerts, once) |
| `{spider}:minutes` | hash | `p:<minute>`, `i:<minute>`, `e:<minute>` -> pages, items, errors (last hour) |
| `{spider}:stats` | hash | cluster totals since the crawl began: pages, items, errors |
| `{spider}:alerts` | list | health alerts, newest first (JSON) |

Every reader works with sync and asyncio redis-py clients: `await` the coroutine, or drive it with
`run_sync` for a sync client (it never suspends then).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from scrapy.settings import BaseSettings

from distributed_crawler.defaults import get_setting
from distributed_crawler.enqueue import maybe_await
from distributed_crawler.keys import SpiderKeys
from distributed_crawler.scripts import lua_source

ALIVE_INTERVALS = 3  # a node missing this many heartbeats is dead
FORGET_SECONDS = 24 * 3600  # dead and closed nodes are listed this long after their last heartbeat
HISTORY_MINUTES = 60
HISTORY_TTL = 2 * 3600  # the per-minute counters vanish this long after the last heartbeat
DEFAULT_INTERVAL = 10.0
PROXY_POOL_KEY = "dc:proxies"  # DESIGN §3: zset, score = health

# Node hash fields and how to read them back.
FLOAT_FIELDS = ("started", "last_seen", "interval", "rate")
INT_FIELDS = ("pid", "pages", "items", "errors", "in_flight", "leases", "rss", "browser_pages")
STR_FIELDS = ("host", "version", "spider")  # state: see node_view


@dataclass(frozen=True)
class NodeKeys:
    spider: str
    nodes: str
    node_template: str
    last: str
    alerted: str
    history: str
    stats: str
    alerts: str

    @classmethod
    def from_settings(cls, settings: BaseSettings, spider: str, spider_keys: SpiderKeys | None = None) -> NodeKeys:
        keys = spider_keys or SpiderKeys.from_settings(settings, spider)

        def key(name: str) -> str:
            return str(get_setting(settings, name)) % {"spider": spider, "name": spider}

        return cls(
            spider=spider,
            nodes=keys.nodes,
            node_template=keys.node_template,
            last=key("NODES_LAST_KEY"),
            alerted=key("NODES_ALERTED_KEY"),
            history=key("HISTORY_KEY"),
            stats=keys.stats,
            alerts=key("ALERTS_KEY"),
        )

    def node(self, node_id: str) -> str:
        return self.node_template % {"spider": self.spider, "name": self.spider, "node": node_id}

    def all(self) -> list[str]:
        """Every monitoring key except the per-node hashes (what a reset deletes)."""
        return [self.nodes, self.last, self.alerted, self.history, self.stats, self.alerts]


def heartbeat_script(client: Any) -> Any:
    return client.register_script(lua_source("heartbeat"))


async def beat(
    script: Any, keys: NodeKeys, node_id: str, interval: float, fields: dict[str, Any],
    deltas: tuple[int, int, int] = (0, 0, 0),
) -> float:
    """Record that `node_id` is alive now, with its fields; one round trip. Returns server time.

    `deltas` are the pages, items and errors since the last recorded heartbeat: they feed the
    per-minute history and the cluster totals.
    """
    fields = {"id": node_id, "interval": interval, **fields}
    ttl = max(1, math.ceil(interval * ALIVE_INTERVALS) + 1)
    pairs: list[Any] = []
    for name, value in fields.items():
        pairs += [name, json.dumps(value) if isinstance(value, (dict, list)) else value]
    stamp = await maybe_await(script(
        keys=[keys.nodes, keys.node(node_id), keys.last, keys.alerted, keys.history, keys.stats],
        args=[node_id, ttl, HISTORY_TTL, *deltas, json.dumps(fields, default=str), *pairs],
    ))
    return float(stamp)


async def server_time(client: Any) -> float:
    seconds, micros = await maybe_await(client.time())
    return seconds + micros / 1e6


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def node_view(node_id: str, last_seen: float, fields: dict[str, str], snapshot: dict[str, Any], now: float) -> dict[str, Any]:
    """One node as `dcrawl status` shows it: the live hash if it has not expired, else the last snapshot.

    `alive`: it beat within 3 intervals (and did not close). `state`: running, idle, draining or
    closed as the node reported it, or `dead` when its heartbeats stopped without a close.
    """
    live = bool(fields)
    raw: dict[str, Any] = fields if live else snapshot
    interval = _float(raw.get("interval"), DEFAULT_INTERVAL)
    reported = _text(raw.get("state") or "running")
    alive = live and reported != "closed" and now - last_seen <= interval * ALIVE_INTERVALS
    view: dict[str, Any] = {
        "id": node_id,
        "alive": alive,
        "state": reported if alive or reported == "closed" else "dead",
        "last_seen": round(last_seen, 3),
    }
    for name in FLOAT_FIELDS:
        if name != "last_seen":
            view[name] = _float(raw.get(name), 0.0)
    for name in INT_FIELDS:
        view[name] = int(_float(raw.get(name), 0))
    for name in STR_FIELDS:
        view[name] = _text(raw.get(name) or "")
    view["interval"] = interval
    if not alive:
        view["rate"] = 0.0  # pages/min: nothing is happening there now
        view["in_flight"] = 0
    report = raw.get("report")
    if report:
        view["report"] = report if isinstance(report, dict) else json.loads(report)
    return view


def _float(value: Any, default: float) -> float:
    try:
        return float(_text(value)) if value not in (None, "", b"") else default
    except ValueError:
        return default


async def read_nodes(client: Any, keys: NodeKeys, now: float | None = None) -> list[dict[str, Any]]:
    """Every node seen for this spider in the last day, newest heartbeat first; two round trips."""
    if now is None:
        now = await server_time(client)
    entries = await maybe_await(client.zrevrangebyscore(keys.nodes, "+inf", now - FORGET_SECONDS, withscores=True))
    if not entries:
        return []
    ids = [_text(raw_id) for raw_id, _ in entries]
    pipe = client.pipeline(transaction=False)
    for node_id in ids:
        pipe.hgetall(keys.node(node_id))
    pipe.hmget(keys.last, ids)
    results = await maybe_await(pipe.execute())
    snapshots = results[-1]
    nodes = []
    for node_id, (_, last_seen), fields, snapshot in zip(ids, entries, results[:-1], snapshots):
        decoded = {_text(k): _text(v) for k, v in fields.items()}
        try:
            snap = json.loads(snapshot) if snapshot else {}
        except ValueError:
            snap = {}
        nodes.append(node_view(node_id, float(last_seen), decoded, snap, now))
    return nodes


async def forget_old_nodes(client: Any, keys: NodeKeys, now: float) -> int:
    """Drop nodes whose last heartbeat is older than FORGET_SECONDS (their snapshots too)."""
    old = await maybe_await(client.zrangebyscore(keys.nodes, "-inf", now - FORGET_SECONDS, start=0, num=500))
    if not old:
        return 0
    pipe = client.pipeline(transaction=False)
    pipe.zrem(keys.nodes, *old)
    pipe.hdel(keys.last, *old)
    pipe.hdel(keys.alerted, *old)
    await maybe_await(pipe.execute())
    return len(old)


async def read_totals(client: Any, keys: NodeKeys) -> dict[str, int]:
    raw = await maybe_await(client.hgetall(keys.stats))
    values = {_text(k): int(_float(v, 0)) for k, v in raw.items()}
    return {name: values.get(name, 0) for name in ("pages", "items", "errors")}


async def read_history(client: Any, keys: NodeKeys, now: float, minutes: int = HISTORY_MINUTES) -> list[dict[str, int]]:
    """Pages, items and errors per minute over the last `minutes` (oldest first; the last is partial)."""
    raw = await maybe_await(client.hgetall(keys.history))
    counters = {_text(k): int(_float(v, 0)) for k, v in raw.items()}
    current = int(now // 60)
    return [
        {
            "minute": m * 60,
            "pages": counters.get(f"p:{m}", 0),
            "items": counters.get(f"i:{m}", 0),
            "errors": counters.get(f"e:{m}", 0),
        }
        for m in range(current - minutes + 1, current + 1)
    ]


async def proxy_health(client: Any, key: str = PROXY_POOL_KEY) -> dict[str, int]:
    """Proxies in the shared pool, and how many have a positive health score."""
    pipe = client.pipeline(transaction=False)
    pipe.zcard(key)
    pipe.zcount(key, "(0", "+inf")
    total, healthy = await maybe_await(pipe.execute())
    return {"total": int(total), "healthy": int(healthy)}


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
