"""Scrapy extension for the benchmarks: counts this worker's Redis round trips, dumps them with stats.

Why client side: the server's `INFO commandstats` counts commands, including the ones a Lua script
runs internally and each command of a MULTI/EXEC pipeline, so it cannot tell how often a worker
waited on the network. A round trip here is one socket write of redis-py
(`send_packed_command`): one command, one pipeline (transactional or not) or one EVALSHA.

Enable with `-s EXTENSIONS={"bench.probe.RedisProbe": 0} -s BENCH_PROBE_FILE=/path.json`
(repo root on PYTHONPATH). Every 0.1 s it samples (wall time, round trips) so the harness can take
the count at the moment the crawl ended rather than after the idle-close wait; the samples and the
final Scrapy stats and the round trips by kind (whole process life) are written to BENCH_PROBE_FILE when the spider closes.

It also adds up the time spent inside *synchronous* redis-py calls (`Redis.execute_command`,
`Pipeline.execute`): in a Scrapy worker those run on the reactor thread, which waits meanwhile.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis.asyncio.connection as async_connection
import redis.client as sync_client
import redis.connection as sync_connection
from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet import task

ROUND_TRIPS = [0]
BLOCKED = [0.0]  # seconds inside synchronous redis-py calls
KINDS: Counter[str] = Counter()  # round trips by what they sent (a script's name, a pipeline's commands)
_SCRIPT_NAMES: dict[bytes, str] = {}


def _script_names() -> dict[bytes, str]:
    """SHA1 -> name of every script of distributed_crawler/lua (as sent: preludes included)."""
    if not _SCRIPT_NAMES:
        try:
            from distributed_crawler.connection.lua import lua_source
        except ImportError:  # an older ref without it: SHAs stay unnamed
            _SCRIPT_NAMES[b""] = ""
            return _SCRIPT_NAMES

        root = Path(__file__).resolve().parent.parent / "distributed_crawler" / "lua"
        for path in root.glob("*.lua"):
            try:
                text = lua_source(path.stem)
            except OSError:
                continue
            _SCRIPT_NAMES[hashlib.sha1(text.encode()).hexdigest().encode()] = path.stem
    return _SCRIPT_NAMES


def _kind(command: Any) -> str:
    """What one socket write sent: `evalsha:NAME`, a command name, or `pipeline:A+B` (its commands)."""
    raw = command if isinstance(command, bytes | bytearray | memoryview) else b"".join(bytes(c) for c in command)
    parts = bytes(raw).split(b"\r\n")
    names: list[str] = []
    i = 0
    while i + 2 < len(parts) and len(names) < 50:
        if parts[i].startswith(b"*") and parts[i + 1].startswith(b"$"):
            name = parts[i + 2].decode("ascii", "replace").lower()
            if name == "evalsha" and i + 4 < len(parts):
                name = "evalsha:" + _script_names().get(parts[i + 4], parts[i + 4][:8].decode("ascii", "replace"))
            names.append(name)
            i += 3
        else:
            i += 1
    unique = [n for n in dict.fromkeys(names) if n not in ("multi", "exec")]
    return unique[0] if len(names) == 1 else "pipeline:" + "+".join(unique[:4])


def _timed(original: Any) -> Any:
    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            BLOCKED[0] += time.perf_counter() - start

    timed._bench_wrapped = True  # type: ignore[attr-defined]
    return timed


def _install() -> None:
    """Wrap redis-py's sync and asyncio `send_packed_command` once per process."""
    sync_cls = sync_connection.AbstractConnection
    if not getattr(sync_cls.send_packed_command, "_bench_wrapped", False):
        original_sync = sync_cls.send_packed_command

        @functools.wraps(original_sync)
        def send_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
            ROUND_TRIPS[0] += 1
            KINDS[_kind(args[0])] += 1
            return original_sync(self, *args, **kwargs)

        send_sync._bench_wrapped = True  # type: ignore[attr-defined]
        sync_cls.send_packed_command = send_sync

    async_cls = async_connection.AbstractConnection
    if not getattr(async_cls.send_packed_command, "_bench_wrapped", False):
        original_async = async_cls.send_packed_command

        @functools.wraps(original_async)
        async def send_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            ROUND_TRIPS[0] += 1
            KINDS[_kind(args[0])] += 1
            return await original_async(self, *args, **kwargs)

        send_async._bench_wrapped = True  # type: ignore[attr-defined]
        async_cls.send_packed_command = send_async

    for cls, name in ((sync_client.Redis, "execute_command"), (sync_client.Pipeline, "execute")):
        if not getattr(getattr(cls, name), "_bench_wrapped", False):
            setattr(cls, name, _timed(getattr(cls, name)))


class RedisProbe:
    def __init__(self, crawler: Any, path: str) -> None:
        self.crawler = crawler
        self.path = Path(path)
        self.samples: list[tuple[float, int, float]] = []
        self.loop = task.LoopingCall(self._sample)
        _install()
        crawler.signals.connect(self._opened, signal=signals.spider_opened)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> RedisProbe:
        path = crawler.settings.get("BENCH_PROBE_FILE")
        if not path:
            raise NotConfigured("BENCH_PROBE_FILE is not set")
        return cls(crawler, path)

    def _sample(self) -> None:
        self.samples.append((time.time(), ROUND_TRIPS[0], BLOCKED[0]))

    def _opened(self, spider: Any) -> None:
        self.loop.start(0.1, now=True)

    def _closed(self, spider: Any, reason: str) -> None:
        if self.loop.running:
            self.loop.stop()
        self._sample()
        stats = self.crawler.stats.get_stats()
        import distributed_crawler

        data = {
            "reason": reason,
            "samples": self.samples,
            "stats": stats,
            "round_trips_by_kind": dict(KINDS.most_common()),
            "package": str(Path(distributed_crawler.__file__).parent),
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, default=str))
        tmp.replace(self.path)
