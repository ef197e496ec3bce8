"""`dcrawl import-scrapy-redis SPIDER`: move a running scrapy-redis crawl's Redis keys over.

What scrapy-redis leaves in Redis, and what becomes of it (docs/migrating-from-scrapy-redis.md):
- `<spider>:start_urls` (REDIS_START_URLS_KEY): read as is by our RedisSpider (same name, same
  seed formats); this command only checks its type matches REDIS_START_URLS_AS_SET / _AS_ZSET.
- `<spider>:requests`: the pending queue, *pickled* requests. Pickle runs code chosen by whoever
  wrote it, so nodes never read it. Only this command, run by the operator with
  `--unpickle-old-queue`, converts it: each entry is unpickled with an unpickler that builds
  plain data only (dict, list, str, bytes, numbers, datetime, Decimal, set; no other class is
  ever loaded), rebuilt against the spider and pushed to our JSON queue through the dedup filter.
- `<spider>:dupefilter`: SHA-1s of scrapy-redis's own fingerprint, which ours does not share
  (canonical URLs): it cannot be converted, only reported (and deleted with `--delete-old-keys`).
Nothing is deleted unless `--delete-old-keys` is given, and then only after every queue entry
was converted.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import io
import json
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from scrapy import Spider
from scrapy.settings import BaseSettings
from scrapy.spiderloader import get_spider_loader
from scrapy.utils.request import request_from_dict

from distributed_crawler.cli.project import open_frontier
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.types import SyncRedis
from distributed_crawler.core.scheduler import SchedulerConfig
from distributed_crawler.dedup.dupefilter import BloomConfig, choose_dedup
from distributed_crawler.dedup.fingerprint import CanonicalFingerprinter, FingerprintConfig
from distributed_crawler.frontier.base import placed_entry
from distributed_crawler.frontier.codec import RequestCodec, UnserializableRequestError
from distributed_crawler.frontier.enqueue import Dedup
from distributed_crawler.frontier.envelope import MAX_PRIORITY, make_member
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.seedkey import SeedKey
from distributed_crawler.keyspace import fill

BATCH = 500
OLD_QUEUE_KEY = "%(spider)s:requests"  # scrapy-redis's SCHEDULER_QUEUE_KEY default
OLD_DUPEFILTER_KEY = "%(spider)s:dupefilter"  # scrapy-redis's SCHEDULER_DUPEFILTER_KEY default
FLAG = "--unpickle-old-queue"

# The only classes an old queue entry may make the unpickler load: plain data.
SAFE_GLOBALS: dict[tuple[str, str], Callable[..., object]] = {
    ("datetime", "datetime"): datetime.datetime,
    ("datetime", "date"): datetime.date,
    ("datetime", "time"): datetime.time,
    ("datetime", "timedelta"): datetime.timedelta,
    ("datetime", "timezone"): datetime.timezone,
    ("decimal", "Decimal"): decimal.Decimal,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "bytearray"): bytearray,
    ("_codecs", "encode"): lambda text, encoding="utf-8": text.encode(encoding),  # bytes, protocol < 3
    # CrawlSpider's meta["link_text"] is lxml's str subclass: it comes back as a plain str
    ("lxml.etree", "_ElementUnicodeResult"): str,
}


class PlainDataUnpickler(pickle.Unpickler):
    """An unpickler that loads no class or function beyond SAFE_GLOBALS (so no code runs)."""

    def find_class(self, module: str, name: str) -> Callable[..., object]:
        found = SAFE_GLOBALS.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"refused to load {module}.{name} (only plain data is converted)")
        return found


def unpickle_plain(raw: bytes) -> object:
    """Plain data (dicts, lists, text, numbers, dates) of any shape: the caller checks it."""
    return PlainDataUnpickler(io.BytesIO(raw)).load()


@dataclass
class Report:
    spider: str
    start_urls: dict[str, Any] = field(default_factory=dict)
    queue: dict[str, Any] = field(default_factory=dict)
    dupefilter: dict[str, Any] = field(default_factory=dict)
    converted: int = 0
    duplicates: int = 0
    refused: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "spider": self.spider,
            "start_urls": self.start_urls,
            "old_queue": self.queue,
            "old_dupefilter": self.dupefilter,
            "converted": self.converted,
            "duplicates": self.duplicates,
            "refused": len(self.refused),
            "refused_examples": self.refused[:5],
            "deleted": self.deleted,
            "notes": self.notes,
        }


def _type(client: SyncRedis, key: str) -> str:
    kind = client.type(key)
    return kind.decode() if isinstance(kind, bytes) else str(kind)


def _size(client: SyncRedis, key: str, kind: str) -> int:
    return {"list": client.llen, "zset": client.zcard, "set": client.scard}.get(kind, lambda _k: 0)(key)


def _check_start_urls(client: SyncRedis, seed_key: SeedKey, report: Report) -> None:
    kind = _type(client, seed_key.key)
    report.start_urls = {"key": seed_key.key, "type": kind, "count": _size(client, seed_key.key, kind)}
    if kind not in ("none", seed_key.kind):
        setting = {"set": "REDIS_START_URLS_AS_SET", "zset": "REDIS_START_URLS_AS_ZSET"}.get(kind)
        fix = f"set {setting} = True" if setting else "push seeds to a list (or delete the key)"
        report.notes.append(f"{seed_key.key} is a {kind} but the spider reads a {seed_key.kind}: {fix}")


def _old_entries(client: SyncRedis, key: str, kind: str) -> list[tuple[bytes, int]]:
    """(pickled request, priority) of the old queue, in scrapy-redis's pop order."""
    if kind == "zset":  # PriorityQueue: score = -priority, lowest score first
        entries = []
        for pair in client.zrange(key, 0, -1, withscores=True):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(f"{key}: ZRANGE WITHSCORES gave {pair!r:.60}, not a (member, score) pair")
            entries.append((_raw(pair[0], key), int(-float(pair[1]))))
        return entries
    if kind == "list":  # FifoQueue pops from the right, LifoQueue from the left: keep FIFO order
        return [(_raw(member, key), 0) for member in reversed(client.lrange(key, 0, -1))]
    return []


def _raw(member: object, key: str) -> bytes:
    """An entry of the old queue as the bytes scrapy-redis wrote (the CLI's client does not decode)."""
    if isinstance(member, bytes):
        return member
    raise ValueError(f"{key}: an entry came back as {type(member).__name__}, not bytes (decode_responses is on?)")


def _spider(settings: BaseSettings, name: str) -> Spider:
    """The project's spider, without running its __init__ (only its methods are looked up)."""
    try:
        spidercls = get_spider_loader(settings).load(name)
    except KeyError:
        raise ValueError(f"no spider named {name!r} in this project (SPIDER_MODULES); run from the project") from None
    spider = spidercls.__new__(spidercls)
    spider.name = name
    return spider


async def _prepared(client: SyncRedis, config: BloomConfig, key: str) -> Dedup:
    """The Bloom backend of the filter at `key` (a frontier shard's slice), prepared."""
    dedup = await choose_dedup(client, key, config)
    await dedup.prepare(client)
    return dedup


def _convert(
    client: SyncRedis,
    settings: Any,
    keys: SpiderKeys,
    old_key: str,
    kind: str,
    report: Report,
    warn: Callable[[str], None],
) -> None:
    warn(
        f"WARNING: {FLAG} unpickles {report.queue['count']} entries of {old_key}. Only plain data is "
        "loaded (no class or function), but do this only with a Redis no stranger could write to."
    )
    config = SchedulerConfig.from_settings(settings)
    spider = _spider(settings, keys.spider)
    codec = RequestCodec(spider, config.allowed_classes)
    fingerprinter = CanonicalFingerprinter(FingerprintConfig.from_settings(settings))
    frontier = open_frontier(settings, client, keys)
    enqueuer = run_sync(frontier.open_enqueuer(partial(_prepared, client, BloomConfig.from_settings(settings))))
    batch: list[Any] = []

    def push() -> None:
        if batch:
            results = run_sync(enqueuer.run("push", batch))
            report.converted += sum(results)
            report.duplicates += len(batch) - sum(results)
            batch.clear()

    for raw, priority in _old_entries(client, old_key, kind):
        try:
            data = unpickle_plain(raw)
            if not isinstance(data, dict):
                raise ValueError(f"not a request dict but a {type(data).__name__}")
            request = request_from_dict(data, spider=spider)
            placement = frontier.placement(request.url)
            payload = codec.encode(request, slot=placement.slot)
        except (pickle.UnpicklingError, UnserializableRequestError, ValueError, TypeError, KeyError, EOFError) as exc:
            report.refused.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            continue
        priority = max(-MAX_PRIORITY, min(MAX_PRIORITY, request.priority if request.priority else priority))
        fingerprint = fingerprinter.fingerprint(request).hex()
        batch.append(placed_entry(fingerprint, request.dont_filter, make_member(payload, priority), 0.0, placement))
        if len(batch) >= BATCH:
            push()
    push()


def run_import(client: SyncRedis, settings: Any, args: argparse.Namespace, warn: Callable[[str], None]) -> Report:
    keys = SpiderKeys.from_settings(settings, args.spider)
    seed_key = SeedKey.from_settings(settings, args.spider)  # both AS_SET and AS_ZSET: ValueError before any change
    old_queue = fill(args.old_queue_key or OLD_QUEUE_KEY, args.spider)
    old_df = fill(args.old_dupefilter_key or OLD_DUPEFILTER_KEY, args.spider)
    ours = {*open_frontier(settings, client, keys).status_types(), keys.dupefilter}
    clash = {old_queue, old_df} & ours
    if clash:
        raise ValueError(
            f"{', '.join(sorted(clash))} is one of our own keys, not scrapy-redis's; check the key options"
        )
    report = Report(args.spider)
    _check_start_urls(client, seed_key, report)
    queue_kind = _type(client, old_queue)
    report.queue = {"key": old_queue, "type": queue_kind, "count": _size(client, old_queue, queue_kind)}
    df_kind = _type(client, old_df)
    report.dupefilter = {"key": old_df, "type": df_kind, "count": _size(client, old_df, df_kind)}
    if queue_kind not in ("none", "list", "zset"):
        report.notes.append(f"{old_queue} is a {queue_kind}, not a scrapy-redis queue (list or zset): left alone")
    elif report.queue["count"] and not args.unpickle_old_queue:
        report.notes.append(
            f"{report.queue['count']} pickled requests wait in {old_queue}; nodes never read pickle. To move them "
            f"to the {keys.spider} queue, rerun with {FLAG} (the operator's call: it unpickles)"
        )
    elif report.queue["count"]:
        _convert(client, settings, keys, old_queue, queue_kind, report, warn)
    if report.dupefilter["count"]:
        report.notes.append(
            f"{old_df} holds {report.dupefilter['count']} fingerprints of scrapy-redis's own hash, which ours does "
            "not share: pages the old crawl fetched may be fetched once more (storage upserts on the URL)"
        )
    if args.delete_old_keys:
        _delete(client, report, old_queue, old_df, args.unpickle_old_queue)
    return report


def _delete(client: SyncRedis, report: Report, old_queue: str, old_df: str, converted: bool) -> None:
    if report.queue["count"] and (not converted or report.refused):
        why = "not converted (no " + FLAG + ")" if not converted else f"{len(report.refused)} entries were refused"
        report.notes.append(f"--delete-old-keys: kept {old_queue}, {why}")
        keys = [old_df]
    else:
        keys = [old_queue, old_df]
    for key in keys:
        if client.delete(key):
            report.deleted.append(key)


def print_report(report: Report, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.as_json(), indent=2, ensure_ascii=False))
        return
    s = report.start_urls
    print(f"start URLs: {s['key']} ({s['type']}, {s['count']}) is read as is by the spider")
    q = report.queue
    print(
        f"old queue: {q['key']} ({q['type']}, {q['count']}): converted {report.converted}, "
        f"already seen {report.duplicates}, refused {len(report.refused)}"
    )
    for example in report.refused[:5]:
        print(f"  refused: {example}")
    d = report.dupefilter
    print(f"old dupefilter: {d['key']} ({d['type']}, {d['count']})")
    if report.deleted:
        print(f"deleted: {', '.join(report.deleted)}")
    for note in report.notes:
        print(f"note: {note}")


def add_parser(command: Callable[..., argparse.ArgumentParser], connect: Callable[..., Any]) -> None:
    def cmd(args: argparse.Namespace) -> int:
        settings, client, _ = connect(args)
        try:
            report = run_import(client, settings, args, lambda line: print(line, file=sys.stderr))
        finally:
            client.close()
        print_report(report, args.json)
        return 1 if report.refused else 0

    p = command(
        "import-scrapy-redis",
        cmd,
        "take over a scrapy-redis crawl's keys: start URLs as is; the pickled queue only with " + FLAG,
        json_flag=True,
    )
    p.add_argument("spider")
    p.add_argument(
        FLAG,
        dest="unpickle_old_queue",
        action="store_true",
        help="convert the old pickled queue to JSON requests (unpickles: plain data only; trusted Redis only)",
    )
    p.add_argument("--delete-old-keys", action="store_true", help="then delete the old queue and dupefilter keys")
    p.add_argument("--old-queue-key", help=f"scrapy-redis's SCHEDULER_QUEUE_KEY (default {OLD_QUEUE_KEY})")
    p.add_argument(
        "--old-dupefilter-key", help=f"scrapy-redis's SCHEDULER_DUPEFILTER_KEY (default {OLD_DUPEFILTER_KEY})"
    )
