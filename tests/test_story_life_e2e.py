"""End to end: stories edited after their first fetch are revisited on ARTICLE_REVISITS,
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

from tests.conftest import Workers, dcrawl, stored_rows, wait_for
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
    cluster: Workers, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    db = tmp_path / "items.db"
    redis_client.delete(*SCHEDULE)
    with RevisedNewsSite(stories=3) as site:
        stories = site.story_paths()
        cluster.start("a", *SETTINGS, f"WARC_DIR={tmp_path / 'warc'}")  # every fetch archived: replayed below
        cluster.wait_ready("a")
        redis_client.lpush("news:start_urls", site.url + "/")
        expected = 1 + len(REVISITS)

        def done() -> bool:
            scheduled = redis_client.zcard(SCHEDULE[0]) + redis_client.hlen(SCHEDULE[1])
            rows = stored_rows(db)
            # the commit of the last fetch may land just after its record in the schedule
            committed = all(rows.get(site.url + p, {}).get("version") == expected for p in stories)
            return scheduled == 0 and committed and all(site.hits(p) >= expected for p in stories)

        wait_for("every story's last revisit stored and an empty schedule", done, 120, cluster)
        # the schedule is empty: nothing can bring a story back; the counts are final
        assert {p: site.hits(p) for p in stories} == {p: expected for p in stories}
        assert site.hits("/") == 1  # a list page: no rule, not an article, never revisited
        rows = stored_rows(db)
        for path in stories:
            row = rows[site.url + path]
            assert row["version"] == expected  # each revisit found an edited story
            assert row["title"].endswith("council confirms")

        # every version is kept: the three a revisit replaced, then the current row
        shown = dcrawl(redis_url, "versions", "news", site.url + stories[0], "--json", "--from", f"sqlite:///{db}")
        assert shown.returncode == 0, shown.stderr
        versions = json.loads(shown.stdout)["versions"]
        assert [v["version"] for v in versions] == [1, 2, 3, 4]
        assert [v["replaced_at"] is None for v in versions] == [False, False, False, True]
        assert "Correction:" not in versions[0]["text"] and "Correction:" in versions[1]["text"]
        assert [v["title"].endswith("council confirms") for v in versions] == [False, False, True, True]
        assert all(v["replaced_at"] == later["fetched_at"] for v, later in zip(versions, versions[1:]))
        table = dcrawl(redis_url, "versions", "news", site.url + stories[0], "--from", f"sqlite:///{db}")
        assert table.returncode == 0 and "4 versions" in table.stdout and "current" in table.stdout, table.stdout

        # each revisit's `changed` event says what changed: a correction, then a new headline
        listed = dcrawl(redis_url, "events", "news", "--json", "--since", "0")
        assert listed.returncode == 0, listed.stderr
        entries = [json.loads(line) for line in listed.stdout.splitlines() if line.startswith("{")]
        changes = [e for e in entries if e["url"] == site.url + stories[0] and e["event"] == "changed"]
        diffs = {e["version"]: e["diff"] for e in changes}
        assert sorted(diffs) == [2, 3, 4]
        assert diffs[2]["correction"] and not diffs[2]["title_changed"] and diffs[2]["text_added"] > 0
        assert diffs[3]["title_changed"] and not diffs[3]["correction"]
        assert all(d["text_removed"] == 0 for d in diffs.values())  # the stories only grow

        # The crawl's WARC replayed into an empty database: the same rows and versions, never a fetch
        cluster.stop_all()
        hits = len(site._log)
        files = sorted(str(p) for p in (tmp_path / "warc").glob("*.warc.gz"))
        replayed = f"sqlite:///{tmp_path / 'replayed.db'}"
        dry = dcrawl(redis_url, "replay", "news", *files, "--to", replayed, "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        assert json.loads(dry.stdout)["new"] == len(stories) * expected  # each archived story, no row yet
        done = dcrawl(redis_url, "replay", "news", *files, "--to", replayed, "--json")
        assert done.returncode == 0, done.stderr
        counts = json.loads(done.stdout)
        assert (counts["new"], counts["changed"], counts["unchanged"]) == (
            len(stories),
            len(stories) * len(REVISITS),
            0,
        )
        assert counts["not_stored"] == 1  # the front page: a list page, not in the default STORE_PAGE_TYPES
        again = json.loads(dcrawl(redis_url, "replay", "news", *files, "--to", replayed, "--json").stdout)
        assert (again["new"], again["changed"]) == (0, 0)  # idempotent: no new row, no new version
        assert (again["known"], again["unchanged"]) == (len(stories) * len(REVISITS), len(stories))
        assert len(site._log) == hits  # 0 requests at the site
        shown = dcrawl(redis_url, "versions", "news", site.url + stories[0], "--json", "--from", replayed)
        replayed_versions = json.loads(shown.stdout)["versions"]
        assert [(v["version"], v["title"], v["text"]) for v in replayed_versions] == [
            (v["version"], v["title"], v["text"]) for v in versions
        ]
