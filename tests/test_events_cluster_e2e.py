"""The change feed on a real 3-master Redis Cluster: 3 workers, FRONTIER_SHARDS=6, the feed on (default).

Each committed batch writes its events (XADD to `{news}:events`) and its per-source counts
(source_record.lua) in one pipelined round trip; a pipelined script call that the Cluster client
refuses stalls every worker's storage after its first batch (their items wait for the events,
their requests are never acked). Checked: every article stored exactly once, every stored row
announced exactly once, the source counted once per new article, the workers exit by themselves,
no ERROR or traceback in any log.

What the crawl relies on: the loopback site settings of tests/conftest.py (LOOPBACK_SITE: private
addresses allowed, every page type stored, politeness off for our own servers). The site is
FreshSite: six sources on their own loopback addresses (six hosts, so six sources and every shard),
each story a NewsArticle (page type `article`: counted for its source).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.connection.batch import Batch
from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.events.feed import parse_entry, source_of
from distributed_crawler.frontier.shards import shard_tags
from tests.conftest import Workers, stored_rows
from tests.redis_topologies import RedisClusterNodes
from tests.site.fresh_site import FreshSite
from tests.test_e2e_crawl import assert_clean_logs

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

NODES = ("node-a", "node-b", "node-c")
SOURCES = 6  # one host each (127.0.0.(10+i):<port>): spread over the shards, so over the three masters
STORIES = 10
SETTINGS = ("FRONTIER_SHARDS=6", "HEARTBEAT_INTERVAL=1", "LOG_LEVEL=INFO")


@pytest.fixture
def site() -> Iterator[FreshSite]:
    with FreshSite(sources=SOURCES, stories=STORIES) as fresh:
        yield fresh


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    nodes = RedisClusterNodes(tmp_path_factory.mktemp("cluster")).start()
    yield nodes
    nodes.stop()


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_a_batch_over_six_shards_runs_each_call_once_after_every_master_lost_its_scripts(
    cluster: RedisClusterNodes, kind: str
) -> None:
    """connection/batch.py on the Cluster: script calls of six shard tags (three masters) and plain
    commands in one batch; every master's script cache emptied first (a restart): each call runs once."""
    cluster.flushall()
    for port in cluster.master_ports():
        node = redis.Redis(host="127.0.0.1", port=port)
        try:
            node.script_flush()
        finally:
            node.close()
    tags = [f"{{{tag}}}" for tag in shard_tags("news", 6)]
    config = RedisConfig.from_settings(Settings({"REDIS_URL": cluster.url, "REDIS_CLUSTER": True}))

    async def run() -> list[Any]:
        client = config.sync_client() if kind == "sync" else config.async_client(max_connections=4)
        try:
            script = client.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
            batch = Batch(client)
            for i, tag in enumerate(tags):
                batch.commands.xadd(f"{tag}:events", {"n": str(i)})
                batch.script(script, [f"{tag}:count"], [i + 1])
            return await batch.execute()
        finally:
            await maybe_await(client.aclose() if kind == "asyncio" else client.close())

    replies = asyncio.run(run())
    assert replies[1::2] == list(range(1, 7))
    check = cluster.client()
    try:
        assert [int(check.get(f"{tag}:count") or 0) for tag in tags] == list(range(1, 7))
        assert [check.xlen(f"{tag}:events") for tag in tags] == [1] * 6
        assert len({check.get_node_from_key(f"{tag}:count").port for tag in tags}) == 3
    finally:
        check.close()


def items_scraped(workers: Workers) -> int:
    """Items the workers handed to storage (their closing stats): more than rows = a page stored twice."""
    found = [re.search(r"'item_scraped_count': (\d+)", workers.log(node)) for node in workers.procs]
    return sum(int(match.group(1)) for match in found if match)


def test_three_workers_on_a_six_shard_cluster_store_and_announce_every_article_once(
    cluster: RedisClusterNodes, site: FreshSite, tmp_path: Path
) -> None:
    cluster.flushall()
    db = tmp_path / "items.db"
    env = {
        "REDIS_URL": cluster.url,
        "REDIS_CLUSTER": "1",
        "STORAGE_URL": f"sqlite:///{db}",
        "MAX_IDLE_TIME_BEFORE_CLOSE": "5",  # the workers exit by themselves once the crawl is done
    }
    workers = Workers(tmp_path, env)
    client = cluster.client()
    try:
        for node in NODES:
            workers.start(node, *SETTINGS)
        workers.wait_ready(*NODES, timeout=90)
        client.lpush("news:start_urls", *(url + "/" for url in site.urls))
        codes = workers.wait_all(timeout=200)
        events = [parse_entry(entry_id, fields) for entry_id, fields in client.xrange("{news}:events")]
        counted = {
            source: int(client.hget(f"{{news}}:source:{source}", "n") or 0)
            for source in {source_of(url) for url in site.urls}
        }
    finally:
        workers.stop_all()
        client.close()

    assert codes == dict.fromkeys(NODES, 0)
    rows = stored_rows(db)
    expected = {url + "/" for url in site.urls} | set(site.story_urls())
    assert set(rows) == expected, sorted(expected - set(rows))[:5]
    assert items_scraped(workers) == len(rows), "a page was stored twice"
    announced = Counter(event["url"] for event in events)
    assert set(announced) == set(rows), sorted(set(rows) ^ set(announced))[:5]
    twice = [url for url, n in announced.items() if n > 1]
    assert not twice, f"announced more than once: {twice[:5]}"
    assert {(event["event"], event["version"]) for event in events} == {("new", 1)}
    articles = Counter(source_of(url) for url, row in rows.items() if row["page_type"] == "article")
    assert counted == dict(articles), "each new article counted once for its source (source_record.lua)"
    assert_clean_logs(workers)
