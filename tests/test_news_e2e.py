"""End to end: two `news` workers crawl a publisher seeded with `dcrawl seed news --site`, then its
wire copy; every article is stored once with its fields, old sitemap entries are never fetched,
aliases collapse onto the canonical URL, the syndicated copy is marked, garbage is dead-lettered,
and a rerun re-reads the sitemaps but not the articles (tests/site/news_portal.py)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.conftest import Workers, dcrawl
from tests.site.news_portal import BOILERPLATE, NewsPortal

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SETTINGS = ("SITEMAP_SINCE=2d", "SITEMAP_MAX_BYTES=1048576", "CONCURRENT_REQUESTS=8")


def rows(db: Path) -> dict[str, dict[str, Any]]:
    if not db.exists():
        return {}
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        try:
            return {r["url"]: dict(r) for r in conn.execute("SELECT * FROM items")}
        except sqlite3.OperationalError:  # table not made yet
            return {}


def dcrawl_ok(redis_url: str, *args: str) -> str:
    done = dcrawl(redis_url, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.timeout(240)
def test_news_site_articles_once_with_fields_duplicates_marked_garbage_dead_lettered(
    workers: Workers, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    db = tmp_path / "items.db"
    workers.env["MAX_IDLE_TIME_BEFORE_CLOSE"] = "4"
    with NewsPortal() as portal:
        P, W = portal.publisher_url, portal.wire_url
        dcrawl_ok(redis_url, "seed", "news", "--site", P)
        workers.start("node-a", *SETTINGS)
        workers.start("node-b", *SETTINGS)
        # The wire copy is seeded once the original is stored, so which one is the copy is known.
        deadline = time.monotonic() + 120
        while portal.url(2) not in rows(db):
            assert time.monotonic() < deadline, workers.log("node-a")[-3000:]
            assert all(p.poll() is None for p in workers.procs.values()), workers.log("node-a")[-3000:]
            time.sleep(0.1)
        dcrawl_ok(redis_url, "seed", "news", "--site", W)
        assert workers.wait_all(180) == {"node-a": 0, "node-b": 0}

        stored = rows(db)
        articles = {portal.url(i): portal.stories[i] for i in range(1, 6)}
        assert set(stored) == {P + "/", W + "/", portal.wire_story_url, *articles}
        for url, story in articles.items():
            row = stored[url]
            assert all(s in row["text"] for s in story.sentences), (url, row["text"])
            assert not [m for m in BOILERPLATE if m in row["text"]], (url, row["text"])
            assert row["title"] == story.title and json.loads(row["authors"]) == [story.author]
            assert row["published_at"] == story.published.isoformat()
            assert (row["lang"], row["description"], row["duplicate_of"]) == ("en", story.description, None)
        copy = stored[portal.wire_story_url]
        assert copy["duplicate_of"] == portal.url(2) and copy["text"]  # another site: marked, kept

        # Old entries (story 6 in the news sitemap, story 7 in the old sitemap of the index) never fetched.
        for path in (portal.stories[6].path, portal.stories[7].path, "/sitemaps/archive.xml"):
            assert portal.hits(P, path) == 0, path
        # Story 1 was fetched under its alias and its AMP copy only; its canonical URL is in the
        # seen-filter all the same (a link to it would not be fetched).
        assert portal.hits(P, portal.stories[1].path) == 0
        assert (portal.hits(P, "/story"), portal.hits(P, "/amp/story-1")) == (1, 1)
        assert dcrawl_ok(redis_url, "dedup", "check", "news", portal.url(1)).strip() == "seen"
        # robots.txt once for the cluster: the site seed read its Sitemap: lines from the cache.
        assert portal.hits(P, "/robots.txt") == 1

        failed = [json.loads(e) for e in redis_client.lrange("{news}:failed", 0, -1)]
        assert sorted((e["url"], e["kind"]) for e in failed) == [
            (P + "/broken-feed.xml", "bad_feed"),
            (P + "/gone-feed.xml", "bad_feed"),  # HTTP 404 (the wire site's guessed /sitemap.xml 404 is not)
            (P + "/sitemaps/bomb.xml.gz", "bad_sitemap"),
            (P + "/sitemaps/garbage.xml", "bad_sitemap"),
        ]
        logs = workers.log("node-a") + workers.log("node-b")
        assert "Traceback" not in logs and " ERROR: " not in logs
        assert logs.count("Bad sitemap ") == 2 and logs.count("Bad feed ") == 2

        # A rerun re-reads the sitemaps and feeds (they bypass the seen-filter), not the articles.
        dcrawl_ok(redis_url, "seed", "news", "--site", P)
        workers.start("node-c", *SETTINGS)
        assert workers.wait_all(120)["node-c"] == 0
        assert portal.hits(P, "/news-sitemap.xml") == 2 and portal.hits(P, "/sitemap_index.xml.gz") == 2
        assert portal.hits(P, "/feed.rss") == 2 and portal.hits(P, "/sitemaps/recent.xml") == 2
        assert all(portal.hits(P, portal.stories[i].path) == 1 for i in (2, 3, 4, 5))
        assert set(rows(db)) == set(stored)
