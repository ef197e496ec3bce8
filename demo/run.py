"""`make demo`: two `scrapy crawl news` workers of the demo project crawl the local demo site.

The demo touches only what it made: its own redis-server under .run/ (fresh, no data kept), its own
site and its own SQLite file. REDIS_URL, the variable production nodes read, is ignored: a crawl on
6379 or on REDIS_URL is never seen. `--redis-url URL` runs it on a server of yours instead: then it
refuses when that server holds `news` keys it did not make, and resets (listing them) only the keys
of its own last run there. Seeds with `redis-cli lpush news:start_urls URL`, prints progress, waits
for the workers to close themselves (MAX_IDLE_TIME_BEFORE_CLOSE), prints a summary and stops
everything it started.
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

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.events.feed import EventsConfig
from distributed_crawler.frontier.counts import crawl_counts
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.redact import mask_url

ROOT = Path(__file__).resolve().parent.parent
SPIDER = "news"
WORKERS = 2
TIMEOUT = 110
# What the local demo site allows and the open web does not: every page of it is a row (its pages
# are short, generated ones; a news crawl stores articles only by default: docs/news.md), and it is
# our own server on loopback, so the polite per-host defaults (1 request/s, 2 in flight, for the
# whole cluster: docs/retries-and-politeness.md) are lifted. A real crawl keeps them. The proxy
# pool is the demo's own: `dc:proxies` is shared by every spider of a Redis.
DEMO_SITE = (
    "STORE_PAGE_TYPES=article,list,other",
    "DOMAIN_RATE_LIMIT=0",
    "DOMAIN_MAX_IN_FLIGHT=0",
    "PROXY_POOL_KEY=dc:demo:proxies",
    "PROXY_DEAD_KEY=dc:demo:proxies:dead",
)
# Set by the demo on a server given with --redis-url: the `news` keys there are the demo's own.
MARK_KEY = "{news}:made-by-demo"
# Every key of the `news` spider, any queue mode or shard (docs/architecture.md §4), and the demo's pool.
SPIDER_PATTERNS = ("news:*", "{news}*", "{news~*", "{news:*", "dc:demo:*")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_answers(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        return bool(client.ping())
    except (redis.RedisError, OSError, ValueError):
        return False


def start_redis(stack: ExitStack, run: Path) -> str:
    """A fresh redis-server of the demo's own under RUN/redis, stopped when the demo ends."""
    if not shutil.which("redis-server"):
        raise SystemExit("redis-server is not installed: run `make demo`, which installs it")
    port = free_port()
    data = run / "redis"
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
    for _ in range(200):
        if redis_answers(url):
            print(f"redis: the demo's own redis-server on port {port} (under {data}; stopped at the end)")
            return url
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit(f"redis-server did not start; see {data / 'redis.log'}")


def spider_keys_on(client: redis.Redis) -> list[bytes]:
    """Every key of the `news` spider (and of the demo's proxy pool) on that server."""
    found: set[bytes] = set()
    for pattern in SPIDER_PATTERNS:
        found.update(client.scan_iter(match=pattern, count=1000))
    return sorted(found)


def claim(client: redis.Redis, url: str) -> None:
    """On a server of the user's: reset the demo's own last run there, or refuse to touch a crawl."""
    keys = spider_keys_on(client)
    if keys and not client.exists(MARK_KEY):
        shown = ", ".join(k.decode("utf-8", "replace") for k in keys[:5])
        raise SystemExit(
            f"{mask_url(url)} holds a `{SPIDER}` crawl the demo did not make ({len(keys)} keys: {shown}"
            f"{', ...' if len(keys) > 5 else ''}); the demo touches nothing it did not make: run it "
            "without --redis-url (its own redis-server) or give it an empty database (redis://HOST:PORT/15)"
        )
    if keys:
        print(f"resetting the demo's last run on {mask_url(url)}: deleting {len(keys)} keys")
        for key in keys:
            print(f"  {key.decode('utf-8', 'replace')}")
        client.delete(*keys)
    client.set(MARK_KEY, str(int(time.time())))


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
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("DEMO_REDIS_URL"),
        help="a Redis of yours instead of the demo's own redis-server (env DEMO_REDIS_URL; never REDIS_URL)",
    )
    parser.add_argument("--run-dir", type=Path, default=ROOT / ".run", help="the demo's redis-server and logs")
    parser.add_argument("--db", type=Path, default=ROOT / "data" / "demo-items.db", help="the demo's SQLite file")
    args = parser.parse_args(argv)
    run, db = args.run_dir.resolve(), args.db.resolve()
    run.mkdir(parents=True, exist_ok=True)
    db.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    with ExitStack() as stack:
        own = not args.redis_url
        redis_url = start_redis(stack, run) if own else args.redis_url
        if not own and not redis_answers(redis_url):
            raise SystemExit(f"cannot reach Redis at {mask_url(redis_url)} (--redis-url / DEMO_REDIS_URL)")
        client = redis.Redis.from_url(redis_url)
        if not own:
            claim(client, redis_url)
        keys = SpiderKeys.from_settings(Settings(), SPIDER)
        site = start_site(stack, args.articles)
        print(f"demo site: {site}/  redis: {mask_url(redis_url)}  storage: {db}")
        seed(redis_url, keys.start_urls, site + "/", client)
        env = {
            **{k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"},
            "SCRAPY_PROJECT": "demo",  # scrapy.cfg: the demo's settings, not production's default
            "REDIS_URL": redis_url,
            "STORAGE_URL": f"sqlite:///{db}",
            "MAX_IDLE_TIME_BEFORE_CLOSE": str(args.idle),
        }
        workers = []
        for i in range(1, WORKERS + 1):
            log = open(run / f"worker-{i}.log", "w")
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
        print(f"started {WORKERS} workers (logs: {run}/worker-N.log)")
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
        print(f"  data: {db} (table items)   worker logs: {run}/worker-*.log")
        try:
            events = client.xlen(EventsConfig.from_settings(Settings()).stream(SPIDER))
        except redis.RedisError:
            events = 0
        try:
            failed = run_sync(crawl_counts(client, keys)).failed
        except redis.RedisError:
            failed = 0
        # the demo's own server stops with it: a command naming it would find nothing
        see = "" if own else f" (see: .venv/bin/dcrawl events {SPIDER} --redis-url {mask_url(redis_url)})"
        print(f"  events: {events} in the change feed{see}")
        if failed:
            see = "" if own else f" (see: .venv/bin/dcrawl failed {SPIDER} --redis-url {mask_url(redis_url)})"
            print(f"  failed: {failed} requests dead-lettered{see}")
        if own:
            print(
                "  the demo's redis-server stops now; --redis-url URL runs the demo on a Redis of yours to look around"
            )
        ok = codes == [0] * WORKERS and total > 0
        print("demo finished" if ok else f"demo FAILED (worker exit codes {codes})")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
