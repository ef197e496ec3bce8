"""Redis round trips per page on a many-host crawl with robots.txt: this tree vs another git ref.

Why: at many hosts the costs per host dominate: robots.txt of every new host (claim, fetch,
store, the host's first request) and the links robots.txt disallows. This bench crawls `--hosts`
hosts h<N>.bench.test (resolved to 127.0.0.1 by bench/loopback_resolver.py), each a home page
linking `--links` stories and `--private` links under /private/, which its robots.txt disallows;
every answer waits `--delay-ms`. Default politeness (1 request/s and 2 in flight per host, all
nodes), ROBOTSTXT_OBEY on, `--workers` workers, one private redis-server per run; the sides run
alternately (`ours` = this working tree, `ref` = a `git archive` snapshot of `--ref`).

Measured per run, from the seed to the last page stored (every page: hosts x (1 + links)): pages/s,
Redis round trips per page (socket writes of redis-py in the workers, bench/probe.py) and the
kinds that cost the most, robots.txt fetches and requests for disallowed paths (the site's counts),
politeness as the site saw it (shortest gap between two requests of one host, robots.txt included,
gaps under 0.9 s; most requests of one host in flight), and the `dc/refused/robots_txt` stat.

Usage: .venv/bin/python bench/new_hosts.py --hosts 500 --runs 2 --ref main --json
Serve mode (the site process): python bench/new_hosts.py --serve --links 5 --private 2 --delay-ms 50
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.harness import (
    PYTHON,
    SEED_KEY,
    Children,
    StoredCounter,
    Workers,
    WorkerSpec,
    log,
    make_workdir,
    median,
    prepare_code,
    probe_delta,
    start_redis,
)

CONTROL = "/__bench__/state"
ROBOTS = b"User-agent: *\nDisallow: /private/\n"


class Site(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, links: int, private: int, delay: float) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.links, self.private, self.delay = links, private, delay
        self.lock = threading.Lock()
        self.hits: Counter[str] = Counter()  # pages, robots, private; short_gaps, max_in_flight
        self.last: dict[str, float] = {}  # host -> arrival of its last request (monotonic)
        self.in_flight: Counter[str] = Counter()
        self.min_gap = float("inf")
        self.short: list[Any] = []
        self.last_path: dict[str, str] = {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Site

    def log_message(self, format: str, *args: object) -> None:
        return None

    def do_GET(self) -> None:
        host = self.headers.get("Host", "unknown")
        path = self.path.split("?", 1)[0]
        site = self.server
        if path == CONTROL:
            with site.lock:
                state = {**site.hits, "min_gap_s": round(site.min_gap, 3) if site.last else None, "short": site.short}
            self._send(200, "application/json", json.dumps(state).encode())
            return
        kind = "robots" if path == "/robots.txt" else "private" if path.startswith("/private/") else "pages"
        with site.lock:  # politeness as the site sees it: gaps between arrivals per host (robots.txt too)
            now = time.monotonic()
            site.hits[kind] += 1
            if host in site.last:
                gap = now - site.last[host]
                if gap < 0.9 and len(site.short) < 50:
                    site.short.append((host, site.last_path.get(host, ""), path, round(gap, 3)))
                site.min_gap = min(site.min_gap, gap)
                site.hits["gaps_under_0.9s"] += gap < 0.9
            site.last[host] = now
            site.last_path[host] = path
            site.in_flight[host] += 1
            site.hits["max_in_flight"] = max(site.hits["max_in_flight"], site.in_flight[host])
        try:
            self._answer(host, path)
        finally:
            with site.lock:
                site.in_flight[host] -= 1

    def _answer(self, host: str, path: str) -> None:
        time.sleep(self.server.delay)
        if path == "/robots.txt":
            self._send(200, "text/plain", ROBOTS)
        elif path == "/":
            links = [f"http://{host}/story/{i}" for i in range(1, self.server.links + 1)]
            links += [f"http://{host}/private/{i}" for i in range(1, self.server.private + 1)]
            items = "".join(f'<li><a href="{u}">{u}</a></li>' for u in links)
            self._send(200, "text/html", _html(f"Home of {host}", f"<ul>{items}</ul>"))
        elif path.startswith(("/story/", "/private/")):
            text = f"<p>Story {path} of {host}. " + "Words of the story. " * 40 + "</p>"
            self._send(200, "text/html", _html(f"Story on {host}", f"<article>{text}</article>"))
        else:
            self._send(404, "text/plain", b"not found")

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _html(title: str, body: str) -> bytes:
    return (
        f"<!doctype html><html><head><title>{title}</title></head><body><h1>{title}</h1>{body}</body></html>".encode()
    )


def serve(args: argparse.Namespace) -> int:
    server = Site(args.links, args.private, args.delay_ms / 1000)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    return 0


def site_hits(port: int) -> dict[str, int]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}{CONTROL}", timeout=10) as answer:
        return dict(json.loads(answer.read()))


def run_once(children: Children, side: str, code_root: Path, args: argparse.Namespace, run_no: int) -> dict[str, Any]:
    workdir, _ = make_workdir(args.keep, f"new-hosts-{run_no}-{side}")
    redis_proc, redis_url = start_redis(children, workdir)
    site = children.start(
        [
            PYTHON,
            str(code_root / "bench" / "new_hosts.py"),
            "--serve",
            "--links",
            str(args.links),
            "--private",
            str(args.private),
            "--delay-ms",
            str(args.delay_ms),
        ],
        stdout=subprocess.PIPE,
        stderr=open(workdir / "site.log", "wb"),
        text=True,
    )
    line = site.stdout.readline().strip() if site.stdout else ""
    if not line.startswith("READY "):
        raise SystemExit(f"site did not start: {line!r}; see {workdir / 'site.log'}")
    port = int(line.split()[1])
    db = workdir / "items.db"
    extra = {
        "DNS_RESOLVER": "bench.loopback_resolver.LoopbackResolver",
        "DNSCACHE_SIZE": str(args.hosts * 2),
        "REDIS_START_URLS_BATCH_SIZE": str(args.hosts),
        "ROBOTSTXT_OBEY": "True",
        "DOMAIN_RATE_LIMIT": "1",  # the defaults, said out loud (the harness lifts them for one host)
        "DOMAIN_MAX_IN_FLIGHT": "2",
    }
    spec = WorkerSpec("ours" if side == "ours" else "ref", redis_url, f"sqlite:///{db}", 0.0, workdir, extra, code_root)
    workers = Workers(children, spec)
    names = [f"w{i}" for i in range(1, args.workers + 1)]
    for node in names:
        workers.start(node)
    workers.wait_ready(names)
    client = redis.Redis.from_url(redis_url)
    counter = StoredCounter(db)
    expected = args.hosts * (1 + args.links)
    try:
        seeds = [f"http://h{i}.bench.test:{port}/" for i in range(args.hosts)]
        for i in range(0, len(seeds), 1000):
            client.lpush(SEED_KEY, *seeds[i : i + 1000])
        t0 = time.time()
        last, last_change, stored = -1, time.monotonic(), 0
        while True:
            stored = counter.count()
            if stored != last:
                last, last_change, t1 = stored, time.monotonic(), time.time()
            if stored >= expected or time.monotonic() - last_change > args.stall:
                break
            time.sleep(0.1)
        hits = site_hits(port)
    finally:
        client.close()
        counter.close()
    workers.wait_exit(timeout=0)
    children.stop(site)
    children.stop(redis_proc)
    probes = [workers.probe(n) for n in workers.procs]
    kinds: Counter[str] = Counter()
    refused = 0
    for probe in probes:
        kinds.update((probe or {}).get("round_trips_by_kind", {}))
        refused += int(((probe or {}).get("stats") or {}).get("dc/refused/robots_txt", 0) or 0)
    rt = probe_delta(probes, t0, t1)
    seconds = t1 - t0
    return {
        "side": side,
        "run": run_no,
        "pages": stored,
        "expected": expected,
        "seconds": round(seconds, 2),
        "pages_per_s": round(stored / seconds, 1) if seconds > 0 else None,
        "round_trips_per_page": round(rt / stored, 3) if stored else None,
        # whole worker lives (start-up and the idle tail too)
        "round_trips_by_kind_per_page": {k: round(v / stored, 3) for k, v in kinds.most_common(10)} if stored else {},
        "robots_fetches": hits.get("robots", 0),
        "disallowed_fetched": hits.get("private", 0),
        # politeness at the site: the shortest gap between two requests of one host (robots.txt
        # included), how many were under 0.9 s (1 request/s, less one node's pop-to-send latency),
        # the most requests of one host in flight at once
        "min_gap_s": hits.get("min_gap_s"),
        "gaps_under_0.9s": hits.get("gaps_under_0.9s", 0),
        "max_in_flight_per_host": hits.get("max_in_flight", 0),
        "short_gaps": hits.get("short", [])[:20],
        "refused_robots_txt": refused,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="run the site (used by the bench itself)")
    parser.add_argument("--hosts", type=int, default=500)
    parser.add_argument("--links", type=int, default=5, help="stories linked from each home page")
    parser.add_argument("--private", type=int, default=2, help="links per home page robots.txt disallows")
    parser.add_argument("--delay-ms", type=float, default=50.0, help="each answer waits this long")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--ref", default="main", help="the other side: a git ref ('' = ours only)")
    parser.add_argument("--stall", type=float, default=20.0, help="end a run after this long without a new page")
    parser.add_argument("--keep", metavar="DIR", help="keep logs and SQLite files under DIR")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args)
    sides = [("ours", prepare_code(None)[0])]
    if args.ref:
        sides.append((f"ref:{args.ref}", prepare_code(args.ref)[0]))
    results = []
    children = Children()
    try:
        for run_no in range(1, args.runs + 1):
            for side, root in sides:
                result = run_once(children, side, root, args, run_no)
                log(json.dumps(result))
                results.append(result)
    finally:
        children.kill_all()
    summary = {
        side: {
            "median_round_trips_per_page": median([r["round_trips_per_page"] for r in results if r["side"] == side]),
            "median_pages_per_s": median([r["pages_per_s"] for r in results if r["side"] == side]),
        }
        for side, _ in sides
    }
    out = {"args": {k: v for k, v in vars(args).items() if k != "serve"}, "runs": results, "summary": summary}
    print(json.dumps(out, indent=2) if args.json else json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
