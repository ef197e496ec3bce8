"""scrapy-redis's example-project, moved over (tests/compat/project), crawling the local test site.

The three shapes: a RedisSpider fed from Redis, a RedisCrawlSpider whose rules follow every link,
and a plain CrawlSpider with start_urls that is stopped and resumed. The project reaches Redis with
REDIS_HOST/REDIS_PORT only (no REDIS_URL anywhere), as a scrapy-redis project does. Page counts are
what a scrapy-redis user gets from the same spiders: every page the site serves with status 200 that
robots.txt allows (tests/site: `expected_urls`), each stored once.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from distributed_crawler.dedup.fingerprint import canonicalize_url
from tests.conftest import LOOPBACK_SITE_SETTINGS, ROOT, RedisServer
from tests.site.server import NewsSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _env(redis_server: RedisServer, site: NewsSite, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDIS_")}
    env.update(
        SCRAPY_SETTINGS_MODULE="tests.compat.project.settings",
        COMPAT_REDIS_PORT=str(redis_server.port),
        COMPAT_SITE_URL=site.url,
        STORAGE_URL=f"sqlite:///{tmp_path / 'items.db'}",
        MAX_IDLE_TIME_BEFORE_CLOSE="2",
        PYTHONPATH=str(ROOT),
    )
    return env


def _crawl(env: dict[str, str], tmp_path: Path, spider: str, *args: str, timeout: float = 150) -> str:
    """Run `scrapy crawl SPIDER ARGS` to its end; the log, after checking it exited 0."""
    log = tmp_path / f"{spider}.log"
    with open(log, "ab") as out:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "scrapy",
                "crawl",
                spider,
                *(a for s in LOOPBACK_SITE_SETTINGS for a in ("-s", s)),
                *args,
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    text = log.read_text(errors="replace")
    assert proc.returncode == 0, f"{spider} exited {proc.returncode}:\n{text[-4000:]}"
    assert "Traceback" not in text, text[-4000:]
    return text


def _stored(tmp_path: Path) -> list[str]:
    """Stored pages, canonical: the example spiders store `response.url`, which is whichever link
    to a page came first (`?utm_source=...` or not); dedup already made each page one fetch."""
    db = tmp_path / "items.db"
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        return [canonicalize_url(r[0]) for r in conn.execute("SELECT url FROM items")]


@pytest.fixture
def site():
    with NewsSite(articles=40, per_page=10) as s:
        yield s


@pytest.fixture
def clean_redis(redis_server: RedisServer) -> redis.Redis:
    client = redis.Redis(port=redis_server.port)
    client.flushall()
    yield client
    client.close()


@pytest.mark.timeout(200)
def test_myspider_redis_fetches_every_seed(redis_server, clean_redis, site: NewsSite, tmp_path: Path) -> None:
    seeds = [f"{site.url}/article/{i}" for i in range(1, 11)]
    readme_seed = {"url": f"{site.url}/about", "meta": {"job-id": "123xsd"}, "url_cookie_key": "fertxsas"}
    clean_redis.rpush("myspider:start_urls", *seeds, json.dumps(readme_seed))
    _crawl(_env(redis_server, site, tmp_path), tmp_path, "myspider_redis", "-a", "domain=127.0.0.1")
    stored = sorted(_stored(tmp_path))
    assert stored == sorted([*seeds, f"{site.url}/about?url_cookie_key=fertxsas"])
    assert clean_redis.llen("{myspider_redis}:failed") == 0


@pytest.mark.timeout(200)
@pytest.mark.parametrize("queue", ["host", "scrapy_redis.queue.PriorityQueue", "scrapy_redis.queue.FifoQueue"])
def test_mycrawler_redis_rules_follow_every_link(
    redis_server, clean_redis, site: NewsSite, tmp_path: Path, queue: str
) -> None:
    clean_redis.lpush("mycrawler:start_urls", site.url + "/")
    log = _crawl(
        _env(redis_server, site, tmp_path),
        tmp_path,
        "mycrawler_redis",
        "-a",
        "domain=127.0.0.1",
        "-s",
        f"SCHEDULER_QUEUE_CLASS={queue}",
    )
    # every page once; the seed (the front page, linked from no other page) goes to
    # parse_start_url, which makes no item, as in Scrapy and scrapy-redis
    stored = _stored(tmp_path)
    assert set(stored) == site.expected_urls() - {site.url + "/"}
    assert len(stored) == len(set(stored))
    assert "scheduler/unserializable" not in log and "scheduler/undecodable" not in log
    assert clean_redis.llen("{mycrawler_redis}:failed") == 0
    assert clean_redis.zcard("{mycrawler_redis}:processing") == 0


@pytest.mark.timeout(300)
def test_plain_crawlspider_stops_and_resumes(redis_server, clean_redis, site: NewsSite, tmp_path: Path) -> None:
    env = _env(redis_server, site, tmp_path)
    first = _crawl(env, tmp_path, "dmoz", "-s", "CLOSESPIDER_PAGECOUNT=8")
    assert "closespider_pagecount" in first
    after_stop = len(_stored(tmp_path))
    assert 0 < after_stop < len(site.expected_urls()) - 1
    status = subprocess.run(
        [sys.executable, "-m", "distributed_crawler", "status", "dmoz", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr  # dcrawl reaches Redis through REDIS_HOST/PORT too
    summary = json.loads(status.stdout)
    left = summary["pending"] + summary["hosts"]["count"] + summary["delayed"]
    assert left > 0, summary
    second = _crawl(env, tmp_path, "dmoz")
    assert "Resuming crawl (" in second
    stored = _stored(tmp_path)
    # the start page goes to parse_start_url; a later link back to it is a rule page like any other
    assert set(stored) == site.expected_urls() - {site.url + "/"}  # the start page: parse_start_url
    assert len(stored) == len(set(stored))
    assert clean_redis.zcard("{dmoz}:processing") == 0


@pytest.mark.timeout(200)
def test_persist_false_flushes_on_any_close_reason(redis_server, clean_redis, site: NewsSite, tmp_path: Path) -> None:
    env = _env(redis_server, site, tmp_path)
    log = _crawl(env, tmp_path, "dmoz", "-s", "CLOSESPIDER_PAGECOUNT=5", "-s", "SCHEDULER_PERSIST=False")
    assert "closespider_pagecount" in log
    leftovers = [
        k for k in clean_redis.scan_iter(match="{dmoz}:*") if not k.startswith((b"{dmoz}:node", b"{dmoz}:stats"))
    ]
    kinds = {k: clean_redis.type(k) for k in leftovers}
    queue_like = [
        k for k in leftovers if b":q:" in k or k.endswith((b":requests", b":dupefilter", b":hosts", b":processing"))
    ]
    assert queue_like == [], kinds
