"""A wide crawl: many hosts of a few pages each, default politeness, ours vs plain Scrapy in one run.

Why: a news crawl touches tens of thousands of sites with a handful of pages each, so what a worker
keeps per host (robots.txt parsers, downloader slots, DNS and cookie caches, connections) and what
each new host costs in Redis round trips decide its memory and speed, not the per-page path that
bench/e2e.py measures on one big site.

Shape (per `--hosts` N): bench/hosts_site.py serves hosts h<i>.bench.test (resolved to 127.0.0.1 by
bench/loopback_resolver.py, through Scrapy's DNS cache), each a home page linking
`--pages-per-host` - 1 articles, robots.txt allowing everything, every answer `--delay` (50 ms)
late, idle keep-alive connections closed after 5 s. Every host's home page is seeded at once.

Sides, run alternately in each round, each on a fresh redis-server and a fresh site process:
* `ours`: `--workers` (2) workers of this tree, default politeness (DOMAIN_RATE_LIMIT 1 request/s
  and DOMAIN_MAX_IN_FLIGHT 2 per host across all nodes), CONCURRENT_REQUESTS 32 each;
* `plain`: plain Scrapy in ONE process (bench/plain_scrapy_project: memory scheduler, the same
  parse and storage, Scrapy's own robots.txt middleware) with the same politeness per host:
  DOWNLOAD_DELAY 1 s (no jitter), CONCURRENT_REQUESTS_PER_DOMAIN 2, and CONCURRENT_REQUESTS =
  32 x workers (64).

Measured per run, from the seed to the last page stored (or to `--timeout`, pages stored by then):
pages/s; worker CPU ms per page (/proc); Redis round trips per page (socket writes of redis-py in
the workers, bench/probe.py; ours only); Redis CPU per page (the redis-server process's CPU, ours
only: plain Scrapy reads its seeds from Redis and nothing else); peak RSS per worker (VmHWM from
/proc just before the workers are stopped) and RSS samples along the crawl; the leases the workers
hold (`{news}:processing`) along the crawl; robots.txt fetches per host (the site's counts).

Usage: .venv/bin/python bench/wide.py --hosts 2000 --runs 2 --json
       .venv/bin/python bench/wide.py --hosts 10000 --timeout 420
       .venv/bin/python bench/wide.py --hosts 100000 --pages-per-host 2 --sides ours --timeout 1200
       (100,000 hosts x 6 pages is ~600,000 pages: hours of this 2-core machine; fewer pages per host
       keep every host's per-host state while costing less, and say so in the output)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.cluster import start_hosts_site
from bench.harness import (
    SEED_KEY,
    Children,
    StoredCounter,
    Workers,
    WorkerSpec,
    cpu_delta,
    cpu_snapshot,
    git_state,
    log,
    make_workdir,
    median,
    prepare_code,
    probe_delta,
    start_redis,
)

SIDES = ("ours", "plain")
STALL_SECONDS = 30.0  # no new row for this long: the crawl is over (pages lost or refused)
RSS_EVERY = 2.0  # seconds between two RSS samples of each worker
CONCURRENT_PER_WORKER = 32
LEASES_KEY = "{news}:processing"


def proc_memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a live process in kB, {} once it is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0])
    return out


def hosts_state(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/__bench__/state", timeout=30) as resp:
        return json.load(resp)


def side_settings(side: str, args: argparse.Namespace) -> dict[str, str]:
    """The settings that make the shape (DNS, politeness, concurrency) the same on both sides."""
    common = {
        "DNS_RESOLVER": "bench.loopback_resolver.LoopbackResolver",
        "CONCURRENT_REQUESTS": str(CONCURRENT_PER_WORKER),
        "DOWNLOAD_TIMEOUT": "30",
    }
    if side == "plain":
        return {
            **common,
            "CONCURRENT_REQUESTS": str(CONCURRENT_PER_WORKER * args.workers),
            "CONCURRENT_REQUESTS_PER_DOMAIN": "2",
            "DOWNLOAD_DELAY": "1",
            "RANDOMIZE_DOWNLOAD_DELAY": "False",
            # Scrapy's own robots.txt middleware (the project's setting swaps in ours, which would
            # share robots.txt through Redis: not plain Scrapy)
            "DOWNLOADER_MIDDLEWARES": "{}",
        }
    return {
        **common,
        # the defaults (defaults.py), which the harness lifts for its one-site benches
        "DOMAIN_RATE_LIMIT": "1",
        "DOMAIN_MAX_IN_FLIGHT": "2",
        **dict(kv.split("=", 1) for kv in args.ours_set),
    }


def run_once(children: Children, side: str, args: argparse.Namespace, run_no: int) -> dict[str, Any]:
    workdir, kept = make_workdir(args.keep, f"wide-{run_no}-{side}-{args.hosts}")
    load_at_start = os.getloadavg()[0]
    redis_proc, redis_url = start_redis(children, workdir)
    site_proc, port = start_hosts_site(children, args.pages_per_host - 1, workdir, args.code_root, args.delay)
    db = workdir / "items.db"
    spec = WorkerSpec(side, redis_url, f"sqlite:///{db}", 0.0, workdir, side_settings(side, args), args.code_root)
    workers = Workers(children, spec)
    client = redis.Redis.from_url(redis_url, socket_timeout=30)
    counter = StoredCounter(db)
    expected = args.hosts * args.pages_per_host
    rss: dict[str, list[tuple[float, int, int]]] = {}
    peak: dict[str, int] = {}
    leased: list[tuple[float, int, int]] = []
    try:
        nodes = [f"w{i}" for i in range(1, (1 if side == "plain" else args.workers) + 1)]
        for node in nodes:
            workers.start(node)
        workers.wait_ready(nodes)
        time.sleep(0.5)
        procs = {**workers.procs, "site": site_proc, "redis-server": redis_proc}
        cpu_before = cpu_snapshot(procs)
        seeds = [json.dumps({"url": f"http://h{i}.bench.test:{port}/"}) for i in range(args.hosts)]
        t0 = time.time()
        with client.pipeline(transaction=True) as pipe:  # all at once: plain Scrapy drains them in one go
            for i in range(0, len(seeds), 1000):
                pipe.lpush(SEED_KEY, *seeds[i : i + 1000])
            pipe.execute()
        cpu_after, last_count, t_last, next_rss = cpu_before, 0, t0, 0.0
        timed_out = False
        while True:
            time.sleep(0.2)
            now = time.time()
            n = counter.count()
            if n != last_count:
                last_count, t_last = n, now
                cpu_after = cpu_snapshot(procs)
            if now >= next_rss:
                next_rss = now + RSS_EVERY
                if side == "ours":  # leases held: work the workers took and have not finished
                    leased.append((round(now - t0, 1), n, int(client.zcard(LEASES_KEY))))
                for node, proc in workers.procs.items():
                    mem = proc_memory(proc.pid)
                    if mem:
                        rss.setdefault(node, []).append((round(now - t0, 1), n, mem["VmRSS"]))
                        peak[node] = max(peak.get(node, 0), mem["VmHWM"])
            if n >= expected or not workers.alive():
                break
            if now - t_last > STALL_SECONDS and n:
                log(f"{side}: no new page for {STALL_SECONDS:.0f}s; {expected - n} pages missing")
                break
            if now - t0 > args.timeout:
                timed_out = True
                t_last = now
                cpu_after = cpu_snapshot(procs)
                log(f"{side}: {n} of {expected} pages after the {args.timeout:.0f}s cap")
                break
        for node, proc in workers.procs.items():
            mem = proc_memory(proc.pid)
            if mem:
                peak[node] = max(peak.get(node, 0), mem["VmHWM"])
                rss.setdefault(node, []).append((round(time.time() - t0, 1), last_count, mem["VmRSS"]))
        state = hosts_state(port)
        codes = workers.wait_exit(timeout=0)
    finally:
        client.close()
        counter.close()
        children.stop(site_proc)
        children.stop(redis_proc)

    probes = [workers.probe(n) for n in workers.procs]
    rt = probe_delta(probes, t0, t_last) if side == "ours" else None
    cpu = cpu_delta(cpu_before, cpu_after)
    seconds = t_last - t0
    pages = last_count
    worker_cpu = sum(v or 0 for k, v in cpu.items() if k in workers.procs)
    redis_cpu = cpu.get("redis-server")
    machine_busy = cpu.pop("machine_busy", None)
    ours_total = sum(v for v in cpu.values() if v)
    kinds: dict[str, float] = {}
    for p in probes:
        for k, v in ((p or {}).get("round_trips_by_kind") or {}).items():
            kinds[k] = kinds.get(k, 0) + v
    result = {
        "side": side,
        "run": run_no,
        "hosts": args.hosts,
        "pages_per_host": args.pages_per_host,
        "workers": len(workers.procs),
        "pages_expected": expected,
        "pages_stored": pages,
        "timed_out": timed_out,
        "seconds": round(seconds, 1),
        "pages_per_s": round(pages / seconds, 1) if seconds > 0 and pages else None,
        "worker_cpu_ms_per_page": round(1000 * worker_cpu / pages, 2) if pages else None,
        "round_trips_per_page": round(rt / pages, 3) if rt is not None and pages else None,
        "redis_cpu_us_per_page": round(1e6 * redis_cpu / pages, 1)
        if side == "ours" and pages and redis_cpu is not None
        else None,
        "peak_rss_mb_per_worker": {n: round(kb / 1024, 1) for n, kb in sorted(peak.items())},
        "max_peak_rss_mb": round(max(peak.values()) / 1024, 1) if peak else None,
        "rss_samples": {n: s[:: max(1, len(s) // 40)] + s[-1:] for n, s in rss.items()},  # (s, pages, kB)
        "leases_samples": leased[:: max(1, len(leased) // 40)] + leased[-1:],  # (s, pages, leases held)
        "max_leases_held": max((x[2] for x in leased), default=None),
        "robots_fetches": state.get("robots"),
        "hosts_with_robots_fetched": state.get("robots_hosts"),
        "site_pages_served": state.get("pages"),
        "round_trips_by_kind_per_page_whole_life": {
            k: round(v / pages, 3) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])[:10]
        }
        if pages and kinds
        else {},
        "cpu_seconds": cpu,
        "other_programs_cpu_fraction_of_all_cores": round(
            (machine_busy - ours_total) / (seconds * (os.cpu_count() or 1)), 2
        )
        if machine_busy is not None and seconds > 0
        else None,
        "loadavg_1m_at_start": round(load_at_start, 2),
        "exit_codes": codes,
        "workdir": str(workdir) if kept else None,
    }
    if not kept:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [
        "pages_stored",
        "seconds",
        "pages_per_s",
        "worker_cpu_ms_per_page",
        "round_trips_per_page",
        "redis_cpu_us_per_page",
        "max_peak_rss_mb",
    ]
    out: dict[str, Any] = {}
    for side in SIDES:
        mine = [r for r in runs if r["side"] == side]
        if mine:
            out[side] = {f"median_{k}": median([r[k] for r in mine]) for k in keys}
            out[side]["peak_rss_mb_per_worker"] = [r["peak_rss_mb_per_worker"] for r in mine]
    if out.get("ours") and out.get("plain"):
        pairs = [
            round(a["pages_per_s"] / b["pages_per_s"], 2)
            for a in runs
            for b in runs
            if a["side"] == "ours" and b["side"] == "plain" and a["run"] == b["run"]
            if a["pages_per_s"] and b["pages_per_s"]
        ]
        out["pages_per_s_ours_over_plain_pairwise"] = pairs
        out["pages_per_s_ours_over_plain_median"] = median(pairs)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--pages-per-host", type=int, default=6, help="home page + this - 1 articles")
    parser.add_argument("--delay", type=float, default=0.05, help="seconds the site takes per answer")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1, help="runs per side, alternating")
    parser.add_argument("--sides", default="ours,plain", help="comma-separated subset of: " + ", ".join(SIDES))
    parser.add_argument("--timeout", type=float, default=600.0, help="cap per crawl: pages/s is taken at the cap")
    parser.add_argument(
        "--ours-set", metavar="KEY=VALUE", action="append", default=[], help="extra Scrapy setting for our workers"
    )
    parser.add_argument("--code", metavar="REF", help="measure a snapshot of this commit instead of the working tree")
    parser.add_argument("--json", action="store_true", help="print every run, not only the summary")
    parser.add_argument("--keep", metavar="DIR", help="keep logs, probes and SQLite files under DIR")
    args = parser.parse_args(argv)
    if args.pages_per_host < 1:
        raise SystemExit(f"--pages-per-host ({args.pages_per_host}) must be >= 1 (1 = the home page only)")
    sides = [s for s in SIDES if s in args.sides.split(",")]
    args.code_root, code = prepare_code(args.code)
    children = Children()
    load_before = os.getloadavg()[0]
    started = time.time()
    runs: list[dict[str, Any]] = []
    try:
        for run_no in range(1, args.runs + 1):
            for side in sides:
                log(f"run {run_no}/{args.runs}: {side}, {args.hosts} hosts x {args.pages_per_host} pages")
                r = run_once(children, side, args, run_no)
                log(
                    f"  {side}: {r['pages_stored']}/{r['pages_expected']} pages in {r['seconds']}s ="
                    f" {r['pages_per_s']} pages/s; {r['worker_cpu_ms_per_page']} CPU ms/page;"
                    f" {r['round_trips_per_page']} round trips/page; {r['redis_cpu_us_per_page']} Redis µs/page;"
                    f" peak RSS {r['peak_rss_mb_per_worker']} MB"
                )
                runs.append(r)
    finally:
        children.kill_all()
    report = {
        "benchmark": "wide",
        "hosts": args.hosts,
        "pages_per_host": args.pages_per_host,
        "delay_s": args.delay,
        "workers": args.workers,
        "ours_extra_settings": args.ours_set,
        "cpus": os.cpu_count(),
        "code": code if args.code else {"tree": "working tree", **git_state()},
        "loadavg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "duration_s": round(time.time() - started, 1),
        "summary": summarize(runs),
        "runs": runs if args.json else [{k: v for k, v in r.items() if k != "rss_samples"} for r in runs],
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
