"""`CrawlControl`: what operators set on a whole crawl (docs/operations.md "Live control"): the
pause, the per-host overrides, the source registry, and the audit stream that records each change.

None of it is the queue: the frontier leases and acks requests; this object holds the switches a
node reads every 1.5 s (core/pause.py), `dcrawl` and the dashboard write (core/control.py), and
`dcrawl status` shows (monitoring/control.py). Its keys live on the spider's hash tag, except the
overrides hash: each shard's lease script reads the copy on its own tag, so every copy is written
and the first one is read. The frontier it controls is kept for the two actions that reach into
the queue (a purge, a host made due at once).

Its methods that call Redis are coroutines (awaited by core/pause.py on the node's asyncio client,
driven by `run_sync` on the CLI's and the dashboard's sync one: connection/calls.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from redis.typing import EncodableT

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.replies import reply_bytes, reply_int, reply_list
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.keys import SpiderKeys

if TYPE_CHECKING:
    from distributed_crawler.connection.types import AnyRedis

Raw = bytes  # a stored value, as the package's clients give it (no decode_responses)
AuditEntry = tuple[bytes, dict[bytes, bytes]]  # a stream entry: its id, its fields


def decode_pause(raw: Raw | None) -> dict[str, Any] | None:
    """A pause as stored; garbage still means paused (someone set the key), by an unknown user."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        value = None
    if not isinstance(value, dict):
        return {"since": 0.0, "by": "unknown", "drain": False, "source": "unknown"}
    since = value.get("since")
    return {
        "since": float(since) if isinstance(since, (int, float)) else 0.0,
        "by": str(value.get("by", "unknown"))[:100],
        "drain": value.get("drain") is True,
        "source": str(value.get("source", "unknown"))[:20],
    }


class ControlState(NamedTuple):
    pause: dict[str, Any] | None  # decode_pause's
    overrides: dict[Raw, Raw]  # {target: raw JSON}
    version: Raw | None  # the source registry's version (None: none, or garbage in the key)


def _control_reply(reply: object) -> ControlState:
    """control_state's pipeline reply. A registry version that is not a string (garbage in the key)
    reads as none: the pause and the overrides still come through; `dcrawl sources SPIDER import`
    names the key to fix."""
    replies = reply_list(reply, "control state", 3)
    for item in replies[:2]:
        if isinstance(item, Exception):
            raise item
    pause, overrides, version = replies[:3]
    raw_pause = _value(pause, "GET paused")
    raw_version = _value(version, "GET version") if isinstance(version, (bytes, str)) else None
    return ControlState(decode_pause(raw_pause), _hash(overrides, "HGETALL overrides"), raw_version)


def _hash(reply: object, what: str) -> dict[Raw, Raw]:
    """A hash reply (HGETALL) as bytes -> bytes."""
    if not isinstance(reply, dict):
        raise ValueError(f"{what}: expected a hash reply, got {type(reply).__name__}")
    return {reply_bytes(k, what): reply_bytes(v, what) for k, v in reply.items()}


def _value(reply: object, what: str) -> Raw | None:
    return None if reply is None else reply_bytes(reply, what)


def _fields(fields: dict[str, str]) -> dict[EncodableT, EncodableT]:
    return {k: v for k, v in fields.items()}


def _audit_entries(reply: object) -> list[AuditEntry]:
    entries: list[AuditEntry] = []
    for entry in reply_list(reply or [], "XRANGE audit"):
        entry_id, fields = reply_list(entry, "XRANGE audit", 2)[:2]
        if not isinstance(fields, dict):
            raise ValueError(f"XRANGE audit: expected fields, got {type(fields).__name__}")
        pairs = {reply_bytes(k, "XRANGE audit"): reply_bytes(v, "XRANGE audit") for k, v in fields.items()}
        entries.append((reply_bytes(entry_id, "XRANGE audit"), pairs))
    return entries


class CrawlControl:
    """The crawl-wide switches of one spider on one client."""

    def __init__(self, client: AnyRedis, keys: SpiderKeys, override_keys: Sequence[str], frontier: Frontier) -> None:
        self.client = client
        self.keys = keys  # the spider's (its own hash tag)
        self.override_keys = list(override_keys) or [keys.overrides]  # one per shard: the lease reads its own
        self.frontier = frontier

    @classmethod
    def of(cls, frontier: Frontier) -> CrawlControl:
        """The control of `frontier`'s crawl, on its client."""
        return cls(frontier.client, frontier.keys, [k.overrides for k in frontier.part_keys()], frontier)

    @property
    def spider(self) -> str:
        return self.keys.spider

    # -- the pause (dcrawl pause / resume) -------------------------------------------------------
    async def pause(self, by: str, drain: bool, source: str, now: float) -> None:
        """Pause the crawl for every node (they lease nothing until `resume`); survives restarts."""
        value = json.dumps({"since": round(now, 3), "by": by, "drain": drain, "source": source})
        await maybe_await(self.client.set(self.keys.paused, value))

    async def resume(self) -> int:
        """Lift the pause; returns how many keys were removed (0: it was not paused)."""
        return reply_int(await maybe_await(self.client.delete(self.keys.paused)), "DEL paused")

    async def pause_state(self) -> dict[str, Any] | None:
        """The pause as a dict ({since, by, drain, source}), or None when the crawl runs."""
        return decode_pause(_value(await maybe_await(self.client.get(self.keys.paused)), "GET paused"))

    # -- overrides (dcrawl host; the lease reads them in host mode) ------------------------------
    @property
    def overrides_key(self) -> str:
        """The copy of the overrides hash that is read (the first shard's)."""
        return self.override_keys[0]

    async def overrides(self) -> dict[Raw, Raw]:
        """Every override: {host or domain: raw JSON}."""
        return _hash(await maybe_await(self.client.hgetall(self.overrides_key)), "HGETALL overrides")

    async def override(self, target: str) -> Raw | None:
        return _value(await maybe_await(self.client.hget(self.overrides_key, target)), "HGET overrides")

    async def override_count(self) -> int:
        return reply_int(await maybe_await(self.client.hlen(self.overrides_key)), "HLEN overrides")

    async def write_override(self, target: str, value: str | None) -> None:
        """Set (JSON) or drop (None) the override of a host or a registered domain, in every copy."""
        for key in self.override_keys:
            if value is None:
                await maybe_await(self.client.hdel(key, target))
            else:
                await maybe_await(self.client.hset(key, target, value))

    async def control_state(self) -> ControlState:
        """(pause, {target: raw override}, registry version) in one round trip: what a node reads
        every 1.5 s (the registry itself only when its version moved: `sources`)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.get(self.keys.paused)
        pipe.hgetall(self.overrides_key)
        pipe.get(self.keys.sources_version)
        return _control_reply(await maybe_await(pipe.execute(raise_on_error=False)))

    # -- the source registry (dcrawl sources SPIDER import / remove; docs/sources.md) -------------
    def registry_keys(self) -> tuple[str, str]:
        """The source registry's hash and its version counter (what a wrong-type message names)."""
        return self.keys.sources, self.keys.sources_version

    async def sources(self) -> dict[Raw, Raw]:
        """Every registered source: {site: raw JSON}."""
        return _hash(await maybe_await(self.client.hgetall(self.keys.sources)), "HGETALL sources")

    async def source(self, site: str) -> Raw | None:
        """One registered source's raw JSON (None: not registered)."""
        return _value(await maybe_await(self.client.hget(self.keys.sources, site)), "HGET sources")

    async def write_sources(self, put: dict[str, str], drop: Sequence[str] = ()) -> int:
        """Set and remove registry entries and move its version, all or nothing (lua/registry_write.lua:
        nodes see all of an import or none of it); returns the new version."""
        script = self.client.register_script(lua_source("registry_write"))
        args: list[str | int] = [len(put)]
        for site, value in put.items():
            args += [site, value]
        call = script(keys=[self.keys.sources, self.keys.sources_version], args=[*args, *drop])
        return reply_int(await maybe_await(call), "registry_write.lua")

    # -- the audit stream --------------------------------------------------------------------------
    async def audit(self, fields: dict[str, str], maxlen: int) -> None:
        """Append one control action to the capped audit stream."""
        await maybe_await(self.client.xadd(self.keys.audit, _fields(fields), maxlen=maxlen, approximate=True))

    async def audit_many(self, entries: Sequence[dict[str, str]], maxlen: int) -> None:
        """Append many control actions (an import of a source registry) in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for fields in entries:
            pipe.xadd(self.keys.audit, _fields(fields), maxlen=maxlen, approximate=True)
        await maybe_await(pipe.execute())

    async def audit_entries(self, since: str = "-", count: int = 1000) -> list[AuditEntry]:
        """Control actions, oldest first, from `since` (a stream id)."""
        return _audit_entries(await maybe_await(self.client.xrange(self.keys.audit, min=since, count=count)))

    async def latest_audit(self, count: int) -> list[AuditEntry]:
        """The last `count` control actions, newest first."""
        return _audit_entries(await maybe_await(self.client.xrevrange(self.keys.audit, count=count)))
