"""End-to-end throughput and Redis round trips: ours vs scrapy-redis 0.9.1, plain Scrapy and another git ref, same run.

Why: the issue asks whether leases, renewals and acks cost throughput. Absolute timings on a shared
2-core machine are noise, so both sides run alternately (A B A B ...) in one invocation, each run on
a fresh private redis-server and a fresh site process, and the report gives every run, the medians
and the ratio ours/scrapy-redis.

Per run: start redis-server and the site (5,000 articles -> 5,254 pages), start N workers, wait
until each logged "Spider opened", snapshot `INFO commandstats`, seed `news:start_urls`, then poll
the SQLite row count every 0.1 s. The crawl ends at the last row-count change once all expected pages
are stored (or after 10 s without a new row); then the harness stops the workers with SIGTERM.

Measured per run:
* pages stored, wall time seed -> last page stored, pages/s;
* pickup: seed -> first request on the site (scrapy-redis reads seeds only on its 5 s idle
  heartbeat), and pages/s from that first request, which leaves the pickup out;
* Redis commands per page: `INFO commandstats` delta (seed -> end, INFO excluded). Commands a Lua
  script runs count too, as do MULTI/EXEC and each command of a pipeline; EVALSHA/EVAL separately;
  the summary gives them per command and page for each side, and ours minus each other side;
* Redis round trips per page and per scheduled request: socket writes of redis-py in the workers
  (bench/probe.py), between the same two instants;
* fetches and duplicate fetches from the site's own hit counts.

Sides (`--sides`, run alternately in each round):
* `ours`: this working tree (or `--code REF`), N workers;
* `scrapy-redis`: scrapy-redis 0.9.1's scheduler and dupefilter, same spider and pipeline, N workers;
* `plain`: plain Scrapy in ONE process (memory scheduler, RFPDupeFilter with our canonical
  fingerprinter, same spider, robots.txt middleware and pipeline; bench/plain_scrapy_project): what
  one node of ours costs over Scrapy alone, so compare it with `--workers 1`;
* `ref`: our code at `--ref GIT_REF` (e.g. `main`, `HEAD~3`): a `git archive` snapshot of that commit
  in a temp dir (this bench/ copied in), N workers, so "today's main" is measured in the same run.

Usage: .venv/bin/python bench/e2e.py --pages 5000 --workers 2 --runs 2 --json
       .venv/bin/python bench/e2e.py --workers 1 --sides ours,plain,ref --ref HEAD~1 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.harness import (
    SEED_KEY,
    Children,
    StoredCounter,
    Workers,
    WorkerSpec,
    commandstats,
    cpu_delta,
    cpu_snapshot,
    fetch_accounting,
    git_state,
    log,
    make_workdir,
    median,
    prepare_code,
    probe_delta,
    site_state,
    start_redis,
    start_site,
    stats_delta,
    sum_stats,
)

# No idle-close here (0 = run forever on both sides): the harness stops the workers (SIGTERM,
# Scrapy's graceful stop) once the crawl is over. scrapy-redis's idle-close counts from the moment
# the process imported its spider (a class attribute), so a worker that found the queue empty for
# a while quits mid-crawl; that would make its side a one-worker crawl, which is not what this
# benchmark compares. Idle-close is exercised by bench/kill9.py.
SIDES = ("ours", "scrapy-redis", "plain", "ref")
IDLE_CLOSE = 0.0
STALL_SECONDS = 10.0  # no new row for this long and the crawl counts as over (pages were lost)
STAT_KEYS = [
    "downloader/request_count",
    "downloader/response_count",
    "item_scraped_count",
    "storage/committed",
    "scheduler/enqueued/redis",
    "scheduler/dequeued/redis",
    "dupefilter/filtered",
    "retry/count",
    "scheduler/leased",
    "scheduler/lease_empty",
    "scheduler/doorbell_stale",
    "scheduler/acked",
    "scheduler/reclaimed",
    "scheduler/quarantined",
    "log_count/ERROR",
    "log_count/WARNING",
]


def run_once(children: Children, side: str, args: argparse.Namespace, run_no: int) -> dict[str, Any]:
    workdir, kept = make_workdir(args.keep, f"e2e-{run_no}-{side}")
    load_at_start = os.getloadavg()[0]
    redis_proc, redis_url = start_redis(children, workdir)
    site_proc, site_url = start_site(children, args.pages, workdir, args.per_page, args.code_root)
    db = workdir / "items.db"
    settings = {"ours": args.ours_set, "ref": args.ref_set}.get(side, [])
    extra = dict(kv.split("=", 1) for kv in settings)
    code_root = args.ref_root if side == "ref" else args.code_root
    spec = WorkerSpec(side, redis_url, f"sqlite:///{db}", IDLE_CLOSE, workdir, extra, code_root)
    workers = Workers(children, spec)
    client = redis.Redis.from_url(redis_url, socket_timeout=10)
    counter = StoredCounter(db)
    try:
        expected = set(site_state(site_url)["expected"])
        client.flushall()
        nodes = [f"w{i}" for i in range(1, (1 if side == "plain" else args.workers) + 1)]
        for node in nodes:
            workers.start(node)
        workers.wait_ready(nodes)
        time.sleep(0.5)

        procs = {**workers.procs, "site": site_proc, "redis-server": redis_proc}
        before = commandstats(client)
        cpu_before = cpu_snapshot(procs)
        t0 = time.time()
        client.lpush(SEED_KEY, json.dumps({"url": site_url + "/"}))
        after, cpu_after, last_count, t_last = before, cpu_before, 0, t0
        timed_out = False
        while True:
            time.sleep(0.1)
            n = counter.count()
            if n != last_count:
                # Taken at each change, so the last ones are "at the end", not after idle-close.
                last_count, t_last = n, time.time()
                after = commandstats(client)
                cpu_after = cpu_snapshot(procs)
            if n >= len(expected) or not workers.alive():
                break
            if time.time() - t_last > STALL_SECONDS and n:
                log(f"{side}: no new page for {STALL_SECONDS:.0f}s; {len(expected) - n} pages missing")
                break
            if time.time() - t0 > args.timeout:
                timed_out = True
                log(f"{side}: crawl not finished after {args.timeout}s ({n} pages stored)")
                break
        codes = workers.wait_exit(timeout=0)  # SIGTERM now, SIGKILL after 20 s
        state = site_state(site_url)
    finally:
        client.close()
        counter.close()
        children.stop(site_proc)
        children.stop(redis_proc)

    stored_urls = StoredCounter(db).urls()
    probes = [workers.probe(n) for n in workers.procs]
    rt = probe_delta(probes, t0, t_last, column=1)
    blocked = probe_delta(probes, t0, t_last, column=2)
    cpu = cpu_delta(cpu_before, cpu_after)
    seconds = t_last - t0
    pages = len(stored_urls & expected)
    worker_cpu = [v for k, v in cpu.items() if k in workers.procs and v is not None]
    machine_busy = cpu.pop("machine_busy", None)
    ours_total = sum(v for v in cpu.values() if v)
    # CPU that other programs used meanwhile (a worker that exited early counts here too).
    foreign = round(machine_busy - ours_total, 2) if machine_busy is not None else None
    delta, _ = stats_delta(before, after)
    delta["lpush"] = delta.get("lpush", 0) - 1  # the harness's seed
    delta = {k: v for k, v in delta.items() if v}
    commands = sum(delta.values())
    wstats = sum_stats(probes, STAT_KEYS)
    kinds: Counter[str] = Counter()
    for p in probes:
        kinds.update((p or {}).get("round_trips_by_kind", {}))
    dequeued = wstats["scheduler/dequeued/redis"] or None
    first_hit = state["first_hit"]
    crawl_seconds = (t_last - first_hit) if first_hit else None
    result = {
        "side": side,
        "run": run_no,
        "workers": len(nodes),
        "pages_expected": len(expected),
        "pages_stored": pages,
        "pages_lost": len(expected - stored_urls),
        "unexpected_rows": len(stored_urls - expected),
        "seconds": round(seconds, 2),
        "pages_per_s": round(pages / seconds, 1) if seconds > 0 else None,
        "pickup_seconds": round(first_hit - t0, 2) if first_hit else None,
        "pages_per_s_from_first_fetch": round(pages / crawl_seconds, 1) if crawl_seconds else None,
        "redis_commands": commands,
        "redis_commands_per_page": round(commands / pages, 2) if pages else None,
        # From /proc, not commandstats' usec: a script's usec already includes its inner commands.
        "redis_server_cpu_us_per_page": round(1e6 * cpu["redis-server"] / pages, 1)
        if pages and cpu.get("redis-server") is not None
        else None,
        "evalsha": delta.get("evalsha", 0),
        "eval": delta.get("eval", 0),
        "round_trips": round(rt),
        "round_trips_per_page": round(rt / pages, 3) if pages else None,
        "round_trips_per_dequeued_request": round(rt / dequeued, 3) if dequeued else None,
        # whole worker lives (start-up and the idle tail too), so they add up to more than round_trips
        "round_trips_by_kind_per_page": {k: round(v / pages, 3) for k, v in kinds.most_common(12)} if pages else {},
        "worker_seconds_blocked_in_sync_redis_calls": round(blocked, 2),
        "cpu_seconds": cpu,
        "worker_cpu_ms_per_page": round(1000 * sum(worker_cpu) / pages, 2) if pages and worker_cpu else None,
        "cpu_busy_fraction_of_all_cores": round(ours_total / (seconds * (os.cpu_count() or 1)), 2)
        if seconds > 0
        else None,
        "other_programs_cpu_fraction_of_all_cores": round(foreign / (seconds * (os.cpu_count() or 1)), 2)
        if seconds > 0 and foreign is not None
        else None,
        "loadavg_1m_at_start": round(load_at_start, 2),
        "commandstats": delta,
        "fetch": fetch_accounting(state),
        "worker_stats": wstats,
        "exit_codes": codes,
        "finish_reasons": [p["reason"] if p else None for p in probes],
        "package_imported_from": sorted({p.get("package", "?") for p in probes if p}),
        "timed_out": timed_out,
        "workdir": str(workdir) if kept else None,
    }
    if not kept:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def ratios(runs: list[dict[str, Any]], out: dict[str, Any], other: str) -> dict[str, Any]:
    """Ours over `other`: ratio of the medians, and of each pair of runs of the same round."""
    ours, theirs = out["ours"], out[other]

    def ratio(key: str) -> float | None:
        a, b = ours.get(key), theirs.get(key)
        return round(a / b, 3) if a and b else None

    # Run i of one side and run i of the other ran back to back: on a shared machine their ratio
    # is less exposed to load from other programs than the ratio of the medians.
    pairs = [
        (a["pages_per_s"], b["pages_per_s"])
        for a in runs
        if a["side"] == "ours"
        for b in runs
        if b["side"] == other and b["run"] == a["run"]
    ]
    pairwise = [round(a / b, 3) for a, b in pairs if a and b]
    return {
        "pages_per_s": ratio("median_pages_per_s"),
        "pages_per_s_from_first_fetch": ratio("median_pages_per_s_from_first_fetch"),
        "round_trips_per_page": ratio("median_round_trips_per_page"),
        "worker_cpu_ms_per_page": ratio("median_worker_cpu_ms_per_page"),
        "pages_per_s_pairwise": pairwise,
        "pages_per_s_pairwise_median": median(pairwise),
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [
        "pages_stored",
        "seconds",
        "pages_per_s",
        "pickup_seconds",
        "pages_per_s_from_first_fetch",
        "redis_commands_per_page",
        "round_trips_per_page",
        "round_trips_per_dequeued_request",
        "redis_server_cpu_us_per_page",
        "worker_cpu_ms_per_page",
        "worker_seconds_blocked_in_sync_redis_calls",
    ]
    out: dict[str, Any] = {}
    for side in SIDES:
        mine = [r for r in runs if r["side"] == side]
        if not mine:
            continue
        out[side] = {f"median_{k}": median([r[k] for r in mine]) for k in keys}
        out[side]["evalsha_per_page"] = median([r["evalsha"] / r["pages_stored"] for r in mine if r["pages_stored"]])
        out[side]["commands_per_page_by_command"] = by_command(mine)
    for other in SIDES[1:]:
        if out.get("ours") and out.get(other):
            out[f"ratio_ours_over_{other.replace('-', '_')}"] = ratios(runs, out, other)
            # which commands make a difference in commands per page (inside scripts too)
            mine, theirs = out["ours"]["commands_per_page_by_command"], out[other]["commands_per_page_by_command"]
            diff = {k: round(mine.get(k, 0) - theirs.get(k, 0), 2) for k in {*mine, *theirs}}
            out[f"commands_per_page_ours_minus_{other.replace('-', '_')}"] = {
                k: v for k, v in sorted(diff.items(), key=lambda kv: -abs(kv[1])) if v
            }
    return out


def by_command(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Median calls per stored page of each command (the INFO commandstats delta), most first;
    commands under 0.01 per page are left out."""
    names = {k for r in runs for k in r["commandstats"]}
    per_page = {
        k: median([r["commandstats"].get(k, 0) / r["pages_stored"] for r in runs if r["pages_stored"]]) or 0
        for k in names
    }
    return {k: round(v, 2) for k, v in sorted(per_page.items(), key=lambda kv: -kv[1]) if v >= 0.01}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pages", type=int, default=5000, help="articles on the site (pages = articles + list pages + 4)"
    )
    parser.add_argument(
        "--per-page",
        type=int,
        default=20,
        help="articles per list page: 20 = narrow crawl frontier (the spec), 250 = wide",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=2, help="runs per side, alternating A B A B")
    parser.add_argument("--timeout", type=float, default=180.0, help="max seconds per crawl")
    parser.add_argument(
        "--sides",
        default="ours,scrapy-redis,plain",
        help="comma-separated subset of: " + ", ".join(SIDES) + " (ref is added when --ref is given)",
    )
    parser.add_argument("--ref", metavar="GIT_REF", help="also run side `ref`: our code at this commit (e.g. main)")
    parser.add_argument(
        "--ours-set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="extra Scrapy setting for our workers only, e.g. "
        "DUPEFILTER_CLASS=distributed_crawler.dedup.dupefilter.RedisSetDupeFilter",
    )
    parser.add_argument(
        "--ref-set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="extra Scrapy setting for the ref side's workers only (e.g. FRONTIER_SHARDS=6, as --ours-set)",
    )
    parser.add_argument(
        "--code", metavar="REF", help="measure a snapshot of this commit (e.g. HEAD) instead of the working tree"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--keep", metavar="DIR", help="keep logs, probes and SQLite files under DIR")
    args = parser.parse_args(argv)

    children = Children()
    args.code_root, code_before = prepare_code(args.code)
    sides = [s for s in SIDES if s in args.sides.split(",") or (s == "ref" and args.ref)]
    if "ref" in sides and not args.ref:
        raise SystemExit("side ref needs --ref GIT_REF (e.g. --ref main)")
    args.ref_root, ref_code = prepare_code(args.ref) if args.ref else (None, None)
    load_before = os.getloadavg()
    runs: list[dict[str, Any]] = []
    started = time.time()
    try:
        for run_no in range(1, args.runs + 1):
            for side in sides:
                log(f"run {run_no}/{args.runs}: {side}")
                result = run_once(children, side, args, run_no)
                log(
                    f"  {side}: {result['pages_stored']}/{result['pages_expected']} pages in "
                    f"{result['seconds']}s = {result['pages_per_s']} pages/s; "
                    f"{result['round_trips_per_page']} round trips/page; "
                    f"{result['redis_commands_per_page']} commands/page"
                )
                runs.append(result)
    finally:
        children.kill_all()
    report = {
        "benchmark": "e2e",
        "pages_arg": args.pages,
        "per_page": args.per_page,
        "ours_extra_settings": args.ours_set,
        "ref_extra_settings": args.ref_set,
        "workers": args.workers,
        "concurrent_requests": 32,
        "cpus": os.cpu_count(),
        "code_at_start": code_before,
        "ref_code": ref_code,
        "code_at_end": code_before if args.code else {"tree": "working tree", **git_state()},
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "duration_s": round(time.time() - started, 1),
        "runs": runs,
        "summary": summarize(runs),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for r in runs:
            print(
                f"{r['side']:>12} run {r['run']}: {r['pages_stored']:5d} pages {r['seconds']:6.2f}s "
                f"{r['pages_per_s']:7.1f} p/s  rt/page {r['round_trips_per_page']}  "
                f"cmds/page {r['redis_commands_per_page']}"
            )
        print(json.dumps(report["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
