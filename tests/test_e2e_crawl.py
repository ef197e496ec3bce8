"""End to end: real worker processes, a real redis-server, the demo site, SQLite storage."""

from __future__ import annotations

import json
import pickle
import sqlite3
from pathlib import Path

import pytest
import redis

from tests.conftest import Workers, crawl_preflight, free_port, one_error_line
from tests.site.server import NewsSite

pytestmark = [pytest.mark.e2e]


def stored_rows(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT url, node FROM items").fetchall()


def assert_clean_logs(workers: Workers) -> None:
    for node in workers.procs:
        log = workers.log(node)
        assert "Traceback" not in log, f"traceback in {node}'s log:\n{log[-4000:]}"
        assert "ERROR" not in log, f"error in {node}'s log:\n{log[-4000:]}"


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_bad_seeds_and_foreign_payloads_are_dead_lettered_not_run(
    site: NewsSite, workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    bad_seeds = [
        "not a url",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "{broken",
        '{"url": 5}',
        '{"url": "http://e.com/", "meta": [1]}',
        "http://x/" + "a" * 100_000,
    ]
    redis_client.rpush("news:start_urls", *bad_seeds, site.url + "/about")
    pickled = pickle.dumps(("os.system", f"touch {marker}"))
    redis_client.zadd("{news}:requests", {b"0:0:" + pickled: 0, b"garbage": 1, b'0:0:{"v":1,"class":"os.system"}': 2})
    workers.start("node-a")
    assert workers.wait_all(timeout=60) == {"node-a": 0}
    assert not marker.exists()
    assert {url for url, _ in stored_rows(tmp_path / "items.db")} == site.expected_urls()  # the crawl went on
    failed = [json.loads(e) for e in redis_client.lrange("{news}:failed", 0, -1)]
    seeds = [f for f in failed if f["source"] == "seed"]
    queue = [f for f in failed if f["source"] == "queue"]
    assert len(seeds) == len(bad_seeds) and len(queue) == 3
    assert all(f["reason"] and f["node"] == "node-a" for f in failed)
    assert redis_client.zcard("{news}:processing") == 0
    log = workers.log("node-a")
    assert "Traceback" not in log
    # Logged once per kind, counted in stats.
    assert log.count("Rejected a seed") == len(
        {"not_a_url", "bad_scheme", "bad_json", "bad_url", "bad_meta", "too_large"}
    )
    assert "'seeds/rejected/bad_scheme': 2" in log


def test_unreachable_redis_is_one_clear_line_and_nonzero_exit() -> None:
    url = f"redis://admin:s3cret-pw@127.0.0.1:{free_port()}/0"
    proc = crawl_preflight({"REDIS_URL": url})
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1, proc.stderr  # Scrapy's INFO start-up banner may precede it
    assert "Cannot reach Redis at redis://admin:***@127.0.0.1" in errors[0]
    assert "REDIS_URL" in errors[0]
    assert "Traceback" not in proc.stderr
    assert "s3cret-pw" not in proc.stderr + proc.stdout


def test_unreachable_storage_is_one_clear_line_and_nonzero_exit(redis_url: str) -> None:
    storage = f"postgresql://crawler:pg-s3cret@127.0.0.1:{free_port()}/items"
    proc = crawl_preflight({"REDIS_URL": redis_url, "STORAGE_URL": storage})
    assert "postgresql://crawler:***@127.0.0.1" in one_error_line(proc), proc.stderr
    assert "pg-s3cret" not in proc.stderr + proc.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-s", "SITEMAP_SINCE=two days"], "ERROR: SITEMAP_SINCE ('two days') must be seconds or a duration"),
        (["-s", "NEAR_DUPLICATE_WINDOW=x"], "ERROR: NEAR_DUPLICATE_WINDOW ('x') must be seconds or a duration"),
        (["-s", "RECRAWL_RULES=bogus"], "ERROR: RECRAWL_RULES ('bogus') must be a dict"),
        (["-s", "SCHEDULER_LEASE_SECONDS=soon"], "ERROR: SCHEDULER_LEASE_SECONDS ('soon') must be a number"),
        (["-s", "PLAYWRIGHT_SETTLE_MS=x"], "ERROR: PLAYWRIGHT_SETTLE_MS ('x') must be an integer"),
        (["-a", "max_idle_time=abc"], "ERROR: max_idle_time must be a number of seconds, not 'abc'"),
    ],
    ids=["spider", "news-window", "recrawl", "scheduler", "rendering-handler", "spider-argument"],
)
def test_a_setting_refused_while_the_crawler_starts_is_one_line(redis_url: str, args: list[str], expected: str) -> None:
    # refused in the spider's, the scheduler's or a download handler's constructor, after the
    # preflight: one line and exit 2, not asyncio's "Task exception was never retrieved"
    proc = crawl_preflight({"REDIS_URL": redis_url}, *args)
    assert one_error_line(proc).startswith(expected), proc.stderr


def test_an_unknown_spider_is_one_line_naming_the_known_ones(redis_url: str) -> None:
    proc = crawl_preflight({"REDIS_URL": redis_url}, spider="newz")
    assert one_error_line(proc).startswith("ERROR: no spider named 'newz' in this project (its spiders: ")
    assert "news" in proc.stderr


@pytest.mark.timeout(90)
@pytest.mark.parametrize("slow_open", [False, True], ids=["open", "still-opening"])
def test_a_dead_scheduler_task_closes_the_node_instead_of_hanging(
    workers: Workers, redis_client: redis.Redis, slow_open: bool
) -> None:
    redis_client.lpush("news:start_urls", "http://127.0.0.1:9/")
    bug = "SCHEDULER=tests.broken_scheduler.BuggyFeederScheduler"  # the feeder task dies at once
    # still-opening: the task dies while the pipelines open (a close then was undone by
    # the engine's start, and the node never ended)
    extra = (
        [
            'ITEM_PIPELINES={"tests.slow_open.SlowOpen": 100, "distributed_crawler.storage.pipeline.StoragePipeline": 300}'
        ]
        if slow_open
        else []
    )
    proc = workers.start("broken", bug, *extra)
    proc.wait(60)  # bounded: closing must not wait on the dead task
    log = workers.log("broken")
    assert "Scheduler task dc-feeder stopped" in log and "Closing spider (scheduler_error)" in log
