"""Screens from live state: a paused crawl is a banner with `paused` nodes and no ETA, gone nodes
leave the list after NODE_RETENTION_SECONDS, the audit is human, one "stored"."""

from __future__ import annotations

import json

import pytest
import redis
from rich.console import Console

from distributed_crawler.cli.main import main
from distributed_crawler.core.control import audit_words
from distributed_crawler.monitoring.status import live_view, render_status, status_now, stored_total
from tests.test_control import _dcrawl


def node(node_id: str, state: str, alive: bool, last_seen: float) -> dict:
    return {"id": node_id, "state": state, "alive": alive, "last_seen": last_seen}


def test_gone_nodes_leave_the_list_after_the_retention_and_live_ones_of_a_paused_crawl_are_paused() -> None:
    now = 10_000.0
    nodes = [
        node("run", "running", True, now - 1),
        node("idle", "idle", True, now - 1),
        node("drain", "draining", True, now - 1),
        node("closed-recently", "closed", False, now - 600),
        node("closed-long-ago", "closed", False, now - 7200),
        node("dead-long-ago", "dead", False, now - 3601),
    ]
    shown = live_view(nodes, now, 3600, paused=False)
    assert [n["id"] for n in shown] == ["run", "idle", "drain", "closed-recently"]
    assert [n["state"] for n in live_view(nodes, now, 0, paused=True)] == [
        "paused",
        "paused",
        "draining",
        "closed",
        "closed",
        "dead",
    ]  # 0 = kept forever
    assert (
        stored_total({"items": 199}, {"article": {"stored": 205, "skipped": 3}, "list": {"stored": 0, "skipped": 9}})
        == 205
    )
    assert stored_total({"items": 7}, {}) == 7  # a spider without page types: its committed items


def test_a_paused_crawl_is_a_banner_and_has_no_eta(redis_url: str, redis_client: redis.Redis) -> None:
    redis_client.lpush("news:start_urls", *[f"https://example.com/{i}" for i in range(3)])
    assert main(["pause", "news", "--by", "alice", "--redis-url", redis_url]) == 0
    from scrapy.settings import Settings

    status = status_now(redis_client, Settings({"REDIS_URL": redis_url}), "news")
    assert status["totals"]["eta_seconds"] is None and status["control"]["paused"]["by"] == "alice"
    console = Console(record=True, width=100)
    console.print(render_status(status))
    text = console.export_text()
    assert text.splitlines()[1].startswith(" PAUSED since ") and "by alice" in text and "dcrawl resume news" in text
    assert "drains in paused" in text


def test_the_audit_says_old_to_new_in_words_and_local_time(
    redis_url: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setenv("COLUMNS", "160")
    assert _dcrawl(redis_url, "host", "news", "a.example.org", "set", "--delay", "2.5") == 0
    assert _dcrawl(redis_url, "host", "news", "a.example.org", "unset") == 0
    assert _dcrawl(redis_url, "pause", "news") == 0
    capsys.readouterr()
    assert _dcrawl(redis_url, "audit", "news") == 0
    out = capsys.readouterr().out
    assert "none -> delay 2.5" in out and "delay 2.5 -> none" in out and "running -> paused by alice" in out
    assert '{"' not in out  # no raw JSON
    assert audit_words("purge", json.dumps({"dropped": 3, "dead_letter": True})) == "3 pending dropped (dead-lettered)"
    assert audit_words("set", "not json") == "not json"


def test_tables_fit_80_columns_shortening_names_never_numbers(
    tmp_path, redis_url: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis.asyncio as aioredis

    from tests.test_events import article, make_feed, run, store

    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        await store(tmp_path, make_feed(lambda: client), [article(i) for i in range(205)])
        await client.aclose()

    run(scenario())
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["sources", "news", "--redis-url", redis_url]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    row = next(line for line in out.splitlines() if "example" in line)
    assert "205" in row.split(), out  # whole, in its own cell
    header = "".join(out.splitlines()[:6])
    assert "28d" in header and "state" in header, out


def test_the_node_table_keeps_figures_whole_at_80_columns_and_shows_more_when_wide(
    redis_url: str, redis_client: redis.Redis
) -> None:
    from scrapy.settings import Settings

    redis_client.lpush("news:start_urls", "https://example.com/")
    status = status_now(redis_client, Settings({"REDIS_URL": redis_url}), "news")
    long_id = "crawler-machine-07.example.internal-news-12"
    status["nodes"] = [
        {
            "id": long_id,
            "state": "running",
            "alive": True,
            "rate": 1234.0,
            "pages": 1234567,
            "items": 1234000,
            "errors": 12345,
            "in_flight": 32,
            "leases": 64,
            "rss": 512 * 1024 * 1024,
            "last_seen": status["time"] - 3,
        }
    ]
    shown = {}
    for width in (80, 160):
        console = Console(record=True, width=width)
        console.print(render_status(status))
        shown[width] = console.export_text()
        assert max(len(line.rstrip()) for line in shown[width].splitlines()) <= width
        row = next(line for line in shown[width].splitlines() if line.lstrip().startswith("crawler-"))
        assert {"1,234", "1,234,567", "1,234,000", "12,345", "3s"} <= set(row.split()), row
    assert long_id not in shown[80] and "crawler-" in shown[80]  # the name shortened, not a figure
    assert long_id in shown[160] and "512M" in shown[160] and "RSS" in shown[160] and "RSS" not in shown[80]
