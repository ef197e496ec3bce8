"""`CrawlControl`: what operators set on a whole crawl (docs/operations.md "Live control"): the
pause, the per-host overrides, the source registry, and the audit stream that records each change.

None of it is the queue: the frontier leases and acks requests; this object holds the switches a
node reads every 1.5 s (core/pause.py), `dcrawl` and the dashboard write (core/control.py), and
`dcrawl status` shows (monitoring/control.py). Its keys live on the spider's hash tag, except the
overrides hash: each shard's lease script reads the copy on its own tag, so every copy is written
and the first one is read. The frontier it controls is kept for the two actions that reach into
the queue (a purge, a host made due at once).

With a sync client the methods return values; with an asyncio client, awaitables.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Coroutine, Sequence
from typing import Any

from distributed_crawler.connection.calls import maybe_await, run_sync, then
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.keys import SpiderKeys


def decode_pause(raw: Any) -> dict[str, Any] | None:
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


def _control_reply(replies: list[Any]) -> tuple[Any, Any, Any]:
    """(pause, overrides, registry version) of control_state's pipeline. A registry version that is
    not a string (garbage in the key) reads as none: the pause and the overrides still come through;
    `dcrawl sources SPIDER import` names the key to fix."""
    for reply in replies[:2]:
        if isinstance(reply, Exception):
            raise reply
    version = replies[2]
    return decode_pause(replies[0]), replies[1], None if isinstance(version, Exception) else version


class CrawlControl:
    """The crawl-wide switches of one spider on one client."""

    def __init__(self, client: Any, keys: SpiderKeys, override_keys: Sequence[str], frontier: Frontier) -> None:
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

    def _go(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """An awaitable with an asyncio client, the value with a sync one."""
        return coro if inspect.iscoroutinefunction(getattr(self.client, "execute_command", None)) else run_sync(coro)

    # -- the pause (dcrawl pause / resume) -------------------------------------------------------
    def pause(self, by: str, drain: bool, source: str, now: float) -> Any:
        """Pause the crawl for every node (they lease nothing until `resume`); survives restarts."""
        value = json.dumps({"since": round(now, 3), "by": by, "drain": drain, "source": source})
        return self.client.set(self.keys.paused, value)

    def resume(self) -> Any:
        """Lift the pause; returns how many keys were removed (0: it was not paused)."""
        return self.client.delete(self.keys.paused)

    def pause_state(self) -> Any:
        """The pause as a dict ({since, by, drain, source}), or None when the crawl runs."""
        return then(self.client.get(self.keys.paused), decode_pause)

    # -- overrides (dcrawl host; the lease reads them in host mode) ------------------------------
    @property
    def overrides_key(self) -> str:
        """The copy of the overrides hash that is read (the first shard's)."""
        return self.override_keys[0]

    def overrides(self) -> Any:
        """Every override: {host or domain: raw JSON}."""
        return self.client.hgetall(self.overrides_key)

    def override(self, target: str) -> Any:
        return self.client.hget(self.overrides_key, target)

    def override_count(self) -> Any:
        return self.client.hlen(self.overrides_key)

    def write_override(self, target: str, value: str | None) -> Any:
        """Set (JSON) or drop (None) the override of a host or a registered domain, in every copy."""
        if len(self.override_keys) == 1:
            return self._write_one(self.override_keys[0], target, value)

        async def write() -> None:
            for key in self.override_keys:
                await maybe_await(self._write_one(key, target, value))

        return self._go(write())

    def _write_one(self, key: str, target: str, value: str | None) -> Any:
        return self.client.hdel(key, target) if value is None else self.client.hset(key, target, value)

    def control_state(self) -> Any:
        """(pause, {target: raw override}, registry version) in one round trip: what a node reads
        every 1.5 s (the registry itself only when its version moved: `sources`)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.get(self.keys.paused)
        pipe.hgetall(self.overrides_key)
        pipe.get(self.keys.sources_version)
        return then(pipe.execute(raise_on_error=False), _control_reply)

    # -- the source registry (dcrawl sources SPIDER import / remove; docs/sources.md) -------------
    def registry_keys(self) -> tuple[str, str]:
        """The source registry's hash and its version counter (what a wrong-type message names)."""
        return self.keys.sources, self.keys.sources_version

    def sources(self) -> Any:
        """Every registered source: {site: raw JSON}."""
        return self.client.hgetall(self.keys.sources)

    def source(self, site: str) -> Any:
        """One registered source's raw JSON (None: not registered)."""
        return self.client.hget(self.keys.sources, site)

    def write_sources(self, put: dict[str, str], drop: Sequence[str] = ()) -> Any:
        """Set and remove registry entries and move its version, all or nothing (lua/registry_write.lua:
        nodes see all of an import or none of it); returns the new version."""
        script = self.client.register_script(lua_source("registry_write"))
        args: list[str | int] = [len(put)]
        for site, value in put.items():
            args += [site, value]
        return script(keys=[self.keys.sources, self.keys.sources_version], args=[*args, *drop])

    # -- the audit stream --------------------------------------------------------------------------
    def audit(self, fields: dict[str, str], maxlen: int) -> Any:
        """Append one control action to the capped audit stream."""
        return self.client.xadd(self.keys.audit, fields, maxlen=maxlen, approximate=True)

    def audit_many(self, entries: Sequence[dict[str, str]], maxlen: int) -> Any:
        """Append many control actions (an import of a source registry) in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for fields in entries:
            pipe.xadd(self.keys.audit, fields, maxlen=maxlen, approximate=True)
        return pipe.execute()

    def audit_entries(self, since: str = "-", count: int = 1000) -> Any:
        """Control actions, oldest first, from `since` (a stream id)."""
        return self.client.xrange(self.keys.audit, min=since, count=count)

    def latest_audit(self, count: int) -> Any:
        """The last `count` control actions, newest first."""
        return self.client.xrevrange(self.keys.audit, count=count)
