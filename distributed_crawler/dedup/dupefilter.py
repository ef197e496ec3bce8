"""`DUPEFILTER_CLASS`: the cluster's shared memory of seen fingerprints.

`BloomDupeFilter` (default) is a scalable Bloom filter: server-side RedisBloom when the server has
it, else bit arrays in plain Redis sized exactly (bloom.py). `RedisSetDupeFilter` keeps exact
fingerprints in a set (85 bytes each). Our scheduler folds the check into its enqueue script, so
dedup and push cost one round trip; `request_seen` keeps Scrapy's interface working on its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError
from scrapy.dupefilters import BaseDupeFilter
from scrapy.settings import Settings

from distributed_crawler.connection.calls import maybe_await, run_sync
from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.replies import reply_bytes
from distributed_crawler.connection.types import AnyRedis, SyncRedis
from distributed_crawler.connection.untrusted import text, wrong_type_message
from distributed_crawler.dedup.bloom import BloomMetaError, BloomState, layer_plan, piece_key
from distributed_crawler.dedup.fingerprint import CanonicalFingerprinter
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.enqueue import Dedup, DedupDataError, DedupError, Enqueuer, PushEntry, corrupt_message
from distributed_crawler.frontier.factory import frontier_for_dedup, frontier_from_settings
from distributed_crawler.frontier.keys import SpiderKeys

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from scrapy.utils.request import RequestFingerprinterProtocol

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "redisbloom", "bitmap")
REDISBLOOM_TYPE = b"MBbloom--"


# The Redis type each backend keeps at SCHEDULER_DUPEFILTER_KEY.
DEDUP_TYPES: dict[str, tuple[str, ...]] = {"set": ("set",), "bitmap": ("hash",), "redisbloom": ("MBbloom--",)}


@dataclass(frozen=True)
class BloomConfig:
    backend: str = "auto"
    capacity: int = 1_000_000
    error_rate: float = 0.001

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> BloomConfig:
        read = SettingsReader(settings)
        backend = read.str("BLOOM_BACKEND")
        if backend not in BACKENDS:
            raise ValueError(f"BLOOM_BACKEND ({backend}) must be one of {', '.join(BACKENDS)}")
        capacity = read.int("BLOOM_CAPACITY", min=1)
        error_rate = read.float("BLOOM_ERROR_RATE")
        if not 0 < error_rate < 1:
            raise ValueError(f"BLOOM_ERROR_RATE ({error_rate}) must be between 0 and 1")
        return cls(backend, capacity, error_rate)


async def _memory(client: AnyRedis, keys: list[str]) -> int:
    """`MEMORY USAGE` of the filter's keys (0 where the server lacks the command)."""
    total = 0
    for key in keys:
        try:
            used = await maybe_await(client.memory_usage(key))
            total += used or 0
        except ResponseError:
            return 0
    return total


class SetDedup:
    mode = "set"

    def __init__(self, key: str) -> None:
        self.key = key

    def script_keys(self) -> tuple[list[str], int]:
        return [self.key], 0

    async def prepare(self, client: AnyRedis) -> None:
        kind = text(await maybe_await(client.type(self.key)))
        if kind not in ("none", "set"):
            raise DedupDataError(wrong_type_message(self.key, kind, "set (RedisSetDupeFilter)", _reset_fix(self.key)))

    async def fix(self, client: AnyRedis, code: int) -> None:
        raise AssertionError(f"set dedup never asks for a fix (code {code})")

    async def stats(self, client: AnyRedis) -> dict[str, Any]:
        count = await maybe_await(client.scard(self.key))
        return {
            "backend": "set",
            "count": count,
            "bytes": await _memory(client, [self.key]),
            "layers": 1,
            "error_rate": 0.0,
        }


class RedisBloomDedup:
    """RedisBloom's scalable filter (`BF.RESERVE ... EXPANSION 2`), through redis-py's commands."""

    mode = "redisbloom"

    def __init__(self, key: str, config: BloomConfig) -> None:
        self.key = key
        self.config = config

    def script_keys(self) -> tuple[list[str], int]:
        return [self.key], 0

    async def prepare(self, client: AnyRedis) -> None:
        if not await maybe_await(client.exists(self.key)):
            try:
                # RedisBloom tightens each new sub-filter by half, so a full stack's compound rate
                # approaches twice the first one's: reserve at p/2 to stay below BLOOM_ERROR_RATE.
                await maybe_await(
                    client.bf().create(self.key, self.config.error_rate / 2, self.config.capacity, expansion=2)
                )
            except Exception as exc:
                if "exists" not in str(exc).lower():
                    raise

    async def fix(self, client: AnyRedis, code: int) -> None:
        raise AssertionError(f"RedisBloom never asks for a fix (code {code})")

    async def stats(self, client: AnyRedis) -> dict[str, Any]:
        info = await maybe_await(client.bf().info(self.key))
        return {
            "backend": "redisbloom",
            "count": getattr(info, "insertedNum", 0),  # redis-py's BFInfo (untyped)
            "bytes": await _memory(client, [self.key]),
            "layers": getattr(info, "filterNum", 0),
            "error_rate": self.config.error_rate,
        }


class BitmapDedup:
    """Scalable Bloom filter in plain Redis strings: meta hash at `key`, pieces at `key:L:P`."""

    mode = "bitmap"

    def __init__(self, key: str, config: BloomConfig) -> None:
        self.key = key
        self.config = config
        self.state = BloomState((), ())

    def script_keys(self) -> tuple[list[str], int]:
        return [self.key, *self.state.piece_keys(self.key)], len(self.state.layers)

    async def prepare(self, client: AnyRedis) -> None:
        await self.refresh(client)
        if not self.state.layers:
            await self.grow(client)

    async def fix(self, client: AnyRedis, code: int) -> None:
        await (self.grow(client) if code == 1 else self.refresh(client))

    async def refresh(self, client: AnyRedis) -> None:
        try:
            self.state = BloomState.from_meta(await maybe_await(client.hgetall(self.key)))
        except BloomMetaError as exc:
            raise DedupDataError(corrupt_message(self.key, str(exc))) from None

    async def grow(self, client: AnyRedis) -> None:
        """Add layer `len(layers)` (a no-op if another node just did), then reread the layout."""
        index = len(self.state.layers)
        # A filter keeps growing with the sizing it was created with, whatever the settings say now.
        capacity = self.state.capacity or self.config.capacity
        error_rate = self.state.overall_error_rate or self.config.error_rate
        layer = layer_plan(capacity, error_rate, index)
        keys = [self.key, *(piece_key(self.key, index, j) for j in range(layer.pieces))]
        fields = [x for kv in layer.to_meta(index).items() for x in kv]
        args = [index, "bitmap", capacity, repr(error_rate), *layer.piece_lengths(), *fields]
        added = await maybe_await(client.eval(lua_source("bloom_grow"), len(keys), *keys, *args))
        if text(added) == "corrupt" or isinstance(added, int) and added < 0:  # newer bloom_grow.lua
            raise DedupDataError(corrupt_message(self.key, "bloom_grow.lua cannot read its layers"))
        if added:
            logger.info(
                "Bloom filter %s: layer %d added (capacity %d, error rate %.2g, %.1f MB)",
                self.key,
                index,
                layer.capacity,
                layer.error_rate,
                layer.bits / 8e6,
            )
        await self.refresh(client)

    async def stats(self, client: AnyRedis) -> dict[str, Any]:
        await self.refresh(client)
        return {
            "backend": "bitmap",
            "count": self.state.count,
            "bytes": await _memory(client, [self.key, *self.state.piece_keys(self.key)]),
            "layers": len(self.state.layers),
            "error_rate": self.state.error_rate(),
        }


async def has_bloom_commands(client: AnyRedis, key: str) -> bool:
    """Whether the server has RedisBloom (Redis 8, Redis Stack): ask it a harmless BF.EXISTS."""
    probe = f"{key}:probe"
    # A cluster client looks a command's keys up in its command table first, and BF.* is missing
    # there exactly when the server lacks it: name the key's node so the server itself answers.
    route = {"target_nodes": client.get_node_from_key(probe)} if hasattr(client, "get_node_from_key") else {}
    try:
        await maybe_await(client.execute_command("BF.EXISTS", probe, "x", **route))
    except ResponseError as exc:
        if "unknown command" in str(exc).lower():
            return False
        raise
    return True


async def choose_dedup(client: AnyRedis, key: str, config: BloomConfig) -> Dedup:
    """The backend already holding `key` wins; else RedisBloom if the server has it (auto)."""
    kind = reply_bytes(await maybe_await(client.type(key)), "TYPE")
    existing = {b"hash": "bitmap", REDISBLOOM_TYPE: "redisbloom"}.get(kind)
    if kind not in (b"none", b"hash", REDISBLOOM_TYPE):
        raise DedupDataError(wrong_type_message(key, text(kind), "hash or MBbloom-- (a Bloom filter)", _reset_fix(key)))
    has_module = await has_bloom_commands(client, key)
    wanted = config.backend
    if wanted == "auto":
        wanted = existing or ("redisbloom" if has_module else "bitmap")
    elif existing and existing != wanted:
        raise DedupError(
            f"BLOOM_BACKEND ({wanted}) but {key} already holds a {existing} filter; "
            f"set BLOOM_BACKEND={existing} or run `dcrawl dedup reset`"
        )
    if wanted == "redisbloom" and not has_module:
        raise DedupError(
            "BLOOM_BACKEND (redisbloom) but this Redis has no BF.* commands; use Redis 8 / Redis Stack "
            "or set BLOOM_BACKEND=auto"
        )
    return RedisBloomDedup(key, config) if wanted == "redisbloom" else BitmapDedup(key, config)


async def describe_dedup(client: AnyRedis, key: str) -> dict[str, Any]:
    """Stats of whatever filter holds `key`, without creating or changing it."""
    kind = reply_bytes(await maybe_await(client.type(key)), "TYPE")
    config = BloomConfig()
    if kind == b"set":
        return await SetDedup(key).stats(client)
    if kind == b"hash":
        return await BitmapDedup(key, config).stats(client)
    if kind == REDISBLOOM_TYPE:
        return await RedisBloomDedup(key, config).stats(client)
    return {"backend": "none", "count": 0, "bytes": 0, "layers": 0, "error_rate": 0.0}


async def reset_dedup(client: AnyRedis, key: str) -> int:
    """Delete the filter at `key` (all layers and pieces); returns how many keys went."""
    kind = await maybe_await(client.type(key))
    keys = [key]
    if kind in (b"hash", "hash"):
        keys += _piece_keys_anyway(await maybe_await(client.hgetall(key)), key)
    return await maybe_await(client.delete(*keys))


def _piece_keys_anyway(raw: dict[Any, Any], key: str) -> list[str]:
    """Piece keys of a meta hash, even a corrupt one: every layer whose piece count still reads."""
    try:
        return BloomState.from_meta(raw).piece_keys(key)
    except BloomMetaError:
        pass
    meta = {text(k): text(v) for k, v in raw.items()}
    keys = []
    for layer in range(64):
        pieces = meta.get(f"L{layer}:pieces", "")
        if not pieces.isdigit():
            break
        keys += [piece_key(key, layer, j) for j in range(min(int(pieces), 1 << 20))]
    return keys


def _reset_fix(key: str) -> str:
    return f"dcrawl dedup reset {key.split(':', 1)[0].strip('{}')}"


async def flush_crawl(frontier: Frontier, dupefilter_key: str) -> None:
    """Delete a crawl: the frontier's queue, leases and counts, and the filter, every shard's slice
    of it (seeds and dead letters are kept)."""
    for key in dict.fromkeys([dupefilter_key, *frontier.dupefilter_keys()]):
        await reset_dedup(frontier.client, key)
    await frontier.flush()


_HEX_FINGERPRINT = re.compile(r"[0-9a-f]{24,}")


class RedisDupeFilter(BaseDupeFilter):
    """Shared by both filters: fingerprints, Scrapy's interface, and the dedup backend.

    scrapy-redis's contract holds too: `RFPDupeFilter(server, key, debug=False)` (a Redis client
    or our `RedisConfig`; a key name or our `SpiderKeys`), `request_fingerprint(request)` to
    override (the scheduler's enqueue uses it), `clear()`, and `close()` clearing the filter when
    `SCHEDULER_PERSIST` is False (`persist`).
    """

    def __init__(
        self,
        server: RedisConfig | SyncRedis,
        key: SpiderKeys | str,
        fingerprinter: RequestFingerprinterProtocol | None = None,
        debug: bool = False,
        *,
        persist: bool = True,
        frontier: Frontier | None = None,
    ) -> None:
        if isinstance(server, RedisConfig):
            self.redis_config, self.server = server, None
        else:  # a client handed in, scrapy-redis style: used for the blocking calls
            self.redis_config, self.server = RedisConfig(), server
        self.keys = key if isinstance(key, SpiderKeys) else _standalone_keys(key)
        self.key = self.keys.dupefilter
        self.fingerprinter = fingerprinter or CanonicalFingerprinter()
        self.debug = debug
        self.persist = persist
        # where the filter's slices live (FRONTIER_SHARDS: one per shard, on the host's); None = one filter at `key`
        self.frontier = frontier
        self.dedup: Dedup | None = None
        self._client: SyncRedis | None = None  # the blocking client of request_seen and clear
        self._enqueuers: dict[str, Enqueuer] = {}  # filter key -> its "add" script (request_seen)
        self._logged_once = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisDupeFilter:
        assert crawler.spider is not None, "the dupefilter is built once the spider exists"
        assert crawler.request_fingerprinter is not None
        keys = SpiderKeys.from_settings(crawler.settings, crawler.spider.name)
        return cls(
            RedisConfig.from_settings(crawler.settings),
            keys,
            crawler.request_fingerprinter,
            debug=crawler.settings.getbool("DUPEFILTER_DEBUG"),
            persist=SettingsReader(crawler.settings).bool("SCHEDULER_PERSIST"),
            frontier=frontier_from_settings(crawler.settings, crawler.spider.name, None, keys),
            **cls.options(crawler.settings),
        )

    @classmethod
    def options(cls, settings: BaseSettings) -> dict[str, Any]:
        return {}

    async def make_dedup(self, client: AnyRedis, key: str = "") -> Dedup:
        raise NotImplementedError

    async def open_dedup(self, client: AnyRedis) -> Dedup:
        """Resolve and prepare the backend (the scheduler calls this with its async client)."""
        return await self.open_dedup_at(client, self.key)

    async def open_dedup_at(self, client: AnyRedis, key: str) -> Dedup:
        """The backend for the filter at `key` (a frontier shard's slice of it), prepared."""
        dedup = await self.make_dedup(client, key)
        await dedup.prepare(client)
        if key == self.key or self.dedup is None:
            self.dedup = dedup  # what status and the wrong-type checks describe
        return dedup

    def request_fingerprint(self, request: Request) -> str:
        """The request's fingerprint as hex (scrapy-redis's hook: override it to change dedup)."""
        return self.fingerprinter.fingerprint(request).hex()

    def fingerprint_hex(self, request: Request) -> str:
        """`request_fingerprint`, as the hex the Bloom scripts hash (anything else is SHA-1'd)."""
        fingerprint = self.request_fingerprint(request)
        if isinstance(fingerprint, bytes):
            fingerprint = fingerprint.hex()
        if not _HEX_FINGERPRINT.fullmatch(fingerprint):
            fingerprint = hashlib.sha1(str(fingerprint).encode("utf-8", "replace")).hexdigest()
        return fingerprint

    def _sync_client(self) -> SyncRedis:
        if self._client is None:
            self._client = self.server if self.server is not None else self.redis_config.sync_client()
        return self._client

    def _filter_keys(self) -> list[str]:
        """Every slice of the filter (one per frontier shard; one key without shards)."""
        return list(dict.fromkeys([self.key, *(self.frontier.dupefilter_keys() if self.frontier else [])]))

    def clear(self) -> None:
        """Forget every fingerprint, every shard's slice (scrapy-redis's `clear`; a blocking call, like theirs)."""
        opened = self._client is None
        client = self._sync_client()
        try:
            for key in self._filter_keys():
                run_sync(reset_dedup(client, key))
        finally:
            if opened and not self._enqueuers and client is not self.server:
                client.close()  # opened for this call only
                self._client = None

    def request_seen(self, request: Request) -> bool:
        """Check and add in one script call on the slice of the request's host shard (a blocking
        round trip: for direct callers only; the scheduler dedups in its push script)."""
        part = self.frontier.shard_for(request.url) if self.frontier else None
        keys = part.keys if part is not None else self.keys
        enqueuer = self._enqueuers.get(keys.dupefilter)
        if enqueuer is None:
            client = self._sync_client()
            dedup = run_sync(self.make_dedup(client, keys.dupefilter))
            run_sync(dedup.prepare(client))
            enqueuer = self._enqueuers[keys.dupefilter] = Enqueuer(frontier_for_dedup(client, keys), dedup)
        (new,) = run_sync(enqueuer.run("add", [PushEntry(self.fingerprint_hex(request), False, "")]))
        return not new

    def log(self, request: Request, spider: Spider) -> None:
        if self.debug:
            logger.debug("Filtered duplicate request: %s", request)
        elif not self._logged_once:
            logger.debug(
                "Filtered duplicate request: %s - no more duplicates will be shown "
                "(see DUPEFILTER_DEBUG to show all duplicates)",
                request,
            )
            self._logged_once = True

    def close(self, reason: str = "") -> None:
        """Clear the filter when not persisting (as scrapy-redis's close), then drop our client."""
        if not self.persist:
            self.clear()
        if self._client is not None and self._client is not self.server:
            self._client.close()
        self._client = None
        self._enqueuers = {}


def _standalone_keys(key: str) -> SpiderKeys:
    """Keys for a filter made from a bare key name (scrapy-redis's constructor): only the filter
    key is used; the others are named after it so nothing of a spider's is ever touched."""
    keys = SpiderKeys.from_settings(Settings(), key)
    return dataclasses.replace(keys, dupefilter=key)


class RedisSetDupeFilter(RedisDupeFilter):
    """Exact: every fingerprint in one Redis set (about 85 bytes each)."""

    async def make_dedup(self, client: AnyRedis, key: str = "") -> Dedup:
        return SetDedup(key or self.key)


class BloomDupeFilter(RedisDupeFilter):
    """Scalable Bloom filter: `BLOOM_BACKEND`, `BLOOM_CAPACITY`, `BLOOM_ERROR_RATE`."""

    def __init__(self, *args: Any, bloom: BloomConfig | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bloom = bloom or BloomConfig()

    @classmethod
    def options(cls, settings: BaseSettings) -> dict[str, Any]:
        return {"bloom": BloomConfig.from_settings(settings)}

    async def make_dedup(self, client: AnyRedis, key: str = "") -> Dedup:
        return await choose_dedup(client, key or self.key, self.bloom)
