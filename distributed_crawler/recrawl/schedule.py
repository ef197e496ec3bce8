"""The revisit schedule in Redis: what is due when, and each URL's revisit state (docs/recrawl.md).

Two keys on the spider's hash slot: `{spider}:recrawl` (zset fingerprint -> due time, server
clock) and `{spider}:recrawl:state` (hash fingerprint -> "interval\\ndigest\\netag\\nlast-modified\\n
member", lua/lib/recrawl.lua). Writes go through two scripts: recrawl_move.lua (due URLs into the
frontier) and recrawl_record.lua (a fetch's result: next interval and due time). Methods return
values with a sync client and awaitables with an asyncio client.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from scrapy.settings import BaseSettings

from distributed_crawler.defaults import SettingsReader
from distributed_crawler.queue.base import Frontier
from distributed_crawler.queue.enqueue import maybe_await
from distributed_crawler.queue.envelope import split_member
from distributed_crawler.queue.scripts import lua_source, reply_text, then

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
        read = SettingsReader(settings)
        fill = {"spider": spider, "name": spider}
        return cls(read.str("RECRAWL_KEY") % fill, read.str("RECRAWL_STATE_KEY") % fill)


class RevisitState(NamedTuple):
    interval: float
    digest: str
    etag: str
    last_modified: str
    member: str

    @property
    def url(self) -> str | None:
        """The URL the stored member revisits (None if its payload is not readable JSON)."""
        try:
            payload = json.loads(split_member(self.member).payload)
        except ValueError:
            return None
        url = payload.get("url") if isinstance(payload, dict) else None
        return url if isinstance(url, str) else None


def parse_state(value: bytes | str | None) -> RevisitState | None:
    """A state hash value, or None for garbage (the same rules as lua/lib/recrawl.lua)."""
    if value is None:
        return None
    parts = reply_text(value).split("\n", 4)
    if len(parts) != 5:
        return None
    try:
        interval = float(parts[0])
        split_member(parts[4])
    except ValueError:
        return None
    if not (0 < interval <= 1e12):
        return None
    return RevisitState(interval, parts[1], parts[2], parts[3], parts[4])


class Moved(NamedTuple):
    moved: int
    dropped: int  # unreadable states removed
    next_due: float | None  # seconds until the next URL is due; None = the schedule is empty


class Recorded(NamedTuple):
    interval: float
    change: str  # changed | unchanged | first | error | not_stored


class RevisitSchedule:
    """The schedule's scripts on one client: the only place that knows their KEYS / ARGV order."""

    def __init__(self, client: Any, keys: RecrawlKeys, frontier: Frontier) -> None:
        self.client = client
        self.keys = keys
        self.frontier = frontier
        self._move = client.register_script(lua_source("recrawl_move"))
        self._record = client.register_script(lua_source("recrawl_record"))

    def move_due(self, limit: int, pending_seconds: float) -> Any:
        """Push up to `limit` due URLs into the frontier (see recrawl_move.lua) -> Moved."""
        result = self.frontier.recrawl_move(self._move, self.keys.schedule, self.keys.state, limit, pending_seconds)

        def convert(reply: list[Any]) -> Moved:
            due = float(reply[2])
            return Moved(int(reply[0]), int(reply[1]), None if due < 0 else due)

        return then(result, convert)

    def record(
        self,
        fingerprint: str,
        interval: tuple[float, float],
        factor: float,
        outcome: str,
        digest: str = "",
        etag: str = "",
        last_modified: str = "",
        member: str = "",
    ) -> Any:
        """Store a fetch's result and schedule the next visit (recrawl_record.lua) -> Recorded."""
        low, high = interval
        result = self._record(
            keys=[self.keys.schedule, self.keys.state],
            args=[
                fingerprint,
                f"{low:.3f}",
                f"{high:.3f}",
                f"{factor:.6g}",
                outcome,
                digest,
                etag,
                last_modified,
                member,
            ],
        )
        return then(result, lambda reply: Recorded(float(reply[0]), CHANGE_NAMES.get(int(reply[1]), "?")))

    def state(self, fingerprint: str) -> Any:
        """The revisit state of a URL (None: never fetched as revisitable, or garbage)."""
        return then(self.client.hget(self.keys.state, fingerprint), parse_state)


def iter_states(client: Any, keys: RecrawlKeys, count: int = 500) -> Iterator[tuple[str, RevisitState | None]]:
    """Every (fingerprint, state) of the state hash, in HSCAN batches (bounded memory; sync client)."""
    for fingerprint, value in client.hscan_iter(keys.state, count=count):
        yield reply_text(fingerprint), parse_state(value)


async def schedule_summary(client: Any, keys: RecrawlKeys, now: float) -> dict[str, int]:
    """`scheduled` URLs, `due_now`, `due_next_hour` (for status and the dashboard; any client)."""
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.schedule)
    pipe.zcount(keys.schedule, "-inf", now)
    pipe.zcount(keys.schedule, f"({now}", now + 3600)
    scheduled, due_now, next_hour = await maybe_await(pipe.execute())
    return {"scheduled": int(scheduled), "due_now": int(due_now), "due_next_hour": int(next_hour)}
