"""News extraction: its cost per page, and whether it stalls crawling (docs/benchmarks.md).

Part 1 times (CPU time), in this process, the work one article costs: the visible text (EXTRACT_MAIN_TEXT =
False), trafilatura's extraction, the SimHash fingerprint, on a boilerplate-heavy article page of
a real-world size (~70 KB) and on the small test page. Part 2 crawls a local site of such pages
with one `news` worker per configuration, alternating the configurations run after run on the
same machine: visible text only ("before"), extraction on the reactor thread (EXTRACT_THREADS=0)
and extraction on two threads (the default). Part 3 measures the near-duplicate index's
memory per article in a private redis-server. Part 2 reports pages/s between the first and the last
item, the CPU time the reactor thread and the whole worker spent per page (CPU time does not
depend on other programs' load on the machine; wall-clock figures do), and the event loop's
lateness (a 10 ms timer's delay: what every download and Redis call waits when the reactor is busy).

    .venv/bin/python -m bench.news --pages 300 --runs 2
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import redis
from scrapy import signals

from bench.harness import LOOPBACK_RATES, PYTHON, ROOT, Children, log, start_redis
from distributed_crawler.news.extract import extract_article, page_basics
from distributed_crawler.news.nearduplicate import NearDuplicateIndex, fingerprint
from tests.site.news_portal import NewsPortal, Story, _article_page

CONFIGS = {
    "visible text (before)": ["EXTRACT_MAIN_TEXT=False", "NEAR_DUPLICATES=False"],
    "extraction on the reactor": ["EXTRACT_MAIN_TEXT=True", "EXTRACT_THREADS=0"],
    "extraction on 2 threads": ["EXTRACT_MAIN_TEXT=True", "EXTRACT_THREADS=2"],
}
WORDS = (
    "council budget river harbour election festival library railway market weather school bridge museum "
    "orchestra stadium garden residents engineers mayor report cost month week year town city county"
).split()


def heavy_story(i: int) -> Story:
    """An article of ~900 words."""
    sentences = tuple(
        " ".join(WORDS[(i * 7 + n * 13 + k * 5) % len(WORDS)] for k in range(18)).capitalize() + f" ({i}.{n})."
        for n in range(50)
    )
    return Story(i, f"Story number {i} about the {WORDS[i % len(WORDS)]}", sentences, "Jane Doe", datetime.now(UTC), "")


def heavy_page(i: int, pages: int) -> bytes:
    """A real-world-sized article page: the story plus a big menu, related links and comments teasers."""
    page = _article_page(heavy_story(i), f"/article/{i}").decode()
    menu = "".join(
        f'<li><a href="/article/{(i + k) % pages + 1}">Section {k} headline teaser</a></li>' for k in range(60)
    )
    related = "".join(
        f'<div class="card"><a href="/article/{(i * 3 + k) % pages + 1}"><h4>{html.escape(heavy_story(k).title)}</h4>'
        f"<p>{' '.join(heavy_story(k).sentences[:2])}</p></a></div>"
        for k in range(40)
    )
    return (
        page.replace("<main>", f"<nav><ul>{menu}</ul></nav><main>")
        .replace("<aside>", f'<section class="related">{related}</section><aside>')
        .encode()
    )


# -- part 1: cost per page --------------------------------------------------------------------------
def time_ms(func: Any, *args: Any, repeat: int) -> dict[str, float]:
    """CPU milliseconds of this thread per call (unlike wall time, other programs' load does not count)."""
    times = []
    for _ in range(repeat):
        start = time.thread_time()
        func(*args)
        times.append((time.thread_time() - start) * 1000)
    times.sort()
    return {"median": round(statistics.median(times), 2), "p95": round(times[int(len(times) * 0.95) - 1], 2)}


def cost_per_page(repeat: int) -> dict[str, Any]:
    portal = NewsPortal()
    portal.publisher_url = "http://news.example"
    small = portal.render_publisher(portal.stories[1].path)[2].decode()
    big = heavy_page(1, 500).decode()
    extract_article(small, "http://news.example/")  # warm-up (trafilatura's first call loads its data)
    text = extract_article(big, "http://news.example/a").text
    return {
        "pages": {"small": len(small), "heavy": len(big)},
        "visible text, small": time_ms(page_basics, small, repeat=repeat),
        "extraction, small": time_ms(extract_article, small, "http://news.example/a", repeat=repeat),
        "visible text, heavy": time_ms(page_basics, big, repeat=repeat),
        "extraction, heavy": time_ms(extract_article, big, "http://news.example/a", repeat=repeat),
        "fingerprint, heavy": time_ms(fingerprint, text, 50, repeat=repeat),
    }


# -- part 3 (run first): memory of the near-duplicate index ---------------------------------------------
def index_memory(redis_url: str, articles: int) -> dict[str, Any]:
    """Bytes per article of the fingerprint index: `articles` random fingerprints, 80-character URLs."""
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    before = int(client.info("memory")["used_memory"])
    index = NearDuplicateIndex(client, "{news}:simhash", 3)
    rng = random.Random(16)
    for i in range(articles):
        value = rng.getrandbits(64)
        url = f"https://www.example-news.com/2026/12/03/a-headline-of-some-length-{i:012d}.html"
        index._script(
            keys=index.script_keys(value), args=[value >> 32, value & 0xFFFFFFFF, url.ljust(80, "x"), 3, 5, 0]
        )
    used = int(client.info("memory")["used_memory"]) - before
    client.flushall()
    client.close()
    return {"articles": articles, "bytes_per_article": round(used / articles, 1)}


# -- part 2: crawling ----------------------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # a crawler's connect burst; the default 5 drops connections
    daemon_threads = True


class HeavySite:
    """/ links to /list/N pages of 20 articles each; every /article/i is a heavy page (made once)."""

    def __init__(self, pages: int) -> None:
        self.pages = {i: heavy_page(i, pages) for i in range(1, pages + 1)}
        lists = (pages + 19) // 20
        self.lists = {
            n: "".join(
                f'<a href="/article/{i}">{i}</a> ' for i in range((n - 1) * 20 + 1, min(n * 20, pages) + 1)
            ).encode()
            for n in range(1, lists + 1)
        }
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                body, status = b"<html><body>no</body></html>", 404
                if self.path == "/":
                    body, status = "".join(f'<a href="/list/{n}">{n}</a>' for n in site.lists).encode(), 200
                elif self.path.startswith("/list/") and self.path[6:].isdigit() and int(self.path[6:]) in site.lists:
                    body, status = site.lists[int(self.path[6:])], 200
                elif self.path.startswith("/article/") and self.path[9:].isdigit() and int(self.path[9:]) in site.pages:
                    body, status = site.pages[int(self.path[9:])], 200
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Quiet."""

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class NewsProbe:
    """Scrapy extension (in the worker): item times and the event loop's lateness -> NEWS_PROBE_FILE."""

    def __init__(self, crawler: Any) -> None:
        self.path = crawler.settings.get("NEWS_PROBE_FILE")
        self.items: list[float] = []
        self.lags: list[float] = []
        self.task: asyncio.Task[None] | None = None
        crawler.signals.connect(self.started, signal=signals.spider_opened)
        crawler.signals.connect(self.item, signal=signals.item_scraped)
        crawler.signals.connect(self.closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> NewsProbe:
        return cls(crawler)

    def started(self, spider: Any) -> None:
        self.cpu = (time.thread_time(), time.process_time())  # this is the reactor thread
        self.task = asyncio.get_running_loop().create_task(self.watch())

    async def watch(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(0.01)
            self.lags.append((time.perf_counter() - start - 0.01) * 1000)

    def item(self, item: Any, response: Any, spider: Any) -> None:
        self.items.append(time.monotonic())

    def closed(self, spider: Any) -> None:
        if self.task is not None:
            self.task.cancel()
        reactor_cpu, process_cpu = time.thread_time() - self.cpu[0], time.process_time() - self.cpu[1]
        Path(self.path).write_text(
            json.dumps({"items": self.items, "lags": self.lags, "reactor_cpu": reactor_cpu, "process_cpu": process_cpu})
        )


def crawl(
    children: Children, redis_url: str, site: HeavySite, settings: list[str], workdir: Path, n: int
) -> dict[str, Any]:
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    client.lpush("news:start_urls", site.url + "/")
    client.close()
    probe = workdir / f"probe-{n}.json"
    args = [PYTHON, "-m", "scrapy", "crawl", "news"]
    for setting in [
        *settings,
        "CONCURRENT_REQUESTS=16",
        *LOOPBACK_RATES,
        "ALLOWED_PRIVATE_NETWORKS=127.0.0.0/8",  # the bench site is on loopback (docs/security.md)
        "STORE_PAGE_TYPES=article,list,other",  # every page stored: the cost of extraction, not of skipping
        "ROBOTSTXT_OBEY=False",
        "HEARTBEAT_ENABLED=False",
        "LOG_LEVEL=INFO",
        f"NEWS_PROBE_FILE={probe}",
        'EXTENSIONS={"bench.news.NewsProbe": 0}',
    ]:
        args += ["-s", setting]
    env = {
        **os.environ,
        "SCRAPY_SETTINGS_MODULE": "demo.settings",  # the repo root's default is production's
        "REDIS_URL": redis_url,
        "STORAGE_URL": f"sqlite:///{workdir / f'items-{n}.db'}",
        "MAX_IDLE_TIME_BEFORE_CLOSE": "2",
        "NODE_ID": f"bench-{n}",
    }
    with open(workdir / f"worker-{n}.log", "wb") as out:
        proc = children.start(args, cwd=ROOT, env=env, stdout=out, stderr=out)
    if proc.wait(600) != 0:
        raise SystemExit(f"worker failed: see {workdir / f'worker-{n}.log'}")
    data = json.loads(probe.read_text())
    items = data["items"]
    lags = sorted(data["lags"])
    seconds = items[-1] - items[0]
    return {
        "items": len(items),
        "pages_per_s": round((len(items) - 1) / seconds, 1),
        "loop_lag_ms_p50": round(statistics.median(lags), 1),
        "loop_lag_ms_p99": round(lags[int(len(lags) * 0.99) - 1], 1),
        "loop_lag_ms_max": round(lags[-1], 1),
        "reactor_cpu_ms_per_page": round(data["reactor_cpu"] * 1000 / len(items), 1),
        "process_cpu_ms_per_page": round(data["process_cpu"] * 1000 / len(items), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=400, help="heavy article pages on the crawled site")
    parser.add_argument("--runs", type=int, default=2, help="runs per configuration, alternating")
    parser.add_argument("--repeat", type=int, default=40, help="timings per measure in part 1")
    parser.add_argument("--index-articles", type=int, default=100_000, help="fingerprints for the memory figure")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"cost_ms": cost_per_page(args.repeat)}
    log(f"cost per page: {json.dumps(results['cost_ms'])}")
    children = Children()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            _, redis_url = start_redis(children, workdir)
            results["index_memory"] = index_memory(redis_url, args.index_articles)
            log(f"index memory: {results['index_memory']}")
            site = HeavySite(args.pages)
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
            n = 0
            for _ in range(args.runs):
                for name, settings in CONFIGS.items():
                    n += 1
                    result = crawl(children, redis_url, site, settings, workdir, n)
                    log(f"{name}: {result}")
                    runs[name].append(result)
            results["crawl"] = runs
            results["medians"] = {
                name: {
                    key: statistics.median(r[key] for r in rs)
                    for key in ("pages_per_s", "loop_lag_ms_p50", "reactor_cpu_ms_per_page", "process_cpu_ms_per_page")
                }
                for name, rs in runs.items()
            }
    finally:
        children.kill_all()
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
