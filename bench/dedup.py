"""Dedup memory and speed: our Bloom filter through the real enqueue script vs scrapy-redis's SET.

    .venv/bin/python bench/dedup.py --n 1000000 --json

Both sides run against one private redis-server started here, in the same run:
- ours: `Enqueuer.run("push", ...)` in batches of 500 (what the scheduler's outbox sends): the
  Bloom check+add and the queue push in one Lua call. The queue is emptied between batches so
  only the filter stays in memory. `bytes` is `MEMORY USAGE` of the filter's keys.
- scrapy-redis 0.9.1's path, one request at a time as its scheduler does it: `SADD` of the
  40-char hex fingerprint (RFPDupeFilter.request_seen), then the queue push in MULTI/EXEC.
  Its speed is measured on the first `--baseline-timed` URLs; its memory on all N (filled with
  pipelined SADDs, which is the same set, only faster to build).
The false-positive rate is measured on N URLs that were never added (`check` action). Speeds
time the Redis calls only, on both sides (fingerprints are computed outside the timer).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scrapy.settings import Settings

from bench.harness import log, private_redis
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.dedup.dupefilter import BloomConfig, choose_dedup, describe_dedup
from distributed_crawler.frontier.enqueue import Enqueuer
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.frontier.keys import SpiderKeys

BATCH = 500


def urls(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [
        f"https://site{rnd.randrange(1000)}.example/news/{rnd.getrandbits(64):x}?page={rnd.randrange(50)}"
        for _ in range(n)
    ]


def fingerprints(batch: list[str]) -> list[str]:
    """SHA1 of the URL: what our fingerprinter gives for a canonical GET (Request objects would
    make the harness, not Redis, the bottleneck at 10M)."""
    return [hashlib.sha1(u.encode()).hexdigest() for u in batch]


def ours(client: redis.Redis, n: int, capacity: int, error_rate: float) -> dict:
    keys = SpiderKeys.from_settings(Settings(), "bench")
    dedup = run_sync(choose_dedup(client, keys.dupefilter, BloomConfig("auto", capacity, error_rate)))
    run_sync(dedup.prepare(client))
    enqueuer = Enqueuer(client, keys, dedup, "priority")
    added = 0
    elapsed = 0.0
    for start in range(0, n, BATCH):
        batch = urls(min(BATCH, n - start), seed=start)
        entries = [(h, False, make_member(json.dumps({"url": u}), 0)) for h, u in zip(fingerprints(batch), batch)]
        t = time.perf_counter()
        added += sum(run_sync(enqueuer.run("push", entries)))
        elapsed += time.perf_counter() - t
        client.delete(keys.requests)  # keep only the filter in memory
        if start % 1_000_000 == 0 and start:
            log(f"ours: {start} added")
    stats = run_sync(describe_dedup(client, keys.dupefilter))
    false_pos = 0
    for start in range(0, n, BATCH * 4):
        batch = urls(min(BATCH * 4, n - start), seed=10**12 + start)
        false_pos += len(batch) - sum(run_sync(enqueuer.run("check", [(h, False, "") for h in fingerprints(batch)])))
    return {
        "backend": stats["backend"],
        "layers": stats["layers"],
        "added": added,
        "bytes": stats["bytes"],
        "bytes_per_url": round(stats["bytes"] / n, 3),
        "measured_fpr": false_pos / n,
        "adds_per_s": round(n / elapsed),
    }


def baseline(client: redis.Redis, n: int, timed: int) -> dict:
    key, queue = "bench:dupefilter", "bench:requests"
    before = client.info("memory")["used_memory"]
    timed = min(timed, n)
    elapsed = 0.0
    for start in range(0, timed, BATCH):
        batch = urls(min(BATCH, timed - start), seed=start)
        hexes = fingerprints(batch)
        t = time.perf_counter()
        for h, u in zip(hexes, batch):
            if client.sadd(key, h):  # RFPDupeFilter.request_seen: one round trip
                pipe = client.pipeline(transaction=True)  # PriorityQueue.push: MULTI ZADD EXEC
                pipe.zadd(queue, {json.dumps({"url": u}): 0})
                pipe.execute()
        elapsed += time.perf_counter() - t
        client.delete(queue)
    for start in range(timed, n, 10_000):  # the rest of the set, for its memory
        batch = urls(min(10_000, n - start), seed=start)
        pipe = client.pipeline(transaction=False)
        for h in fingerprints(batch):
            pipe.sadd(key, h)
        pipe.execute()
    # used_memory growth: exact MEMORY USAGE (samples=0) walks all members, minutes at 10M
    nbytes = client.info("memory")["used_memory"] - before
    return {
        "bytes": nbytes,
        "bytes_per_url": round(nbytes / n, 3),
        "adds_per_s": round(timed / elapsed),
        "timed_on": timed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--capacity", type=int, default=0, help="BLOOM_CAPACITY (default: N, a sized filter)")
    parser.add_argument("--error-rate", type=float, default=0.001)
    parser.add_argument("--baseline-timed", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with private_redis() as client:
        log(f"ours: {args.n} URLs")
        mine = ours(client, args.n, args.capacity or args.n, args.error_rate)
        client.flushall()
        log("scrapy-redis SET")
        theirs = baseline(client, args.n, args.baseline_timed)
    result = {
        "n": args.n,
        "capacity": args.capacity or args.n,
        "target_fpr": args.error_rate,
        **mine,
        "baseline_bytes": theirs["bytes"],
        "baseline_bytes_per_url": theirs["bytes_per_url"],
        "baseline_adds_per_s": theirs["adds_per_s"],
        "baseline_timed_on": theirs["timed_on"],
        "smaller_than_set": round(theirs["bytes"] / mine["bytes"], 1),
        "speed_ratio": round(mine["adds_per_s"] / theirs["adds_per_s"], 2),
    }
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
