"""Memory of the per-host frontier: bytes per pending request and per host, from MEMORY USAGE.

    .venv/bin/python bench/memory.py --baseline cf79f24 --json      # that commit vs this tree
    .venv/bin/python bench/memory.py --hosts 100 --per-host 400     # queues past 128 entries
    .venv/bin/python bench/memory.py --kind seeds --scheme http     # start requests, http URLs
    .venv/bin/python bench/memory.py --matrix --baseline main        # every shape below, both sides

Each side runs in its own process (the baseline from a `git archive` snapshot of REF, this bench/
copied in: bench/harness.py prepare_code) against its own redis-server with Redis's DEFAULT config
(managed Redis: nothing is tuned with CONFIG SET). The requests are the news spider's links of
bench/scale.py (https://www.example-news<h>.com/<y>/<m>/<d>/world/article-headline-<hex>.html,
callback parse, meta depth), made by the real scheduler (`RedisScheduler.enqueue_request`, default
settings: host mode, DOMAIN_RATE_LIMIT 1, DOMAIN_MAX_IN_FLIGHT 2) and pushed by the real Enqueuer
(enqueue.lua), as the scheduler's outbox does. `--referer` adds the Referer header Scrapy's
RefererMiddleware sets on a followed link (the page it was found on, a section page of the host).
`--kind seeds` makes start requests instead, as a node makes them of `dcrawl seed` lines (a plain
URL: Seed.to_request, no callback, dont_filter) with the meta Scrapy's StartSpiderMiddleware adds
(`is_start_request`). `--scheme http` writes http URLs. `--matrix` runs every shape of MATRIX
(seeds and links, with and without a Referer, http and https, 10 to 10,000 requests per host).

Memory: MEMORY USAGE key SAMPLES 0 summed over every key of the frontier (host queues, host hashes,
ready and over-budget zsets, sequence, pending counter, processing, delayed; the dedup filter is
not the frontier and is left out), measured twice: with `--per-host`/2 and with `--per-host`
requests on each of `--hosts` hosts. bytes/pending = the growth between the two / the requests
added; bytes/host = what the first measure holds beyond its requests, / hosts. Both measures hold
the same number of hosts and the same queue encoding as long as both halves are on the same side of
Redis's zset-max-listpack-entries (128): the report names the encoding of the host queues.

CPU: encode (`make_member(codec.encode(...))`, as enqueue_request) and decode (`codec.decode(
split_member(lease).payload)`, as the scheduler's feeder) of the same 1,000 requests, process time
per request, `--rounds` times per run; with `--repeat N` the sides run alternately N times (old,
new, old, new, ...) and the report gives the median of the N pairwise new/old ratios (the machine
may be shared: a pair runs seconds apart).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PUSH_BATCH = 500  # requests per enqueue.lua call (the scheduler's OUTBOX_BATCH order of magnitude)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- one side (a child process; imports the code under test) ---------------------------------------
#: (kind, scheme, referer, hosts, per_host): the shapes of `--matrix`, 40,000 pending requests each
MATRIX: list[tuple[str, str, bool, int, int]] = [
    ("seeds", "https", False, 400, 100),  # the 40,000 seeded news URLs over 400 hosts
    ("seeds", "http", False, 4000, 10),
    ("seeds", "https", False, 4, 10000),
    ("links", "https", True, 400, 100),
    ("links", "http", True, 4000, 10),
    ("links", "https", True, 4, 10000),
    ("links", "http", False, 100, 400),
]

SECTIONS = ("world", "politics", "business", "sport", "culture", "science")


def make_requests(
    spider: Any, hosts: int, per_host: int, referer: bool, kind: str = "links", scheme: str = "https", seed: int = 1
) -> list[list[Any]]:
    """`per_host` requests for each host: links as bench/scale.py's sample_payloads (with
    `referer`, the section page they were found on), or start requests of seeded URLs."""
    from scrapy import Request

    from distributed_crawler.frontier.seeds import parse_seed

    rnd = random.Random(seed)
    out = []
    for h in range(hosts):
        host = f"www.example-news{h}.com"
        requests = []
        for _ in range(per_host):
            section = rnd.choice(SECTIONS)
            url = (
                f"{scheme}://{host}/{rnd.randrange(2000, 2027)}/{rnd.randrange(1, 13):02d}/{rnd.randrange(1, 29):02d}/"
                f"{section}/article-headline-{rnd.getrandbits(40):x}.html"
            )
            if kind == "seeds":  # a `dcrawl seed` line as a node makes it (RedisSpider), then Scrapy's meta
                request = parse_seed(url, 1 << 20).to_request(None)
                request.meta.setdefault("is_start_request", True)  # StartSpiderMiddleware
                requests.append(request)
                continue
            headers = {"Referer": f"{scheme}://{host}/{section}/"} if referer else None
            requests.append(Request(url, callback=spider.parse, headers=headers, meta={"depth": rnd.randrange(1, 8)}))
        out.append(requests)
    return out


def frontier_bytes(client: Any, keys: Any) -> dict[str, int]:
    """MEMORY USAGE (SAMPLES 0) of every key of the frontier, summed per kind of key."""
    kinds = [
        (keys.host_queue(""), "host queues"),
        (keys.host_in_flight(""), "in-flight sets"),
        (keys.host(""), "host hashes"),
    ]
    single = {
        keys.ready: "ready zset",
        keys.over_budget: "over-budget zset",
        keys.seq: "sequence",
        keys.pending: "pending counter",
        keys.processing: "processing",
        keys.delayed: "delayed",
        keys.requests: "single queue",
    }
    total: dict[str, int] = defaultdict(int)
    count: dict[str, int] = defaultdict(int)
    for raw in client.scan_iter(count=1000):
        key = raw.decode()
        kind = single.get(key) or next((name for prefix, name in kinds if key.startswith(prefix)), None)
        if kind is None:
            continue  # the dedup filter and the rest of the crawl's state: not the frontier
        total[kind] += client.memory_usage(key, samples=0) or 0
        count[kind] += 1
    return {**dict(total), **{f"{k} (keys)": v for k, v in count.items()}}


def queue_encoding(client: Any, keys: Any) -> str:
    """The Redis encoding of the first host's pending requests (its list when it has one: the
    queue zset holds only what is out of arrival order)."""
    host = "www.example-news0.com"
    names = [getattr(keys, "host_list", lambda h: "")(host), keys.host_queue(host)]
    for name in filter(None, names):
        kind = client.type(name)
        if kind != b"none":
            return f"{kind.decode()} {client.object('encoding', name).decode()}"
    return "none"


class Node:
    """The scheduler's enqueue path on one client, whichever structure the code under test has (the
    baseline may predate the Frontier object: core/intake.py, frontier/base.py)."""

    def __init__(self, node: Any, spider: Any, client: Any, keys: Any) -> None:
        from distributed_crawler.dedup.dupefilter import SetDedup
        from distributed_crawler.frontier.codec import RequestCodec
        from distributed_crawler.frontier.enqueue import Enqueuer

        self.node = node
        if hasattr(node, "build_parts"):  # parts built once at open
            from distributed_crawler.core.trouble import RedisTrouble

            node.client = client
            self.frontier = node.frontier.bind(client)
            self.enqueuer = Enqueuer(self.frontier, SetDedup(keys.dupefilter))
            trouble = RedisTrouble(self.frontier, node.df, node.context.policy, node.recent, node.lifecycle)
            self.codec = RequestCodec(spider, node.config.allowed_classes)
            node.parts = node.build_parts(self.frontier, trouble, self.enqueuer, self.codec)  # what open() does
            self.outbox = node.parts.outbox.entries
        elif hasattr(node, "intake"):  # the Frontier object, parts wired by setters
            node.client = client  # what open() sets: node.frontier is bound to it
            self.frontier = node.frontier
            self.codec = node.intake.codec = node.feeder.codec = RequestCodec(spider, node.config.allowed_classes)
            self.outbox = node.outbox.entries
            self.enqueuer = Enqueuer(self.frontier, SetDedup(keys.dupefilter))
        else:  # QueueScripts, scheduler-held outbox
            from distributed_crawler.frontier.scripts import QueueScripts  # type: ignore[attr-defined]

            self.frontier = None
            self.codec = node.codec = RequestCodec(spider, node.config.allowed_classes)
            self.outbox = node._outbox
            self.scripts = QueueScripts.register(client, keys, "host")
            self.enqueuer = Enqueuer(client, keys, SetDedup(keys.dupefilter), "host", scripts=self.scripts)

    def slot(self, url: str) -> str | None:
        if self.frontier is not None:
            return self.frontier.placement(url).slot
        from distributed_crawler.frontier.config import slot_of

        return slot_of(url, self.node.config.frontier)

    def lease_one(self) -> bytes:
        if self.frontier is not None:
            from distributed_crawler.connection.calls import run_sync

            got = self.frontier.lease(1, 600)  # a coroutine, or (a baseline tree) the reply itself
            return (run_sync(got) if inspect.iscoroutine(got) else got).leases[0].lease
        return self.scripts.pop_hosts(1, 600).leases[0].lease


def measure(
    hosts: int, per_host: int, referer: bool, rounds: int, kind: str = "links", scheme: str = "https"
) -> dict[str, Any]:
    """This tree's frontier memory and codec CPU for the workload (runs in the side's process)."""
    import redis
    from scrapy.utils.test import get_crawler

    from bench.harness import Children, start_redis
    from demo.spiders.news import NewsSpider
    from distributed_crawler.connection.calls import run_sync
    from distributed_crawler.core.scheduler import RedisScheduler
    from distributed_crawler.frontier.envelope import make_member, split_member
    from distributed_crawler.frontier.keys import SpiderKeys

    children = Children()
    workdir = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    try:
        _, url = start_redis(children, workdir)  # Redis's defaults (no RDB/AOF files), nothing tuned
        client = redis.Redis.from_url(url, socket_timeout=600)
        crawler = get_crawler(
            NewsSpider, settings_dict={"ADDONS": {"distributed_crawler.Addon": 0}, "NODE_ID": "bench", "REDIS_URL": url}
        )
        spider = NewsSpider.from_crawler(crawler)
        crawler.spider = spider
        keys = SpiderKeys.from_settings(crawler.settings, spider.name)
        node = Node(RedisScheduler.from_crawler(crawler), spider, client, keys)
        by_host = make_requests(spider, hosts, per_host, referer, kind, scheme)

        def push(requests: list[Any]) -> None:
            for request in requests:
                if not node.node.enqueue_request(request) and not request.dont_filter:
                    raise SystemExit(f"the scheduler refused {request.url}")
            entries: list[Any] = []
            while node.outbox:
                _, e = node.outbox.popleft()
                entries.append(
                    (e.fingerprint, e.dont_filter, e.member, e.delay, e.slot, e.interval, e.budget, e.in_flight)
                )
            for start in range(0, len(entries), PUSH_BATCH):
                run_sync(node.enqueuer.run("push", entries[start : start + PUSH_BATCH]))

        half = per_host // 2
        push([r for requests in by_host for r in requests[:half]])
        first = frontier_bytes(client, keys)
        first_encoding = queue_encoding(client, keys)
        push([r for requests in by_host for r in requests[half:]])
        full = frontier_bytes(client, keys)
        pending = hosts * per_host
        grown = sum(v for k, v in full.items() if "(keys)" not in k) - sum(
            v for k, v in first.items() if "(keys)" not in k
        )
        per_pending = grown / (hosts * (per_host - half))
        first_total = sum(v for k, v in first.items() if "(keys)" not in k)
        per_host_bytes = (first_total - hosts * half * per_pending) / hosts
        host0 = "www.example-news0.com"
        members = client.zrange(keys.host_queue(host0), 0, 0)
        if not members and hasattr(keys, "host_list"):
            members = client.lrange(keys.host_list(host0), 0, 0)
        sample_member = members[0].decode() if members else ""
        lease = node.lease_one()

        # CPU of encode and decode, the same requests, process time
        sample = [r for requests in by_host[:20] for r in requests[:50]]
        slots = [node.slot(r.url) for r in sample]
        encode_us, decode_us = [], []
        for _ in range(rounds):
            t0 = time.process_time()
            made = [make_member(node.codec.encode(r, slot=s), r.priority) for r, s in zip(sample, slots)]
            encode_us.append(1e6 * (time.process_time() - t0) / len(sample))
            t0 = time.process_time()
            decoded = [node.codec.decode(split_member(m).payload) for m in made]
            decode_us.append(1e6 * (time.process_time() - t0) / len(sample))
            if [d.url for d in decoded] != [r.url for r in sample]:
                raise SystemExit("decode did not give back the URLs it was given")
        client.close()
        return {
            "shape": f"{kind} {scheme}{' Referer' if referer else ''} {hosts}x{per_host}",
            "hosts": hosts,
            "pending": pending,
            "host_queue_encoding": {f"{half}/host": first_encoding, f"{per_host}/host": queue_encoding(client, keys)},
            "bytes_per_pending": round(per_pending, 1),
            "bytes_per_host": round(per_host_bytes, 1),
            "bytes_per_pending_all_in": round(sum(v for k, v in full.items() if "(keys)" not in k) / pending, 1),
            "frontier_bytes": full,
            "member_example": sample_member,
            "member_bytes": len(sample_member.encode()),
            "lease_example": lease.decode(),
            "encode_us": encode_us,
            "decode_us": decode_us,
        }
    finally:
        children.kill_all()


# -- the run: both sides, alternately ----------------------------------------------------------------
def run_side(code_root: Path, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(code_root / "bench" / "memory.py"),
        "--side",
        "--hosts",
        str(args.hosts),
        "--per-host",
        str(args.per_host),
        "--rounds",
        str(args.rounds),
        "--kind",
        args.kind,
        "--scheme",
        args.scheme,
    ] + (["--referer"] if args.referer else [])
    env = {**os.environ, "PYTHONPATH": str(code_root)}
    done = subprocess.run(cmd, cwd=code_root, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"the side in {code_root} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def run_matrix(args: argparse.Namespace, sides: dict[str, Path]) -> int:
    """Every shape of MATRIX on every side: bytes per pending request (all in, and the growth), the
    host list or queue's encoding, a member; a table (or JSON) on stdout."""
    from bench.harness import git_state

    rows = []
    for kind, scheme, referer, hosts, per_host in MATRIX:
        shape = argparse.Namespace(**{**vars(args), "kind": kind, "scheme": scheme, "referer": referer})
        shape.hosts, shape.per_host, shape.rounds = hosts, per_host, 1
        row: dict[str, Any] = {}
        for name, code_root in sides.items():
            r = run_side(code_root, shape)
            row[name] = {k: r[k] for k in ("shape", "bytes_per_pending_all_in", "bytes_per_pending", "bytes_per_host")}
            row[name]["encoding"] = r["host_queue_encoding"][f"{per_host}/host"]
            row[name]["member_example"] = r["member_example"]
            log(f"{name} {r['shape']}: {r['bytes_per_pending_all_in']} B/pending all in ({row[name]['encoding']})")
        rows.append(row)
    if args.json:
        print(json.dumps({"code": git_state(), "baseline": args.baseline, "rows": rows}, indent=2))
        return 0
    names = list(sides)
    print("| shape | " + " | ".join(f"{n}: B/pending all in (growth), encoding" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for row in rows:
        cells = [
            f"{row[n]['bytes_per_pending_all_in']} ({row[n]['bytes_per_pending']}), {row[n]['encoding']}" for n in names
        ]
        print(f"| {row[names[-1]]['shape']} | " + " | ".join(cells) + " |")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=400)
    parser.add_argument("--per-host", type=int, default=100, help="pending requests per host (>= 2)")
    parser.add_argument("--rounds", type=int, default=5, help="encode/decode timing rounds per run")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each side, alternately (CPU: pairwise ratios)")
    parser.add_argument("--referer", action="store_true", help="links carry a Referer header, as crawled links do")
    parser.add_argument("--kind", choices=("links", "seeds"), default="links", help="links or start requests (seeds)")
    parser.add_argument("--scheme", choices=("https", "http"), default="https")
    parser.add_argument("--matrix", action="store_true", help="every shape of MATRIX (memory only: --rounds 1)")
    parser.add_argument("--baseline", metavar="REF", help="also measure this commit (e.g. main), side by side")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)  # one side, JSON to stdout
    args = parser.parse_args(argv)
    if args.per_host < 2:
        parser.error("--per-host must be >= 2")
    if args.side:
        print(json.dumps(measure(args.hosts, args.per_host, args.referer, args.rounds, args.kind, args.scheme)))
        return 0
    from bench.harness import git_state, prepare_code

    sides = {"new": ROOT}
    if args.baseline:
        old_root, info = prepare_code(args.baseline)
        sides = {"old": old_root, "new": ROOT}
        log(f"baseline: {info}")
    if args.matrix:
        return run_matrix(args, sides)
    results: dict[str, dict[str, Any]] = {}
    pairs: list[dict[str, float]] = []  # per repeat: new/old CPU ratios of that pair of runs
    for repeat in range(args.repeat):
        runs = {}
        for name, code_root in sides.items():
            log(f"measuring {name} ({code_root}), run {repeat + 1} of {args.repeat}")
            runs[name] = r = run_side(code_root, args)
            log(
                f"{name}: {r['bytes_per_pending']} B/pending, {r['bytes_per_host']} B/host, "
                f"{r['bytes_per_pending_all_in']} B/pending all in; member {r['member_bytes']} B; "
                f"encode {statistics.median(r['encode_us']):.1f} us, decode {statistics.median(r['decode_us']):.1f} us"
            )
            if name not in results:
                results[name] = r
            else:  # memory is the same every run; the CPU rounds add up
                results[name]["encode_us"] += r["encode_us"]
                results[name]["decode_us"] += r["decode_us"]
        if "old" in runs:
            old, new = runs["old"], runs["new"]
            pairs.append(
                {
                    what: round(statistics.median(new[f"{what}_us"]) / statistics.median(old[f"{what}_us"]), 3)
                    for what in ("encode", "decode")
                }
            )
    report: dict[str, Any] = {"code": git_state(), "baseline": args.baseline, "referer": args.referer, **results}
    if "old" in results:
        old, new = results["old"], results["new"]
        report["ratios_new_over_old"] = {
            "bytes_per_pending": round(new["bytes_per_pending"] / old["bytes_per_pending"], 3),
            "bytes_per_host": round(new["bytes_per_host"] / old["bytes_per_host"], 3),
            "encode_cpu": round(statistics.median(p["encode"] for p in pairs), 3),  # median of the pairwise ratios
            "decode_cpu": round(statistics.median(p["decode"] for p in pairs), 3),
            "cpu_pairs": pairs,
        }
    print(json.dumps(report, indent=2) if args.json else json.dumps(report.get("ratios_new_over_old", results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
