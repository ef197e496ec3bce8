"""The shared proxy pool: its settings, proxy URLs (parsed, validated, masked) and its Redis API.

Keys (settings, shared by every spider and node):

| key | type | what |
|---|---|---|
| `PROXY_POOL_KEY` (`dc:proxies`) | zset | proxy URL -> health score; the pool requests are sent through |
| `PROXY_DEAD_KEY` (`dc:proxies:dead`) | hash | proxy URL -> JSON `{error, since, score}` of evicted proxies |

A proxy starts at `INITIAL_SCORE`, gains `SUCCESS_BONUS` per good response up to `MAX_SCORE`,
loses `FAILURE_PENALTY` per failure and is evicted below `PROXY_MIN_SCORE`. The scripts touching
both keys need them in one Redis Cluster hash slot: under REDIS_CLUSTER an unset PROXY_DEAD_KEY
becomes `{dc:proxies}:dead`, in the slot of `dc:proxies`.

The pool stores proxy URLs with their credentials (it must, to use them); everything else — logs,
stats, request meta, the CLI — sees `redact.mask_url(url)`. Every reader works with sync and asyncio
redis-py clients (await it, or drive it with `run_sync` on a sync client).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from redis.crc import key_slot
from scrapy.settings import BaseSettings

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.clients import parse_bool
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.defaults import SettingsReader, set_above_addon
from distributed_crawler.keyspace import default
from distributed_crawler.proxies.retries import parse_retry_times
from distributed_crawler.redact import mask_url, scrub

INITIAL_SCORE = 10.0
MAX_SCORE = 20.0
SUCCESS_BONUS = 1.0
FAILURE_PENALTY = 3.0
SCHEMES = ("http", "https")
EMPTY_POLICIES = ("wait", "direct")
DEFAULT_PORTS = {"http": 80, "https": 443}
DIGEST_LENGTH = 12  # hex digits of a proxy's SHA-1 in FAILED_PROXIES_META (lua/proxy_pick.lua agrees)


class ProxyURLError(ValueError):
    """A proxy that is not `scheme://[user:pass@]host[:port]`; the message masks the password."""


def proxy_digest(proxy: str) -> str:
    """A proxy's name in request meta: 12 hex digits of its SHA-1 (no credentials leave the pool)."""
    return hashlib.sha1(proxy.encode()).hexdigest()[:DIGEST_LENGTH]


def parse_proxy(raw: str) -> str:
    """The normalized proxy URL (`scheme://[user:pass@]host:port`, lower-case scheme and host)."""
    text = raw.strip()
    shown = mask_url(text)
    fix = "write it as http://[user:password@]host:port"
    if "://" not in text:
        raise ProxyURLError(f"proxy {shown!r} has no scheme; {fix}")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ProxyURLError(f"proxy {shown!r} is malformed ({scrub(str(exc), text)}); {fix}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ProxyURLError(f"proxy {shown!r}: scheme {scheme!r} is not supported (http or https); {fix}")
    host = (parts.hostname or "").lower()
    if not host or any(c.isspace() for c in text):
        raise ProxyURLError(f"proxy {shown!r} has no valid host; {fix}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ProxyURLError(f"proxy {shown!r} must not have a path, query or fragment; {fix}")
    if (parts.username is None) != (parts.password is None) or parts.username == "":
        raise ProxyURLError(f"proxy {shown!r}: give both user and password, or neither; {fix}")
    if port == 0:
        raise ProxyURLError(f"proxy {shown!r}: port 0 is not a port; {fix}")
    host_part = f"[{host}]" if ":" in host else host
    netloc = f"{host_part}:{port or DEFAULT_PORTS[scheme]}"
    if parts.username is not None:
        netloc = f"{parts.username}:{parts.password}@{netloc}"
    return f"{scheme}://{netloc}"


def read_proxy_file(path: str) -> list[str]:
    """One proxy a line; blank lines and `#` comments skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"PROXY_FILE ({path}) cannot be read ({exc.strerror}); fix the path") from None
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def parse_proxies(entries: list[str], source: str) -> tuple[str, ...]:
    """Validated, normalized and de-duplicated; the first bad entry raises, naming `source`."""
    found: dict[str, None] = {}
    for entry in entries:
        try:
            found[parse_proxy(entry)] = None
        except ProxyURLError as exc:
            raise ProxyURLError(f"{source}: {exc}") from None
    return tuple(found)


def _enabled(value: Any) -> bool | None:
    """PROXY_ENABLED: True/False (also "1"/"0"... from `-s`), or "auto" -> None."""
    if str(value).strip().lower() == "auto":
        return None
    try:
        return parse_bool("PROXY_ENABLED", value)
    except ValueError:
        raise ValueError(f"PROXY_ENABLED ({value!r}) must be True, False or 'auto'") from None


def cluster_dead_key(pool_key: str) -> str:
    """The default dead key on Redis Cluster: in the pool key's hash slot (`{dc:proxies}:dead`)."""
    return f"{pool_key}:dead" if "{" in pool_key else f"{{{pool_key}}}:dead"


def pool_keys(settings: BaseSettings) -> tuple[str, str]:
    """(PROXY_POOL_KEY, PROXY_DEAD_KEY) as the pool uses them: under REDIS_CLUSTER an unset dead
    key moves to the pool key's hash slot (the scripts touch both); a project's own dead key on
    another slot is a ValueError naming the fix."""
    read = SettingsReader(settings)
    pool_key = read.str("PROXY_POOL_KEY")
    dead_key = read.str("PROXY_DEAD_KEY")
    if read.bool("REDIS_CLUSTER") and key_slot(pool_key.encode()) != key_slot(dead_key.encode()):
        if set_above_addon(settings, "PROXY_DEAD_KEY"):  # the project's own key, not the default
            raise ValueError(
                f"PROXY_POOL_KEY ({pool_key}) and PROXY_DEAD_KEY ({dead_key}) are in different Redis "
                "Cluster hash slots; set them to {dc}:proxies and {dc}:proxies:dead, or leave "
                "PROXY_DEAD_KEY unset"
            )
        dead_key = cluster_dead_key(pool_key)
    return pool_key, dead_key


@dataclass(frozen=True)
class ProxyConfig:
    """The PROXY_* settings, read once and checked together."""

    proxies: tuple[str, ...] = ()
    enabled: bool | None = None  # None = auto: on when proxies are configured or the pool has any
    pool_key: str = default("PROXY_POOL_KEY")
    dead_key: str = default("PROXY_DEAD_KEY")
    ban_statuses: frozenset[int] = frozenset({403, 429})
    ban_body_regex: re.Pattern[str] | None = None
    min_score: float = 0.0
    revive_seconds: float = 600.0
    empty_policy: str = "wait"
    sticky_domains: bool = False
    retry_times: int | None = None  # PROXY_RETRY_TIMES; None = auto (proxies/retries.py)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> ProxyConfig:
        read = SettingsReader(settings)
        listed = parse_proxies(read.list("PROXY_LIST"), "PROXY_LIST")
        path = read.str("PROXY_FILE")
        filed = parse_proxies(read_proxy_file(path), f"PROXY_FILE ({path})") if path else ()
        pool_key, dead_key = pool_keys(settings)
        try:
            statuses = frozenset(int(s) for s in read.list("PROXY_BAN_STATUSES"))
        except ValueError:
            raise ValueError(
                f"PROXY_BAN_STATUSES ({read.raw('PROXY_BAN_STATUSES')!r}) must be HTTP status codes, e.g. [403, 429]"
            ) from None
        bad = sorted(s for s in statuses if not 100 <= s <= 599)
        if bad:
            raise ValueError(f"PROXY_BAN_STATUSES ({bad[0]}) must be HTTP status codes between 100 and 599")
        pattern = str(read.raw("PROXY_BAN_BODY_REGEX") or "")
        try:
            regex = re.compile(pattern) if pattern else None
        except re.error as exc:
            raise ValueError(f"PROXY_BAN_BODY_REGEX ({pattern!r}) is not a valid regex ({exc})") from None
        min_score = read.float("PROXY_MIN_SCORE")
        if min_score >= INITIAL_SCORE:
            raise ValueError(
                f"PROXY_MIN_SCORE ({min_score:g}) must be below the initial score {INITIAL_SCORE:g}, "
                "or every proxy is evicted at its first failure"
            )
        revive = read.float("PROXY_REVIVE_SECONDS", min=0, hint="(0 = never revive)")
        policy = read.str("PROXY_EMPTY_POLICY").lower()
        if policy not in EMPTY_POLICIES:
            raise ValueError(f"PROXY_EMPTY_POLICY ({policy!r}) must be 'wait' or 'direct'")
        return cls(
            proxies=tuple(dict.fromkeys(listed + filed)),
            enabled=_enabled(read.raw("PROXY_ENABLED")),
            pool_key=pool_key,
            dead_key=dead_key,
            ban_statuses=statuses,
            ban_body_regex=regex,
            min_score=min_score,
            revive_seconds=revive,
            empty_policy=policy,
            sticky_domains=read.bool("PROXY_STICKY_DOMAINS"),
            retry_times=parse_retry_times(read.raw("PROXY_RETRY_TIMES")),
        )


@dataclass(frozen=True)
class Outcome:
    """What `ProxyPool.record` did: state ok / failed / evicted / gone, and the new score."""

    state: str
    score: float | None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class ProxyPool:
    """The pool's Redis operations on one client (sync or asyncio)."""

    def __init__(
        self,
        client: AnyRedis,
        pool_key: str = default("PROXY_POOL_KEY"),
        dead_key: str = default("PROXY_DEAD_KEY"),
        min_score: float = 0.0,
    ) -> None:
        self.client = client
        self.pool_key = pool_key
        self.dead_key = dead_key
        self.min_score = min_score
        self._pick = client.register_script(lua_source("proxy_pick"))
        self._record = client.register_script(lua_source("proxy_record"))
        self._revive = client.register_script(lua_source("proxy_revive"))
        self._add = client.register_script(lua_source("proxy_add"))

    @classmethod
    def from_config(cls, client: AnyRedis, config: ProxyConfig) -> ProxyPool:
        return cls(client, config.pool_key, config.dead_key, config.min_score)

    @property
    def _keys(self) -> list[str]:
        return [self.pool_key, self.dead_key]

    async def load(self, proxies: list[str] | tuple[str, ...]) -> int:
        """A node's configured proxies at start: new ones join, dead ones stay dead."""
        if not proxies:
            return 0
        return int(await maybe_await(self._add(keys=self._keys, args=["load", INITIAL_SCORE, *proxies])))

    async def add(self, proxies: list[str] | tuple[str, ...]) -> int:
        """An operator's proxies: new ones join, dead ones come back at the initial score."""
        if not proxies:
            return 0
        return int(await maybe_await(self._add(keys=self._keys, args=["add", INITIAL_SCORE, *proxies])))

    async def pick(self, rnd: float | None = None, avoid: tuple[str, ...] = ()) -> str | None:
        """A pooled proxy, weighted by health, other than those of `avoid` (proxy_digest values)
        while there is another; None when the pool is empty."""
        value = await maybe_await(
            self._pick(
                keys=[self.pool_key],
                args=[random.random() if rnd is None else rnd, self.min_score, *avoid],
            )
        )
        return _text(value) if value else None

    async def success(self, proxy: str) -> Outcome:
        return await self._apply(proxy, SUCCESS_BONUS, "")

    async def failure(self, proxy: str, error: str) -> Outcome:
        return await self._apply(proxy, -FAILURE_PENALTY, error)

    async def _apply(self, proxy: str, delta: float, error: str) -> Outcome:
        state, score = await maybe_await(
            self._record(
                keys=self._keys,
                args=[proxy, delta, MAX_SCORE, self.min_score, error[:500]],
            )
        )
        score_text = _text(score)
        return Outcome(_text(state), float(score_text) if score_text else None)

    async def revive(self, after_seconds: float) -> list[tuple[str, str]]:
        """Dead proxies dead for `after_seconds` go back at a probation score: (proxy, last error)."""
        flat = await maybe_await(self._revive(keys=self._keys, args=[after_seconds, self.revival_score]))
        return [(_text(flat[i]), _text(flat[i + 1])) for i in range(0, len(flat), 2)]

    @property
    def revival_score(self) -> float:
        """Just above the minimum: one more failure evicts it again, successes win it back."""
        return min(self.min_score + 1, INITIAL_SCORE)

    async def remove(self, proxies: list[str]) -> int:
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(self.pool_key, *proxies)
        pipe.hdel(self.dead_key, *proxies)
        removed, dead = await maybe_await(pipe.execute())
        return int(removed) + int(dead)

    async def reset(self, proxies: list[str] | None = None) -> int:
        """The given proxies (default: all, pooled and dead) back in the pool at the initial score."""
        if proxies is None:
            entries = await self.entries()
            proxies = [e["url"] for e in entries]
        if not proxies:
            return 0
        pipe = self.client.pipeline(transaction=False)
        pipe.hdel(self.dead_key, *proxies)
        pipe.zadd(self.pool_key, {p: INITIAL_SCORE for p in proxies})
        await maybe_await(pipe.execute())
        return len(proxies)

    async def counts(self) -> tuple[int, int]:
        """(in the pool, dead)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(self.pool_key)
        pipe.hlen(self.dead_key)
        pooled, dead = await maybe_await(pipe.execute())
        return int(pooled), int(dead)

    async def health(self) -> dict[str, int]:
        """Proxies in the pool, and how many have a positive health score (status, Prometheus)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(self.pool_key)
        pipe.zcount(self.pool_key, "(0", "+inf")
        total, healthy = await maybe_await(pipe.execute())
        return {"total": int(total), "healthy": int(healthy)}

    async def dead_count(self) -> int:
        """Evicted proxies."""
        return int(await maybe_await(self.client.hlen(self.dead_key)))

    async def entries(self) -> list[dict[str, Any]]:
        """Every readable proxy, pooled (healthiest first) then dead (see `listing`)."""
        return (await self.listing()).entries

    async def listing(self) -> Listing:
        """Every proxy, pooled (healthiest first) then dead: url, state, score, error, since; one
        round trip. What the pool holds is untrusted: a member that is not short printable UTF-8, a
        score that is not finite and a dead entry that is not a JSON object are skipped or shown
        without the bad field, and counted; a key of another type is named, not read."""
        pipe = self.client.pipeline(transaction=False)
        pipe.type(self.pool_key)
        pipe.type(self.dead_key)
        pipe.zrevrange(self.pool_key, 0, -1, withscores=True)
        pipe.hgetall(self.dead_key)
        pool_type, dead_type, pooled, dead = await maybe_await(pipe.execute(raise_on_error=False))
        listing = Listing([], {self.pool_key: 0, self.dead_key: 0}, {})
        for key, kind, reply, expected in (
            (self.pool_key, pool_type, pooled, "zset"),
            (self.dead_key, dead_type, dead, "hash"),
        ):
            found = "?" if isinstance(kind, Exception) else _text(kind)
            if found not in (expected, "none") or isinstance(reply, Exception):
                listing.wrong[key] = found if found not in (expected, "none") else "another type"
        if self.pool_key not in listing.wrong:
            for raw, score in pooled:
                url = _member_url(raw)
                if url is None:
                    listing.skipped[self.pool_key] += 1
                    continue
                state = "healthy" if score > 0 else "failing"
                listing.entries.append(
                    {"url": url, "state": state, "score": _number(score), "error": None, "since": None}
                )
        if self.dead_key not in listing.wrong:
            for raw, value in sorted(dead.items()):
                url = _member_url(raw)
                if url is None:
                    listing.skipped[self.dead_key] += 1
                    continue
                info = _dead_info(value)
                since = _number(info.get("since"))
                error = info.get("error")
                listing.entries.append(
                    {
                        "url": url,
                        "state": "dead",
                        "score": _number(info.get("score")),
                        "error": error[:500] if isinstance(error, str) else None,
                        "since": since if since is not None and 0 < since < 1e11 else None,
                    }
                )
        return listing


@dataclass(frozen=True)
class Listing:
    """What `ProxyPool.listing` read: the entries, members skipped per key, keys of a wrong type."""

    entries: list[dict[str, Any]]
    skipped: dict[str, int]  # key -> unreadable members skipped
    wrong: dict[str, str]  # key -> the Redis type it holds instead


MAX_MEMBER_CHARS = 2048


def _member_url(raw: Any) -> str | None:
    """A pool member as text, or None when it is not short printable UTF-8."""
    try:
        url = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
    except UnicodeDecodeError:
        return None
    return url if url.isprintable() and len(url) <= MAX_MEMBER_CHARS else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def _dead_info(raw: Any) -> dict[str, Any]:
    """A dead entry's JSON `{error, since, score}`, or {} when it is not a JSON object."""
    try:
        info = json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        return {}
    return info if isinstance(info, dict) else {}


def match_proxies(wanted: list[str], known: list[str]) -> tuple[list[str], list[str]]:
    """Pool members named by `wanted` (full URL, masked URL or host:port); and what matched none."""
    found: dict[str, None] = {}
    missing = []
    for arg in wanted:
        try:
            normalized = parse_proxy(arg)
        except ProxyURLError:
            normalized = None
        hits = [
            k
            for k in known
            if k == normalized or k == arg or mask_url(k) == arg or k.rsplit("@", 1)[-1].split("://")[-1] == arg
        ]
        if hits:
            found.update(dict.fromkeys(hits))
        else:
            missing.append(arg)
    return list(found), missing
