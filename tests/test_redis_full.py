"""Redis at `maxmemory` (noeviction refuses writes): a node waits with its work kept, says so once
with the fix, and finishes the crawl once memory is available again."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
import redis

from tests.conftest import RedisServer, Workers
from tests.site.server import NewsSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FULL_LINE = "is full (maxmemory reached)"


@pytest.mark.timeout(150)
def test_full_redis_stalls_the_node_without_losing_work(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, "--maxmemory-policy", "noeviction").start()
    client = redis.Redis.from_url(server.url)
    workers = Workers(
        tmp_path,
        {
            "REDIS_URL": server.url,
            "STORAGE_URL": f"sqlite:///{tmp_path / 'items.db'}",
            "MAX_IDLE_TIME_BEFORE_CLOSE": "2",
        },
    )
    try:
        with NewsSite(articles=120, per_page=20, delay=0.05) as site:
            workers.start("node-a", "CONCURRENT_REQUESTS=4", "HEARTBEAT_INTERVAL=1")
            workers.wait_ready("node-a")
            client.lpush("news:start_urls", site.url + "/")
            deadline = time.monotonic() + 60
            while site.hits("/article") < 10:
                assert time.monotonic() < deadline, "the crawl did not start"
                time.sleep(0.05)

            client.config_set("maxmemory", "1")  # every write refused from now on
            deadline = time.monotonic() + 30
            while FULL_LINE not in workers.log("node-a"):
                assert workers.procs["node-a"].poll() is None, f"node died:\n{workers.log('node-a')[-3000:]}"
                assert time.monotonic() < deadline, "no 'Redis is full' line"
                time.sleep(0.1)
            time.sleep(3)  # the node keeps retrying meanwhile; it must neither die nor drop work
            assert workers.procs["node-a"].poll() is None, f"node died:\n{workers.log('node-a')[-3000:]}"
            client.config_set("maxmemory", "0")

            codes = workers.wait_all(timeout=90)
            assert codes == {"node-a": 0}
            with sqlite3.connect(tmp_path / "items.db") as conn:
                urls = [row[0] for row in conn.execute("SELECT url FROM items")]
            assert len(urls) == len(set(urls))
            assert set(urls) == site.expected_urls(), "pages lost while Redis was full"
            assert client.zcard("{news}:processing") == 0
            assert client.llen("{news}:failed") == 0
            log = workers.log("node-a")
            assert "Traceback" not in log, log[-4000:]
            full_lines = [line for line in log.splitlines() if FULL_LINE in line]
            # once per task that met the full Redis (outbox, feeder, leases, heartbeat...), not per call
            assert 1 <= len(full_lines) <= 8, "\n".join(full_lines)
            assert all("raise maxmemory or free memory" in line for line in full_lines)
    finally:
        workers.stop_all()
        client.close()
        server.stop()
