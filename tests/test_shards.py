"""FRONTIER_SHARDS routing (frontier/shards.py), the layout record and its refusal, and a frontier
written the way main writes it (keys by hand) read by this code with default settings."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS
from scrapy.settings import Settings

from distributed_crawler.cli.hosts import gather_hosts
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.dedup.dupefilter import SetDedup
from distributed_crawler.frontier.base import Frontier, FrontierLayoutError, placed_entry
from distributed_crawler.frontier.codec import payload_url
from distributed_crawler.frontier.envelope import make_member, split_member
from distributed_crawler.frontier.factory import frontier_from_settings
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.shards import check_shards, shard_of, shard_tags, slot_of_tag
from distributed_crawler.monitoring.status import gather_status
from tests.conftest import Workers, crawl_preflight, dcrawl, one_error_line
from tests.site.server import NewsSite


@pytest.mark.parametrize("shards", [2, 3, 4, 6, 16, 128])
def test_each_shard_tag_falls_in_its_own_slice_of_the_slots(shards: int) -> None:
    tags = shard_tags("news", shards)
    assert len(set(tags)) == shards
    for i, tag in enumerate(tags):
        assert i * REDIS_CLUSTER_HASH_SLOTS // shards <= slot_of_tag(tag) < (i + 1) * REDIS_CLUSTER_HASH_SLOTS // shards


def test_one_shard_is_todays_tag_and_tags_are_deterministic() -> None:
    assert shard_tags("news", 1) == ("news",)
    assert shard_tags("news", 6) == shard_tags("news", 6)
    assert shard_tags("news", 6) != shard_tags("other", 6)


def test_a_hosts_shard_is_stable_and_spread() -> None:
    hosts = [f"site{i}.example" for i in range(4000)]
    counts = [0] * 4
    for host in hosts:
        counts[shard_of(host, 4)] += 1
        assert shard_of(host, 4) == shard_of(host.upper(), 4)  # hosts are case-insensitive
    assert all(800 < n < 1200 for n in counts), counts
    assert {shard_of(h, 1) for h in hosts} == {0}


@pytest.mark.parametrize("value", [0, -1, "x", 1.5, True, 1025, ""])
def test_a_bad_shard_count_names_the_fix(value: object) -> None:
    with pytest.raises(ValueError, match="FRONTIER_SHARDS"):
        check_shards(value)


def test_shard_keys_carry_the_shard_tag_and_keep_the_spiders_own() -> None:
    keys = SpiderKeys.from_settings(Settings(), "news", "news~0.1")
    assert keys.requests == "{news~0.1}:requests" and keys.ready == "{news~0.1}:hosts"
    assert keys.host_queue("a.com") == "{news~0.1}:q:a.com" and keys.dupefilter == "{news~0.1}:dupefilter"
    assert keys.start_urls == "news:start_urls" and keys.nodes == "{news}:nodes" and keys.stats == "{news}:stats"
    assert keys.shards == "{news}:shards" and keys.doorbell == "{news}:doorbell"


def frontier(client: redis.Redis, **settings: object) -> Frontier:
    return frontier_from_settings(Settings({"FRONTIER_SHARDS": 1, **settings}), "news", client)


def test_the_layout_is_recorded_then_accepted(redis_client: redis.Redis) -> None:
    run_sync(frontier(redis_client).check_layout())
    assert redis_client.get("{news}:shards") == b"1"
    run_sync(frontier(redis_client).check_layout())  # the same count: accepted


def test_a_changed_shard_count_on_a_frontier_with_work_is_refused(redis_client: redis.Redis) -> None:
    redis_client.set("{news}:shards", 4)
    pending = SpiderKeys.from_settings(Settings(), "news", shard_tags("news", 4)[0]).pending
    redis_client.set(pending, 3)  # shard 0 of 4 still holds requests
    with pytest.raises(
        FrontierLayoutError, match=r"FRONTIER_SHARDS \(1\) differs from the 4 shard\(s\).*FRONTIER_SHARDS=4"
    ):
        run_sync(frontier(redis_client).check_layout())
    redis_client.delete(pending)
    run_sync(frontier(redis_client).check_layout())  # drained: the new count is recorded
    assert redis_client.get("{news}:shards") == b"1"


def test_a_frontier_written_the_current_way_is_read_with_default_settings(redis_client: redis.Redis) -> None:
    """Keys and members as main writes them (host mode, no layout record): leased, counted, acked."""
    payload = json.dumps({"url": "http://a.test/1", "slot": "a.test"})
    redis_client.zadd("{news}:q:a.test", {f"0:0:{payload}": 1})
    redis_client.zadd("{news}:hosts", {"a.test": 0})
    redis_client.set("{news}:pending", 1)
    single = json.dumps({"url": "http://b.test/2"})
    redis_client.zadd("{news}:requests", {f"0:0:{single}": 2})  # a single-queue entry left by a mode switch
    redis_client.set("{news}:pending", 2)
    ours = frontier_from_settings(Settings(), "news", redis_client)
    run_sync(ours.check_layout())  # one shard, as written: accepted
    assert run_sync(ours.size()) == 2
    leased = []
    for _ in range(5):
        leased += run_sync(ours.lease(10, 60)).leases
    urls = sorted(payload_url(split_member(x.lease).payload) for x in leased)
    assert urls == ["http://a.test/1", "http://b.test/2"]
    run_sync(ours.ack([x.lease for x in leased]))
    counts = run_sync(ours.counts())
    assert (counts.pending, counts.leased) == (0, 0)


def test_a_node_refuses_a_changed_shard_count_in_one_line(redis_url: str, redis_client: redis.Redis) -> None:
    redis_client.set("{news}:shards", 4)
    redis_client.set(SpiderKeys.from_settings(Settings(), "news", shard_tags("news", 4)[2]).pending, 5)
    line = one_error_line(crawl_preflight({"REDIS_URL": redis_url}))
    assert "FRONTIER_SHARDS (1) differs from the 4 shard(s)" in line and "FRONTIER_SHARDS=4" in line
    proc = dcrawl(redis_url, "reclaim", "news")
    assert proc.returncode != 0 and "FRONTIER_SHARDS=4" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_workers_on_four_shards_store_every_page_once(
    site: NewsSite, workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    for node in ("node-a", "node-b"):
        workers.start(node, "CONCURRENT_REQUESTS=8", "FRONTIER_SHARDS=4")
    workers.wait_ready("node-a", "node-b")
    redis_client.lpush("news:start_urls", site.url + "/")
    assert workers.wait_all(timeout=90) == {"node-a": 0, "node-b": 0}
    with sqlite3.connect(tmp_path / "items.db") as conn:
        urls = [url for (url,) in conn.execute("SELECT url FROM items")]
    assert len(urls) == len(set(urls)) and set(urls) == site.expected_urls()
    assert redis_client.get("{news}:shards") == b"4"
    for tag in shard_tags("news", 4):
        assert redis_client.zcard(f"{{{tag}}}:processing") == 0, "leases left behind"
    assert redis_client.llen("{news}:failed") == 0
    assert len({k.split(b"}")[0] for k in redis_client.keys("{news~*:dupefilter")}) == 4  # every shard has its slice
    for node in ("node-a", "node-b"):
        assert "Traceback" not in workers.log(node) and "ERROR" not in workers.log(node), workers.log(node)[-3000:]


def test_status_and_hosts_sum_over_the_shards(redis_client: redis.Redis) -> None:
    """`dcrawl status` and `dcrawl hosts` figures of a four-shard frontier: sums over the shards."""
    settings = Settings({"FRONTIER_SHARDS": 4, "DOMAIN_RATE_LIMIT": 0})
    sharded = frontier_from_settings(settings, "news", redis_client)

    async def plain(key: str) -> SetDedup:
        return SetDedup(key)

    entries = []
    for i in range(30):
        url = f"http://h{i % 10}.test/{i}"
        placement = sharded.placement(url)
        member = make_member(json.dumps({"url": url, "slot": placement.slot}), 0)
        entries.append(placed_entry(url, False, member, 0.0, placement))
    assert sum(run_sync(run_sync(sharded.open_enqueuer(plain)).run("push", entries))) == 30
    status = run_sync(gather_status(redis_client, settings, "news"))
    assert status["pending"] == 30 and status["hosts"]["count"] == 10
    assert status["dedup"]["count"] == 30  # every shard's slice of the filter
    assert status["hosts"]["top"][0]["pending"] == 3
    hosts = run_sync(gather_hosts(redis_client, sharded.keys, 100, 50, sharded.part_keys()))
    assert hosts["count"] == 10 and sorted(r["pending"] for r in hosts["hosts"]) == [3] * 10
    # a status read without the crawl's FRONTIER_SHARDS (an operator's shell) counts what Redis says
    # the frontier was written with, not one shard
    run_sync(sharded.check_layout())  # records 4 in {news}:shards, as a node does
    unset = run_sync(gather_status(redis_client, Settings({"DOMAIN_RATE_LIMIT": 0}), "news"))
    assert unset["pending"] == 30 and unset["hosts"]["count"] == 10 and unset["dedup"]["count"] == 30
