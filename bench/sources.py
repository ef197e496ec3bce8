"""The source registry at 100,000 sources (docs/benchmarks.md "Source registry at 100,000 sources").

Measures, for N generated sources shaped like a news list (name, country, language, 2 tags, 2 deny
rules, every 4th source an allow rule and a subdomain, every 10th a rate):
- checking the file (`load_sources` over JSON Lines), seconds;
- the registry hash in Redis: `MEMORY USAGE` of `{bench}:registry`, bytes per source;
- a node's copy (SourceTable built from the hash, compiled regexes), tracemalloc bytes per source,
  the time of a node's first read and of its rebuild after an import that changes 10 sources;
- a scope check and a row label, microseconds each (a lookup walks the host's labels).

Run: .venv/bin/python -m bench.sources [--sources 100000] (starts its own redis-server on a free port).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import tempfile
import time
import tracemalloc
from pathlib import Path

import redis
from scrapy import Request

from distributed_crawler.core.registry import SourceCache, source_scope_check, table_of
from distributed_crawler.core.source_records import load_sources, read_records

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
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
