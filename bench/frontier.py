"""The per-host frontier under load: a slow site beside a fast one, and many hosts vs one.

Two cases, each run alternately (A B A B ...) in one invocation, every run on a fresh private
redis-server, fresh site process(es) bound on loopback addresses (127.0.0.x, never 0.0.0.0) and
fresh `scrapy crawl news` workers of this working tree (bench/harness.py):

* `two-host`: the fast site (127.0.0.3, 600 articles) crawled ALONE, vs the same fast site crawled
  BESIDE a slow one (127.0.0.2, 600 articles, `DOMAIN_RATE_LIMITS = {"127.0.0.2": 2}`) whose pages
  are all queued first (seeded before the fast site's home page). One worker. Reported: the fast
  site's pages/s both ways (seed -> last fast page stored) and their ratio, and the slow site's
  observed request rate (site-side timestamps) while the fast one was crawled.
* `many-hosts`: 200 hosts x 25 pages (one site on each of 127.0.0.2 ... 127.0.0.201, all in one
  site process, 200 seeds) vs ONE host with the same 5,000 pages (1 seed). `--workers` workers.
  Reported: pages/s of both and the ratio many/one.

Usage: .venv/bin/python bench/frontier.py --case two-host --runs 2 --json
       .venv/bin/python bench/frontier.py --case many-hosts --runs 2 --workers 2 --json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.harness import (
    PYTHON,
    ROOT,
    SEED_KEY,
    Children,
    Workers,
    WorkerSpec,
    log,
    make_workdir,
    median,
    prepare_code,
    start_redis,
)

CODE_ROOT = [ROOT]  # --code REF: a snapshot of that commit (bench/harness.py prepare_code)
SLOW_RATE = 2.0  # requests/s of the slow site
PER_PAGE = 20


def pages_of(articles: int) -> int:
    """Pages a NewsSite of `articles` serves to a correct crawler: articles, lists, 4 fixed pages."""
    return articles + max(1, math.ceil(articles / PER_PAGE)) + 4


def articles_for(pages: int) -> int:
    """The article count whose site has exactly `pages` pages (or the nearest below)."""
    a = max(0, pages - 5)
    while a > 0 and pages_of(a) > pages:
        a -= 1
    return a


def start_sites(children: Children, workdir: Path, bind: str, sites: int, articles: int, name: str) -> list[str]:
    proc = children.start(
        [
            PYTHON,
            str(ROOT / "bench" / "site.py"),
            "--articles",
            str(articles),
            "--per-page",
            str(PER_PAGE),
            "--bind",
            bind,
            "--sites",
            str(sites),
            "--no-flaky",
        ],
        stdout=subprocess.PIPE,
        stderr=open(workdir / f"site-{name}.log", "wb"),
        text=True,
    )
    line = proc.stdout.readline().strip() if proc.stdout else ""
    if not line.startswith("READY "):
        raise SystemExit(f"bench site did not start: {line!r}; see {workdir / f'site-{name}.log'}")
    return line.split()[1:]


def site_state(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/__bench__/state", timeout=30) as resp:
        return json.load(resp)


def stored(db: Path, prefix: str | None = None) -> int:
    """Rows stored (of URLs starting with `prefix`)."""
    if not db.exists():
        return 0
    conn = sqlite3.connect(str(db), timeout=5)
    try:
        if prefix is None:
            return int(conn.execute("SELECT COUNT(*) FROM items").fetchone()[0])
        return int(conn.execute("SELECT COUNT(*) FROM items WHERE url LIKE ?", (prefix + "%",)).fetchone()[0])
    except sqlite3.OperationalError:  # table not created yet
        return 0
    finally:
        conn.close()


def crawl(
    children: Children,
    workdir: Path,
    workers_n: int,
    extra: dict[str, str],
    seeds: list[str],
    done: Any,
    timeout: float,
) -> dict[str, Any]:
    """Start redis + workers, seed, poll `done(db) -> bool` every 0.1 s; returns times and paths."""
    redis_proc, redis_url = start_redis(children, workdir)
    db = workdir / "items.db"
    spec = WorkerSpec("ours", redis_url, f"sqlite:///{db}", 0.0, workdir, extra, CODE_ROOT[0])
    workers = Workers(children, spec)
    client = redis.Redis.from_url(redis_url, socket_timeout=10)
    try:
        nodes = [f"w{i}" for i in range(1, workers_n + 1)]
        for node in nodes:
            workers.start(node)
        workers.wait_ready(nodes)
        time.sleep(0.5)
        t0 = time.time()
        for start in range(0, len(seeds), 500):
            client.rpush(SEED_KEY, *[json.dumps({"url": u}) for u in seeds[start : start + 500]])
        finished, t_end = False, t0
        while time.time() - t0 < timeout:
            time.sleep(0.1)
            if done(db):
                finished, t_end = True, time.time()
                break
        if not finished:
            log(f"not finished after {timeout}s")
            t_end = time.time()
        workers.wait_exit(timeout=0)
    finally:
        client.close()
        children.stop(redis_proc)
    return {"t0": t0, "t_end": t_end, "finished": finished, "db": db}


def two_host(children: Children, args: argparse.Namespace, run_no: int, beside: bool) -> dict[str, Any]:
    side = "beside-slow" if beside else "alone"
    workdir, kept = make_workdir(args.keep, f"frontier-two-{run_no}-{side}")
    slow_url, fast_url = start_sites(children, workdir, "127.0.0.2", 2, args.articles, "two")
    try:
        slow_pages = sorted(site_state(slow_url)["expected"])
        fast_total = pages_of(args.articles)
        extra = {
            "DOMAIN_RATE_LIMITS": json.dumps({"127.0.0.2": SLOW_RATE}),
            "CONCURRENT_REQUESTS": "32",
            **dict(kv.split("=", 1) for kv in args.set),
        }
        # the slow site's pages all queued first (its links reach the queue before the fast home page)
        seeds = ([*slow_pages] if beside else []) + [fast_url + "/"]
        run = crawl(
            children,
            workdir,
            1,
            extra,
            seeds,
            lambda db: stored(db, fast_url) >= fast_total,
            args.timeout,
        )
        fast_state, slow_state = site_state(fast_url), site_state(slow_url)
        fast_stored = stored(run["db"], fast_url)
        seconds = run["t_end"] - run["t0"]
        slow_hits = sum(n for p, n in slow_state["hits"].items() if p != "/robots.txt")
        slow_window = (slow_state["last_hit"] or 0) - (slow_state["first_hit"] or 0)
        result = {
            "case": "two-host",
            "side": side,
            "run": run_no,
            "fast_pages_expected": fast_total,
            "fast_pages_stored": fast_stored,
            "finished": run["finished"],
            "seconds": round(seconds, 2),
            "fast_pages_per_s": round(fast_stored / seconds, 1) if seconds > 0 else None,
            "fast_first_fetch_after_seed_s": round(fast_state["first_hit"] - run["t0"], 2)
            if fast_state["first_hit"]
            else None,
            "slow_pages_stored": stored(run["db"], slow_url),
            "slow_fetches": slow_hits,
            "slow_observed_rate_per_s": round((slow_hits - 1) / slow_window, 2)
            if beside and slow_hits > 1 and slow_window > 0
            else None,
            "slow_rate_limit_per_s": SLOW_RATE if beside else None,
        }
    finally:
        children.kill_all()
    if not kept:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def many_hosts(children: Children, args: argparse.Namespace, run_no: int, many: bool) -> dict[str, Any]:
    side = f"{args.hosts}-hosts" if many else "one-host"
    workdir, kept = make_workdir(args.keep, f"frontier-many-{run_no}-{side}")
    total = args.hosts * args.pages_per_host
    if many:
        articles = articles_for(args.pages_per_host)
        if pages_of(articles) != args.pages_per_host:
            raise SystemExit(f"--pages-per-host {args.pages_per_host}: no NewsSite has exactly that many pages")
        urls = start_sites(children, workdir, "127.0.0.2", args.hosts, articles, "many")
    else:
        articles = articles_for(total)
        urls = start_sites(children, workdir, "127.0.0.2", 1, articles, "one")
    expected = pages_of(articles) * len(urls)
    try:
        run = crawl(
            children,
            workdir,
            args.workers,
            dict(kv.split("=", 1) for kv in args.set),
            [u + "/" for u in urls],
            lambda db: stored(db) >= expected,
            args.timeout,
        )
        pages = stored(run["db"])
        seconds = run["t_end"] - run["t0"]
        result = {
            "case": "many-hosts",
            "side": side,
            "run": run_no,
            "hosts": len(urls),
            "pages_expected": expected,
            "pages_stored": pages,
            "finished": run["finished"],
            "seconds": round(seconds, 2),
            "pages_per_s": round(pages / seconds, 1) if seconds > 0 else None,
            "workers": args.workers,
        }
    finally:
        children.kill_all()
    if not kept:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def summarize(runs: list[dict[str, Any]], key: str, a: str, b: str) -> dict[str, Any]:
    """Medians of `key` per side and a/b: of the medians and of each pair of the same round."""
    med = {s: median([r[key] for r in runs if r["side"] == s]) for s in (a, b)}
    pairs = [
        round(x[key] / y[key], 3)
        for x in runs
        if x["side"] == a and x[key]
        for y in runs
        if y["side"] == b and y["run"] == x["run"] and y[key]
    ]
    return {
        f"median_{key}": med,
        "ratio": f"{a} / {b}",
        "ratio_of_medians": round(med[a] / med[b], 3) if med[a] and med[b] else None,
        "ratio_pairwise": pairs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=["two-host", "many-hosts", "both"], default="both")
    parser.add_argument("--runs", type=int, default=2, help="runs per side, alternating A B A B")
    parser.add_argument("--articles", type=int, default=600, help="two-host: articles of each site")
    parser.add_argument("--hosts", type=int, default=200, help="many-hosts: hosts (127.0.0.2 on; at most 250)")
    parser.add_argument("--pages-per-host", type=int, default=25, help="many-hosts: pages of each host")
    parser.add_argument("--workers", type=int, default=2, help="many-hosts: workers (two-host: always 1)")
    parser.add_argument("--timeout", type=float, default=300.0, help="max seconds per crawl")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], help="extra worker setting")
    parser.add_argument("--code", metavar="REF", help="run the workers on a snapshot of this commit (e.g. HEAD)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--keep", metavar="DIR", help="keep logs and SQLite files under DIR")
    args = parser.parse_args(argv)
    if not 1 <= args.hosts <= 250:
        raise SystemExit(f"--hosts ({args.hosts}) must be 1..250 (loopback addresses 127.0.0.2 on)")
    children = Children()
    CODE_ROOT[0], code = prepare_code(args.code)
    started, load_before = time.time(), os.getloadavg()[0]
    report: dict[str, Any] = {"benchmark": "frontier", "code": code, "cpus": os.cpu_count(), "args": vars(args)}
    try:
        if args.case in ("two-host", "both"):
            runs = []
            for run_no in range(1, args.runs + 1):
                for beside in (False, True):
                    log(f"two-host run {run_no}/{args.runs}: {'beside the slow site' if beside else 'alone'}")
                    r = two_host(children, args, run_no, beside)
                    log(
                        f"  fast site {r['fast_pages_stored']}/{r['fast_pages_expected']} in {r['seconds']}s = "
                        f"{r['fast_pages_per_s']} pages/s; slow site {r['slow_observed_rate_per_s']} req/s"
                    )
                    runs.append(r)
            report["two_host"] = {
                "runs": runs,
                "summary": {
                    **summarize(runs, "fast_pages_per_s", "beside-slow", "alone"),
                    "slow_observed_rate_per_s": median(
                        [r["slow_observed_rate_per_s"] for r in runs if r["side"] == "beside-slow"]
                    ),
                    "slow_rate_limit_per_s": SLOW_RATE,
                },
            }
        if args.case in ("many-hosts", "both"):
            runs = []
            many_side = f"{args.hosts}-hosts"
            for run_no in range(1, args.runs + 1):
                for many in (False, True):
                    log(f"many-hosts run {run_no}/{args.runs}: {many_side if many else 'one host'}")
                    r = many_hosts(children, args, run_no, many)
                    log(
                        f"  {r['pages_stored']}/{r['pages_expected']} pages in {r['seconds']}s = {r['pages_per_s']} p/s"
                    )
                    runs.append(r)
            report["many_hosts"] = {"runs": runs, "summary": summarize(runs, "pages_per_s", many_side, "one-host")}
    finally:
        children.kill_all()
    report["duration_s"] = round(time.time() - started, 1)
    report["loadavg_1m_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(report, indent=2 if not args.json else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
