"""One Redis face per node: every component shares one small pool, whatever the concurrency."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
import redis
from scrapy.utils.test import get_crawler

from distributed_crawler.core.context import RedisContext, client_name
from distributed_crawler.downloadermiddlewares.politeness import DomainRateLimitMiddleware
from distributed_crawler.monitoring.heartbeat import Heartbeat
from tests.conftest import Workers, free_port
from tests.site.server import NewsSite

MAX_NODE_CONNECTIONS = 4  # REDIS_MAX_CONNECTIONS (3) + the doorbell's pub/sub


def test_components_of_one_crawler_share_one_context_and_client() -> None:
    # the middleware keeps the rates of the single-queue modes (host mode: the pop does)
    crawler = get_crawler(settings_dict={"DOMAIN_RATE_LIMIT": 5, "NODE_ID": "n 1", "SCHEDULER_QUEUE_CLASS": "priority"})
    other = get_crawler(settings_dict={"NODE_ID": "n 1"})
    politeness = DomainRateLimitMiddleware.from_crawler(crawler)
    heartbeat = Heartbeat.from_crawler(crawler)
    context = RedisContext.of(crawler)
    assert RedisContext.of(crawler) is context
    assert RedisContext.of(other) is not context
    assert politeness.redis_config is heartbeat.redis_config is context.config
    assert heartbeat.node_id == context.node_id == "n 1"
    assert context.client is context.client  # built once (lazily), shared by every component
    assert context.pubsub_client is not context.client
    assert context.client.connection_pool.max_connections == 3
    assert context.keys_for("news") is context.keys_for("news")
    assert client_name("n 1") == "dc:n_1"


def test_redis_max_connections_is_checked() -> None:
    with pytest.raises(ValueError, match=r"REDIS_MAX_CONNECTIONS \(0\) must be >= 1"):
        RedisContext.of(get_crawler(settings_dict={"REDIS_MAX_CONNECTIONS": 0}))


@pytest.mark.slow  # over 5 s
@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_a_busy_node_holds_at_most_four_connections(workers: Workers, redis_url: str, tmp_path: Path) -> None:
    observer = redis.Redis.from_url(redis_url, client_name="observer")
    first_id = observer.client_id()  # ids grow: every later connection is the worker's
    with NewsSite(articles=300, per_page=20, delay=0.02) as site:
        workers.start(
            "conn-node",
            "CONCURRENT_REQUESTS=32",
            "DOMAIN_RATE_LIMIT=50",
            "HEARTBEAT_INTERVAL=1",
            f"PROMETHEUS_PORT={free_port()}",
        )
        workers.wait_ready("conn-node")
        observer.lpush("news:start_urls", site.url + "/")
        peak, samples, named = 0, 0, set()
        proc = workers.procs["conn-node"]
        started = time.monotonic()
        while proc.poll() is None and time.monotonic() - started < 100:
            clients = [c for c in observer.client_list() if int(c["id"]) > first_id and c.get("name") != "observer"]
            named.update(c.get("name", "") for c in clients)
            peak = max(peak, len(clients))
            samples += 1
            assert len(clients) <= MAX_NODE_CONNECTIONS, f"worker holds {len(clients)} connections: {clients}"
            time.sleep(0.05)
        assert workers.wait_all(timeout=30) == {"conn-node": 0}, workers.log("conn-node")[-3000:]
        expected = site.expected_urls()
    with sqlite3.connect(tmp_path / "items.db") as conn:
        urls = {url for (url,) in conn.execute("SELECT url FROM items")}
    assert urls == expected
    assert samples > 20, "the crawl ended before CLIENT LIST could be sampled"
    assert peak >= 2
    assert "dc:conn-node" in named and "dc:conn-node:pubsub" in named
    print(f"peak Redis connections of one node: {peak} ({samples} samples)")
    observer.close()
