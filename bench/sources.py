"""The source registry at 100,000 sources (docs/benchmarks.md "Source registry at 100,000 sources").

Measures, for N generated sources shaped like a news list (name, country, language, 2 tags, 2 deny
rules, every 4th source an allow rule and a subdomain, every 10th a rate):
- checking the file (`load_sources` over JSON Lines), seconds;
- the registry hash in Redis: `MEMORY USAGE` of `{bench}:registry`, bytes per source;
- a node's copy (SourceTable built from the hash, compiled regexes), tracemalloc bytes per source,
  the time of a node's first read and of its rebuild after an import that changes 10 sources;
- a scope check and a row label, microseconds each (a lookup walks the host's labels);
- what the crawl keeps per source in Redis (`INFO memory` used_memory before and after): the
  health hash (lua/source_record.lua: 28 days of counts, lag and gap histograms, extraction shares)
  with its index entry, and the coverage set (lua/coverage_record.lua) with `--listed` URLs listed
  a day per source (all stored but one failed), bytes per source; and the per-source work of the
  one node's sources check (silence, drift, coverage) over all of them at once, seconds (a crawl's
  check covers at most 10,000 sources an interval, 1,000 at a time: events/extension.py).

Run: .venv/bin/python -m bench.sources [--sources 100000] [--listed 20] (starts its own redis-server
on a free port).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import subprocess
import tempfile
import time
import tracemalloc
from pathlib import Path

import redis
import redis.asyncio as aioredis
from scrapy import Request

from distributed_crawler.connection.batch import Batch
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.core.registry import SourceCache, source_scope_check, table_of
from distributed_crawler.core.source_records import load_sources, read_records
from distributed_crawler.events.coverage import FAILED, STORED, CoverageLog
from distributed_crawler.events.coverage_alert import check_coverage
from distributed_crawler.events.drift import check_drift
from distributed_crawler.events.extension import check_silence
from distributed_crawler.events.sources import SourcesConfig, read_sources

COUNTRIES = ("FR", "DE", "GB", "US", "ES", "IT", "BR", "IN")


def record(i: int) -> dict:
    r: dict = {
        "url": f"https://www.outlet{i}.example{i % 50}.com/",
        "name": f"Outlet {i}",
        "country": COUNTRIES[i % len(COUNTRIES)],
        "language": "en",
        "tags": ["national" if i % 3 else "regional", f"collection{i % 20}"],
        "deny": ["/video/", r"/live/\d+"],
    }
    if i % 4 == 0:
        r["allow"] = [r"/20\d\d/"]
        r["subdomains"] = ["regions"]
    if i % 10 == 0:
        r["rate"] = 2
    return r


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sources", type=int, default=100_000)
    parser.add_argument("--listed", type=int, default=20, help="URLs each source's sitemaps list a day")
    args = parser.parse_args()
    n = args.sources
    tmp = Path(tempfile.mkdtemp())
    port = free_port()
    server = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(port=port)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        path = tmp / "outlets.jsonl"
        path.write_text("".join(json.dumps(record(i)) + "\n" for i in range(n)))
        start = time.perf_counter()
        sources, errors = load_sources(read_records(str(path)))
        check_s = time.perf_counter() - start
        assert not errors and len(sources) == n
        for chunk in range(0, n, 10_000):
            client.hset("{bench}:registry", mapping={s.site: s.to_json() for s in sources[chunk : chunk + 10_000]})
        redis_bytes = int(client.memory_usage("{bench}:registry", samples=0) or 0)
        raw = client.hgetall("{bench}:registry")
        start = time.perf_counter()
        table = table_of(raw)
        first_s = time.perf_counter() - start
        del table
        tracemalloc.start()
        table = table_of(raw)
        node_bytes = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        changed = sources[:10]
        client.hset("{bench}:registry", mapping={s.site: s.to_json().replace("national", "national2") for s in changed})
        raw = client.hgetall("{bench}:registry")
        start = time.perf_counter()
        table = table_of(raw, table)
        rebuild_s = time.perf_counter() - start
        del raw
        cache = SourceCache()
        cache.table = table
        check = source_scope_check(cache)
        urls = [
            f"https://www.outlet{i}.example{i % 50}.com/2026/12/story-{i}.html"
            for i in range(0, n, max(1, n // 10_000))
        ]
        requests = [Request(u, meta={"depth": 1}) for u in urls]
        start = time.perf_counter()
        refused = sum(check(r) is not None for r in requests)
        check_us = (time.perf_counter() - start) / len(requests) * 1e6
        start = time.perf_counter()
        for u in urls:
            table.label(u)
        label_us = (time.perf_counter() - start) / len(urls) * 1e6
        print(f"sources                      {n:,}")
        print(f"check the file (load)        {check_s:.2f} s")
        print(f"Redis hash                   {redis_bytes / n:,.0f} bytes/source ({redis_bytes / 2**20:.1f} MiB)")
        print(f"node copy (SourceTable)      {node_bytes / n:,.0f} bytes/source ({node_bytes / 2**20:.1f} MiB)")
        print(f"node first read              {first_s:.2f} s (in a thread, off the event loop)")
        print(f"node rebuild, 10 changed     {rebuild_s:.3f} s")
        print(f"scope check                  {check_us:.1f} us/request ({refused} of {len(requests)} refused)")
        print(f"row label                    {label_us:.1f} us/row")
        client.delete("{bench}:registry")
        state_bytes, coverage_bytes, check_s = per_source_state(client, port, n, args.listed)
        print(f"health hash + index entry    {state_bytes / n:,.0f} bytes/source ({state_bytes / 2**20:.1f} MiB)")
        print(
            f"coverage, {args.listed} URLs listed     {coverage_bytes / n:,.0f} bytes/source "
            f"({coverage_bytes / 2**20:.1f} MiB, {coverage_bytes / n / max(1, args.listed):,.0f} bytes/URL)"
        )
        parts = ", ".join(f"{what} {seconds:.1f} s" for what, seconds in check_s.items())
        print(f"sources check (one node)     {sum(check_s.values()):.1f} s for {n:,} sources ({parts})")
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def per_source_state(client: redis.Redis, port: int, n: int, listed: int) -> tuple[int, int, dict[str, float]]:
    """(bytes of the health hashes + index, bytes of the coverage sets, seconds of one check by part)."""
    config = SourcesConfig(max_sources=n, coverage_min_listed=1, coverage_grace=0)
    names = [f"Outlet {i}" for i in range(n)]
    health = client.register_script(lua_source("source_record"))
    coverage = client.register_script(lua_source("coverage_record"))
    before = used_memory(client)
    for start in range(0, n, 1000):
        batch = Batch(client)
        for name in names[start : start + 1000]:
            keys = [config.key_of("bench", name), config.index_key("bench")]
            batch.script(health, keys, [name, "article", 3, 28, "3,2,3", 4, 5, 9])
            batch.script(health, keys, [name, "error", 1, 28])
        asyncio.run(batch.execute())
    middle = used_memory(client)
    log = CoverageLog(config, "bench", source_of=lambda url: names[int(url.split("/")[2][10:].split(".")[0])])
    for start in range(0, n, 1000):
        for i in range(start, min(n, start + 1000)):
            for j in range(listed):
                url = f"https://www.outlet{i}.example{i % 50}.com/2026/12/06/story-{j}-with-a-slug.html"
                log.listed(url)
                log.outcome(url, {}, FAILED if j == 0 else STORED)
        batch = Batch(client)
        for keys, call_args in log.take():
            batch.script(coverage, keys, call_args)
        asyncio.run(batch.execute())
    after = used_memory(client)

    class Quiet:
        async def alert(self, *args: object, **details: object) -> None:
            return None

    async def check() -> dict[str, float]:
        """events/extension.py's three checks over every source at once: read once for silence and drift,
        then coverage (the crawl's check does this per chunk of one slice)."""
        aio = aioredis.Redis(port=port)
        now = float((await aio.time())[0])
        took = {}
        start = time.perf_counter()
        healths = await read_sources(aio, config, "bench", now, config.max_sources)
        took["read"] = time.perf_counter() - start
        await check_silence(aio, config, "bench", Quiet(), now, healths)
        await check_drift(aio, config, "bench", Quiet(), now, healths)
        took["silence, drift"] = time.perf_counter() - start - took["read"]
        mark = time.perf_counter()
        await check_coverage(aio, config, "bench", Quiet(), now)
        took["coverage"] = time.perf_counter() - mark
        await aio.aclose()
        return took

    return middle - before, after - middle, asyncio.run(check())


if __name__ == "__main__":
    main()
