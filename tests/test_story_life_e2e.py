"""Issue 44 end to end: stories edited after their first fetch are revisited on ARTICLE_REVISITS,
then leave the schedule; every fetch is counted at the site (tests/site/revised_site.py).

Relies on the loopback-site settings of conftest (ALLOWED_PRIVATE_NETWORKS, no rate limits,
STORE_PAGE_TYPES with every type); the front page is a list page, never revisited.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import Workers, stored_rows, wait_for
from tests.site.revised_site import RevisedNewsSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

REVISITS = [1, 2, 3]  # ARTICLE_REVISITS lifted from hours to seconds: the whole life of a story in the test
SETTINGS = (f"ARTICLE_REVISITS={json.dumps(REVISITS)}", "RECRAWL_POLL_SECONDS=0.2", "LOG_LEVEL=INFO")
SCHEDULE = ("{news}:recrawl", "{news}:recrawl:state")


@pytest.fixture
def cluster(tmp_path: Path, redis_url: str) -> Iterator[Workers]:
    workers = Workers(
        tmp_path,
        {
            "REDIS_URL": redis_url,
            "STORAGE_URL": f"sqlite:///{tmp_path / 'items.db'}",
            "MAX_IDLE_TIME_BEFORE_CLOSE": "0",  # revisits come back after the queue ran dry
        },
    )
    yield workers
    workers.stop_all()


def test_each_story_is_fetched_once_plus_its_revisits_then_never(
    cluster: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    db = tmp_path / "items.db"
    redis_client.delete(*SCHEDULE)
    with RevisedNewsSite(stories=3) as site:
        stories = site.story_paths()
        cluster.start("a", *SETTINGS)
        cluster.wait_ready("a")
        redis_client.lpush("news:start_urls", site.url + "/")
        expected = 1 + len(REVISITS)

        def done() -> bool:
            scheduled = redis_client.zcard(SCHEDULE[0]) + redis_client.hlen(SCHEDULE[1])
            return scheduled == 0 and all(site.hits(p) >= expected for p in stories)

        wait_for("every story's last revisit and an empty schedule", done, 120, cluster)
        # the schedule is empty: nothing can bring a story back; the counts are final
        assert {p: site.hits(p) for p in stories} == {p: expected for p in stories}
        assert site.hits("/") == 1  # a list page: no rule, not an article, never revisited
        rows = stored_rows(db)
        for path in stories:
            row = rows[site.url + path]
            assert row["version"] == expected  # each revisit found an edited story
            assert row["title"].endswith("council confirms")
