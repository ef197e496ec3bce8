"""End to end: two `news` workers crawl a newsroom (tests/site/newsroom.py: home, sections, tag
pages, an about page, articles in English and German with JSON-LD @graph, dates without offsets, a
paywalled story). Only the types and languages named are stored, every other page is still crawled
for its links, every request is acked, and `dcrawl status --json` counts what was and was not stored."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.conftest import Workers, crawl_preflight, dcrawl, one_error_line
from tests.site.newsroom import STORIES, Newsroom

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SETTINGS = ("CONCURRENT_REQUESTS=8", "DOMAIN_RATE_LIMIT=0", "NEAR_DUPLICATES=False")


def rows(db: Path) -> dict[str, dict[str, Any]]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return {r["url"]: dict(r) for r in conn.execute("SELECT * FROM items")}


def crawl(workers: Workers, redis_url: str, site: Newsroom, *settings: str) -> dict[str, Any]:
    """Seed the home page, crawl it with two workers until idle; the cluster's status after."""
    seeded = dcrawl(redis_url, "seed", "news", site.url + "/")
    assert seeded.returncode == 0, seeded.stderr
    for node in ("node-a", "node-b"):
        workers.start(node, *SETTINGS, *settings)
    assert workers.wait_all(150) == {"node-a": 0, "node-b": 0}, workers.log("node-a")[-3000:]
    logs = workers.log("node-a") + workers.log("node-b")
    assert "Traceback" not in logs and " ERROR: " not in logs
    status = dcrawl(redis_url, "status", "news", "--json")
    assert status.returncode == 0, status.stderr
    return json.loads(status.stdout)


def check_articles(stored: dict[str, dict[str, Any]], site: Newsroom, langs: set[str]) -> None:
    expected = [s for s in STORIES if s.lang in langs]
    assert set(stored) == {site.story_url(s) for s in expected}
    for story in expected:
        row = stored[site.story_url(story)]
        assert (row["page_type"], row["lang"]) == ("article", story.lang), row
        assert row["published_at"] == story.published and row["modified_at"] == story.modified, row
        assert json.loads(row["authors"]) == list(story.authors), row
        assert row["paywalled"] == (None if story.free is None else not story.free), row
        assert row["title"] == story.title and all(p in row["text"] for p in story.paragraphs), row


@pytest.mark.timeout(240)
def test_only_articles_are_stored_and_list_pages_are_crawled_for_their_links(
    workers: Workers, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with Newsroom() as site:
        # This test names the types it stores: the default, articles only, over the conftest's all.
        status = crawl(workers, redis_url, site, "STORE_PAGE_TYPES=article")
        stored = rows(tmp_path / "items.db")
        check_articles(stored, site, {"en", "de"})
        # Every list page and the about page were fetched once, none stored; the stories linked
        # from a tag page only were found through it.
        for path in [*site.list_paths, "/about"]:
            assert site.hits(path) == 1, path
        assert all(site.hits(s.path) == 1 for s in STORIES)
    paywalled = [s for s in STORIES if s.locked]
    assert [stored[site.story_url(s)]["paywalled"] for s in paywalled] == [1]
    assert status["page_types"] == {
        "article": {"stored": len(STORIES), "skipped": 0},
        "list": {"stored": 0, "skipped": len(site.list_paths)},
        "other": {"stored": 0, "skipped": 1},
    }
    assert status["languages"] == {"skipped": {}, "top_hosts": []}
    # Pages not stored were acked like the others: nothing pending, leased or failed.
    assert (status["pending"], status["leased"], status["delayed"], status["failed"]) == (0, 0, 0, 0)
    assert status["totals"]["items"] == len(STORIES)


@pytest.mark.timeout(240)
def test_articles_in_other_languages_are_not_stored_but_counted_per_host(
    workers: Workers, redis_url: str, tmp_path: Path
) -> None:
    with Newsroom() as site:
        status = crawl(workers, redis_url, site, "STORE_PAGE_TYPES=article", "LANGUAGES=de")
        check_articles(rows(tmp_path / "items.db"), site, {"de"})
        assert all(site.hits(s.path) == 1 for s in STORIES)  # English stories were fetched: their links count
    english = sum(1 for s in STORIES if s.lang == "en")
    assert status["languages"] == {"skipped": {"en": english}, "top_hosts": [{"host": "127.0.0.1", "skipped": english}]}
    assert status["page_types"]["article"] == {"stored": len(STORIES) - english, "skipped": english}
    assert (status["pending"], status["leased"], status["failed"]) == (0, 0, 0)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            "STORE_PAGE_TYPES=article,stories",
            "STORE_PAGE_TYPES (stories) must be page types among article, list, other",
        ),
        ("LANGUAGES=en,xx", "LANGUAGES (xx) must be ISO 639-1 codes"),
    ],
)
def test_a_bad_store_setting_stops_the_node_at_start_with_one_line(
    redis_url: str, tmp_path: Path, setting: str, message: str
) -> None:
    env = {"REDIS_URL": redis_url, "STORAGE_URL": f"sqlite:///{tmp_path / 'items.db'}"}
    assert message in one_error_line(crawl_preflight(env, "-s", setting))
