"""A node holding leases with nothing in flight for longer than a lease is `stalled`: its heartbeat
says so, `dcrawl status` (text and JSON) shows it, and it raises the alert `stalled` once per stall."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import redis
import redis.asyncio
from rich.console import Console
from scrapy.settings import Settings
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.policy import RedisPolicy
from distributed_crawler.monitoring.alerts import AlertConfig, Alerter
from distributed_crawler.monitoring.heartbeat import Heartbeat, HeartbeatConfig, sample_node
from distributed_crawler.monitoring.nodes import NodeKeys, beat, heartbeat_script
from distributed_crawler.monitoring.status import render_status, status_now


def fake_crawler(leases: int, stalled: float) -> Any:
    scheduler = SimpleNamespace(leases_held=leases, stalled_seconds=stalled)
    engine = SimpleNamespace(scheduler=scheduler, downloader=SimpleNamespace(active=set()), _slot=None, scraper=None)
    return SimpleNamespace(stats=MemoryStatsCollector(get_crawler()), engine=engine, crawling=True)


def test_the_heartbeat_reports_a_stalled_node() -> None:
    sample = sample_node(fake_crawler(leases=2, stalled=9.4))
    assert (sample.state, sample.stalled, sample.leases) == ("stalled", 9, 2)
    assert sample_node(fake_crawler(leases=2, stalled=0.0)).state == "running"  # holding, not for long
    assert sample_node(fake_crawler(leases=2, stalled=9.4), closed=True).state == "closed"


def test_status_shows_the_stalled_node_in_text_and_json(redis_client: redis.Redis) -> None:
    k = NodeKeys.from_settings(Settings(), "news")
    script = heartbeat_script(redis_client)
    run_sync(beat(script, k, "worker-1", 1.0, {"state": "stalled", "leases": 2, "stalled": 12}))
    run_sync(beat(script, k, "worker-2", 1.0, {"state": "running", "leases": 3, "in_flight": 3}))
    status = status_now(redis_client, Settings(), "news")
    nodes = {n["id"]: n for n in status["nodes"]}
    assert nodes["worker-1"]["state"] == "stalled" and nodes["worker-1"]["alive"]
    assert nodes["worker-1"]["stalled"] == 12 and nodes["worker-2"]["stalled"] == 0
    assert status["totals"]["nodes_stalled"] == 1 and status["totals"]["nodes_alive"] == 2
    json.dumps(status)
    console = Console(record=True, width=120)
    console.print(render_status(status, "news @ test"))
    text = console.export_text()
    assert "2 alive, 1 stalled" in text
    assert any("worker-1" in line and "stalled" in line for line in text.splitlines())


def test_a_stall_is_alerted_once_and_again_after_it_ended(redis_url: str, redis_client: redis.Redis) -> None:
    heartbeat = Heartbeat(
        get_crawler(),
        HeartbeatConfig(),
        None,
        AlertConfig(),
        "worker-1",
        RedisPolicy(redis_url),  # type: ignore[arg-type]
    )

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        heartbeat.alerter = Alerter(AlertConfig(), client, "{news}:alerts", "news", "worker-1", heartbeat.policy)
        stalled, busy = sample_node(fake_crawler(3, 7.0)), sample_node(fake_crawler(3, 0.0))
        for sample in (stalled, stalled, stalled, busy, stalled):
            await heartbeat._check_stalled(sample, 1000.0)
        await client.aclose()

    asyncio.run(scenario())
    alerts = [json.loads(a) for a in redis_client.lrange("{news}:alerts", 0, -1)]
    assert [(a["kind"], a["node"], a["leases"], a["seconds"]) for a in alerts] == [("stalled", "worker-1", 3, 7)] * 2
    assert "nothing in flight for 7s" in alerts[0]["message"]
