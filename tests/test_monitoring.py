"""Monitoring end to end: heartbeats, `dcrawl status`, health alerts, dashboard in Chromium, Prometheus.

Real worker processes, a real redis-server, the demo site; `HEARTBEAT_INTERVAL=1` so a dead node
shows within seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
import redis

from distributed_crawler.cli.main import main
from tests.conftest import ROOT, Workers, free_port
from tests.site.local import LoopbackServer
from tests.site.server import NewsSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAST = ["HEARTBEAT_INTERVAL=1", "SCHEDULER_LEASE_SECONDS=3", "CONCURRENT_REQUESTS=4"]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def status(redis_url: str, spider: str = "news") -> dict[str, Any]:
    """`dcrawl status SPIDER --json`, parsed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["status", spider, "--json", "--redis-url", redis_url]) == 0
    return json.loads(out.getvalue())


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def nodes_by_id(s: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["id"]: n for n in s["nodes"]}


def alerts(client: redis.Redis, spider: str) -> list[dict[str, Any]]:
    return [json.loads(a) for a in client.lrange(f"{{{spider}}}:alerts", 0, -1)]


@pytest.mark.timeout(90)
def test_status_shows_live_nodes_then_a_killed_node_dead_alerted_and_its_leases_reclaimed(
    workers: Workers,
    redis_client: redis.Redis,
    redis_url: str,
) -> None:
    with NewsSite(articles=200, per_page=20, delay=0.2) as site:
        # The site's /flaky answers 503 at first; a host block (host mode) would send node-b's held
        # requests back to delayed, and a kill at that moment would leave it no lease to reclaim.
        no_block = "HOST_BLOCK_HTTP_CODES=429"
        workers.start("node-a", *FAST, no_block)
        workers.start("node-b", *FAST, no_block)
        workers.wait_ready("node-a", "node-b")
        redis_client.lpush("news:start_urls", site.url + "/")

        def both_busy() -> dict[str, Any] | None:
            nodes = nodes_by_id(status(redis_url))
            ok = all(nodes.get(n, {}).get("alive") and nodes[n]["pages"] > 0 for n in ("node-a", "node-b"))
            return nodes if ok and nodes["node-b"]["leases"] > 0 else None

        nodes = wait_for(both_busy, 30, "both nodes alive with pages > 0 in `dcrawl status --json`")
        assert {nodes[n]["state"] for n in nodes} <= {"running", "idle"}
        assert all(nodes[n]["rate"] > 0 for n in nodes)

        held_at_kill = set(redis_client.zrange("{news}:processing", 0, -1))
        workers.kill9("node-b")
        killed_at = time.monotonic()
        s = wait_for(
            lambda: (lambda st: st if not nodes_by_id(st)["node-b"]["alive"] else None)(status(redis_url)),
            10,
            "node-b to show as dead",
        )
        dead_after = time.monotonic() - killed_at
        assert dead_after <= 3 * 1 + 1.5, f"dead only after {dead_after:.1f}s (3 intervals of 1s)"
        node_b = nodes_by_id(s)["node-b"]
        assert node_b["state"] == "dead" and node_b["leases"] > 0 and node_b["pages"] > 0
        assert nodes_by_id(s)["node-a"]["alive"]

        alert = wait_for(
            lambda: [a for a in alerts(redis_client, "news") if a["kind"] == "dead_node"],
            8,
            "a dead_node alert",
        )
        assert len(alert) == 1 and alert[0]["node"] == "node-b" and alert[0]["reporter"] == "node-a"
        assert alert[0]["leases"] > 0

        # Its leases expire (3 s) and node-a returns them to the queue, then crawls them.
        wait_for(
            lambda: not held_at_kill & set(redis_client.zrange("{news}:processing", 0, -1)),
            20,
            "the leases held at the kill to be reclaimed or acked",
        )
        codes = workers.wait_all(timeout=60)
        expected = site.expected_urls()
    assert codes["node-a"] == 0
    assert "Reclaimed" in workers.log("node-a")
    assert "Health alert (dead_node) for node node-b" in workers.log("node-a")
    with contextlib.closing(sqlite3.connect(workers.tmp_path / "items.db")) as db:
        stored = {row[0] for row in db.execute("SELECT url FROM items")}
    assert stored == expected, "pages lost after the kill"
    final = status(redis_url)
    assert (final["pending"], final["leased"]) == (0, 0)
    node_a = nodes_by_id(final)["node-a"]
    assert node_a["state"] == "closed" and not node_a["alive"]
    report = node_a["report"]
    assert report["reason"] == "finished" and report["items"] == node_a["items"] > 0
    assert report["completed"] > 0 and report["taken"] >= report["completed"]
    # Totals count what heartbeats reported: a killed node's last second of pages is not in them.
    assert final["totals"]["pages"] >= len(expected) - 40 and final["totals"]["nodes_dead"] == 1
    assert sum(m["pages"] for m in final["history"]) == final["totals"]["pages"]


class Webhook:
    """A local HTTP server that records JSON POSTs."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        received = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append({"path": self.path, "type": self.headers.get("Content-Type"), "json": json.loads(body)})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = LoopbackServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    yield hook
    hook.close()


@pytest.mark.timeout(60)
def test_no_items_alert_is_logged_recorded_and_posted(
    workers: Workers,
    redis_client: redis.Redis,
    webhook: Webhook,
) -> None:
    with NewsSite(articles=200, per_page=20, delay=0.1) as site:
        redis_client.lpush("stalled:start_urls", site.url + "/")
        workers.start(
            "stall-1",
            "SPIDER_MODULES=demo.spiders,tests.spiders",
            "HEARTBEAT_INTERVAL=1",
            "HEALTH_NO_ITEMS_SECONDS=2",
            f"ALERT_WEBHOOK_URL={webhook.url}",
            "CONCURRENT_REQUESTS=2",
            spider="stalled",
        )
        wait_for(lambda: webhook.posts, 30, "the webhook POST")
        entries = alerts(redis_client, "stalled")
        workers.stop_all()
    post = webhook.posts[0]
    assert post["path"] == "/hook" and post["type"] == "application/json"
    assert post["json"]["kind"] == "no_items" and post["json"]["node"] == "stall-1"
    assert post["json"]["spider"] == "stalled" and post["json"]["items"] == 3 and post["json"]["pages"] > 3
    assert len(webhook.posts) == 1, "one alert per stall"
    assert [e["kind"] for e in entries] == ["no_items"] and entries[0]["node"] == "stall-1"
    log = workers.log("stall-1")
    assert re.search(r"ERROR: Health alert \(no_items\) for node stall-1 of stalled: no item for \d+s", log), log[
        -3000:
    ]
    assert "Traceback" not in log


def start_dashboard(redis_url: str, *args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "distributed_crawler", "dashboard", "--port", "0", "--redis-url", redis_url, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"http://[\d.]+:\d+/", line)
    if not match:
        proc.kill()
        pytest.fail(f"dashboard did not start: {line}{proc.stdout.read()}")
    return proc, match.group(0)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def assert_same_status(read_a: Callable[[], dict[str, Any]], read_b: Callable[[], dict[str, Any]]) -> None:
    """Equal but for the moment they were read at (read again if a minute boundary fell between)."""
    for _ in range(2):
        a, b = read_a(), read_b()
        assert abs(a.pop("time") - b.pop("time")) < 30
        if a["history"][-1]["minute"] == b["history"][-1]["minute"]:
            break
    assert a == b


@pytest.mark.timeout(90)
def test_dashboard_in_chromium_shows_both_nodes_and_matches_status_json(
    workers: Workers,
    redis_client: redis.Redis,
    redis_url: str,
) -> None:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run `make test`, which installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    dashboard, url = start_dashboard(redis_url)
    try:
        with NewsSite(articles=200, per_page=20, delay=0.25) as site:
            workers.start("node-a", *FAST)
            workers.start("node-b", *FAST)
            workers.wait_ready("node-a", "node-b")
            redis_client.lpush("news:start_urls", site.url + "/")
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    page = browser.new_page(viewport={"width": 1280, "height": 860})
                    page.goto(url)
                    rows = page.locator("#spider-news tr.node")
                    page.wait_for_function(
                        """() => {
                          const rows = [...document.querySelectorAll('#spider-news tr.node')];
                          return rows.length >= 2 && rows.every(r => Number(r.querySelector('td.rate').textContent) > 0);
                        }""",
                        timeout=30_000,
                    )
                    ids = sorted(rows.nth(i).get_attribute("data-node") for i in range(rows.count()))
                    rates = [float(rows.nth(i).locator("td.rate").inner_text()) for i in range(rows.count())]
                    page.wait_for_timeout(1500)  # a second refresh: the chart has bars
                    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
                    pages_per_min = page.locator('#spider-news [data-card="rate"] .v').inner_text()
                finally:
                    browser.close()
            assert ids == ["node-a", "node-b"]
            assert all(r > 0 for r in rates) and float(pages_per_min) > 0
            assert workers.wait_all(timeout=60) == {"node-a": 0, "node-b": 0}
        # Quiet now: the JSON endpoint and `dcrawl status --json` must agree exactly.
        assert_same_status(lambda: get_json(url + "api/status/news"), lambda: status(redis_url))
        assert list(get_json(url + "api/status")["spiders"]) == ["news"]
        assert_same_status(lambda: get_json(url + "api/status")["spiders"]["news"], lambda: status(redis_url))
    finally:
        dashboard.terminate()
        dashboard.wait(10)


@pytest.mark.timeout(60)
def test_prometheus_page_counters_increase_during_a_crawl(workers: Workers, redis_client: redis.Redis) -> None:
    port = free_port()
    metrics_url = f"http://127.0.0.1:{port}/metrics"

    def pages() -> float | None:
        try:
            with urllib.request.urlopen(metrics_url, timeout=5) as response:
                text = response.read().decode()
        except OSError:
            return None
        match = re.search(r'^dcrawl_pages_total\{node="prom-1",spider="news"\} (\S+)$', text, re.M)
        assert "dcrawl_queue_requests" in text and "dcrawl_leases_held" in text
        return float(match.group(1)) if match else None

    with NewsSite(articles=200, per_page=20, delay=0.1) as site:
        workers.start("prom-1", f"PROMETHEUS_PORT={port}", "PROMETHEUS_HOST=127.0.0.1", "CONCURRENT_REQUESTS=2")
        workers.wait_ready("prom-1")
        redis_client.lpush("news:start_urls", site.url + "/")
        first = wait_for(lambda: (lambda p: p if p and p > 0 else None)(pages()), 30, "a page counted in /metrics")
        # bounded wait, not a fixed sleep: a new host's first pages may wait for its robots.txt
        second = wait_for(lambda: (lambda p: p if p and p > first else None)(pages()), 30, "the counter increasing")
        workers.stop_all()
    assert second is not None and second > first > 0
