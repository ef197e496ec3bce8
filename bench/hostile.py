"""Peak RSS of a worker crawling the hostile site vs. the normal site, in the same run (docs/benchmarks.md).

Each side is one real node (`scrapy crawl news`, the default settings plus the local site's
LOOPBACK_SITE_SETTINGS) seeded with `dcrawl seed news --site URL` against a private redis-server;
the sides alternate run after run on the same machine. "normal" is the demo news site
(tests/site/server.py); "hostile" is tests/hostile/traps.py: articles beside an infinite calendar,
ever-deeper paths, a gzip bomb (64 MiB), pages of 200 MiB (announced) and 64 MiB (streamed), a
slow-loris, redirect loops, 2,000 headers and a sitemap bomb (80 MiB gunzipped). `--before` adds a
third side: the hostile site with Scrapy's own caps (DOWNLOAD_MAXSIZE 1 GiB, no extraction cap,
no header cap), to show what the bounds save. The worker's peak RSS is the kernel's high-water
mark (VmHWM in /proc/<pid>/status), read until it exits on its own (MAX_IDLE_TIME_BEFORE_CLOSE).

    .venv/bin/python -m bench.hostile --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from bench.harness import PYTHON, ROOT, Children, log, start_redis
from tests.conftest import LOOPBACK_SITE_SETTINGS
from tests.hostile.traps import TrapSite
from tests.site.server import NewsSite

COMMON = ("DOWNLOAD_TIMEOUT=5", "RETRY_TIMES=0", "DOMAIN_RATE_LIMIT=0", "LOG_LEVEL=INFO")
BEFORE = ("DOWNLOAD_MAXSIZE=1073741824", "DOWNLOAD_WARNSIZE=33554432", "EXTRACT_MAX_BYTES=0")
BEFORE += ("RESPONSE_MAX_HEADERS=100000", "RESPONSE_MAX_HEADER_BYTES=1073741824", "MEMUSAGE_ENABLED=False")


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident set (VmHWM) in MB, None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def stored(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        try:
            return int(conn.execute("SELECT count(*) FROM items").fetchone()[0])
        except sqlite3.OperationalError:
            return 0


def crawl(
    children: Children, redis_url: str, site_url: str, workdir: Path, settings: tuple[str, ...]
) -> dict[str, Any]:
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    db = workdir / "items.db"
    db.unlink(missing_ok=True)
    env = {
        **os.environ,
        "SCRAPY_SETTINGS_MODULE": "demo.settings",
        "REDIS_URL": redis_url,
        "STORAGE_URL": f"sqlite:///{db}",
        "MAX_IDLE_TIME_BEFORE_CLOSE": "3",
    }
    subprocess.run(
        [PYTHON, "-m", "distributed_crawler", "seed", "news", "--site", site_url + "/", "--redis-url", redis_url],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=60,
    )
    args = [PYTHON, "-m", "scrapy", "crawl", "news"]
    for setting in (*LOOPBACK_SITE_SETTINGS, *COMMON, *settings):
        args += ["-s", setting]
    started = time.monotonic()
    with open(workdir / "worker.log", "wb") as out:
        proc = children.start(args, cwd=ROOT, env={**env, "NODE_ID": "bench"}, stdout=out, stderr=subprocess.STDOUT)
    peak = 0.0
    while proc.poll() is None and time.monotonic() - started < 600:
        peak = max(peak, peak_rss_mb(proc.pid) or 0.0)
        time.sleep(0.05)
    if proc.poll() is None:
        children.stop(proc)
    return {"peak_rss_mb": round(peak, 1), "seconds": round(time.monotonic() - started, 1), "rows": stored(db)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", action="store_true", help="also the hostile site with Scrapy's own caps")
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    children = Children()
    results: dict[str, list[dict[str, Any]]] = {"normal": [], "hostile": []}
    if opts.before:
        results["hostile, Scrapy's caps"] = []
    with tempfile.TemporaryDirectory() as tmp, NewsSite(articles=200, per_page=20) as normal, TrapSite() as hostile:
        workdir = Path(tmp)
        _, redis_url = start_redis(children, workdir)
        sides = {"normal": (normal.url, ()), "hostile": (hostile.url, ())}
        if opts.before:
            sides["hostile, Scrapy's caps"] = (hostile.url, BEFORE)
        for run in range(opts.runs):
            for side, (url, settings) in sides.items():
                result = crawl(children, redis_url, url, workdir, settings)
                log(f"run {run + 1} {side}: {result}")
                results[side].append(result)
        children.kill_all()
    summary = {
        side: {
            "peak_rss_mb_median": statistics.median(r["peak_rss_mb"] for r in runs),
            "peak_rss_mb_max": max(r["peak_rss_mb"] for r in runs),
            "rows_median": statistics.median(r["rows"] for r in runs),
            "seconds_median": statistics.median(r["seconds"] for r in runs),
        }
        for side, runs in results.items()
    }
    if opts.json:
        print(json.dumps({"runs": results, "summary": summary}, indent=2))
    else:
        print("| site | peak RSS, median (MB) | peak RSS, max (MB) | rows | seconds |")
        print("|---|---|---|---|---|")
        for side, s in summary.items():
            print(
                f"| {side} | {s['peak_rss_mb_median']} | {s['peak_rss_mb_max']} | {s['rows_median']} | {s['seconds_median']} |"
            )


if __name__ == "__main__":
    main()
