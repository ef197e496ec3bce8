"""`make demo`: two `scrapy crawl news` workers crawl the local demo site through one Redis.

Starts what is missing (a redis-server under .run/ when none answers, the demo site), seeds it with
`redis-cli lpush news:start_urls URL`, prints progress, waits for the workers to close themselves
(MAX_IDLE_TIME_BEFORE_CLOSE), prints a summary and stops everything it started. Only the `news`
spider's keys are touched, and they are reset first, so a second run gives the same result.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import redis
from scrapy.settings import Settings

from distributed_crawler.dedup.dupefilter import flush_crawl
from distributed_crawler.events.feed import EventsConfig
from distributed_crawler.events.sources import SourcesConfig
from distributed_crawler.monitoring.nodes import NodeKeys
from distributed_crawler.queue.base import Frontier
from distributed_crawler.queue.counts import crawl_counts
from distributed_crawler.queue.enqueue import run_sync
from distributed_crawler.queue.keys import SpiderKeys
from distributed_crawler.redact import mask_url

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / ".run"
SPIDER = "news"
WORKERS = 2
TIMEOUT = 110
# What the local demo site allows and the open web does not: every page of it is a row (its pages
# are short, generated ones; a news crawl stores articles only by default: docs/news.md), and it is
# our own server on loopback, so the polite per-host defaults (1 request/s, 2 in flight, for the
# whole cluster: docs/retries-and-politeness.md) are lifted. A real crawl keeps them.
DEMO_SITE = ("STORE_PAGE_TYPES=article,list,other", "DOMAIN_RATE_LIMIT=0", "DOMAIN_MAX_IN_FLIGHT=0")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_answers(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False


def start_redis(stack: ExitStack) -> str:
    """REDIS_URL if set; else the local server on 6379; else our own redis-server under .run/."""
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"]
    if redis_answers("redis://127.0.0.1:6379/0"):
        return "redis://127.0.0.1:6379/0"
    port = free_port()
    data = RUN / "redis"
    data.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(data / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
    )
    stack.callback(stop, proc)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(100):
        if redis_answers(url):
            print(f"started redis-server on port {port} (data under {data})")
            return url
        time.sleep(0.05)
    raise SystemExit(f"redis-server did not start; see {data / 'redis.log'}")


def start_site(stack: ExitStack, articles: int) -> str:
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "site" / "server.py"), "--articles", str(articles)],
        stdout=subprocess.PIPE,
        text=True,
    )
    stack.callback(stop, proc)
    line = proc.stdout.readline().strip()
    if not line.startswith("READY "):
        raise SystemExit(f"demo site did not start: {line!r}")
    return line.split()[1]


def stop(proc: subprocess.Popen, timeout: float = 10) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def reset_crawl(client: redis.Redis, keys: SpiderKeys) -> None:
    """The `news` spider's keys only: seeds, queue, leases, filter, dead letters, monitoring."""
    node_keys = NodeKeys.from_settings(Settings(), SPIDER, keys)
    try:  # node ids are untrusted: garbage in the nodes zset (or a key of another type) must not stop the demo
        node_hashes = [keys.node(n.decode("utf-8", "replace")) for n in client.zrange(keys.nodes, 0, -1)]
    except redis.ResponseError:
        node_hashes = []
    feed, sources = EventsConfig.from_settings(Settings()), SourcesConfig.from_settings(Settings())
    try:  # the change feed and source health of the last demo (docs/events.md)
        source_hashes = [
            sources.key_of(SPIDER, n.decode("utf-8", "replace"))
            for n in client.zrange(sources.index_key(SPIDER), 0, -1)
        ]
    except redis.ResponseError:
        source_hashes = []
    client.delete(feed.stream(SPIDER), sources.index_key(SPIDER), *source_hashes)
    client.delete(keys.start_urls, keys.failed, *node_keys.all(), *node_hashes)
    run_sync(flush_crawl(Frontier.from_settings(Settings(), SPIDER, client, keys), keys.dupefilter))


def seed(redis_url: str, key: str, url: str, client: redis.Redis) -> None:
    if shutil.which("redis-cli"):
        subprocess.run(["redis-cli", "-u", redis_url, "lpush", key, url], check=True, stdout=subprocess.DEVNULL)
    else:
        client.lpush(key, url)
    print(f"seeded: redis-cli lpush {key} {url}")


def stored(db: Path) -> dict[str, int]:
    if not db.exists():
        return {}
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return dict(conn.execute("SELECT node, COUNT(*) FROM items GROUP BY node").fetchall())
    except sqlite3.Error:
        return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--articles", type=int, default=300)
    parser.add_argument("--idle", type=float, default=3.0, help="MAX_IDLE_TIME_BEFORE_CLOSE for the workers")
    args = parser.parse_args(argv)
    RUN.mkdir(exist_ok=True)
    db = ROOT / "data" / "demo-items.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    with ExitStack() as stack:
        redis_url = start_redis(stack)
        client = redis.Redis.from_url(redis_url)
        keys = SpiderKeys.from_settings(Settings(), SPIDER)
        reset_crawl(client, keys)
        site = start_site(stack, args.articles)
        print(f"demo site: {site}/  redis: {mask_url(redis_url)}  storage: {db}")
        seed(redis_url, keys.start_urls, site + "/", client)
        env = {
            **os.environ,
            "REDIS_URL": redis_url,
            "STORAGE_URL": f"sqlite:///{db}",
            "MAX_IDLE_TIME_BEFORE_CLOSE": str(args.idle),
        }
        workers = []
        for i in range(1, WORKERS + 1):
            log = open(RUN / f"worker-{i}.log", "w")
            stack.callback(log.close)
            proc = subprocess.Popen(
                [sys.executable, "-m", "scrapy", "crawl", SPIDER, *(a for s in DEMO_SITE for a in ("-s", s))],
                cwd=ROOT,
                env={**env, "NODE_ID": f"demo-{i}"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            stack.callback(stop, proc)
            workers.append(proc)
        print(f"started {WORKERS} workers (logs: {RUN}/worker-N.log)")
        started = time.monotonic()
        last_total, last_time = 0, started
        while any(w.poll() is None for w in workers):
            time.sleep(2)
            now = time.monotonic()
            total = sum(stored(db).values())
            try:
                c = run_sync(crawl_counts(client, keys))
                pending = "unknown" if c.pending is None else c.pending
                queues = f"pending {pending:>4} leased {c.leased:3d} seeds {c.seeds}"
            except redis.ResponseError as exc:  # garbage a script refused: the summary goes on
                queues = f"queue counts unreadable ({str(exc)[:80]})"
            print(
                f"[{now - started:5.1f}s] pages stored {total:4d} | {queues} | "
                f"{(total - last_total) / (now - last_time):6.1f} pages/s",
                flush=True,
            )
            last_total, last_time = total, now
            if now - started > TIMEOUT:
                print("demo timed out; stopping the workers")
                break
        elapsed = time.monotonic() - started
        per_node = stored(db)
        total = sum(per_node.values())
        codes = [w.wait() for w in workers] if all(w.poll() is not None for w in workers) else []
        print("\nsummary")
        for node, n in sorted(per_node.items()):
            print(f"  {node}: {n} pages")
        print(f"  total: {total} pages in {elapsed:.1f}s ({total / elapsed:.1f} pages/s)")
        print(f"  data: {db} (table items)   worker logs: {RUN}/worker-*.log")
        try:
            events = client.xlen(EventsConfig.from_settings(Settings()).stream(SPIDER))
        except redis.RedisError:
            events = 0
        print(
            f"  events: {events} in the change feed (see: .venv/bin/dcrawl events {SPIDER} --redis-url {mask_url(redis_url)})"
        )
        try:
            failed = run_sync(crawl_counts(client, keys)).failed
        except redis.RedisError:
            failed = 0
        if failed:
            print(f"  failed: {failed} (see: .venv/bin/dcrawl failed {SPIDER} --redis-url {mask_url(redis_url)})")
        ok = codes == [0] * WORKERS and total > 0
        print("demo finished" if ok else f"demo FAILED (worker exit codes {codes})")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
