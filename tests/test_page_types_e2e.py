"""End to end: a `news` worker crawls a site whose stories live at URLs that look like list pages
(tests/site/leaf_stories.py: `/news/<n>`, `/archive/story-<n>.html`, `/blog/<slug>`, `/1927`) or
are of a kind the blind samples lost (a one-paragraph item or a Japanese story among menus, wire
copy of one-sentence paragraphs, a post linked with `?s=r`) next to real list pages; with the default STORE_PAGE_TYPES every
story is stored and no list page."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.conftest import Workers, dcrawl
from tests.site.leaf_stories import LeafStories

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.mark.timeout(180)
def test_every_story_is_stored_and_no_list_page(workers: Workers, redis_url: str, tmp_path: Path) -> None:
    with LeafStories() as site:
        assert dcrawl(redis_url, "seed", "news", site.url + "/").returncode == 0
        # STORE_PAGE_TYPES=article: the default, over the conftest's "every type"; the loopback
        # site needs the conftest's ALLOWED_PRIVATE_NETWORKS; no rate limit, no near-duplicate check
        # (the stories share sentences on purpose).
        workers.start(
            "node-a",
            "STORE_PAGE_TYPES=article",
            "DOMAIN_RATE_LIMIT=0",
            "NEAR_DUPLICATES=False",
            "CONCURRENT_REQUESTS=8",
        )
        assert workers.wait_all(150) == {"node-a": 0}, workers.log("node-a")[-3000:]
        assert all(site.hits(p) == 1 for p in site.list_paths)  # every list page was crawled for its links
    with sqlite3.connect(tmp_path / "items.db") as conn:
        stored = {url: kind for url, kind in conn.execute("SELECT url, page_type FROM items")}
    assert stored == {site.url + p: "article" for p in site.story_paths}
