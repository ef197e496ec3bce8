"""End to end: two workers with the default settings crawl a news site beside crawler traps
(tests/hostile/traps.py): every article is stored, every trap ends bounded, each refusal is one
dead letter with its reason, and the workers stay alive and stop on their own once idle."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import redis

from tests.conftest import Workers, dcrawl
from tests.hostile.traps import TrapSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# The defaults, but for the wall time: the slow-loris is bounded by DOWNLOAD_TIMEOUT whatever its
# value (Scrapy's 180 s would hold the test that long), and one host is crawled without a rate.
SETTINGS = ("DOWNLOAD_TIMEOUT=3", "RETRY_TIMES=0", "DOMAIN_RATE_LIMIT=0")


def stored_urls(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {row[0] for row in conn.execute("SELECT url FROM items")}


@pytest.mark.timeout(150)
def test_traps_are_bounded_refusals_dead_lettered_articles_stored(
    workers: Workers, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with TrapSite() as site:
        seeded = dcrawl(redis_url, "seed", "news", "--site", site.url + "/")
        assert seeded.returncode == 0, seeded.stderr
        workers.start("node-a", *SETTINGS)
        workers.start("node-b", *SETTINGS)
        assert workers.wait_all(120) == {"node-a": 0, "node-b": 0}  # alive to the end, idle exit
        hits = dict(site.hits)

    stored = stored_urls(tmp_path / "items.db")
    assert set(site.article_urls()) <= stored
    # Traps end: the calendar at DEPTH_LIMIT (20) links from the home page, either way from day 0;
    # the ever-deeper path at URL_MAX_SEGMENTS (16); the repeating path at its third repeat;
    # the redirect chain at Scrapy's REDIRECT_MAX_TIMES (20); the loop at the seen-filter.
    assert 0 < hits["calendar"] <= 2 * 20
    assert 0 < hits["deep"] <= 16
    assert 0 < hits["again"] <= 2
    assert 0 < hits["chain"] <= 21
    assert 0 < hits["loop"] <= 3
    for trap in ("bomb", "huge", "stream", "slow", "headers", "sitemap-bomb.xml.gz"):
        assert hits[trap] == 1, (trap, hits)  # refused once, never retried or redelivered

    letters = [json.loads(raw) for raw in redis_client.lrange("{news}:failed", 0, -1)]
    by_url = {letter["url"].removeprefix(site.url): letter for letter in letters}
    for path in ("/bomb", "/huge", "/stream", "/headers"):
        assert by_url[path]["reason"] == "too_large", by_url.get(path)
    assert by_url["/sitemap-bomb.xml.gz"]["kind"] == "bad_sitemap"
    assert by_url["/again/a/a/a/"]["reason"] == "repeated_segments"
    assert [p for p, x in by_url.items() if x["reason"] == "path_segments"] == [
        "/deep/" + "/".join(str(n) for n in range(1, 17))  # 17 segments
    ]
    assert "DownloadTimeoutError" in by_url["/slow"]["reason"]
    assert len(letters) == len(by_url)  # one dead letter per refused URL

    # an operator sees the traps: refusals per reason for the host
    hosts = dcrawl(redis_url, "hosts", "news", "--json")
    assert hosts.returncode == 0, hosts.stderr
    refused = {row["host"]: row["reasons"] for row in json.loads(hosts.stdout)["refused"]}
    assert refused["127.0.0.1"] == {"too_large": 4, "path_segments": 1, "repeated_segments": 1}

    logs = workers.log("node-a") + workers.log("node-b")
    # Scrapy logs the slow-loris's timeout as a download error, with its traceback: the only one
    assert logs.count("Traceback") == logs.count("Error downloading") == 1 and "/slow>" in logs
    assert "memusage_exceeded" not in logs
