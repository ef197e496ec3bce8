"""Redis at `maxmemory` (noeviction refuses writes) for longer than a lease: the nodes wait with
their work kept, say so once with the fix, and finish the crawl once memory is available again:
every article stored once, nothing left leased, no node renewing leases nobody works on, and the
workers close by themselves."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
import redis

from tests.conftest import RedisServer, Workers, dcrawl
from tests.site.server import NewsSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FULL_LINE = "is full (maxmemory reached)"
# A short lease so that a fault of three leases (12 s) keeps the test short: every lease held when
# Redis fills expires during the fault, as any real out-of-memory longer than 60 s does.
LEASE_SECONDS = 4


def _stored(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT url FROM items")]


@pytest.mark.timeout(240)
def test_full_redis_longer_than_a_lease_loses_nothing_and_stalls_nothing(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, "--maxmemory-policy", "noeviction").start()
    client = redis.Redis.from_url(server.url)
    db = tmp_path / "items.db"
    workers = Workers(
        tmp_path,
        {"REDIS_URL": server.url, "STORAGE_URL": f"sqlite:///{db}", "MAX_IDLE_TIME_BEFORE_CLOSE": "2"},
    )
    nodes = ("node-a", "node-b")
    try:
        with NewsSite(articles=120, per_page=20, delay=0.5) as site:
            for node in nodes:
                # DOMAIN_MAX_IN_FLIGHT: a cap on (the loopback site lifts the default 2; 8 keeps 8
                # leases out when Redis fills): its lease script first drops the in-flight marks of
                # finished or expired leases, a write a full Redis allows, so redelivered requests
                # reach busy nodes during the fault, and their releases are refused
                workers.start(
                    node,
                    "CONCURRENT_REQUESTS=4",
                    "HEARTBEAT_INTERVAL=1",
                    f"SCHEDULER_LEASE_SECONDS={LEASE_SECONDS}",
                    "DOMAIN_MAX_IN_FLIGHT=8",
                )
            workers.wait_ready(*nodes)
            client.lpush("news:start_urls", site.url + "/")
            deadline = time.monotonic() + 60
            while site.hits("/article") < 12:
                assert time.monotonic() < deadline, "the crawl did not start"
                time.sleep(0.05)

            # below what Redis uses now: every write is refused (acks free too little to matter)
            used = int(client.info("memory")["used_memory"])
            client.config_set("maxmemory", str(used // 2))
            deadline = time.monotonic() + 30
            while not all(FULL_LINE in workers.log(node) for node in nodes):
                for node in nodes:
                    assert workers.procs[node].poll() is None, f"{node} died:\n{workers.log(node)[-3000:]}"
                assert time.monotonic() < deadline, "no 'Redis is full' line"
                time.sleep(0.1)
            time.sleep(3 * LEASE_SECONDS)  # every lease held when Redis filled expires meanwhile
            for node in nodes:
                assert workers.procs[node].poll() is None, f"{node} died:\n{workers.log(node)[-3000:]}"
            client.config_set("maxmemory", "0")
            deadline = time.monotonic() + 30  # the first heartbeats Redis takes again (1 s apart)
            while not all(client.exists(f"{{news}}:node:{node}") for node in nodes):
                assert time.monotonic() < deadline, "no heartbeat after the fault"
                time.sleep(0.1)
            pages_at_restore = {node: int(client.hget(f"{{news}}:node:{node}", "pages") or 0) for node in nodes}

            codes = workers.wait_all(timeout=150)
            assert codes == {node: 0 for node in nodes}
            urls = _stored(db)
            assert len(urls) == len(set(urls)), "a page stored twice"
            assert set(urls) == site.expected_urls(), "pages lost while Redis was full"
            status = json.loads(dcrawl(server.url, "status", "news", "--json").stdout)
            assert (status["pending"], status["leased"], status["delayed"], status["failed"]) == (0, 0, 0, 0)
            assert {n["id"]: n["state"] for n in status["nodes"]} == {node: "closed" for node in nodes}
            # both kept crawling after the fault: neither waits for good on a lease nobody works on
            pages = {n["id"]: n["pages"] for n in status["nodes"]}
            assert all(pages[node] > pages_at_restore[node] for node in nodes), (pages_at_restore, pages)
            # no false alarm: heartbeats Redis refused make no node stalled or dead
            assert not [a for a in status["alerts"] if a["kind"] in ("stalled", "dead_node")], status["alerts"]
            for node in nodes:
                log = workers.log(node)
                assert "Traceback" not in log, log[-4000:]
                assert " stalled: it holds" not in log, log[-4000:]
                full_lines = [line for line in log.splitlines() if FULL_LINE in line]
                # once per outage episode (a write refused after a read answered is the same one)
                assert 1 <= len(full_lines) <= 8, "\n".join(full_lines)
                assert all("raise maxmemory or free memory" in line for line in full_lines)
    finally:
        workers.stop_all()
        client.close()
        server.stop()
