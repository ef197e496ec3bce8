"""Revisit schedule memory and speed: bytes per scheduled URL, and moves/records per second.

    .venv/bin/python bench/recrawl.py --n 100000 --json

Against one private redis-server started here, in the same run:
- ours: N news URLs recorded through recrawl_record.lua as the nodes do it (state = interval,
  16-hex digest, a 22-char ETag (a page with an ETag keeps no Last-Modified) and the request as the nodes store it:
  the codec's compact payload (frontier/codec.py), in host mode with
  its slot; key = 16-hex fingerprint), then all made due and moved into the
  frontier with recrawl_move.lua in batches of RECRAWL_MOVE_BATCH (500). Bytes = `used_memory`
  growth while recording: the two schedule keys only (measured before the move fills the frontier).
- the naive layout one writes first: the same fields in one Redis hash per URL, keyed by the
  URL, plus a zset member = the URL (no fingerprint, named fields, the codec's full JSON).
Speeds time the Redis calls only (members are encoded outside the timer); the machine is shared:
read them as a ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scrapy import Request
from scrapy.settings import Settings

from bench.harness import log, private_redis
from distributed_crawler.frontier.codec import RequestCodec
from distributed_crawler.frontier.config import FrontierConfig, slot_of
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.recrawl.schedule import RecrawlKeys, RevisitSchedule

BATCH = 500
ETAG = '"5f3c9a1b7e2d4c08a1b2"'
LAST_MODIFIED = "Thu, 03 Dec 2026 09:15:53 GMT"


def urls(n: int) -> list[str]:
    rnd = random.Random(15)
    return [f"https://site{rnd.randrange(1000)}.example/section/{rnd.getrandbits(48):x}/latest" for _ in range(n)]


def members(batch: list[str], compact: bool = True) -> list[str]:
    """Queue members as the nodes store them for a revisit (compact) or as full JSON (the codec's
    JSON format, every field written)."""
    codec, frontier = RequestCodec(None), FrontierConfig()
    out = []
    for url in batch:
        request, slot = Request(url), slot_of(url, frontier)
        if compact:
            payload = codec.encode(request, slot=slot, again=True)
        else:
            payload = json.dumps({"v": 1, **codec.to_dict(request), "slot": slot, "again": 1}, separators=(",", ":"))
        out.append(make_member(payload, 0))
    return out


def used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def ours(client: redis.Redis, all_urls: list[str]) -> dict:
    spider_keys = SpiderKeys.from_settings(Settings(), "bench")
    keys = RecrawlKeys.from_settings(Settings(), "bench")
    schedule = RevisitSchedule(client, frontier_for_mode(client, spider_keys, "host"))
    before = used(client)
    recorded = 0.0
    sample_member = ""
    for start in range(0, len(all_urls), BATCH):
        batch = all_urls[start : start + BATCH]
        encoded = members(batch)
        sample_member = encoded[0]
        t = time.perf_counter()
        pipe = client.pipeline(transaction=False)
        for i, member in enumerate(encoded):
            fp = f"{start + i:016x}"
            schedule._record(  # the script the nodes call, pipelined here to time Redis, not the harness
                keys=[keys.schedule, keys.state],
                args=[fp, "600", "86400", "2", "body", "0123456789abcdef", ETAG, "", member],
                client=pipe,
            )
        pipe.execute()
        recorded += time.perf_counter() - t
    nbytes = used(client) - before
    client.zadd(keys.schedule, {f"{i:016x}": 0 for i in range(len(all_urls))})  # all due now
    t = time.perf_counter()
    moved = 0
    while True:
        result = schedule.move_due(BATCH, 3600)
        moved += result.moved
        if result.moved < BATCH:
            break
    moving = time.perf_counter() - t
    return {
        "bytes": nbytes,
        "bytes_per_url": round(nbytes / len(all_urls)),
        "member_bytes": len(sample_member.encode()),
        "records_per_s": round(len(all_urls) / recorded),
        "moved": moved,
        "moves_per_s": round(moved / moving),
    }


def naive(client: redis.Redis, all_urls: list[str]) -> dict:
    before = used(client)
    for start in range(0, len(all_urls), BATCH):
        batch = all_urls[start : start + BATCH]
        pipe = client.pipeline(transaction=False)
        for url, member in zip(batch, members(batch, compact=False)):
            pipe.hset(
                f"{{bench}}:revisit:{url}",
                mapping={
                    "url": url,
                    "interval": 600,
                    "digest": "0123456789abcdef",
                    "etag": ETAG,
                    "last_modified": LAST_MODIFIED,
                    "request": member,
                },
            )
            pipe.zadd("{bench}:revisits", {url: time.time() + 600})
        pipe.execute()
    nbytes = used(client) - before
    return {"bytes": nbytes, "bytes_per_url": round(nbytes / len(all_urls))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    all_urls = urls(args.n)
    with private_redis() as client:
        log(f"ours: {args.n} URLs")
        mine = ours(client, all_urls)
        client.flushall()
        log("naive: a hash per URL")
        theirs = naive(client, all_urls)
        version = client.info("server")["redis_version"]
    result = {
        "n": args.n,
        "redis": version,
        "ours": mine,
        "naive": theirs,
        "smaller": round(theirs["bytes"] / mine["bytes"], 2),
    }
    print(json.dumps(result, indent=2) if args.json else result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
