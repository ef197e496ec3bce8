"""Monitoring pieces on their own: settings, heartbeat records, liveness, alerts, dashboard server."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
import redis
import redis.asyncio
from rich.console import Console
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.policy import RedisPolicy
from distributed_crawler.monitoring.alerts import AlertConfig, Alerter
from distributed_crawler.monitoring.dashboard import DashboardServer, discover_spiders
from distributed_crawler.monitoring.heartbeat import Heartbeat, HeartbeatConfig, RateWindow
from distributed_crawler.monitoring.metrics import MetricsConfig, PrometheusMetrics
from distributed_crawler.monitoring.nodes import NodeKeys, beat, heartbeat_script, read_history, read_nodes, read_totals
from distributed_crawler.monitoring.status import render_status, status_now
from distributed_crawler.news.counts import NewsCounts
from tests.site.local import LoopbackServer


def keys() -> NodeKeys:
    return NodeKeys.from_settings(Settings(), "news")


# -- settings ---------------------------------------------------------------------------------
def test_heartbeat_is_on_by_default_and_can_be_turned_off() -> None:
    assert isinstance(Heartbeat.from_crawler(get_crawler(settings_dict={})), Heartbeat)
    with pytest.raises(NotConfigured):
        Heartbeat.from_crawler(get_crawler(settings_dict={"HEARTBEAT_ENABLED": False}))
    assert HeartbeatConfig.from_settings(Settings()) == HeartbeatConfig(10.0, 300.0, True)


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("HEARTBEAT_INTERVAL", 0, r"HEARTBEAT_INTERVAL \(0.0\) must be > 0"),
        ("HEALTH_NO_ITEMS_SECONDS", -1, r"HEALTH_NO_ITEMS_SECONDS \(-1.0\) must be >= 0"),
    ],
)
def test_bad_heartbeat_settings_name_the_value(setting: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HeartbeatConfig.from_settings(Settings({setting: value}))


def test_bad_alert_and_metrics_settings_name_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"ALERT_WEBHOOK_URL \(ftp://hooks.example/\.\.\.\) must be an http"):
        AlertConfig.from_settings(Settings({"ALERT_WEBHOOK_URL": "ftp://hooks.example/secret-path"}))
    with pytest.raises(ValueError, match=r"PROMETHEUS_PORT \(70000\)"):
        MetricsConfig.from_settings(Settings({"PROMETHEUS_PORT": 70000}))
    with pytest.raises(NotConfigured):
        PrometheusMetrics.from_crawler(get_crawler(settings_dict={}))
    monkeypatch.setenv("PROMETHEUS_PORT", "9410")  # env var overrides, one port per node on a host
    assert MetricsConfig.from_settings(Settings()).port == 9410


def test_rate_window_is_pages_per_minute_over_the_last_minute() -> None:
    window = RateWindow()
    assert window.add(0, 0) == 0.0
    assert window.add(10, 20) == 120.0  # 20 pages in 10 s
    for t in range(20, 130, 10):
        rate = window.add(t, 20)  # nothing more
    assert rate == 0.0 and len(window.samples) <= 8


# -- heartbeat records and liveness -----------------------------------------------------------
def test_beat_writes_node_hash_with_ttl_history_totals_and_liveness(redis_client: redis.Redis) -> None:
    k = keys()
    script = heartbeat_script(redis_client)
    fields = {
        "state": "running",
        "pages": 5,
        "items": 4,
        "errors": 1,
        "leases": 3,
        "rate": 60.0,
        "started": time.time(),
    }
    now = run_sync(beat(script, k, "n1", 1.0, fields, (5, 4, 1)))
    run_sync(beat(script, k, "n1", 1.0, {**fields, "pages": 7}, (2, 0, 0)))
    assert 0 < redis_client.ttl("{news}:node:n1") <= 4  # 3 intervals + 1 s
    assert redis_client.hget("{news}:node:n1", "pages") == b"7"
    (node,) = run_sync(read_nodes(redis_client, k))
    assert (node["id"], node["alive"], node["state"], node["pages"], node["leases"]) == ("n1", True, "running", 7, 3)
    assert run_sync(read_totals(redis_client, k)) == {"pages": 7, "items": 4, "errors": 1}
    history = run_sync(read_history(redis_client, k, now))
    assert len(history) == 60 and history[-1]["pages"] == 7 and history[-1]["minute"] == int(now // 60) * 60

    # Silent for more than 3 intervals (an old score, not a sleep): dead, last numbers kept.
    redis_client.zadd("{news}:nodes", {"n1": now - 10})
    (node,) = run_sync(read_nodes(redis_client, k))
    assert (node["alive"], node["state"], node["pages"], node["leases"], node["rate"]) == (False, "dead", 7, 3, 0.0)
    redis_client.delete("{news}:node:n1")  # the hash expired: the snapshot still tells
    (node,) = run_sync(read_nodes(redis_client, k))
    assert (node["state"], node["pages"], node["leases"]) == ("dead", 7, 3)

    # A closed node is not dead, and a node that beats again is no longer "alerted".
    redis_client.hset("{news}:nodes:alerted", "n1", now)
    run_sync(beat(script, k, "n1", 1.0, {**fields, "state": "closed", "leases": 0, "report": {"taken": 9}}))
    (node,) = run_sync(read_nodes(redis_client, k))
    assert (node["alive"], node["state"], node["report"]) == (False, "closed", {"taken": 9})
    assert not redis_client.hexists("{news}:nodes:alerted", "n1")


# -- alerts -------------------------------------------------------------------------------------
class SlowHook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        time.sleep(2)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_alert_is_logged_recorded_and_never_waits_for_the_webhook(
    redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    server = LoopbackServer(("127.0.0.1", 0), SlowHook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/secret-token-path"

    async def scenario() -> float:
        client = redis.asyncio.Redis.from_url(redis_url)
        alerter = Alerter(AlertConfig(url, 1.0, 2), client, "{news}:alerts", "news", "n0", RedisPolicy(redis_url))
        began = time.monotonic()
        for i in range(3):
            await alerter.alert("no_items", f"n{i}", "no item for 300s", time.time())
        took = time.monotonic() - began
        await alerter.close()
        await client.aclose()
        return took

    try:
        with caplog.at_level(logging.WARNING):
            took = asyncio.run(scenario())
    finally:
        server.shutdown()
        server.server_close()
    assert took < 0.9, "raising an alert waited for the webhook"  # one wait = its 1 s timeout
    assert [json.loads(a)["node"] for a in redis_client.lrange("{news}:alerts", 0, -1)] == ["n2", "n1"]  # capped
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 3 and "Health alert (no_items) for node n0 of news" in errors[0].getMessage()
    failed = [r.getMessage() for r in caplog.records if "webhook POST" in r.getMessage()]
    assert len(failed) == 3 and "secret-token-path" not in failed[0] and "timed out" in failed[0]


# -- dashboard server ---------------------------------------------------------------------------
@pytest.fixture
def dashboard(redis_url: str) -> Iterator[DashboardServer]:
    server = DashboardServer(("127.0.0.1", 0), Settings({"REDIS_URL": redis_url}), None, "s3cret")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def fetch(url: str, method: str = "GET", token: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_dashboard_needs_its_token_is_read_only_and_serves_status_json(
    dashboard: DashboardServer, redis_client: redis.Redis
) -> None:
    run_sync(beat(heartbeat_script(redis_client), keys(), "n1", 10.0, {"state": "idle"}))
    redis_client.lpush("other:start_urls", "http://e.com/")
    assert fetch(dashboard.url)[0] == 401
    assert fetch(dashboard.url + "api/status", token="wrong")[0] == 401
    code, page = fetch(dashboard.url + "?token=s3cret")
    assert code == 200 and b"pages per minute, last hour" in page
    assert fetch(dashboard.url + "api/status", method="POST", token="s3cret")[0] == 405
    assert fetch(dashboard.url + "api/status", method="DELETE", token="s3cret")[0] == 405
    code, body = fetch(dashboard.url + "api/status/news", token="s3cret")
    served = json.loads(body)
    expected = status_now(redis_client, Settings(), "news")
    assert abs(served.pop("time") - expected.pop("time")) < 5 and served == expected
    assert json.loads(fetch(dashboard.url + "api/spiders", token="s3cret")[1]) == ["news", "other"]
    assert discover_spiders(redis_client, Settings()) == ["news", "other"]


def _with_host(url: str, host: str) -> int:
    request = urllib.request.Request(url, headers={"Host": host, "Authorization": "Bearer s3cret"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_dashboard_answers_only_its_own_host_names(redis_url: str) -> None:
    """DNS rebinding: a page of evil.example, its name now resolving to 127.0.0.1, gets 421."""
    server = DashboardServer(
        ("127.0.0.1", 0), Settings({"REDIS_URL": redis_url}), None, "s3cret", frozenset({"crawl.internal"})
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        url = server.url + "api/spiders"
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "crawl.internal", "CRAWL.internal:80"):
            assert _with_host(url, host) == 200, host
        for host in (f"evil.example:{port}", "127.0.0.1.evil.example", "", "10.0.0.1"):
            assert _with_host(url, host) == 421, host
    finally:
        server.shutdown()
        server.server_close()


def test_dashboard_on_every_address_answers_this_machines_names_and_ips(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from distributed_crawler.monitoring.dashboard import allowed_hosts

    monkeypatch.setenv("DASHBOARD_ALLOWED_HOSTS", "crawl.example.org, other.example")
    assert allowed_hosts(Settings()) == {"crawl.example.org", "other.example"}
    server = DashboardServer(("0.0.0.0", 0), Settings({"REDIS_URL": redis_url}), None, "s3cret")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/api/spiders"
        for host in (socket.gethostname(), "10.1.2.3:8080", "[fd00::1]:8080"):
            assert _with_host(url, host) == 200, host
        assert _with_host(url, "rebound.evil.example") == 421
    finally:
        server.shutdown()
        server.server_close()


def test_status_renders_dead_nodes_and_alerts(redis_client: redis.Redis) -> None:
    k = keys()
    script = heartbeat_script(redis_client)
    now = run_sync(beat(script, k, "worker-1", 1.0, {"state": "running", "pages": 3, "leases": 2}))
    redis_client.zadd(k.nodes, {"worker-1": now - 60})
    redis_client.lpush(
        k.alerts, json.dumps({"time": now, "kind": "dead_node", "node": "worker-1", "message": "no heartbeat"})
    )
    console = Console(record=True, width=100)
    console.print(render_status(status_now(redis_client, Settings(), "news"), "news @ test"))
    text = console.export_text()
    assert "worker-1" in text and "dead" in text and "1 dead" in text
    assert "alert" in text and "dead_node worker-1: no heartbeat" in text


def test_status_counts_pages_per_type_and_language_for_the_cluster(redis_client: redis.Redis) -> None:
    empty = status_now(redis_client, Settings(), "news")
    assert empty["page_types"] == {t: {"stored": 0, "skipped": 0} for t in ("article", "list", "other")}
    assert empty["languages"] == {"skipped": {}, "top_hosts": []}
    for node in range(2):  # two nodes' counts add up
        counts = NewsCounts(redis_client, "{news}:stats", "{news}:language:skipped")
        for _ in range(3):
            counts.stored("article")
        counts.not_stored("list", ("page_type", "list"), "a.example")
        counts.not_stored("article", ("language", "fr"), "a.example")
        counts.not_stored("article", ("language", "it"), f"h{node}.example")
        run_sync(counts.flush())
    status = status_now(redis_client, Settings(), "news")
    assert status["page_types"] == {
        "article": {"stored": 6, "skipped": 4},  # not stored for their language
        "list": {"stored": 0, "skipped": 2},
        "other": {"stored": 0, "skipped": 0},
    }
    assert status["languages"]["skipped"] == {"fr": 2, "it": 2}
    assert status["languages"]["top_hosts"][0] == {"host": "a.example", "skipped": 2}
    assert len(status["languages"]["top_hosts"]) == 3
    console = Console(record=True, width=200)
    console.print(render_status(status, "news @ test"))
    text = console.export_text()
    assert "page types (stored/skipped) article 6/4, list 0/2, other 0/0" in text
    assert "not stored for language fr 2, it 2" in text
    redis_client.delete("{news}:language:skipped")
    redis_client.set("{news}:language:skipped", "garbage")
    status = status_now(redis_client, Settings(), "news")
    assert status["languages"]["top_hosts"] == [] and status["page_types"]["article"]["stored"] == 6
    assert [w["key"] for w in status["wrong_type"]] == ["{news}:language:skipped"]


def test_status_shows_pages_not_stored_for_their_robots_meta_per_host(redis_client: redis.Redis) -> None:
    assert status_now(redis_client, Settings(), "news")["robots_meta"] == {"skipped": {}, "top_hosts": []}
    for node in range(2):  # what the news spider counts for a noindex page, on two nodes
        counts = NewsCounts(redis_client, "{news}:stats", "{news}:robots:skipped")
        counts.skipped("robots", "noindex", "a.example")
        counts.skipped("robots", "noindex", f"h{node}.example")
        run_sync(counts.flush())
    status = status_now(redis_client, Settings(), "news")
    assert status["robots_meta"] == {
        "skipped": {"noindex": 4},
        "top_hosts": [
            {"host": "a.example", "skipped": 2, "reason": "noindex"},
            {"host": "h1.example", "skipped": 1, "reason": "noindex"},
            {"host": "h0.example", "skipped": 1, "reason": "noindex"},
        ],
    }
    assert status["page_types"]["article"] == {"stored": 0, "skipped": 0}  # not a page type's count
    console = Console(record=True, width=200)
    console.print(render_status(status, "news @ test"))
    assert "not stored for robots meta noindex 4 (a.example 2, h1.example 1, h0.example 1)" in console.export_text()
    redis_client.hset("{news}:stats", mapping={"robots:x y:skipped": 5, "robots:nofollow:skipped": "many"})
    assert status_now(redis_client, Settings(), "news")["robots_meta"]["skipped"] == {"noindex": 4}  # garbage left out
    redis_client.delete("{news}:robots:skipped")
    redis_client.set("{news}:robots:skipped", "garbage")
    status = status_now(redis_client, Settings(), "news")
    assert status["robots_meta"]["top_hosts"] == [] and [w["key"] for w in status["wrong_type"]] == [
        "{news}:robots:skipped"
    ]
