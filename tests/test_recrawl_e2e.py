"""End to end: a 2-worker cluster keeps a changing news site fresh.

The local site (tests/site/live_site.py) publishes new articles into its section pages while the
cluster runs; sections and the front page are revisited (RECRAWL_RULES, seconds), articles never.
Checked: every new article is discovered through a revisit, articles are fetched once, 304s write
nothing, intervals adapt as documented (min 1 s, max 4 s, factor 2), kill -9 during revisits loses
nothing, `dcrawl recrawl --all` refetches every page once, `dcrawl schedule` / `status` show it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from distributed_crawler.recrawl.schedule import RecrawlKeys, iter_states
from tests.conftest import Workers, dcrawl, stored_rows, wait_for
from tests.site.live_site import LiveNewsSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

LOW, HIGH = 1, 4  # short, so the intervals climb to max within the test
# Even-numbered articles are scheduled too, but for minutes (never due during the test): a full
# recrawl then refetches them with their validators (304); odd ones come from the items table.
RULES = json.dumps({r"/section/|/$": [LOW, HIGH], r"/article/\d*[02468]$": [600, 3600]})
SETTINGS = (
    f"RECRAWL_RULES={RULES}",
    "RECRAWL_POLL_SECONDS=0.2",
    "SCHEDULER_LEASE_SECONDS=4",
    "LOG_LEVEL=INFO",
)
KEYS = RecrawlKeys("{news}:recrawl", "{news}:recrawl:state")


def intervals(client: redis.Redis) -> dict[str, float]:
    """URL -> current revisit interval, from the schedule's state hash."""
    return {s.url: s.interval for _, s in iter_states(client, KEYS) if s is not None and s.url}


@pytest.fixture
def live_site() -> Iterator[LiveNewsSite]:
    with LiveNewsSite(articles=4, section_delay=0.5) as site:
        yield site


@pytest.fixture
def cluster(tmp_path: Path, redis_url: str) -> Iterator[Workers]:
    workers = Workers(
        tmp_path,
        {
            "REDIS_URL": redis_url,
            "STORAGE_URL": f"sqlite:///{tmp_path / 'items.db'}",
            "MAX_IDLE_TIME_BEFORE_CLOSE": "0",  # a fresh crawl never ends on its own
        },
    )
    yield workers
    workers.stop_all()


def test_two_workers_keep_a_changing_site_fresh(
    cluster: Workers, live_site: LiveNewsSite, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    db = tmp_path / "items.db"
    site = live_site
    base = site.url
    revisited = [base + "/", *(base + p for p in site.section_paths())]
    cluster.start("a", *SETTINGS)
    cluster.start("b", *SETTINGS)
    cluster.wait_ready("a", "b")
    redis_client.lpush("news:start_urls", base + "/")

    def articles_stored() -> bool:
        rows = stored_rows(db)
        return all(base + p in rows for p in site.article_paths())

    wait_for("the first articles", articles_stored, 90, cluster)

    def scheduled() -> set[str]:
        return set(revisited) | {base + p for p in site.article_paths() if int(p.rsplit("/", 1)[1]) % 2 == 0}

    wait_for(
        "front page, sections, even articles scheduled",
        lambda: set(intervals(redis_client)) == scheduled(),
        30,
        cluster,
    )

    # Unchanged pages answer 304 to the validators: the interval doubles up to max, nothing is stored.
    section = base + site.section_paths()[0]
    row_before = stored_rows(db)[section]
    wait_for("sections at their max interval", lambda: intervals(redis_client).get(section) == HIGH, 60, cluster)
    not_modified = site.hits(site.section_paths()[0], 304)
    wait_for("two more 304s", lambda: site.hits(site.section_paths()[0], 304) >= not_modified + 2, 60, cluster)
    row_after = stored_rows(db)[section]
    assert row_after == row_before  # a 304 wrote nothing: same fetched_at, version, node
    assert row_after["version"] == 1 and row_after["content_hash"]

    # kill -9 both workers while a revisit is leased (sections answer slowly), then publish: the
    # replacements reclaim the revisit and find every new article.
    wait_for("a revisit in flight", lambda: site.sections_in_flight > 0, 60, cluster, step=0.01)
    cluster.kill9("a")
    cluster.kill9("b")
    assert redis_client.zcard("{news}:processing") > 0  # the lease of the killed revisit
    published_at = len(site.log())
    fresh = site.publish(4)
    seen_intervals: list[float] = []

    def new_articles_stored() -> bool:
        seen_intervals.append(intervals(redis_client).get(section, HIGH))
        rows = stored_rows(db)
        # the section's record lands with its ack, after its links are in Redis: an article may be
        # stored first, so the watch goes on until the shorter interval was seen too
        return all(base + p in rows for p in fresh) and min(seen_intervals) <= HIGH / 2

    cluster.start("a2", *SETTINGS)
    cluster.start("b2", *SETTINGS)
    wait_for("the new articles", new_articles_stored, 90, cluster, step=0.05)
    # discovered by the first revisit of their section after publishing (within one interval): no
    # 304 of that section between the publish and the article's first fetch
    after = site.log()[published_at:]
    for path in fresh:
        first_fetch = next(i for i, (p, _) in enumerate(after) if p == path)
        section_path = "/section/" + site.section_of(path)
        assert (section_path, 304) not in after[:first_fetch], (path, after[:first_fetch])
        assert (section_path, 200) in after[:first_fetch]
    # the changed section's interval went down (max / factor) before growing again
    assert min(seen_intervals) <= HIGH / 2
    changed = stored_rows(db)[section]
    assert changed["version"] == 2 and changed["last_changed"] != changed["first_seen"]
    assert changed["first_seen"] == row_before["first_seen"]
    # nothing lost: every revisitable URL is still scheduled exactly once
    wait_for("new even articles scheduled", lambda: set(intervals(redis_client)) == scheduled(), 30, cluster)
    assert redis_client.zcard(KEYS.schedule) == len(scheduled())

    # Articles are never revisited: each was fetched exactly once.
    assert {p: site.hits(p) for p in site.article_paths()} == {p: 1 for p in site.article_paths()}

    # dcrawl schedule / status show the schedule
    shown = dcrawl(redis_url, "schedule", "news", "--json")
    assert shown.returncode == 0, shown.stderr
    schedule = json.loads(shown.stdout)
    assert schedule["scheduled"] == len(scheduled()) == schedule["due_now"] + schedule["due_next_hour"]
    assert {e["url"] for e in schedule["next"]} == scheduled()
    assert all(e["due_in"] > 60 for e in schedule["next"] if "/article/" in e["url"])  # not due in this test
    status = json.loads(dcrawl(redis_url, "status", "news", "--json").stdout)
    assert status["recrawl"]["scheduled"] == len(scheduled())

    # A full recrawl fetches every page once more: scheduled ones with their validators (an
    # unchanged article answers 304 and writes nothing), stored ones from the items table.
    even = [p for p in site.article_paths() if int(p.rsplit("/", 1)[1]) % 2 == 0]
    odd = [p for p in site.article_paths() if p not in even]
    rows_before = stored_rows(db)
    done = dcrawl(redis_url, "recrawl", "news", "--all", "--from", f"sqlite:///{db}")
    assert done.returncode == 0, done.stderr
    assert f"{len(scheduled())} scheduled URLs due now, {len(odd)} stored URLs queued" in done.stdout
    wait_for(
        "every article fetched once more",
        lambda: all(site.hits(p) == 2 for p in site.article_paths()),
        90,
        cluster,
    )
    assert {p: site.hits(p, 304) for p in even} == {p: 1 for p in even}
    assert {p: site.hits(p, 200) for p in odd} == {p: 2 for p in odd}
    sections_seen = sum(site.hits(p) for p in site.section_paths())
    wait_for(
        "two more section revisits",
        lambda: sum(site.hits(p) for p in site.section_paths()) >= sections_seen + 2,
        60,
        cluster,
    )
    assert {p: site.hits(p) for p in site.article_paths()} == {p: 2 for p in site.article_paths()}
    rows = stored_rows(db)
    assert {base + p: rows[base + p] for p in even} == {base + p: rows_before[base + p] for p in even}  # 304: no write
    assert all(rows[base + p]["version"] == 1 for p in site.article_paths())  # refetched, unchanged
