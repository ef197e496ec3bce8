"""Rendering end to end: real worker processes, real Chromium, real redis-server, the
local render site (tests/site/render_site.py) on two ports."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import redis

from distributed_crawler.frontier.codec import read_payload
from distributed_crawler.frontier.envelope import split_member
from distributed_crawler.rendering.config import DEFAULT_CHROMIUM
from tests.conftest import Workers, queued_members
from tests.site.render_site import BROKEN_PAGES, READY, TOKENS, RenderSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RELAY = "SPIDER_MODULES=demo.spiders,tests.spiders"


@pytest.fixture(autouse=True)
def _chromium() -> None:
    if not os.path.exists(DEFAULT_CHROMIUM):
        pytest.fail(f"{DEFAULT_CHROMIUM} is missing: run `make test`, which installs Debian's chromium")


def rows(db: Path) -> dict[str, tuple[str, str]]:
    """url -> (text, node)"""
    if not db.exists():
        return {}
    with sqlite3.connect(db, timeout=10) as conn:
        return {url: (text, node) for url, text, node in conn.execute("SELECT url, text, node FROM items")}


class BrowserProcesses:
    """Chromium processes started by one test's workers, sampled while they run.

    Found two ways: the workers' process trees (renderers are forked by Chromium's zygote) and an
    env var every process they start inherits (crash handlers are re-parented to init).
    """

    def __init__(self, workers: Workers) -> None:
        self.workers = workers
        self.marker = f"DC_RENDER_TEST={uuid.uuid4().hex}".encode()
        workers.env["DC_RENDER_TEST"] = self.marker.split(b"=", 1)[1].decode()
        self.seen: set[int] = set()
        self.max_seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def _read(pid: int, name: str) -> bytes:
        try:
            with open(f"/proc/{pid}/{name}", "rb") as f:
                return f.read()
        except OSError:
            return b""

    def chromium(self) -> set[int]:
        children: dict[int, list[int]] = {}
        marked = set()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            stat = self._read(pid, "stat")
            if stat:
                children.setdefault(int(stat.rsplit(b")", 1)[1].split()[1]), []).append(pid)
            if self.marker in self._read(pid, "environ").split(b"\0"):
                marked.add(pid)
        tree, todo = set(), [p.pid for p in self.workers.procs.values()]
        while todo:
            pid = todo.pop()
            tree.add(pid)
            todo.extend(children.get(pid, []))
        return {pid for pid in tree | marked if b"chrom" in self._read(pid, "cmdline")}

    def _sample(self) -> None:
        while not self._stop.is_set():
            found = self.chromium()
            self.seen |= found
            self.max_seen = max(self.max_seen, len(found))
            time.sleep(0.2)

    def __enter__(self) -> BrowserProcesses:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def alive(self) -> list[int]:
        return sorted(pid for pid in self.seen | self.chromium() if b"chrom" in self._read(pid, "cmdline"))

    def assert_gone(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while self.alive():
            assert time.monotonic() < deadline, f"Chromium processes left behind: {self.alive()}"
            time.sleep(0.1)


def gave_up_line(log: str, url: str) -> str:
    lines = [line for line in log.splitlines() if "Gave up retrying" in line and f"<GET {url}>" in line]
    assert len(lines) == 1, f"no 'Gave up retrying' line for {url}:\n{log[-3000:]}"
    return lines[0]


def assert_no_page_left(log: str, rendered: int) -> None:
    assert "'render/pages_open': 0" in log, log[-3000:]
    assert re.search(rf"Rendering closed: {rendered} pages rendered, .*now 0 pages and 0 contexts open", log), log[
        -3000:
    ]
    assert "Closing page due to failed request" not in log  # every page closed by us, not by the fallback


@pytest.mark.timeout(120)
def test_rendered_site_stores_every_token_and_broken_pages_fail_clearly(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with RenderSite() as site, BrowserProcesses(workers) as procs:
        for path, tokens in TOKENS.items():  # the tokens exist only once JavaScript ran
            static = urllib.request.urlopen(site.url + path).read().decode()
            assert not any(t in static for t in tokens)
        redis_client.lpush("news:start_urls", site.url + "/")
        workers.start(
            "r1",
            "PLAYWRIGHT_URL_PATTERNS=/r/",
            f"PLAYWRIGHT_WAIT_FOR={READY}",
            "PLAYWRIGHT_RENDER_TIMEOUT=4",
            "RETRY_TIMES=1",
        )
        assert workers.wait_all(timeout=90) == {"r1": 0}
        procs.assert_gone()
        hits = {p: site.hits(p) for p in [*BROKEN_PAGES, "/img.png", "/"]}
    stored = rows(tmp_path / "items.db")
    for path, tokens in TOKENS.items():
        text = stored[site.url + path][0]
        assert all(t in text for t in tokens), f"{path}: {tokens} not in {text!r}"
    assert stored[site.url + "/"][0].startswith("render index")  # the plain index, not rendered
    assert set(stored) == {site.url + "/", *(site.url + p for p in TOKENS)}, "a broken page was stored"
    assert hits == {"/r/throws": 2, "/r/hang": 2, "/img.png": 0, "/": 1}  # retried once; image aborted
    log = workers.log("r1")
    throws = gave_up_line(log, site.url + "/r/throws")
    assert "'html[data-ready]' (PLAYWRIGHT_WAIT_FOR) never appeared" in throws and "page errors: render-boom" in throws
    hang = gave_up_line(log, site.url + "/r/hang")
    assert "did not reach 'load'" in hang and "PLAYWRIGHT_RENDER_TIMEOUT=4s" in hang
    assert "'render/pages': 5" in log and "'render/frames': 4" in log
    assert_no_page_left(log, rendered=5)
    assert procs.max_seen > 0, "the process scan never saw Chromium: it would not see a leak either"


@pytest.mark.timeout(180)
def test_200_rendered_pages_leave_no_page_context_or_browser(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with RenderSite() as site, BrowserProcesses(workers) as procs:
        redis_client.lpush("news:start_urls", site.url + "/many?n=200")
        workers.start(
            "leak",
            "PLAYWRIGHT_URL_PATTERNS=/r/page/",
            "PLAYWRIGHT_RESTART_AFTER_PAGES=80",
            "CONCURRENT_REQUESTS=8",
            "PLAYWRIGHT_MAX_PAGES=8",
            # the 200 pages are 100 words of filler + a token each: near-duplicates of each other
            # (docs/news.md), whose text the news spider would not store twice
            "NEAR_DUPLICATES=False",
        )
        assert workers.wait_all(timeout=160) == {"leak": 0}
        procs.assert_gone()
    stored = rows(tmp_path / "items.db")
    for i in range(1, 201):
        assert f"page-{i}-token" in stored[f"{site.url}/r/page/{i}"][0]
    log = workers.log("leak")
    assert "'render/pages': 200" in log and "'render/browser_restarts': 2" in log
    assert "'playwright/page_count/max_concurrent': " in log
    max_pages = int(re.search(r"'playwright/page_count/max_concurrent': (\d+)", log).group(1))
    assert max_pages <= 8, "PLAYWRIGHT_MAX_PAGES exceeded"
    assert_no_page_left(log, rendered=200)
    assert procs.max_seen > 0


@pytest.mark.timeout(60)
def test_contexts_per_node_are_bounded(workers: Workers, redis_client: redis.Redis, tmp_path: Path) -> None:
    # Seeds may name a browser context each (scrapy-playwright's `playwright_context`): a node keeps
    # at most PLAYWRIGHT_MAX_PAGES of them, closing idle ones, and never waits for one.
    with RenderSite() as site:
        seeds = [
            json.dumps({"url": f"{site.url}/r/page/{i}", "meta": {"render": True, "playwright_context": f"ctx-{i}"}})
            for i in range(1, 13)
        ]
        redis_client.rpush("news:start_urls", *seeds)
        workers.start("ctx", "PLAYWRIGHT_MAX_PAGES=3", "CONCURRENT_REQUESTS=6")
        assert workers.wait_all(timeout=45) == {"ctx": 0}
    stored = rows(tmp_path / "items.db")
    assert all(f"page-{i}-token" in stored[f"{site.url}/r/page/{i}"][0] for i in range(1, 13))
    log = workers.log("ctx")
    assert int(re.search(r"'playwright/context_count/max_concurrent': (\d+)", log).group(1)) <= 3
    assert "'render/contexts_closed': 9" in log
    assert_no_page_left(log, rendered=12)


@pytest.mark.timeout(120)
def test_rendered_request_with_page_methods_travels_through_redis_to_another_node(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with RenderSite() as site:
        redis_client.lpush("render_relay:start_urls", site.url + "/")
        # node-a parses the plain index, queues rendered requests with a PageMethod, and stops
        # after that one page (its close releases anything it leased but did not start).
        workers.start("node-a", RELAY, "CLOSESPIDER_PAGECOUNT=1", "ROBOTSTXT_OBEY=False", spider="render_relay")
        assert workers.wait_all(timeout=60) == {"node-a": 0}
        queued = queued_members(redis_client, "render_relay")
        assert len(queued) == len(TOKENS) and redis_client.zcard("{render_relay}:processing") == 0
        payload = read_payload(split_member(queued[0]).payload)
        assert payload["meta"]["render"] is True
        assert payload["meta"]["playwright_page_methods"][0]["__dc_type__"] == "PageMethod"
        assert "Starting download handler" not in workers.log("node-a")  # node-a never rendered
        workers.start("node-b", RELAY, spider="render_relay")
        assert workers.wait_all(timeout=90)["node-b"] == 0
    stored = rows(tmp_path / "items.db")
    assert set(stored) == {site.url + p for p in TOKENS}
    for path, tokens in TOKENS.items():
        text, node = stored[site.url + path]
        assert node == "node-b" and "pm-token-42" in text and all(t in text for t in tokens), (path, text)
    assert_no_page_left(workers.log("node-b"), rendered=len(TOKENS))


@pytest.mark.timeout(90)
def test_render_slower_than_the_lease_is_not_redelivered(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with RenderSite() as site:
        redis_client.lpush("news:start_urls", site.url + "/r/slow?s=6")  # 6 s render > 2 s lease
        settings = [
            "SCHEDULER_LEASE_SECONDS=2",
            "PLAYWRIGHT_URL_PATTERNS=/r/",
            f"PLAYWRIGHT_WAIT_FOR={READY}",
            "PLAYWRIGHT_RENDER_TIMEOUT=20",
        ]
        workers.start("a", *settings)
        workers.start("b", *settings)
        assert workers.wait_all(timeout=70) == {"a": 0, "b": 0}
        hits = site.hits("/r/slow")
    stored = rows(tmp_path / "items.db")
    assert hits == 1, "the slow render was delivered twice: its lease was not renewed"
    assert "slow-token-42" in stored[site.url + "/r/slow?s=6"][0]
    for node in ("a", "b"):
        assert "Reclaimed" not in workers.log(node)


@pytest.mark.timeout(60)
def test_without_a_browser_plain_pages_work_and_rendered_ones_fail_clearly(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    workers.env["PLAYWRIGHT_EXECUTABLE_PATH"] = "/nonexistent/chromium"
    with RenderSite() as site:
        redis_client.lpush("news:start_urls", site.url + "/f/static", site.url + "/r/main")
        workers.start("nob", "PLAYWRIGHT_URL_PATTERNS=/r/main", "RETRY_TIMES=1")
        assert workers.wait_all(timeout=45) == {"nob": 0}
    stored = rows(tmp_path / "items.db")
    assert "static-frame-text" in stored[site.url + "/f/static"][0]  # plain HTTP still works
    assert site.url + "/r/main" not in stored
    log = workers.log("nob")
    notice = [line for line in log.splitlines() if "Rendering unavailable" in line]
    assert len(notice) == 1 and "WARNING" in notice[0], log[-3000:]
    assert "PLAYWRIGHT_EXECUTABLE_PATH (/nonexistent/chromium)" in notice[0] and "apt-get install chromium" in notice[0]
    failed = gave_up_line(log, site.url + "/r/main")
    assert "BrowserUnavailableError" in log and "cannot render" in failed and "apt-get install chromium" in failed
    assert "Starting download handler" not in log  # Playwright was never started


@pytest.mark.timeout(60)
def test_plain_crawl_starts_no_browser_and_follows_static_iframes(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with RenderSite() as site, BrowserProcesses(workers) as procs:
        redis_client.lpush("news:start_urls", site.url + "/static")
        workers.start("plain", "IFRAME_FOLLOW_STATIC=True")
        assert workers.wait_all(timeout=45) == {"plain": 0}
    stored = rows(tmp_path / "items.db")
    assert set(stored) == {site.url + "/static", site.url + "/f/static"}
    assert "static-frame-text" in stored[site.url + "/f/static"][0]
    log = workers.log("plain")
    assert "Starting download handler" not in log and "Launching browser" not in log
    assert procs.max_seen == 0, "a crawl that renders nothing started Chromium"


@pytest.mark.timeout(60)
def test_stalled_render_is_cancelled_at_the_deadline_and_its_page_closed(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with RenderSite() as site, BrowserProcesses(workers) as procs:
        redis_client.lpush("render_relay:start_urls", site.url + "/")
        workers.start("stall", RELAY, "RENDER_RELAY_STALL=1", "RETRY_TIMES=0", spider="render_relay")
        assert workers.wait_all(timeout=45) == {"stall": 0}
        procs.assert_gone()
    log = workers.log("stall")
    failed = [line for line in log.splitlines() if "Error downloading" in line or "RenderTimeoutError:" in line]
    assert any("render of " + site.url + "/r/main did not finish in 2s" in line for line in failed), log[-3000:]
    assert "'render/failed/timeout': 1" in log
    assert_no_page_left(log, rendered=0)
    assert procs.max_seen > 0


@pytest.mark.timeout(60)
def test_stop_signal_to_the_whole_group_requeues_renders_in_flight(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # supervisord's stopasgroup and systemd's default KillMode signal the Playwright driver too: it
    # closes Chromium at once. The interrupted renders go back to the queue, no retry spent.
    with RenderSite() as site, BrowserProcesses(workers) as procs:
        redis_client.lpush("news:start_urls", site.url + "/r/slow?s=30", site.url + "/r/slow?s=31")
        workers.start(
            "stop", "PLAYWRIGHT_URL_PATTERNS=/r/", f"PLAYWRIGHT_WAIT_FOR={READY}", "PLAYWRIGHT_RENDER_TIMEOUT=50"
        )
        deadline = time.monotonic() + 30
        while site.hits("/r/slow") < 2:
            assert time.monotonic() < deadline, workers.log("stop")[-3000:]
            time.sleep(0.05)
        time.sleep(0.5)
        os.killpg(workers.procs["stop"].pid, signal.SIGTERM)
        assert workers.wait_all(timeout=40) == {"stop": 0}
        procs.assert_gone()
    queued = [read_payload(split_member(m).payload) for m in queued_members(redis_client)]
    assert sorted(q["url"] for q in queued) == [site.url + "/r/slow?s=30", site.url + "/r/slow?s=31"]
    assert all("retry_times" not in q["meta"] for q in queued), "an interrupted render cost a retry"
    assert redis_client.zcard("{news}:processing") == 0
    log = workers.log("stop")
    assert "'render/interrupted': 2" in log and log.count("Requeued <GET") == 2
    assert "Gave up retrying" not in log and "'render/failed'" not in log
    assert_no_page_left(log, rendered=0)
