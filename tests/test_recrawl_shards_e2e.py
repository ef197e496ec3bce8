"""Revisits on a sharded frontier end to end: 2 workers, FRONTIER_SHARDS=4, two local news sites
whose hosts live on different shards. Each site's revisit schedule is kept on its host's shard, the
movers bring due revisits back from every shard, and a section that changed is refetched on its
revisit: the new articles are found and stored once (the single-shard story: test_recrawl_e2e.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.factory import frontier_from_settings
from distributed_crawler.recrawl.schedule import RecrawlKeys, RevisitSchedule
from tests.conftest import Workers, stored_rows, wait_for
from tests.site.live_site import LiveNewsSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

SHARDS = 4
SETTINGS = (
    f"FRONTIER_SHARDS={SHARDS}",
    f"RECRAWL_RULES={json.dumps({r'/section/|/$': [2, 4]})}",
    "RECRAWL_POLL_SECONDS=0.2",
    "LOG_LEVEL=INFO",
)


@pytest.fixture
def frontier(redis_client: redis.Redis) -> Frontier:
    return frontier_from_settings(Settings({"FRONTIER_SHARDS": SHARDS}), "news", redis_client)


@pytest.fixture
def sites(frontier: Frontier) -> Iterator[list[LiveNewsSite]]:
    """Two sites (hosts 127.0.0.1:<port>) on two different shards."""
    with ExitStack() as stack:
        found: dict[str, LiveNewsSite] = {}
        for _ in range(20):  # a port's shard is a hash: a few tries find two shards
            site = stack.enter_context(LiveNewsSite(articles=2))
            found.setdefault(frontier.shard_for(site.url + "/").keys.tag, site)
            if len(found) == 2:
                break
        assert len(found) == 2, "no two free ports on different shards"
        yield list(found.values())


@pytest.fixture
def cluster(tmp_path: Path, redis_url: str) -> Iterator[Workers]:
    workers = Workers(
        tmp_path,
        {
            "REDIS_URL": redis_url,
            "STORAGE_URL": f"sqlite:///{tmp_path / 'items.db'}",
            "MAX_IDLE_TIME_BEFORE_CLOSE": "0",  # revisits never end on their own
        },
    )
    yield workers
    workers.stop_all()


def test_two_workers_on_four_shards_refetch_a_changed_page_on_revisit(
    cluster: Workers, sites: list[LiveNewsSite], frontier: Frontier, redis_client: redis.Redis, tmp_path: Path
) -> None:
    db = tmp_path / "items.db"
    schedule = RevisitSchedule(redis_client, frontier)
    cluster.start("a", *SETTINGS)
    cluster.start("b", *SETTINGS)
    cluster.wait_ready("a", "b")
    for site in sites:
        redis_client.lpush("news:start_urls", site.url + "/")
    revisited = {site.url + p for site in sites for p in ["/", *site.section_paths()]}

    def every_article_stored() -> bool:
        rows = stored_rows(db)
        return all(site.url + p in rows for site in sites for p in site.article_paths())

    wait_for("the first articles of both sites", every_article_stored, 60, cluster)

    def scheduled() -> dict[str, RecrawlKeys]:
        return {state.url: keys for keys, _, state in schedule.iter_states() if state and state.url}

    wait_for("front pages and sections scheduled", lambda: set(scheduled()) == revisited, 30, cluster)
    for url, keys in scheduled().items():  # on the host's shard, the tag of its queue
        assert keys == schedule.keys_for(url) and keys.schedule != "{news}:recrawl"
    assert len(set(scheduled().values())) == 2
    assert not redis_client.exists("{news}:recrawl", "{news}:recrawl:state")

    # both sites publish: each changed section is refetched on its next revisit (a 200, new text)
    sections = {site.url + "/section/" + site.section_of(p): site for site in sites for p in site.publish(2)}
    fresh = [site.url + p for site in sites for p in site.article_paths()[-2:]]
    wait_for("the new articles of both sites", lambda: all(url in stored_rows(db) for url in fresh), 60, cluster)
    rows = stored_rows(db)
    for url in sections:
        assert rows[url]["version"] == 2, rows[url]  # the changed section was stored again
    for site in sites:  # articles are not revisited: each fetched once
        assert {p: site.hits(p) for p in site.article_paths()} == {p: 1 for p in site.article_paths()}
        assert all(site.hits(p, 200) >= 2 for p in site.section_paths())  # first fetch + the changed revisit
    assert run_sync(schedule.summary(float(redis_client.time()[0])))["scheduled"] == len(revisited)
    for node in ("a", "b"):
        log = cluster.log(node)
        assert "Traceback" not in log and "ERROR" not in log, log[-3000:]
