"""The change feed end to end: 2 real workers crawl a multi-source site that keeps publishing.

Checked: every stored article appears in `{news}:events` as `new` under exactly one idempotency
key; an edited story gives `changed` (version 2); a story that answers 410 on its revisit gives
`removed`; after a kill -9 of a worker mid-crawl no stored row lacks its event; the same on
PostgreSQL; the webhook sink delivers every event to an endpoint that fails for 10 s first;
`dcrawl sources` flags the source that stopped publishing and one `source_silent` alert fires.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import redis

from distributed_crawler.events.feed import parse_entry
from distributed_crawler.events.webhook import SIGNATURE_HEADER, verify
from tests.conftest import ROOT, Workers, dcrawl, wait_for
from tests.site.fresh_site import FreshSite
from tests.site.local import LoopbackServer
from tests.test_storage import _pg_admin_dsn

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

RULES = json.dumps({r"/$": [1, 2], r"/story/": [2, 3]})
SETTINGS = (
    f"RECRAWL_RULES={RULES}",
    "RECRAWL_POLL_SECONDS=0.2",
    "SCHEDULER_LEASE_SECONDS=4",
    "STORE_PAGE_TYPES=article",
    "DOMAIN_RATE_LIMIT=0",
    "DOMAIN_MAX_IN_FLIGHT=0",
    "NEAR_DUPLICATES=False",
    "LOG_LEVEL=INFO",
)
STREAM = "{news}:events"


def sqlite_rows(db: Path) -> dict[str, int]:
    if not db.exists():
        return {}
    try:
        with sqlite3.connect(db) as conn:
            return {url: int(v or 1) for url, v in conn.execute("SELECT url, version FROM items")}
    except sqlite3.OperationalError:
        return {}


def stream(client: redis.Redis) -> list[dict[str, Any]]:
    return [parse_entry(i, f) for i, f in client.xrange(STREAM)]


def check_feed(events: list[dict[str, Any]], rows: dict[str, int]) -> None:
    """Every stored row has its events; `new` once per article by key; nothing announced unstored."""
    keys_new: dict[str, set[str]] = {}
    announced = set()
    for e in events:
        if e["event"] == "new":
            keys_new.setdefault(e["url"], set()).add(e["key"])
        if e["event"] in ("new", "changed"):
            announced.add((e["url"], e["version"]))
    assert set(keys_new) == set(rows), "a new event without a row, or a row without its new event"
    assert all(keys == {f"1 {url}"} for url, keys in keys_new.items())
    missing = [(u, v) for u, v in rows.items() if (u, v) not in announced]
    assert not missing, f"stored rows without their event: {missing[:5]}"


def crawl_and_change(
    cluster: Workers, site: FreshSite, rows: Callable[[], dict[str, int]], client: redis.Redis
) -> None:
    for url in site.urls:
        client.lpush("news:start_urls", url + "/")
    wait_for("every story stored", lambda: set(site.story_urls()) <= set(rows()), 90, cluster)
    edited = site.story_urls(0)[0]
    site.edit(0, 1)
    wait_for("the edited story stored again", lambda: rows().get(edited) == 2, 60, cluster)
    gone = site.story_urls(1)[1]
    site.remove(1, 2)
    wait_for(
        "the removed event",
        lambda: any(e["event"] == "removed" and e["url"] == gone for e in stream(client)),
        60,
        cluster,
    )
    events = stream(client)
    assert [(e["event"], e["version"]) for e in events if e["url"] == edited and e["event"] == "changed"] == [
        ("changed", 2)
    ]


@pytest.fixture
def cluster(tmp_path: Path, redis_url: str) -> Iterator[Workers]:
    workers = Workers(
        tmp_path,
        {
            "REDIS_URL": redis_url,
            "STORAGE_URL": f"sqlite:///{tmp_path / 'items.db'}",
            "MAX_IDLE_TIME_BEFORE_CLOSE": "0",
        },
    )
    yield workers
    workers.stop_all()


def test_sqlite_two_workers_kill9_every_row_has_its_event(
    cluster: Workers, tmp_path: Path, redis_client: redis.Redis
) -> None:
    db = tmp_path / "items.db"
    with FreshSite(sources=2, stories=3) as site:
        cluster.start("a", *SETTINGS)
        cluster.start("b", *SETTINGS)
        cluster.wait_ready("a", "b")
        site.run_publisher(0.5)
        for url in site.urls:
            redis_client.lpush("news:start_urls", url + "/")
        wait_for("a few stories stored", lambda: len(sqlite_rows(db)) >= 8, 60, cluster)
        cluster.kill9("a")  # mid-crawl: its leases come back to b, and c
        cluster.start("c", *SETTINGS)
        time.sleep(2)
        site.silence(0)
        site.silence(1)
        crawl_and_change(cluster, site, lambda: sqlite_rows(db), redis_client)
        check_feed(stream(redis_client), sqlite_rows(db))


@pytest.fixture
def pg_storage() -> Iterator[str]:
    """A fresh throwaway database on the machine's server (tests/test_storage.py's way)."""
    import uuid

    import psycopg

    admin = _pg_admin_dsn()
    if admin is None:
        pytest.skip("no PostgreSQL reachable at 127.0.0.1:5432 with trust auth")
    name = f"dc_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_postgresql_every_row_new_once_and_changed(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, pg_storage: str
) -> None:
    import psycopg

    def pg_rows() -> dict[str, int]:
        try:
            with psycopg.connect(pg_storage) as conn:
                return {u: int(v or 1) for u, v in conn.execute("SELECT url, version FROM items")}
        except psycopg.Error:
            return {}

    workers = Workers(tmp_path, {"REDIS_URL": redis_url, "STORAGE_URL": pg_storage, "MAX_IDLE_TIME_BEFORE_CLOSE": "0"})
    try:
        with FreshSite(sources=2, stories=4) as site:
            workers.start("a", *SETTINGS)
            workers.start("b", *SETTINGS)
            workers.wait_ready("a", "b")
            crawl_and_change(workers, site, pg_rows, redis_client)
            check_feed(stream(redis_client), pg_rows())
    finally:
        workers.stop_all()


def test_webhook_endpoint_failing_10s_receives_every_event(redis_url: str, redis_client: redis.Redis) -> None:
    received: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    refused = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if time.monotonic() - started < 10:
                refused[0] += 1
                self.send_response(500)
            elif verify(body, "s3cret", self.headers.get(SIGNATURE_HEADER, "")):
                event = json.loads(body)
                received[event["key"]] = event
                self.send_response(200)
            else:
                self.send_response(401)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = LoopbackServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    keys = [f"1 http://x.test/{i}" for i in range(20)]
    for key in keys:
        redis_client.xadd(STREAM, {"event": "new", "url": key.split(" ")[1], "version": "1", "key": key})
    env = {
        **os.environ,
        "EVENTS_WEBHOOK_URL": f"http://127.0.0.1:{server.server_address[1]}/hook",
        "EVENTS_WEBHOOK_SECRET": "s3cret",
    }
    args = [sys.executable, "-m", "distributed_crawler", "events", "news", "--webhook", "--consumer", "sink-1"]
    proc = subprocess.Popen([*args, "--redis-url", redis_url], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while len(received) < len(keys) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
        server.shutdown()
    assert sorted(received) == sorted(keys), err[-2000:]
    assert refused[0] >= 1 and proc.returncode == 0
    stats = redis_client.hgetall("{news}:events:webhook")
    assert int(stats[b"delivered"]) == 20 and int(stats[b"failed_attempts"]) >= 1
    status = json.loads(dcrawl(redis_url, "status", "news", "--json").stdout)
    assert status["events"]["webhook"]["delivered"] == 20


def test_sources_flags_the_silent_source_and_alerts_once(
    cluster: Workers, tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    db = tmp_path / "items.db"
    fast = ("SOURCE_SILENT_MIN_HOURS=0.002", "SOURCE_CHECK_SECONDS=0.5")  # silent after 7.2 s without news
    with FreshSite(sources=2, stories=1) as site:
        cluster.start("a", *SETTINGS, *fast)
        cluster.start("b", *SETTINGS, *fast)
        cluster.wait_ready("a", "b")
        site.run_publisher(1.0)
        for url in site.urls:
            redis_client.lpush("news:start_urls", url + "/")
        wait_for("stories of both sources", lambda: len(sqlite_rows(db)) >= 6, 60, cluster)
        site.silence(1)
        quiet = site.urls[1].split("//")[1].split(":")[0]

        def alerts() -> list[dict[str, Any]]:
            return [json.loads(a) for a in redis_client.lrange("{news}:alerts", 0, -1)]

        wait_for("the source_silent alert", lambda: any(a["kind"] == "source_silent" for a in alerts()), 60, cluster)
        time.sleep(3)  # more checks run: still one alert
        silent = [a for a in alerts() if a["kind"] == "source_silent"]
        assert [(a["source"], a["state"]) for a in silent] == [(quiet, "silent")]
        listed = json.loads(dcrawl(redis_url, "sources", "news", "--silent", "--json").stdout)
        assert [s["source"] for s in listed["sources"]] == [quiet]
        every = json.loads(dcrawl(redis_url, "sources", "news", "--json").stdout)
        assert {s["source"] for s in every["sources"]} == {quiet, site.urls[0].split("//")[1].split(":")[0]}
