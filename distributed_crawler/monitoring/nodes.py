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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from redis.commands.core import AsyncScript, Script
from redis.exceptions import ResponseError
from scrapy.settings import BaseSettings

from distributed_crawler.connection.calls import maybe_await, server_time
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.connection.untrusted import is_wrong_type
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.keyspace import fill
from distributed_crawler.keyspace import key as spider_key
from distributed_crawler.storage.extra_fields import JsonValue

ALIVE_INTERVALS = 3  # a node missing this many heartbeats is dead
FORGET_SECONDS = 24 * 3600  # dead and closed nodes are listed this long after their last heartbeat
HISTORY_MINUTES = 60
HISTORY_TTL = 2 * 3600  # the per-minute counters vanish this long after the last heartbeat
DEFAULT_INTERVAL = 10.0

# Node hash fields and how to read them back.
FLOAT_FIELDS = ("started", "last_seen", "interval", "rate")
INT_FIELDS = ("pid", "pages", "items", "errors", "in_flight", "leases", "rss", "browser_pages", "stalled")
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
            return spider_key(settings, name, spider)

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
        return fill(self.node_template, self.spider, node=node_id)

    def all(self) -> list[str]:
        """Every monitoring key except the per-node hashes (what a reset deletes)."""
        return [self.nodes, self.last, self.alerted, self.history, self.stats, self.alerts]


def heartbeat_script(client: AnyRedis) -> Script | AsyncScript:
    return client.register_script(lua_source("heartbeat"))


async def beat(
    script: Any,
    keys: NodeKeys,
    node_id: str,
    interval: float,
    fields: dict[str, Any],
    deltas: tuple[int, ...] = (0, 0, 0),
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
    stamp = await maybe_await(
        script(
            keys=[keys.nodes, keys.node(node_id), keys.last, keys.alerted, keys.history, keys.stats],
            args=[node_id, ttl, HISTORY_TTL, *deltas, json.dumps(fields, default=str), *pairs],
        )
    )
    return float(stamp)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


MAX_COUNT = 2**53  # larger integers than this in a node field are garbage, not counts
MAX_TEXT = 200  # characters of a text field shown (a host name, a version)
MAX_NODE_ID = 256
STATES = ("running", "idle", "stalled", "draining", "closed")


class Skips:
    """What a reader left out: unreadable entries by key, and keys of the wrong Redis type.

    Everything read from Redis is untrusted (untrusted.py): readers skip what they cannot read,
    count it here, and the status shows one line about it instead of failing.
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.wrong: dict[str, tuple[str, str]] = {}  # key -> (actual type, expected types)

    def add(self, key: str, n: int = 1) -> None:
        if n:
            self.counts[key] = self.counts.get(key, 0) + n

    def wrong_type(self, key: str, actual: str, expected: str) -> None:
        self.wrong[key] = (actual, expected)

    # Any: `call`'s reply, of whichever command it sends, or `default` (the callers parse it).
    async def read(self, key: str, expected: str, default: Any, call: Callable[[], Any]) -> Any:
        """`call()` (reads of `key` only, sync or asyncio client), or `default` on a WRONGTYPE reply.

        Checking TYPE first is not enough: anyone may replace the key between the check and the
        read. Such a key is named in `wrong_type` like one the check caught, never a traceback.
        """
        try:
            return await maybe_await(call())
        except ResponseError as exc:
            if not is_wrong_type(exc):
                raise
            self.wrong.setdefault(key, ("other type", expected))
            return default

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        """One line: 'skipped 3 unreadable entries in {news}:failed' ('' when nothing was skipped)."""
        if not self.counts:
            return ""
        if len(self.counts) == 1:
            ((key, n),) = self.counts.items()
            return f"skipped {n} unreadable {'entry' if n == 1 else 'entries'} in {key}"
        parts = ", ".join(f"{n} in {key}" for key, n in sorted(self.counts.items()))
        return f"skipped {self.total} unreadable entries: {parts}"

    def lines(self) -> list[str]:
        from distributed_crawler.connection.untrusted import wrong_type_message

        lines = [wrong_type_message(key, actual, expected) for key, (actual, expected) in sorted(self.wrong.items())]
        return ([self.summary()] if self.counts else []) + lines

    def as_json(self) -> dict[str, Any]:
        from distributed_crawler.connection.untrusted import wrong_type_message

        return {
            "skipped": dict(sorted(self.counts.items())),
            "wrong_type": [
                {
                    "key": key,
                    "type": actual,
                    "expected": expected,
                    "fix": f"redis-cli del '{key}'",
                    "message": wrong_type_message(key, actual, expected),
                }
                for key, (actual, expected) in sorted(self.wrong.items())
            ],
        }


def _count(value: Any) -> int:
    """A counter read from Redis: garbage, NaN, ±inf, negative and absurd values become 0."""
    number = _float(value, 0.0)
    return int(number) if 0 <= number <= MAX_COUNT else 0


def _short(value: Any) -> str:
    return (value.decode("utf-8", "replace") if isinstance(value, bytes) else value if isinstance(value, str) else "")[
        :MAX_TEXT
    ]


def _report(value: Any) -> dict[str, Any] | None:
    """A node's JSON report (a dict), or None when it is not one."""
    if isinstance(value, dict):
        report = value
    else:
        try:
            report = json.loads(value)
        except (TypeError, ValueError, RecursionError):
            return None
    return clean_json(report) if isinstance(report, dict) else None


def clean_json(value: Mapping[Any, Any]) -> dict[str, JsonValue]:
    """A decoded JSON object made safe to print as strict JSON: NaN/±inf -> None, depth capped."""
    return {str(k): _clean(v, 1) for k, v in value.items()}


def _clean(value: object, depth: int) -> JsonValue:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth > 20:
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v, depth + 1) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    return str(value)  # not a JSON type (json.loads never makes one)


def node_view(
    node_id: str, last_seen: float, fields: dict[str, str], snapshot: dict[str, Any], now: float
) -> dict[str, Any]:
    """One node as `dcrawl status` shows it: the live hash if it has not expired, else the last snapshot.

    `alive`: it beat within 3 intervals (and did not close). `state`: running, idle, stalled (holds
    leases with nothing in flight for longer than a lease), draining or closed as the node reported it, or `dead` when its heartbeats stopped without a close. Fields
    that do not read as what they should be (garbage, NaN, ±inf) show as 0 or "".
    """
    live = bool(fields)
    raw: dict[str, Any] = fields if live else snapshot
    interval = _float(raw.get("interval"), DEFAULT_INTERVAL)
    if interval <= 0:
        interval = DEFAULT_INTERVAL
    reported = _short(raw.get("state")) or "running"
    if reported not in STATES:
        reported = "unknown"
    alive = live and reported != "closed" and now - last_seen <= interval * ALIVE_INTERVALS
    view: dict[str, Any] = {
        "id": node_id,
        "alive": alive,
        "state": reported if alive or reported == "closed" else "dead",
        "last_seen": round(last_seen, 3),
    }
    for name in FLOAT_FIELDS:
        if name != "last_seen":
            view[name] = max(0.0, _float(raw.get(name), 0.0))
    for name in INT_FIELDS:
        view[name] = _count(raw.get(name))
    for name in STR_FIELDS:
        view[name] = _short(raw.get(name))
    view["interval"] = interval
    if not alive:
        view["rate"] = 0.0  # pages/min: nothing is happening there now
        view["in_flight"] = 0
    report = _report(raw.get("report")) if raw.get("report") else None
    if report:
        view["report"] = report
    return view


def _float(value: Any, default: float) -> float:
    """A number read from Redis; garbage, NaN and ±inf give `default`."""
    if value in (None, "", b""):
        return default
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return default
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return default
    return number if math.isfinite(number) else default


def scored_members(reply: object, key: str) -> list[tuple[bytes | str, float]]:
    """The (member, score) pairs of a ZRANGE ... WITHSCORES reply (redis-py gives scores as floats)."""
    if not isinstance(reply, list):
        raise ValueError(f"{key}: expected a list from ZRANGE WITHSCORES, got {reply!r:.80}")
    pairs = []
    for pair in reply:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[0], (bytes, str))):
            raise ValueError(f"{key}: expected (member, score) pairs from ZRANGE WITHSCORES, got {pair!r:.80}")
        if not isinstance(pair[1], (int, float)):
            raise ValueError(f"{key}: expected a number as the score of {pair[0]!r:.60}, got {pair[1]!r:.60}")
        pairs.append((pair[0], float(pair[1])))
    return pairs


def _node_id(raw: Any) -> str | None:
    """A node id from the nodes zset, or None when it cannot be one (not UTF-8, empty, huge, control chars)."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if not isinstance(raw, str) or not raw or len(raw) > MAX_NODE_ID or not raw.isprintable():
        return None
    return raw


async def read_nodes(
    client: AnyRedis, keys: NodeKeys, now: float | None = None, skips: Skips | None = None
) -> list[dict[str, Any]]:
    """Every node seen for this spider in the last day, newest heartbeat first; two round trips.

    Entries that cannot be a node (an id that is not text, a heartbeat time that is not a finite
    time up to now) are skipped and counted in `skips`; so are node hashes of the wrong type.
    """
    skips = skips if skips is not None else Skips()
    if now is None:
        now = await server_time(client)
    entries = scored_members(
        await maybe_await(client.zrevrangebyscore(keys.nodes, "+inf", now - FORGET_SECONDS, withscores=True)),
        keys.nodes,
    )
    good: list[tuple[str, float]] = []
    for raw_id, score in entries:
        node_id = _node_id(raw_id)
        if node_id is None or not math.isfinite(score) or score > now + 3600:
            skips.add(keys.nodes)
            continue
        good.append((node_id, float(score)))
    if not good:
        return []
    ids = [node_id for node_id, _ in good]
    pipe = client.pipeline(transaction=False)
    for node_id in ids:
        pipe.hgetall(keys.node(node_id))
    pipe.hmget(keys.last, ids)
    results = await maybe_await(pipe.execute(raise_on_error=False))
    snapshots = results[-1]
    if isinstance(snapshots, Exception):
        snapshots = [None] * len(ids)  # the caller checks the key's type and names it
    nodes = []
    for (node_id, last_seen), fields, snapshot in zip(good, results[:-1], snapshots):
        if isinstance(fields, Exception):
            key = keys.node(node_id)
            if "WRONGTYPE" in str(fields):
                skips.wrong_type(key, "other type", "hash")
            else:
                skips.add(key)
            fields = {}
        decoded = {_text(k): _text(v) for k, v in fields.items()}
        snap: Any = {}
        if snapshot:
            try:
                snap = json.loads(snapshot)
            except (ValueError, RecursionError):
                snap = {}
            if not isinstance(snap, dict):
                snap = {}
            if not snap:
                skips.add(keys.last)
        nodes.append(node_view(node_id, last_seen, decoded, snap, now))
    return nodes


async def forget_old_nodes(client: AnyRedis, keys: NodeKeys, now: float) -> int:
    """Drop nodes whose last heartbeat is older than FORGET_SECONDS (their snapshots too)."""
    old = await maybe_await(client.zrangebyscore(keys.nodes, "-inf", now - FORGET_SECONDS, start=0, num=500))
    if not isinstance(old, list) or not all(isinstance(m, (bytes, str)) for m in old):
        raise ValueError(f"{keys.nodes}: expected a list of node ids from ZRANGEBYSCORE, got {old!r:.80}")
    if not old:
        return 0
    pipe = client.pipeline(transaction=False)
    pipe.zrem(keys.nodes, *old)
    pipe.hdel(keys.last, *old)
    pipe.hdel(keys.alerted, *old)
    await maybe_await(pipe.execute())
    return len(old)


async def read_totals(client: AnyRedis, keys: NodeKeys, skips: Skips | None = None) -> dict[str, int]:
    raw = await maybe_await(client.hgetall(keys.stats))
    values = {_text(k): v for k, v in raw.items()}
    totals = {}
    for name in ("pages", "items", "errors"):
        value = values.get(name)
        totals[name] = _count(value)
        if skips is not None and value is not None and not 0 <= _float(value, -1.0) <= MAX_COUNT:
            skips.add(keys.stats)
    return totals


async def read_history(
    client: AnyRedis, keys: NodeKeys, now: float, minutes: int = HISTORY_MINUTES
) -> list[dict[str, int]]:
    """Pages, items and errors per minute over the last `minutes` (oldest first; the last is partial)."""
    return history_of(await maybe_await(client.hgetall(keys.history)), now, minutes)


def history_of(
    raw: Mapping[bytes | str, bytes | str], now: float, minutes: int = HISTORY_MINUTES
) -> list[dict[str, int]]:
    """`read_history` from the history hash as read (empty: a key of another type)."""
    counters = {_text(k): _count(v) for k, v in raw.items()}
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


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
