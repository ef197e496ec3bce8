"""The per-host frontier as an operator sees it: `dcrawl hosts` rows and the `hosts` block of the status.

Keys read (host mode, docs/frontier.md): `{spider}:hosts` (ready zset: host -> server time it may
be served next), `{spider}:hosts:over` (over-budget zset: host -> pending when it went over),
`{spider}:q:<host>` and `{spider}:q:<host>/` (one host's queue zset and list) and
`{spider}:host:<host>` (its state hash), all read through their owner frontier/hoststate.py, and
`{spider}:refused` (hash "<reason> <host>" -> requests
refused at enqueue or connect time, core/refusals.py; bounded, so read whole).

Bounded on a million hosts: the counts are ZCARD/ZCOUNT (O(log n)); per-host figures are read for
a sample only (the hosts due soonest, the latest-due ones, which is where blocked hosts sit, and
the over-budget hosts with the most left), in pipelines of `CHUNK` commands; nothing uses KEYS.
Everything read is untrusted: a host name that is not short printable UTF-8, a per-host key of the
wrong type (at TYPE or at read time: `Skips.read`) and a field that is not a finite number are
skipped or read as their default, and counted in `Skips`. Works with a sync client (`run_sync`) and an asyncio one, like nodes.py.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.connection.untrusted import finite, text
from distributed_crawler.frontier.hoststate import SHOWN, read_hosts
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.monitoring.nodes import Skips

CHUNK = 1000  # commands per pipeline round trip
STATUS_SAMPLE = 500  # hosts whose queue sizes the status reads (its `top` is among these)
STATUS_TOP = 10  # hosts listed in the status's `top`
STATUS_BLOCKED = 5  # blocked hosts listed in the status (latest until first)
MAX_HOST_CHARS = 300  # a DNS name is at most 253, plus ":port"
MAX_WHY_CHARS = 300
MAX_COUNT = 2**53
MAX_BLOCK_SECONDS = 365 * 86400  # lib/host.lua reads a longer block as garbage too
MAX_INTERVAL = 86400  # lib/host.lua: an iv / cd above a day reads as 0
MAX_BACKOFF = 64
HOST_FIELDS = SHOWN  # the host hash's fields a row shows (frontier/hoststate.py names them all)


def host_name(raw: Any) -> str | None:
    """A host name read from Redis, or None when it is not short printable UTF-8 text."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if not isinstance(raw, str) or not raw or len(raw) > MAX_HOST_CHARS:
        return None
    return raw if raw.isprintable() and " " not in raw else None


def _count(value: Any, default: int = 0) -> int:
    number = finite(text(value) if isinstance(value, bytes) else value, float(default))
    return int(number) if -1 <= number <= MAX_COUNT else default


@dataclass(frozen=True)
class HostRow:
    host: str
    pending: int  # requests in its queue
    due_in: float | None  # seconds until it may be served (0 = now); None = not in the ready index
    blocked_until: float | None  # server time of a block still running (429, Retry-After, backoff)
    blocked_for: float | None  # seconds left of that block
    why: str  # why it waits now, computed when read (waiting_reason); "" = it does not
    pages: int  # requests leased on their first delivery
    budget: int | None  # DOMAIN_MAX_PAGES of the host (None = no budget)
    in_flight_cap: int | None  # DOMAIN_MAX_IN_FLIGHT of the host: leases held at once (None = no cap)
    over_budget: bool
    backoff: int  # adaptive backoff level (0 = none)
    interval: float  # seconds between two requests: max(rate interval, Crawl-delay)
    last_block: str = ""  # the reason of its last block, running or not ("" = never blocked)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _is_error(value: Any) -> bool:
    return isinstance(value, Exception)


async def _pipelined(client: AnyRedis, calls: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
    """Run (method, args) calls in pipelines of CHUNK; errors come back in place (never raised)."""
    out: list[Any] = []
    for start in range(0, len(calls), CHUNK):
        pipe = client.pipeline(transaction=False)
        for method, args in calls[start : start + CHUNK]:
            getattr(pipe, method)(*args)
        out += await maybe_await(pipe.execute(raise_on_error=False))
    return out


async def wrong_host_keys(client: AnyRedis, keys: SpiderKeys, skips: Skips) -> set[str]:
    """The ready / over-budget keys holding another Redis type than zset (named in `skips`)."""
    kinds = await _pipelined(client, [("type", (keys.ready,)), ("type", (keys.over_budget,))])
    wrong = set()
    for key, raw in zip((keys.ready, keys.over_budget), kinds):
        kind = "?" if _is_error(raw) else text(raw) or "none"
        if kind not in ("zset", "none"):
            skips.wrong_type(key, kind, "zset")
            wrong.add(key)
    return wrong


async def read_rows(
    client: AnyRedis,
    keys: SpiderKeys,
    now: float,
    ready: dict[str, float],
    over: set[str],
    skips: Skips,
) -> list[HostRow]:
    """One row per host (ready score given for hosts in the ready index); two commands a host."""
    hosts = sorted(set(ready) | over)
    rows = []
    queue_pattern, state_pattern = keys.host_queue("<host>"), keys.host("<host>")
    for host, (size, fields) in zip(hosts, await read_hosts(client, keys, hosts, HOST_FIELDS)):
        if _is_error(size):
            skips.add(queue_pattern)
            size = 0
        if _is_error(fields) or not isinstance(fields, list) or len(fields) != len(HOST_FIELDS):
            skips.add(state_pattern)
            fields = [None] * len(HOST_FIELDS)
        state = dict(zip(HOST_FIELDS, fields))
        until = finite(state["until"])
        if until > now + MAX_BLOCK_SECONDS:  # "blocked for over a year": garbage, as lib/host.lua reads it
            skips.add(state_pattern)
            until = 0.0
        budget = _count(state["max"], -1)
        cap = _count(state["cap"], -1)
        pages = max(0, _count(state["pages"]))
        score = ready.get(host)
        due_in = None if score is None else round(max(0.0, score - now), 3) if math.isfinite(score) else None
        last_block = "".join(c if c.isprintable() else "?" for c in text(state["why"])[:MAX_WHY_CHARS])
        over_budget = host in over or (budget >= 0 and pages >= budget)
        blocked = until > now
        rows.append(
            HostRow(
                host=host,
                pending=int(size),
                due_in=due_in,
                blocked_until=round(until, 3) if blocked else None,
                blocked_for=round(until - now, 3) if blocked else None,
                why=waiting_reason(int(size), due_in, last_block if blocked else None, over_budget),
                pages=pages,
                budget=budget if budget >= 0 else None,
                in_flight_cap=cap if cap > 0 else None,
                over_budget=over_budget,
                backoff=bo if 0 <= (bo := _count(state["bo"])) <= MAX_BACKOFF else 0,
                interval=round(
                    max(0.0, *(v for v in (finite(state["iv"]), finite(state["cd"])) if v <= MAX_INTERVAL)), 3
                ),
                last_block=last_block,
            )
        )
    return rows


def waiting_reason(pending: int, due_in: float | None, block: str | None, over_budget: bool) -> str:
    """Why a host waits, from its state now: a block still running (its reason), its page budget
    spent, or its politeness delay; "" when it has nothing pending or is due. A block that ended
    long ago says nothing (its reason stays in `last_block`)."""
    if block is not None:
        return block or "blocked"
    if not pending:
        return ""
    if over_budget:
        return "page budget spent (DOMAIN_MAX_PAGES)"
    if due_in is not None and due_in > 0:
        return "politeness delay"
    return ""


def _named(pairs: list[Any], skips: Skips, key: str) -> dict[str, float]:
    """(member, score) pairs with readable host names; the others are counted in `skips`."""
    out: dict[str, float] = {}
    for raw, score in pairs:
        name = host_name(raw)
        if name is None:
            skips.add(key)
            continue
        out[name] = float(score)
    return out


async def _zrange(client: AnyRedis, key: str, start: int, stop: int, reverse: bool = False) -> list[Any]:
    if stop < start:
        return []
    method = client.zrevrange if reverse else client.zrange
    return list(await maybe_await(method(key, start, stop, withscores=True)))


async def _zscan_all(client: AnyRedis, key: str) -> list[Any]:
    pairs: list[Any] = []
    cursor: Any = 0
    while True:
        cursor, chunk = await maybe_await(client.zscan(key, cursor, count=CHUNK))
        pairs += list(chunk)
        if not int(cursor):
            return pairs


async def sample_hosts(
    client: AnyRedis, keys: SpiderKeys, wrong: set[str], sample: int, skips: Skips
) -> tuple[dict[str, float], set[str]]:
    """Ready hosts (-> score) and over-budget hosts to show: every host when `sample` is 0, else
    the `sample` due soonest, a quarter as many due latest (blocked hosts) and over budget."""
    ready_key, over_key = keys.ready, keys.over_budget
    tail = max(1, sample // 4)

    async def ready_sample() -> list[Any]:
        if sample <= 0:
            return await _zscan_all(client, ready_key)
        pairs = await _zrange(client, ready_key, 0, sample - 1)
        if len(pairs) == sample:  # more may follow: the latest due too (no overlap)
            size = int(await maybe_await(client.zcard(ready_key)))
            pairs += await _zrange(client, ready_key, 0, min(tail, size - sample) - 1, reverse=True)
        return pairs

    async def over_sample() -> list[Any]:
        if sample <= 0:
            return await _zscan_all(client, over_key)
        return await _zrange(client, over_key, 0, tail - 1, reverse=True)

    ready_pairs = [] if ready_key in wrong else await skips.read(ready_key, "zset", [], ready_sample)
    over_pairs = [] if over_key in wrong else await skips.read(over_key, "zset", [], over_sample)
    ready = _named(ready_pairs, skips, ready_key)
    over = set(_named(over_pairs, skips, over_key))
    return ready, over


REFUSED_FIELDS_READ = 20_000  # the hash holds at most core/refusals.py's COUNTED_FIELDS_MAX + a field per reason


async def read_refusals(client: AnyRedis, keys: SpiderKeys, skips: Skips) -> dict[str, dict[str, int]]:
    """host -> {reason: requests refused} ("*" = the hosts over the count cap), from `{spider}:refused`."""
    kind = text(await maybe_await(client.type(keys.refused))) or "none"
    if kind not in ("hash", "none"):
        skips.wrong_type(keys.refused, kind, "hash")
        return {}
    out: dict[str, dict[str, int]] = {}
    cursor: Any = 0
    read = 0
    while read < REFUSED_FIELDS_READ:
        cursor, chunk = await skips.read(
            keys.refused, "hash", (0, {}), partial(client.hscan, keys.refused, cursor, count=CHUNK)
        )
        for raw, value in dict(chunk).items():
            read += 1
            field = text(raw) if isinstance(raw, bytes) else str(raw)
            reason, _, host = field.partition(" ")
            name = host if host == "*" else host_name(host)
            count = _count(value, -1)
            if name is None or not reason.isidentifier() or count < 0:
                skips.add(keys.refused)
                continue
            out.setdefault(name, {})[reason] = count
        if not int(cursor):
            break
    return out


def by_refusals(refused: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """Hosts with the most refused requests first: {host, total, reasons}."""
    rows = [{"host": h, "total": sum(r.values()), "reasons": dict(sorted(r.items()))} for h, r in refused.items()]
    return sorted(rows, key=lambda r: (-r["total"], r["host"]))


def by_pending(rows: list[HostRow]) -> list[HostRow]:
    return sorted(rows, key=lambda r: (-r.pending, r.host))


async def host_totals(client: AnyRedis, keys: SpiderKeys, now: float, wrong: set[str]) -> tuple[int, int, int]:
    """(hosts in ready, of them due now, hosts over budget): three O(log n) reads, no scan."""
    ready_key, over_key = keys.ready, keys.over_budget
    pipe = client.pipeline(transaction=False)
    pipe.zcard(ready_key)
    pipe.zcount(ready_key, "-inf", now)
    pipe.zcard(over_key)
    in_ready, due, over = [
        0 if key in wrong or _is_error(v) else int(v)
        for key, v in zip((ready_key, ready_key, over_key), await maybe_await(pipe.execute(raise_on_error=False)))
    ]
    return in_ready, due, over


async def host_summary(
    client: AnyRedis,
    keys: SpiderKeys,
    now: float,
    skips: Skips,
    wrong: set[str] | None = None,
    sample: int = STATUS_SAMPLE,
    top: int = STATUS_TOP,
) -> dict[str, Any]:
    """The status's `hosts`: count, ready (due now), waiting, blocked, over_budget, top by pending.

    `blocked` counts the hosts of the ready index whose block (`until`) is still running among the
    `sample` latest-due ones (`blocked_exact` is false when there were more not-due hosts than that);
    `top` is the `top` hosts by pending among the `scanned` ones.
    """
    if wrong is None:
        wrong = await wrong_host_keys(client, keys, skips)
    ready_key = keys.ready
    in_ready, due, over_count = await host_totals(client, keys, now, wrong)
    waiting = max(0, in_ready - due)
    ready, over = await sample_hosts(client, keys, wrong, sample, skips)
    not_due: dict[str, float] = {}
    if waiting and ready_key not in wrong:
        latest = await skips.read(
            ready_key,
            "zset",
            [],
            lambda: client.zrevrangebyscore(ready_key, "+inf", f"({now!r}", start=0, num=sample, withscores=True),
        )
        not_due = _named(list(latest), Skips(), ready_key)  # already counted by sample_hosts if garbage
    rows = await read_rows(client, keys, now, {**ready, **not_due}, over, skips)
    blocked = [r for r in rows if r.blocked_until is not None and r.host in not_due]
    return {
        "count": in_ready + over_count,
        "ready": due,
        "waiting": waiting,
        "blocked": len(blocked),
        "blocked_exact": waiting <= sample,
        "over_budget": over_count,
        "scanned": len(rows),
        "top": [r.as_json() for r in by_pending(rows)[:top]],
        "blocked_hosts": [
            r.as_json() for r in sorted(blocked, key=lambda r: (-(r.blocked_until or 0), r.host))[:STATUS_BLOCKED]
        ],
    }


async def sharded_summary(
    client: AnyRedis, parts: list[SpiderKeys], now: float, skips: Skips, wrong: set[str] | None = None
) -> dict[str, Any]:
    """`host_summary` summed over the frontier's shards (FRONTIER_SHARDS; one shard: the same)."""
    each = [await host_summary(client, keys, now, skips, wrong if len(parts) == 1 else None) for keys in parts]
    if len(each) == 1:
        return each[0]
    merged: dict[str, Any] = {
        name: sum(s[name] for s in each) for name in ("count", "ready", "waiting", "blocked", "over_budget", "scanned")
    }
    merged["blocked_exact"] = all(s["blocked_exact"] for s in each)
    merged["top"] = sorted((r for s in each for r in s["top"]), key=lambda r: (-r["pending"], r["host"]))[:STATUS_TOP]
    merged["blocked_hosts"] = sorted(
        (r for s in each for r in s["blocked_hosts"]), key=lambda r: (-(r.get("blocked_until") or 0), r["host"])
    )[:STATUS_BLOCKED]
    return merged


EMPTY_SUMMARY: dict[str, Any] = {
    "count": 0,
    "ready": 0,
    "waiting": 0,
    "blocked": 0,
    "blocked_exact": True,
    "over_budget": 0,
    "scanned": 0,
    "top": [],
    "blocked_hosts": [],
}
