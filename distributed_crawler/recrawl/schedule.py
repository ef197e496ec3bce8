"""The revisit schedule in Redis: what is due when, and each URL's revisit state (docs/recrawl.md).

Two keys per frontier shard, on the shard's hash tag (one shard: the spider's): `{spider}:recrawl`
(zset fingerprint -> due time, server clock) and `{spider}:recrawl:state` (hash fingerprint ->
"timing\\ndigest\\netag\\nlast-modified\\nmember", lua/lib/recrawl.lua; timing = "interval" or
"interval;first fetch;revisits;end"). Writes go through two scripts: recrawl_move.lua (due URLs into the
frontier) and recrawl_record.lua (a fetch's result: next interval and due time). Methods are
coroutines on either client (`run_sync` drives them on the CLI's sync client); `iter_states` reads
with HSCAN as the replies come, on a sync client only.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import redis
from redis.cluster import RedisCluster
from scrapy.settings import BaseSettings

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.lua import lua_source, reply_text
from distributed_crawler.connection.types import AnyRedis, AnyScript, SyncRedis
from distributed_crawler.frontier.base import Frontier, RevisitRecord
from distributed_crawler.frontier.codec import payload_url
from distributed_crawler.frontier.envelope import split_member
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.replies import Moved
from distributed_crawler.keyspace import key as spider_key

FINGERPRINT_CHARS = 16  # the first 64 bits of the request fingerprint name a URL in the schedule
HEADER_CHARS = 256  # longest ETag / Last-Modified kept (a longer one is not a validator worth storing)

CHANGE_NAMES = {1: "changed", 0: "unchanged", -1: "first", -2: "error", -3: "not_stored"}


def clean_header(value: bytes | str | None) -> str:
    """A validator as stored: one line, bounded; "" when absent or unusable."""
    if value is None:
        return ""
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if "\n" in text or "\r" in text or len(text) > HEADER_CHARS:
        return ""
    return text


@dataclass(frozen=True)
class RecrawlKeys:
    schedule: str  # zset fingerprint -> due time
    state: str  # hash fingerprint -> revisit state

    @classmethod
    def from_settings(cls, settings: BaseSettings | dict[str, Any], spider: str) -> RecrawlKeys:
        return cls(spider_key(settings, "RECRAWL_KEY", spider), spider_key(settings, "RECRAWL_STATE_KEY", spider))

    @classmethod
    def of(cls, keys: SpiderKeys) -> RecrawlKeys:
        """The schedule keys of one frontier shard (its hash tag)."""
        return cls(keys.recrawl, keys.recrawl_state)


class RevisitState(NamedTuple):
    interval: float
    digest: str
    etag: str
    last_modified: str
    member: str
    born: float | None = None  # server time of the first fetch (None: written by an older release)
    step: int = 0  # revisits recorded since the first fetch
    ends: float = 0.0  # server time after which the URL leaves the schedule (0 = never)

    @property
    def url(self) -> str | None:
        """The URL the stored member revisits (None if its payload is not a request payload)."""
        try:
            return payload_url(split_member(self.member).payload)
        except ValueError:
            return None


def parse_state(value: bytes | str | None) -> RevisitState | None:
    """A state hash value, or None for garbage (the same rules as lua/lib/recrawl.lua)."""
    if value is None:
        return None
    parts = reply_text(value).split("\n", 4)
    if len(parts) != 5:
        return None
    timing = parts[0].split(";")
    if len(timing) not in (1, 4):
        return None
    try:
        interval = float(timing[0])
        born, step, ends = (
            (float(timing[1]), int(float(timing[2])), float(timing[3])) if len(timing) == 4 else (None, 0, 0.0)
        )
        split_member(parts[4])
    except ValueError:
        return None
    if not (0 < interval <= 1e12) or not all(math.isfinite(v) for v in (born or 0.0, ends)):
        return None
    return RevisitState(interval, parts[1], parts[2], parts[3], parts[4], born, step, ends)


class Recorded(NamedTuple):
    interval: float
    change: str  # changed | unchanged | first | error | not_stored
    ended: bool = False  # that was the URL's last visit: it left the schedule


class RevisitSchedule:
    """The schedule's scripts on one client, over the frontier's shards: the only place that knows
    their KEYS / ARGV order. A URL's revisit lives on the shard of its host (the same hash tag as
    its queue), so a record and a move are each one script on one node; figures sum the shards."""

    def __init__(self, client: AnyRedis, frontier: Frontier) -> None:
        self.client = client
        self.frontier = frontier
        self._move = client.register_script(lua_source("recrawl_move"))
        self._record = client.register_script(lua_source("recrawl_record"))

    def keys_for(self, url: str) -> RecrawlKeys:
        """The schedule keys of the shard that holds `url`'s host."""
        return RecrawlKeys.of(self.frontier.shard_for(url).keys)

    def every_keys(self) -> list[RecrawlKeys]:
        """The schedule keys of every shard (one pair with one shard)."""
        return [RecrawlKeys.of(part.keys) for part in self.frontier.each_shard()]

    @property
    def where(self) -> str:
        """The keys to name in a message: the first shard's, and how many more."""
        keys = self.every_keys()
        more = f" (+{len(keys) - 1} shards)" if len(keys) > 1 else ""
        return f"{keys[0].schedule} and {keys[0].state}{more}"

    async def move_due(self, limit: int, pending_seconds: float) -> Moved:
        """Push up to `limit` due URLs of each shard into the frontier (see recrawl_move.lua)."""
        return await self.frontier.recrawl_move(self._move, limit, pending_seconds)

    async def record(
        self, fingerprint: str, interval: tuple[float, float], factor: float, outcome: str, **fields: Any
    ) -> Recorded:
        """Store a fetch's result and schedule the next visit (recrawl_record.lua) -> Recorded: the
        record `revisit_record` makes of these arguments, written on its own (`write`)."""
        return await self.write(self.revisit_record(fingerprint, interval, factor, outcome, **fields))

    async def write(self, record: RevisitRecord) -> Recorded:
        """One record on its own (recrawl_record.lua, on the shard of its URL)."""
        script, keys, args = self.write_call(record)
        return recorded_from(await maybe_await(script(keys=keys, args=args)))

    def write_call(self, record: RevisitRecord) -> tuple[AnyScript, list[str], list[Any]]:
        """recrawl_record.lua with its KEYS and ARGV for `record`, on the shard of its URL: what
        `write` runs, or what a caller queues in a Batch (bench/revisit_schedule.py)."""
        keys = self.keys_for(record.url)
        return self._record, [keys.schedule, keys.state], list(record.args)

    def revisit_record(
        self,
        fingerprint: str,
        interval: tuple[float, float],
        factor: float,
        outcome: str,
        digest: str = "",
        etag: str = "",
        last_modified: str = "",
        member: str = "",
        url: str = "",
        horizon: float = 0.0,
        plan: tuple[float, ...] | None = None,
    ) -> RevisitRecord:
        """A fetch's record as a value: written on its own (`write`), or by the frontier in the script
        that acks the page's lease (lua/recrawl_ack.lua); recrawl_record.lua's ARGV, in its order.
        `plan`: the seconds after the first fetch of each revisit (None: no plan, `()`: the plan ends
        now); `horizon`: seconds after the first fetch past which an adaptive schedule ends (0 = never)."""
        low, high = interval
        args = (
            fingerprint,
            f"{low:.3f}",
            f"{high:.3f}",
            f"{factor:.6g}",
            outcome,
            digest,
            etag,
            last_modified,
            member,
            "" if plan is None else "plan:" + ",".join(f"{s:.3f}" for s in plan),
            f"{horizon:.3f}",
        )
        return RevisitRecord(url or member_url(member), args)

    async def state(self, fingerprint: str, url: str = "") -> RevisitState | None:
        """The revisit state of a URL (None: never fetched as revisitable, or garbage)."""
        return parse_state(await maybe_await(self.client.hget(self.keys_for(url).state, fingerprint)))

    async def summary(
        self,
        now: float,
        skip: Collection[str] = (),
        read: Callable[[str, Callable[[], Awaitable[dict[str, int]]]], Awaitable[dict[str, int]]] | None = None,
    ) -> dict[str, int]:
        """`scheduled`, `due_now`, `due_next_hour`, summed over the shards; any client. Shards whose
        schedule key is in `skip` (of the wrong type) are left out; `read(key, call)` wraps each
        shard's read (status: a key replaced meanwhile is named, not raised)."""
        total = {"scheduled": 0, "due_now": 0, "due_next_hour": 0}
        for keys in self.every_keys():
            if keys.schedule in skip:
                continue
            call = partial(schedule_summary, self.client, keys, now)
            part = await (read(keys.schedule, call) if read else call())
            for name, value in part.items():
                total[name] += value
        return total

    async def soonest(self, limit: int) -> list[tuple[str, float, RevisitState | None]]:
        """The `limit` URLs due soonest over every shard: (fingerprint, due time, state)."""
        head: list[tuple[str, float, RevisitState | None]] = []
        for keys in self.every_keys():
            due = scored(await maybe_await(self.client.zrange(keys.schedule, 0, limit - 1, withscores=True)))
            states = await maybe_await(self.client.hmget(keys.state, [fp for fp, _ in due])) if due else []
            head += [(fp, when, parse_state(raw)) for (fp, when), raw in zip(due, states)]
        return sorted(head, key=lambda row: row[1])[:limit]

    def iter_states(self, count: int = 500) -> Iterator[tuple[RecrawlKeys, str, RevisitState | None]]:
        """Every (shard keys, fingerprint, state) of every shard's state hash (HSCAN: bounded memory)."""
        for keys in self.every_keys():
            for fingerprint, state in iter_states(sync_client(self.client), keys, count):
                yield keys, fingerprint, state

    async def make_due(self, chosen: dict[RecrawlKeys, list[str]], now: float) -> int:
        """Make these fingerprints (by their shard's keys) due at `now`. Returns how many."""
        done = 0
        for keys, fingerprints in chosen.items():
            if fingerprints:
                await maybe_await(self.client.zadd(keys.schedule, dict.fromkeys(fingerprints, now)))
                done += len(fingerprints)
        return done

    async def scheduled(self, urls: Sequence[str], fingerprints: Sequence[str]) -> list[bool]:
        """Whether each URL (named by its fingerprint) has a revisit state on its shard."""
        pipe = self.client.pipeline(transaction=False)
        for url, fingerprint in zip(urls, fingerprints):
            pipe.hexists(self.keys_for(url).state, fingerprint)
        return [bool(found) for found in await maybe_await(pipe.execute())]


def _numbers(reply: object, length: int, what: str) -> list[float]:
    """A script's array reply of `length` numbers (Lua gives integers, or strings for fractions)."""
    if not isinstance(reply, (list, tuple)) or len(reply) < length:
        raise ValueError(f"{what}: expected {length} numbers, got {reply!r:.80}")
    try:
        return [float(reply_text(value)) for value in reply[:length]]
    except ValueError:
        raise ValueError(f"{what}: expected {length} numbers, got {reply!r:.80}") from None


def recorded_from(reply: object) -> Recorded:
    """recrawl_record.lua's reply as a Recorded (ValueError: recrawl_ack.lua's ["err", message])."""
    interval, change, ended = _numbers(reply, 3, "recrawl_record.lua")
    return Recorded(interval, CHANGE_NAMES.get(int(change), "?"), bool(int(ended)))


def scored(reply: object) -> list[tuple[str, float]]:
    """A ZRANGE ... WITHSCORES reply as (member, score) pairs."""
    if not isinstance(reply, list):
        raise ValueError(f"ZRANGE WITHSCORES: expected an array, got {reply!r:.80}")
    pairs = []
    for pair in reply:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"ZRANGE WITHSCORES: expected (member, score) pairs, got {pair!r:.80}")
        pairs.append((reply_text(pair[0]), float(pair[1])))
    return pairs


def sync_client(client: AnyRedis) -> SyncRedis:
    """`client` as the sync client a loop over replies as they come needs (the CLI's)."""
    if isinstance(client, (redis.Redis, RedisCluster)):
        return client
    raise TypeError(f"a sync redis client is needed here, not {type(client).__name__}")


def member_url(member: str) -> str:
    """The URL a queue member requests ("" when its payload holds none: the codec reads both the
    compact form and old JSON members)."""
    if not member:
        return ""
    try:
        return payload_url(split_member(member).payload) or ""
    except ValueError:
        return ""


def iter_states(client: SyncRedis, keys: RecrawlKeys, count: int = 500) -> Iterator[tuple[str, RevisitState | None]]:
    """Every (fingerprint, state) of the state hash, in HSCAN batches (bounded memory; sync client)."""
    for fingerprint, value in client.hscan_iter(keys.state, count=count):
        yield reply_text(fingerprint), parse_state(value)


async def schedule_summary(client: AnyRedis, keys: RecrawlKeys, now: float) -> dict[str, int]:
    """`scheduled` URLs, `due_now`, `due_next_hour` (for status and the dashboard; any client)."""
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.schedule)
    pipe.zcount(keys.schedule, "-inf", now)
    pipe.zcount(keys.schedule, f"({now}", now + 3600)
    scheduled, due_now, next_hour = await maybe_await(pipe.execute())
    return {"scheduled": int(scheduled), "due_now": int(due_now), "due_next_hour": int(next_hour)}
