"""One crawl over every Redis Cluster master: command share and CPU per master, pages/s.

Why: with one hash tag per spider, a crawl lives on one master however many the cluster has.
`FRONTIER_SHARDS` spreads the frontier over the masters by host; this bench measures how evenly
(each master's share of the crawl's commands, from `INFO commandstats` deltas, and its Redis CPU,
from `INFO cpu` deltas) and what it buys in pages/s, against the same cluster crawled with
`FRONTIER_SHARDS=1` (one master serves the frontier) or against a 1-master Cluster.

Per case (`--cases 6,1`: FRONTIER_SHARDS values on 3 masters; `6x3,1x1`: FRONTIER_SHARDS x
masters, 1 master = one node owning every slot; run alternately `--runs` times): a fresh local
Redis Cluster (tests/redis_topologies.py; `--replicas 1` adds a replica each), every redis-server
pinned to one CPU core with `taskset -a` (masters round-robin over the cores, replicas on the next
core) and its affinity read back with `taskset -p` (the map is in the output), a fresh
bench/hosts_site.py process serving `--hosts` hosts h<N>.bench.test (resolved to 127.0.0.1 by
bench/loopback_resolver.py) of 1 + `--links` pages each, `--workers` workers of this tree
(bench/harness.py WorkerSpec, politeness off). All hosts are seeded at once (one seed batch); once
the seed list is empty and `--warmup` seconds have passed, a `--seconds` window is measured: pages
stored, per master calls and CPU (`--monitor N`: also each master's shares over every N seconds),
round trips, and "Redis-bound pages/s": pages per CPU-second of the busiest master.

Honest limits: Redis is the bottleneck only when the workers can outrun one Redis core. On a
machine with fewer cores than masters + workers need, the masters share cores with each other and
with the workers, and the 3-vs-1 ratio says more about the machine than about the sharding. There
`--redis-cpu-quota F` holds each master to F of one core (a cgroup CFS quota, bench/cpu_quota.py),
so Redis is the bottleneck: `--cases 6x3,1x1 --redis-cpu-quota 0.05` compares 3 masters with 1.
The output records the cores, the pinning, the quotas, the workers' and masters' CPU, and the
machine's load.

Usage: .venv/bin/python bench/cluster.py --json
       .venv/bin/python bench/cluster.py --cases 6,1 --runs 2 --hosts 10000 --workers 4 --monitor 3 --json
       .venv/bin/python bench/cluster.py --cases 6x3,1x1 --runs 2 --warmup 20 --redis-cpu-quota 0.05 --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.cpu_quota import CpuQuota
from bench.harness import (
    PYTHON,
    SEED_KEY,
    Children,
    StoredCounter,
    Workers,
    WorkerSpec,
    commandstats,
    cpu_delta,
    cpu_snapshot,
    git_state,
    log,
    make_workdir,
    median,
    prepare_code,
    probe_delta,
)
from tests.redis_topologies import RedisClusterNodes

# Commands the bench itself sends (INFO, CLUSTER, PING at connect, CONFIG): not the crawl's.
HARNESS_COMMANDS = {"info", "cluster", "ping", "config", "command", "client", "hello", "readonly", "readwrite"}
SCRIPT_COMMANDS = {"evalsha", "eval", "fcall", "evalsha_ro", "eval_ro"}


def start_hosts_site(
    children: Children, links: int, workdir: Path, code_root: Path, delay: float = 0.0
) -> tuple[Any, int]:
    proc = children.start(
        [PYTHON, str(code_root / "bench" / "hosts_site.py"), "--links", str(links), "--delay", str(delay)],
        stdout=subprocess.PIPE,
        stderr=open(workdir / "site.log", "wb"),
        text=True,
    )
    line = proc.stdout.readline().strip() if proc.stdout else ""
    if not line.startswith("READY "):
        raise SystemExit(f"hosts site did not start: {line!r}; see {workdir / 'site.log'}")
    return proc, int(line.split()[1])


def pin_nodes(nodes: RedisClusterNodes, cpus: int) -> dict[str, Any]:
    """Masters round-robin over the cores, each replica on the core after its master's: {port: core}."""
    masters = nodes.master_ports()
    pinned: dict[int, int] = {}
    for i, port in enumerate(masters):
        pinned[port] = i % cpus
    for i, port in enumerate(p for p in nodes.ports if p not in masters):
        pinned[port] = (i + 1) % cpus
    for port, cpu in pinned.items():
        nodes.pin(port, cpu)
    return {
        "masters": {str(p): pinned[p] for p in masters},
        "replicas": {str(p): c for p, c in pinned.items() if p not in masters},
        "taskset_p": {str(p): affinity(nodes.procs[nodes.ports.index(p)].pid) for p in pinned},
    }


def affinity(pid: int) -> str:
    """What the kernel says: `taskset -p <pid>` (the mask) and `taskset -cp <pid>` (the core list)."""
    out = [
        subprocess.run(["taskset", flag, str(pid)], capture_output=True, text=True, timeout=10).stdout.strip()
        for flag in ("-p", "-cp")
    ]
    return "; ".join(out)


def master_snapshot(ports: list[int]) -> dict[int, dict[str, Any]]:
    """Per master: commandstats and Redis's own CPU seconds (INFO cpu, main thread and children)."""
    snap = {}
    for port in ports:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
        try:
            cpu = client.info("cpu")
            snap[port] = {
                "commands": commandstats(client),
                "cpu": float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
            }
        finally:
            client.close()
    return snap


def per_master(before: dict[int, dict[str, Any]], after: dict[int, dict[str, Any]]) -> dict[str, Any]:
    rows = {}
    for port in after:
        calls = {
            name: after[port]["commands"][name][0] - before[port]["commands"].get(name, (0, 0))[0]
            for name in after[port]["commands"]
            if name not in HARNESS_COMMANDS
        }
        rows[port] = {
            "commands": sum(calls.values()),
            "scripts": sum(v for k, v in calls.items() if k in SCRIPT_COMMANDS),
            "redis_cpu_s": round(after[port]["cpu"] - before[port]["cpu"], 2),
            "top_commands": dict(sorted(((k, v) for k, v in calls.items() if v), key=lambda kv: -kv[1])[:6]),
        }
    totals = {k: sum(r[k] for r in rows.values()) for k in ("commands", "scripts", "redis_cpu_s")}
    for row in rows.values():
        for k, total in totals.items():
            row[f"{k}_share"] = round(row[k] / total, 3) if total else None
    return {"per_master": {str(p): r for p, r in rows.items()}, "totals": totals}


def parse_cases(text: str) -> list[tuple[int, int]]:
    """`6,1` (FRONTIER_SHARDS on 3 masters) or `6x3,1x1` (FRONTIER_SHARDS x masters)."""
    cases = []
    for case in text.split(","):
        shards, _, masters = case.strip().partition("x")
        cases.append((int(shards), int(masters or 3)))
    return cases


def label(shards: int, masters: int) -> str:
    return f"{shards}x{masters}"


def sample_window(masters: list[int], seconds: float, every: float) -> list[dict[str, Any]]:
    """Sleep through the window; with `every` > 0, each master's shares over each `every` seconds."""
    if every <= 0:
        time.sleep(seconds)
        return []
    samples = []
    end = time.monotonic() + seconds
    last = master_snapshot(masters)
    while (left := end - time.monotonic()) > 0.05:
        time.sleep(min(every, left))
        now = master_snapshot(masters)
        rows = per_master(last, now)["per_master"]
        samples.append(
            {p: {"commands": m["commands_share"], "redis_cpu": m["redis_cpu_s_share"]} for p, m in rows.items()}
        )
        last = now
    return samples


def redis_bound(pages: int, rows: dict[str, Any], quota: float | None) -> dict[str, Any]:
    """Pages per CPU-second of the busiest master: pages/s if that master had a core to itself
    (and x quota: the ceiling its CPU quota sets)."""
    busiest = max((m["redis_cpu_s"] for m in rows.values()), default=0.0)
    per_cpu_s = pages / busiest if busiest > 0 else None
    return {
        "busiest_master_redis_cpu_s": busiest,
        "redis_bound_pages_per_s": round(per_cpu_s, 1) if per_cpu_s else None,
        "redis_bound_pages_per_s_at_quota": round(per_cpu_s * quota, 1) if per_cpu_s and quota else None,
    }


def run_once(children: Children, case: tuple[int, int], args: argparse.Namespace, run_no: int) -> dict[str, Any]:
    shards, n_masters = case
    workdir, _ = make_workdir(args.keep, f"cluster-{run_no}-{label(*case)}")
    nodes = RedisClusterNodes(workdir / "cluster", masters=n_masters, replicas=args.replicas)
    quota = CpuQuota(args.redis_cpu_quota, f"dcbench-{os.getpid()}") if args.redis_cpu_quota else None
    nodes.start()
    try:
        pinning = pin_nodes(nodes, args.cpus)
        if quota is not None:
            pinning["cpu_quota"] = {
                str(p): quota.limit(nodes.procs[nodes.ports.index(p)].pid, str(p)) for p in nodes.master_ports()
            }
        site_proc, port = start_hosts_site(children, args.links, workdir, args.code_root)
        db = workdir / "items.db"
        extra = {
            "REDIS_CLUSTER": "1",
            "FRONTIER_SHARDS": str(shards),
            "DNS_RESOLVER": "bench.loopback_resolver.LoopbackResolver",
            "REDIS_START_URLS_BATCH_SIZE": str(args.hosts),  # one take: the seeds' slot out of the window
            "DOMAIN_RATE_LIMIT": "0",
            "DOMAIN_MAX_IN_FLIGHT": "0",
            "DNSCACHE_SIZE": str(args.hosts * 2),
        }
        spec = WorkerSpec("ours", nodes.url, f"sqlite:///{db}", 0.0, workdir, extra, args.code_root)
        workers = Workers(children, spec)
        names = [f"w{i}" for i in range(1, args.workers + 1)]
        for node in names:
            workers.start(node)
        workers.wait_ready(names)
        client = nodes.client()
        counter = StoredCounter(db)
        try:
            seeds = [json.dumps({"url": f"http://h{i}.bench.test:{port}/"}) for i in range(args.hosts)]
            for i in range(0, len(seeds), 1000):
                client.lpush(SEED_KEY, *seeds[i : i + 1000])
            t_seed = time.time()
            deadline = time.monotonic() + 120
            while client.llen(SEED_KEY) and time.monotonic() < deadline:
                time.sleep(0.2)
            seeded_in = round(time.time() - t_seed, 2)
            time.sleep(args.warmup)
            masters = nodes.master_ports()
            procs = {**workers.procs, **{f"redis:{p}": nodes.procs[nodes.ports.index(p)] for p in masters}}
            before, rows_before, cpu_before, t0 = (
                master_snapshot(masters),
                counter.count(),
                cpu_snapshot(procs),
                time.time(),
            )
            samples = sample_window(masters, args.seconds, args.monitor)
            after, rows_after, cpu_after, t1 = (
                master_snapshot(masters),
                counter.count(),
                cpu_snapshot(procs),
                time.time(),
            )
            left = client.llen(SEED_KEY)
        finally:
            client.close()
            counter.close()
        workers.wait_exit(timeout=0)
        children.stop(site_proc)
    finally:
        nodes.stop()
        if quota is not None:
            quota.close()
    probes = [workers.probe(n) for n in workers.procs]
    pages = rows_after - rows_before
    seconds = t1 - t0
    cpu = cpu_delta(cpu_before, cpu_after)
    worker_cpu = sum(v or 0 for k, v in cpu.items() if k in workers.procs)
    rt = probe_delta(probes, t0, t1)
    spread = per_master(before, after)
    return {
        "case": label(*case),
        "frontier_shards": shards,
        "masters": n_masters,
        "redis_cpu_quota": args.redis_cpu_quota,
        "run": run_no,
        "hosts": args.hosts,
        "workers": args.workers,
        "pinning": pinning,
        "seeds_taken_in_s": seeded_in,
        "seeds_left_at_window": left,
        "window_s": round(seconds, 2),
        "pages_in_window": pages,
        "rows_at_window_start": rows_before,
        "pages_per_s": round(pages / seconds, 1) if seconds > 0 else None,
        "round_trips_per_page": round(rt / pages, 3) if pages else None,
        "worker_cpu_ms_per_page": round(1000 * worker_cpu / pages, 2) if pages else None,
        "cpu_seconds": cpu,
        **spread,
        **redis_bound(pages, spread["per_master"], args.redis_cpu_quota),
        "monitor_every_s": args.monitor,
        "monitor_shares": samples,
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cases = list(dict.fromkeys(r["case"] for r in runs))
    for case in cases:
        mine = [r for r in runs if r["case"] == case]
        shares = [sorted((m["commands_share"] or 0) for m in r["per_master"].values()) for r in mine]
        cpu_shares = [sorted((m["redis_cpu_s_share"] or 0) for m in r["per_master"].values()) for r in mine]
        out[f"case_{case}"] = {
            "pages_per_s": [r["pages_per_s"] for r in mine],
            "median_pages_per_s": median([r["pages_per_s"] for r in mine if r["pages_per_s"]]),
            "redis_bound_pages_per_s": [r["redis_bound_pages_per_s"] for r in mine],
            "command_shares_sorted": shares,
            "redis_cpu_shares_sorted": cpu_shares,
            "every_master_33_pct_pm_10": all(0.23 <= s <= 0.43 for row in shares for s in row),
            "every_master_cpu_33_pct_pm_10": all(0.23 <= s <= 0.43 for row in cpu_shares for s in row),
        }
    if len(cases) == 2:  # pairwise, run by run: the first case over the second
        first, second = ([r for r in runs if r["case"] == c] for c in cases)
        for name, field in (("pages_per_s", "pages_per_s"), ("redis_bound", "redis_bound_pages_per_s")):
            pairs = [a[field] / b[field] for a, b in zip(first, second) if a[field] and b[field]]
            out[f"pairwise_{name}_{cases[0]}_over_{cases[1]}"] = [round(x, 2) for x in pairs]
            out[f"median_{name}_{cases[0]}_over_{cases[1]}"] = round(median(pairs) or 0, 2) if pairs else None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases",
        default="6,1",
        help="FRONTIER_SHARDS[xMASTERS] per case (3 masters unless given), run alternately: 6,1 or 6x3,1x1",
    )
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--links", type=int, default=2, help="leaf pages per host")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--replicas", type=int, default=0, help="replicas per master (0: the cores go to masters)")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="cores to pin the redis-servers on")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=30.0, help="measured window")
    parser.add_argument("--monitor", type=float, default=0.0, metavar="N", help="per-master shares every N s")
    parser.add_argument(
        "--redis-cpu-quota",
        type=float,
        default=0.0,
        metavar="F",
        help="each master in a cgroup of its own held to F of one core (CFS quota): Redis the bottleneck",
    )
    parser.add_argument("--code", metavar="REF", help="measure a snapshot of this commit instead of the working tree")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", metavar="DIR", help="keep logs and SQLite files under DIR")
    args = parser.parse_args(argv)
    args.code_root, code = prepare_code(args.code)
    children = Children()
    load_before = os.getloadavg()[0]
    runs = []
    started = time.time()
    try:
        for run_no in range(1, args.runs + 1):
            for case in parse_cases(args.cases):
                log(f"run {run_no}/{args.runs}: FRONTIER_SHARDS={case[0]} on {case[1]} master(s)")
                result = run_once(children, case, args, run_no)
                shares = {p: m["commands_share"] for p, m in result["per_master"].items()}
                cpu = {p: m["redis_cpu_s"] for p, m in result["per_master"].items()}
                log(
                    f"  {result['pages_per_s']} pages/s ({result['redis_bound_pages_per_s']} Redis-bound);"
                    f" command share per master {shares}; Redis CPU s {cpu}"
                )
                runs.append(result)
    finally:
        children.kill_all()
    report = {
        "benchmark": "cluster",
        "cpus": os.cpu_count(),
        "code": code if args.code else {"tree": "working tree", **git_state()},
        "loadavg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "duration_s": round(time.time() - started, 1),
        "runs": runs,
        "summary": summarize(runs),
    }
    print(json.dumps(report if args.json else report["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
