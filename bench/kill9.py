"""Crash safety under `kill -9`: pages lost and pages fetched twice, ours vs scrapy-redis 0.9.1.

Why: the point of leases is that a worker killed mid-crawl loses nothing. Per side and run: two
workers crawl the 5,254-page site; once ~30% of the pages are stored, the busier worker (the one
that stored most of the last 200 rows: killing an idle worker proves nothing) gets SIGKILL on its
whole process group, and 1 s later a fresh worker (`<victim>r`) starts in its place; the crawl then
runs to its end (all pages stored, or every worker closed by idle-close).

How it counts:
* pages lost = expected canonical URLs (the site's own `expected_urls()`) minus rows stored;
* duplicate fetches come from the site's hit counts (bench/site.py, canonicalised), not from the
  workers' `downloader/response_count` stats: the killed worker never writes its stats, so those
  would miss exactly the fetches that matter. Survivors' response counts are reported as a check.

Ours runs with SCHEDULER_LEASE_SECONDS=10 and MAX_IDLE_TIME_BEFORE_CLOSE=15, so the dead worker's
leases expire and are reclaimed before the survivors may idle-close; scrapy-redis with its own
MAX_IDLE_TIME_BEFORE_CLOSE=15 and SCHEDULER_PERSIST=True (bench/scrapy_redis_project/settings.py).

Usage: .venv/bin/python bench/kill9.py --pages 5000 --runs 2 --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.harness import (
    SEED_KEY,
    SIDES,
    Children,
    StoredCounter,
    Workers,
    WorkerSpec,
    fetch_accounting,
    git_state,
    log,
    make_workdir,
    median,
    prepare_code,
    site_state,
    start_redis,
    start_site,
    sum_stats,
)

IDLE_CLOSE = 15.0
LEASE_SECONDS = 10
QUEUE_KEYS = {"ours": ("{news}:requests", "{news}:processing"), "scrapy-redis": ("news:requests", None)}
RECLAIM_RE = re.compile(r"Reclaimed (\d+) expired leases")
STAT_KEYS = [
    "downloader/response_count",
    "item_scraped_count",
    "storage/committed",
    "scheduler/reclaimed",
    "scheduler/quarantined",
    "scheduler/dead_lettered",
    "log_count/ERROR",
]


def busiest(db: Path) -> tuple[str, dict[str, int]]:
    """The worker (w1 or w2) that stored most of the last 200 rows, and that count per worker."""
    with closing(sqlite3.connect(str(db), timeout=5)) as conn:
        rows = conn.execute(
            "SELECT node, COUNT(*) FROM (SELECT node FROM items ORDER BY rowid DESC LIMIT 200) GROUP BY node"
        ).fetchall()
    recent = {node: n for node, n in rows if node in ("w1", "w2")}
    return (max(recent, key=recent.__getitem__) if recent else "w1"), recent


def run_once(children: Children, side: str, args: argparse.Namespace, run_no: int) -> dict[str, Any]:
    workdir, kept = make_workdir(args.keep, f"kill9-{run_no}-{side}")
    redis_proc, redis_url = start_redis(children, workdir)
    site_proc, site_url = start_site(children, args.pages, workdir, code_root=args.code_root)
    db = workdir / "items.db"
    extra = {"SCHEDULER_LEASE_SECONDS": str(LEASE_SECONDS)} if side == "ours" else {}
    spec = WorkerSpec(side, redis_url, f"sqlite:///{db}", IDLE_CLOSE, workdir, extra, args.code_root)
    workers = Workers(children, spec)
    client = redis.Redis.from_url(redis_url, socket_timeout=10)
    counter = StoredCounter(db)
    t_kill = t_restart = None
    stored_at_kill = victim = recent = None
    try:
        expected = set(site_state(site_url)["expected"])
        client.flushall()
        workers.start("w1")
        workers.start("w2")
        workers.wait_ready(["w1", "w2"])
        time.sleep(0.5)
        t0 = time.time()
        client.lpush(SEED_KEY, json.dumps({"url": site_url + "/"}))
        last_count, t_last, timed_out = 0, t0, False
        timeline: list[list[float | int | None]] = []  # [s since seed, stored, queued, leased] each second
        queue_key, leases_key = QUEUE_KEYS[side]
        while True:
            time.sleep(0.1)
            n = counter.count()
            if n != last_count:
                last_count, t_last = n, time.time()
            if time.time() - t0 >= len(timeline):
                timeline.append(
                    [
                        round(time.time() - t0, 1),
                        n,
                        client.zcard(queue_key),
                        client.zcard(leases_key) if leases_key else None,
                    ]
                )
            if t_kill is None and n >= args.kill_at * len(expected):
                victim, recent = busiest(db)
                workers.kill9(victim)
                t_kill, stored_at_kill = time.time(), n
                log(f"{side}: kill -9 {victim} at {n} pages stored (last 200 rows by node: {recent})")
            if t_kill is not None and t_restart is None and time.time() - t_kill >= 1.0:
                workers.start(f"{victim}r")
                t_restart = time.time()
            if n >= len(expected) or (t_restart is not None and not workers.alive()):
                break
            if time.time() - t0 > args.timeout:
                timed_out = True
                log(f"{side}: crawl not finished after {args.timeout}s ({n} pages stored)")
                break
        codes = workers.wait_exit(timeout=IDLE_CLOSE + 30)
        state = site_state(site_url)
    finally:
        client.close()
        counter.close()
        children.stop(site_proc)
        children.stop(redis_proc)

    stored = StoredCounter(db).urls()
    survivors = [n for n in workers.procs if n != victim]
    probes = [workers.probe(n) for n in survivors]
    reclaimed_logged = sum(
        int(m.group(1)) for n in workers.procs for m in RECLAIM_RE.finditer(workers.logs[n].read_text(errors="replace"))
    )
    fetch = fetch_accounting(state)
    result = {
        "side": side,
        "run": run_no,
        "pages_expected": len(expected),
        "pages_stored": len(stored & expected),
        "pages_lost": len(expected - stored),
        "lost_examples": sorted(expected - stored)[:5],
        "unexpected_rows": len(stored - expected),
        "stored_at_kill": stored_at_kill,
        "duplicate_fetches": fetch["duplicate_fetches"],
        "fetch": fetch,
        "seconds_seed_to_last_page": round(t_last - t0, 2),
        "seconds_kill_to_last_page": round(t_last - t_kill, 2) if t_kill else None,
        "reclaimed_leases_logged": reclaimed_logged,
        "kill_at_s": round(t_kill - t0, 1) if t_kill else None,
        "timeline": timeline,
        "survivor_stats": sum_stats(probes, STAT_KEYS),
        "exit_codes": codes,
        "package_imported_from": sorted({p.get("package", "?") for p in probes if p}),
        "killed": victim,
        "killed_share_of_last_200_rows": recent,
        "finish_reasons": {n: (p or {}).get("reason") for n, p in zip(survivors, probes)},
        "timed_out": timed_out,
        "workdir": str(workdir) if kept else None,
    }
    if not kept:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pages", type=int, default=5000, help="articles on the site (pages = articles + list pages + 4)"
    )
    parser.add_argument("--runs", type=int, default=2, help="runs per side, alternating A B A B")
    parser.add_argument("--kill-at", type=float, default=0.3, help="fraction of pages stored at the kill")
    parser.add_argument("--timeout", type=float, default=240.0, help="max seconds per crawl")
    parser.add_argument("--sides", default=",".join(SIDES), help="comma-separated subset of: " + ", ".join(SIDES))
    parser.add_argument(
        "--code", metavar="REF", help="measure a snapshot of this commit (e.g. HEAD) instead of the working tree"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--keep", metavar="DIR", help="keep logs, probes and SQLite files under DIR")
    args = parser.parse_args(argv)

    children = Children()
    args.code_root, code_before = prepare_code(args.code)
    load_before = os.getloadavg()
    runs: list[dict[str, Any]] = []
    started = time.time()
    try:
        for run_no in range(1, args.runs + 1):
            for side in [s for s in SIDES if s in args.sides.split(",")]:
                log(f"run {run_no}/{args.runs}: {side}")
                r = run_once(children, side, args, run_no)
                log(
                    f"  {side}: {r['pages_stored']}/{r['pages_expected']} stored, {r['pages_lost']} lost, "
                    f"{r['duplicate_fetches']} duplicate fetches, last page {r['seconds_kill_to_last_page']}s after kill"
                )
                runs.append(r)
    finally:
        children.kill_all()
    summary = {
        side: {
            "median_pages_lost": median([r["pages_lost"] for r in runs if r["side"] == side]),
            "median_duplicate_fetches": median([r["duplicate_fetches"] for r in runs if r["side"] == side]),
            "max_pages_lost": max((r["pages_lost"] for r in runs if r["side"] == side), default=None),
        }
        for side in SIDES
    }
    report = {
        "benchmark": "kill9",
        "pages_arg": args.pages,
        "workers": 2,
        "kill_at": args.kill_at,
        "cpus": os.cpu_count(),
        "code_at_start": code_before,
        "code_at_end": code_before if args.code else {"tree": "working tree", **git_state()},
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "duration_s": round(time.time() - started, 1),
        "runs": runs,
        "summary": summary,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for r in runs:
            print(
                f"{r['side']:>12} run {r['run']}: stored {r['pages_stored']}/{r['pages_expected']} "
                f"lost {r['pages_lost']} duplicate fetches {r['duplicate_fetches']}"
            )
        print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
