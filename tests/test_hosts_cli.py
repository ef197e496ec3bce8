"""`dcrawl hosts` and the status's `hosts` block, on hand-written host-mode keys (garbage included).

Fast: a real redis-server, `main()` in process, no crawl.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from rich.console import Console
from scrapy.settings import Settings

from distributed_crawler.cli.main import main
from distributed_crawler.connection.calls import run_sync, server_time
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.monitoring.dashboard import PAGE
from distributed_crawler.monitoring.hosts import host_name, host_summary
from distributed_crawler.monitoring.nodes import Skips
from distributed_crawler.monitoring.status import render_status, status_now

KEYS = SpiderKeys.from_settings(Settings(), "news")


def queue(client: redis.Redis, host: str, n: int) -> None:
    client.zadd(KEYS.host_queue(host), {f'0:0:{{"url": "http://{host}/{i}"}}': i for i in range(n)})


def frontier(client: redis.Redis) -> float:
    """A small frontier: due, waiting, blocked, over budget, and garbage of every kind. Returns now."""
    now = float(run_sync(server_time(client)))
    client.zadd(KEYS.ready, {"a.com": now - 5, "b.com": now + 30, "c.com": now + 600, "e.com": now, "g.com": now})
    queue(client, "a.com", 3)
    queue(client, "b.com", 7)
    queue(client, "c.com", 1)
    queue(client, "d.com", 5)
    queue(client, "g.com", 2)
    # b.com's robots.txt was waited for long ago: its reason stays in the hash, the block is over
    client.hset(
        KEYS.host("b.com"),
        mapping={"iv": "0.5", "cd": "30", "pages": "4", "max": "-1", "until": now - 3600, "why": "robots.txt pending"},
    )
    client.hset(KEYS.host("c.com"), mapping={"until": now + 600, "why": "429 Retry-After: 600\x1b[31m", "bo": "2"})
    client.hset(KEYS.host("d.com"), mapping={"pages": "10", "max": "10"})
    client.zadd(KEYS.over_budget, {"d.com": 5})
    # garbage: host names that are not short printable text, fields that are not numbers,
    # a queue and a state hash of the wrong type, a block decades long
    client.zadd(KEYS.ready, {b"\xff\xfe": now, b"bad host\n": now, b"x" * 400: now, b"": now})
    client.zadd(KEYS.over_budget, {b"\x00\x01": 1})
    client.hset(KEYS.host("a.com"), mapping={"iv": b"nan", "bo": b"inf", "pages": b"\xff", "max": b"1e999"})
    client.set(KEYS.host_queue("e.com"), "a string where a zset belongs")
    client.rpush(KEYS.host("e.com"), "a list where a hash belongs")
    client.hset(KEYS.host("g.com"), mapping={"until": "1e300", "why": b"\xff\xfe", "iv": "1e9", "bo": "65"})
    return now


def hosts_json(redis_url: str, capsys: pytest.CaptureFixture, *args: str) -> dict[str, Any]:
    assert main(["hosts", "news", "--json", "--redis-url", redis_url, *args]) == 0
    return json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))


def test_hosts_lists_the_frontier_by_pending_and_skips_garbage(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture
) -> None:
    frontier(redis_client)
    data = hosts_json(redis_url, capsys)
    assert (data["count"], data["ready"], data["over_budget"]) == (11, 7, 2)  # raw sizes: garbage members too
    rows = {h["host"]: h for h in data["hosts"]}
    assert [h["host"] for h in data["hosts"]] == ["b.com", "d.com", "a.com", "g.com", "c.com", "e.com"]
    assert rows["b.com"]["pending"] == 7 and rows["b.com"]["interval"] == 30
    assert 20 < rows["b.com"]["due_in"] <= 30  # 30 s after `now`, minus the CLI's start-up
    assert rows["b.com"]["budget"] is None and rows["b.com"]["pages"] == 4 and not rows["b.com"]["over_budget"]
    # why it waits is read from its state now, never the reason a block left behind
    assert rows["b.com"]["why"] == "politeness delay" and rows["b.com"]["last_block"] == "robots.txt pending"
    assert rows["a.com"]["why"] == "" and rows["d.com"]["why"] == "page budget spent (DOMAIN_MAX_PAGES)"
    assert rows["a.com"]["due_in"] == 0 and rows["a.com"]["interval"] == 0 and rows["a.com"]["backoff"] == 0
    assert rows["a.com"]["budget"] is None and rows["a.com"]["pages"] == 0  # nan / inf / 1e999 -> defaults
    c = rows["c.com"]
    assert 590 < c["blocked_for"] <= 600 and c["blocked_until"] > data["time"] and c["backoff"] == 2
    assert c["why"].startswith("429 Retry-After: 600") and "\x1b" not in c["why"]
    assert rows["d.com"]["over_budget"] and rows["d.com"]["budget"] == 10 and rows["d.com"]["due_in"] is None
    assert rows["e.com"]["pending"] == 0 and rows["g.com"]["blocked_until"] is None
    assert rows["g.com"]["interval"] == 0 and rows["g.com"]["backoff"] == 0  # read as lib/host.lua reads them
    skipped = data["skipped"]
    assert skipped[KEYS.ready] == 4 and skipped[KEYS.over_budget] == 1
    assert skipped[KEYS.host_queue("<host>")] == 1 and skipped[KEYS.host("<host>")] == 2  # e.com's list, g.com's 1e300
    assert redis_client.type(KEYS.host_queue("e.com")) == b"string"  # reading changed nothing

    assert main(["hosts", "news", "--redis-url", redis_url]) == 0
    out, err = capsys.readouterr()
    assert "b.com" in out and "429" in out and "yes" in out and "11 hosts" in out
    assert "skipped 8 unreadable entries" in err


def test_hosts_work_is_bounded_by_scan_and_limit(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture
) -> None:
    now = float(redis_client.time()[0])
    redis_client.zadd(KEYS.ready, {f"h{i:03d}.example": now + i for i in range(200)})
    for i in range(0, 200, 10):
        queue(redis_client, f"h{i:03d}.example", i // 10 + 1)
    data = hosts_json(redis_url, capsys, "--scan", "40", "--limit", "3")
    assert data["count"] == 200 and data["scanned"] == 50  # 40 due soonest + 10 latest
    assert [h["host"] for h in data["hosts"]] == [
        "h190.example",
        "h030.example",
        "h020.example",
    ]  # h190 is among the latest due
    everything = hosts_json(redis_url, capsys, "--scan", "0", "--limit", "1")
    assert everything["scanned"] == 200 and everything["hosts"][0]["host"] == "h190.example"
    assert main(["hosts", "news", "--limit", "0", "--redis-url", redis_url]) == 1
    assert "--limit (0) must be at least 1" in capsys.readouterr().err


def test_hosts_name_a_wrong_type_key_and_an_empty_frontier(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture
) -> None:
    assert main(["hosts", "news", "--redis-url", redis_url]) == 0
    assert "no host queued for news" in capsys.readouterr().out
    redis_client.set(KEYS.ready, "a string")
    redis_client.zadd(KEYS.over_budget, {"d.com": 3})
    data = hosts_json(redis_url, capsys)
    assert [w["key"] for w in data["wrong_type"]] == [KEYS.ready] and data["count"] == 1
    status = status_now(redis_client, Settings(), "news")
    assert [w["key"] for w in status["wrong_type"]] == [KEYS.ready] and status["hosts"]["over_budget"] == 1


def test_status_counts_hosts_ready_blocked_over_budget_and_top(redis_client: redis.Redis) -> None:
    frontier(redis_client)
    status = status_now(redis_client, Settings(), "news")
    hosts = status["hosts"]
    assert (hosts["count"], hosts["ready"], hosts["waiting"], hosts["over_budget"]) == (11, 7, 2, 2)
    assert hosts["blocked"] == 1 and hosts["blocked_exact"] and hosts["blocked_hosts"][0]["host"] == "c.com"
    assert [h["host"] for h in hosts["top"][:3]] == ["b.com", "d.com", "a.com"]
    assert status["skipped"][KEYS.ready] == 4  # garbage names counted once, not once per read
    for field in ("pending", "leased", "delayed", "failed", "nodes", "dedup", "totals", "proxies", "history"):
        assert field in status
    console = Console(record=True, width=120)
    console.print(render_status(status, "news @ test"))
    text = console.export_text()
    assert "hosts 11 (7 ready, 1 blocked, 2 over budget)" in text
    assert "top hosts by pending b.com 7, d.com 5, a.com 3" in text
    assert "blocked c.com until" in text and "429 Retry-After" in text


def test_status_blocked_count_is_a_lower_bound_past_the_sample(redis_client: redis.Redis) -> None:
    now = float(redis_client.time()[0])
    redis_client.zadd(KEYS.ready, {f"h{i}.example": now + 100 + i for i in range(30)})
    for i in range(0, 30, 2):
        redis_client.hset(KEYS.host(f"h{i}.example"), mapping={"until": now + 100 + i, "why": "503"})
    skips = Skips()
    summary = run_sync(host_summary(redis_client, KEYS, now, skips, sample=10, top=2))
    assert summary["waiting"] == 30 and not summary["blocked_exact"] and summary["blocked"] == 5
    assert [h["host"] for h in summary["blocked_hosts"]] == [f"h{i}.example" for i in (28, 26, 24, 22, 20)]
    full = run_sync(host_summary(redis_client, KEYS, now, skips, sample=100))
    assert full["blocked"] == 15 and full["blocked_exact"] and len(full["top"]) == 10


def test_status_of_a_crawl_without_hosts_keeps_its_shape(redis_client: redis.Redis) -> None:
    status = status_now(redis_client, Settings(), "news")
    assert status["hosts"]["count"] == 0 and status["hosts"]["top"] == []
    console = Console(record=True, width=120)
    console.print(render_status(status))
    assert "hosts" not in console.export_text()


def test_dashboard_page_renders_the_hosts_block() -> None:
    assert "card(`hosts (" in PAGE and "panel hosts" in PAGE and "blocked until" in PAGE


@pytest.mark.parametrize(
    "raw, name",
    [
        (b"example.com", "example.com"),
        (b"example.com:8080", "example.com:8080"),
        ("b\u00fccher.de", "b\u00fccher.de"),
        (b"\xff", None),
        (b"a b", None),
        (b"a\tb", None),
        (b"", None),
        (b"h" * 301, None),
        (5, None),
    ],
)
def test_host_names_are_short_printable_text(raw: Any, name: str | None) -> None:
    assert host_name(raw) == name


def test_hosts_reads_what_the_host_mode_scripts_write(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture
) -> None:
    from distributed_crawler.dedup.dupefilter import SetDedup
    from distributed_crawler.frontier.enqueue import Enqueuer

    scripts = frontier_for_mode(redis_client, KEYS, "host")
    enqueuer = Enqueuer(scripts, SetDedup(KEYS.dupefilter))
    entries = [
        ("", True, f'0:0:{{"url": "http://{host}/{i}", "slot": "{host}"}}', 0.0, host, interval, budget)
        for host, n, interval, budget in (("a.example", 3, 0.5, None), ("b.example", 1, 0.0, 10))
        for i in range(n)
    ]
    run_sync(enqueuer.run("push", entries))
    data = hosts_json(redis_url, capsys)
    rows = {h["host"]: h for h in data["hosts"]}
    assert data["count"] == 2 and [h["host"] for h in data["hosts"]] == ["a.example", "b.example"]
    assert rows["a.example"]["pending"] == 3 and rows["a.example"]["interval"] == 0.5
    assert rows["b.example"]["budget"] == 10 and rows["b.example"]["due_in"] == 0
    run_sync(scripts.lease(10, 60))  # a.example gives one (interval), b.example its one
    rows = {h["host"]: h for h in hosts_json(redis_url, capsys)["hosts"]}
    assert (
        rows["a.example"]["pending"] == 2 and 0 < rows["a.example"]["due_in"] <= 0.525
    )  # interval + the send spread allowance
    assert data["skipped"] == {} and redis_client.hget(KEYS.host("b.example"), "pages") == b"1"
    assert "b.example" not in rows or rows["b.example"]["pages"] == 1  # an emptied host may leave ready
