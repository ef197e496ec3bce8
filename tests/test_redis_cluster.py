"""Redis Cluster: a real 3-master cluster, real workers, the demo site, `dcrawl` against it."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio.cluster
from redis.cluster import key_slot
from scrapy.settings import Settings
from scrapy.utils.project import get_project_settings

from distributed_crawler.cli import project as cli_project
from distributed_crawler.cli.main import main
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.clients import TRANSIENT_ERRORS, RedisConfig, subscribe
from distributed_crawler.connection.cluster_client import AsyncClusterClient
from distributed_crawler.core.crawl_control import CrawlControl
from distributed_crawler.dedup.dupefilter import SetDedup
from distributed_crawler.frontier.base import placed_entry
from distributed_crawler.frontier.codec import payload_url
from distributed_crawler.frontier.enqueue import Enqueuer, refused_entry
from distributed_crawler.frontier.envelope import make_member, split_member
from distributed_crawler.frontier.factory import frontier_for_mode, frontier_from_settings
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.seedkey import SeedKey
from distributed_crawler.frontier.shards import shard_tags
from distributed_crawler.monitoring.dashboard import discover_spiders
from distributed_crawler.monitoring.nodes import NodeKeys
from distributed_crawler.recrawl.schedule import RecrawlKeys, RevisitSchedule
from tests.conftest import RedisServer, Workers, crawl_preflight, one_error_line
from tests.redis_topologies import RedisClusterNodes
from tests.round_trips import first_visit_records
from tests.site.server import NewsSite
from tests.test_e2e_crawl import assert_clean_logs, stored_rows

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TEST_SPIDERS = "SPIDER_MODULES=demo.spiders,tests.spiders"
# Default proxy keys (the dead key then follows the pool's slot, docs/proxies.md); the per-domain
# rate limit (one key a domain) is on to run its script on the cluster too.
CLUSTER_SETTINGS = {"DOMAIN_RATE_LIMIT": "200"}
NODE_SETTINGS = tuple(f"{k}={v}" for k, v in CLUSTER_SETTINGS.items()) + ("HEARTBEAT_INTERVAL=1",)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    nodes = RedisClusterNodes(tmp_path_factory.mktemp("cluster")).start()
    yield nodes
    nodes.stop()


@pytest.fixture
def cluster_env(cluster: RedisClusterNodes, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An empty cluster; REDIS_URL (one seed node) and REDIS_CLUSTER=1 in this process's env too,
    and CLUSTER_SETTINGS in the settings `dcrawl` reads."""
    cluster.flushall()
    env = {"REDIS_URL": cluster.url, "REDIS_CLUSTER": "1"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    def project_settings() -> Any:
        settings = get_project_settings()
        settings.setdict(CLUSTER_SETTINGS, priority="project")
        return settings

    monkeypatch.setattr(cli_project, "get_project_settings", project_settings)
    return env


def keys_by_master(cluster: RedisClusterNodes) -> dict[int, list[str]]:
    """Every key in the cluster, grouped by the master that holds it (asked of each node)."""
    found: dict[int, list[str]] = {}
    for port in cluster.ports:
        client = redis.Redis(host="127.0.0.1", port=port)
        try:
            found[port] = sorted(k.decode() for k in client.scan_iter(count=1000))
        finally:
            client.close()
    return found


def dcrawl(capsys: pytest.CaptureFixture, *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


@pytest.mark.timeout(180)
def test_two_workers_crawl_a_cluster_and_two_spiders_use_different_masters(
    site: NewsSite,
    cluster: RedisClusterNodes,
    cluster_env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    news = Workers(
        tmp_path / "news",
        {**cluster_env, "STORAGE_URL": f"sqlite:///{tmp_path / 'news.db'}", "MAX_IDLE_TIME_BEFORE_CLOSE": "2"},
    )
    wiki = Workers(
        tmp_path / "wiki",
        {**cluster_env, "STORAGE_URL": f"sqlite:///{tmp_path / 'wiki.db'}", "MAX_IDLE_TIME_BEFORE_CLOSE": "2"},
    )
    (tmp_path / "news").mkdir()
    (tmp_path / "wiki").mkdir()
    try:
        news.start("node-a", "CONCURRENT_REQUESTS=8", *NODE_SETTINGS)
        news.start("node-b", "CONCURRENT_REQUESTS=8", *NODE_SETTINGS)
        wiki.start("wiki-1", TEST_SPIDERS, *NODE_SETTINGS, spider="wiki")
        news.wait_ready("node-a", "node-b", timeout=60)
        wiki.wait_ready("wiki-1", timeout=60)
        assert "(cluster)" in news.log("node-a")  # the scheduler says where it runs
        # Seeds go in through the CLI, on the cluster (a single-key list outside the hash tag).
        assert "seeded 1" in dcrawl(capsys, "seed", "news", site.url + "/")
        assert "seeded 1" in dcrawl(capsys, "seed", "wiki", site.url + "/")
        assert news.wait_all(timeout=120) == {"node-a": 0, "node-b": 0}
        assert wiki.wait_all(timeout=60) == {"wiki-1": 0}
    finally:
        news.stop_all()
        wiki.stop_all()

    # Every page stored exactly once, by both news nodes; the wiki spider crawled its own copy.
    for db, nodes in (("news.db", {"node-a", "node-b"}), ("wiki.db", {"wiki-1"})):
        rows = stored_rows(tmp_path / db)
        urls = [url for url, _ in rows]
        assert len(urls) == len(set(urls)) and set(urls) == site.expected_urls(), db
        assert {node for _, node in rows} == nodes, db
    assert_clean_logs(news)
    assert_clean_logs(wiki)
    assert "Doorbell" not in news.log("node-a") + news.log("node-b"), "pub/sub fell back to polling"

    # Each spider's keys sit on one master (one hash slot); the two spiders on different masters.
    placement = keys_by_master(cluster)
    masters: dict[str, set[int]] = defaultdict(set)
    for port, keys in placement.items():
        for key in keys:
            if key.startswith("dc:rate:"):
                continue  # the per-domain rate limit: one key a domain, wherever its slot is
            assert key.startswith(("{news}", "{wiki}")), f"unexpected key {key} on :{port}"
            masters[key[1:5]].add(port)
    assert masters["news"] == {cluster.master_port_of("{news}:requests")}, placement
    assert masters["wiki"] == {cluster.master_port_of("{wiki}:requests")}, placement
    assert masters["news"] != masters["wiki"], placement
    assert any(k.startswith("{news}:dupefilter") for k in placement[next(iter(masters["news"]))])

    # The operator's commands work on the cluster as on one server.
    status = json.loads(dcrawl(capsys, "status", "news", "--json"))
    assert (status["pending"], status["leased"], status["delayed"], status["failed"]) == (0, 0, 0, 0)
    assert {n["id"] for n in status["nodes"]} == {"node-a", "node-b"}
    assert status["dedup"]["count"] >= len(site.expected_urls())
    assert json.loads(dcrawl(capsys, "failed", "news", "--json")) == []
    assert "requeued 0" in dcrawl(capsys, "reclaim", "news")
    assert dcrawl(capsys, "dedup", "check", "news", site.url + "/about").strip() == "seen"
    assert dcrawl(capsys, "dedup", "check", "news", site.url + "/never-linked").strip() == "new"
    assert json.loads(dcrawl(capsys, "dedup", "stats", "wiki", "--json"))["key"] == "{wiki}:dupefilter"
    client = RedisConfig.from_settings(Settings()).sync_client()
    try:
        assert discover_spiders(client, Settings()) == ["news", "wiki"]  # the dashboard scans every master
    finally:
        client.close()
    assert "added 2 of 2" in dcrawl(capsys, "proxies", "add", "http://10.0.0.1:3128", "http://10.0.0.2:3128")
    assert len(json.loads(dcrawl(capsys, "proxies", "list", "--json"))["proxies"]) == 2
    assert json.loads(dcrawl(capsys, "status", "news", "--json"))["proxies"]["total"] == 2


def test_every_key_of_a_spider_shares_one_slot() -> None:
    """What scripts and transactions rely on: one hash slot per spider, for every tagged key."""
    settings = Settings()
    for spider in ("news", "wiki"):
        keys = SpiderKeys.from_settings(settings, spider)
        node_keys = NodeKeys.from_settings(settings, spider, keys)
        tagged = [
            keys.requests,
            keys.processing,
            keys.delayed,
            keys.dupefilter,
            keys.failed,
            keys.seq,
            keys.stats,
            keys.nodes,
            keys.node("n1"),
            keys.doorbell,
            keys.sources,  # the registry and its version: written in one transaction
            keys.sources_version,
            f"{keys.dupefilter}:0:0",
            *node_keys.all(),
            *astuple(RecrawlKeys.from_settings(settings, spider)),
        ]
        assert {key_slot(k.encode()) for k in tagged} == {key_slot(f"{{{spider}}}".encode())}, spider


def test_revisit_scripts_run_on_the_cluster(
    cluster: RedisClusterNodes, cluster_env: dict[str, str], capsys: pytest.CaptureFixture
) -> None:
    """recrawl_record.lua and recrawl_move.lua on the spider's slot, host queues included."""
    settings = Settings()
    keys = SpiderKeys.from_settings(settings, "news")
    client = cluster.client()
    schedule = RevisitSchedule(client, frontier_for_mode(client, keys, "host"))
    member = make_member(json.dumps({"v": 1, "url": "http://a.test/section", "slot": "a.test"}), 0)
    assert run_sync(schedule.record("fp", (1, 4), 2.0, "body", digest="d", member=member)).change == "first"
    schedule.client.zadd(RecrawlKeys.from_settings(settings, "news").schedule, {"fp": 0})
    assert run_sync(schedule.move_due(10, 60)).moved == 1
    assert schedule.client.lrange(keys.host_list("a.test"), 0, -1) == [member.encode()]  # priority 0: the list
    assert main(["schedule", "news", "--json"]) == 0  # dcrawl on the cluster (REDIS_CLUSTER=1 in env)
    assert json.loads(capsys.readouterr().out)["scheduled"] == 1


@pytest.mark.parametrize("shards", [1, 3])
def test_acks_with_revisit_records_run_on_the_cluster(
    cluster: RedisClusterNodes, cluster_env: dict[str, str], shards: int
) -> None:
    """recrawl_ack.lua: each shard's leases and the records of its pages in one script on its slot
    (three shards: one call per master, sent together)."""
    client = cluster.client()
    settings = Settings({"FRONTIER_SHARDS": shards, "DOMAIN_RATE_LIMIT": 0, "DOMAIN_MAX_IN_FLIGHT": 0})
    frontier = frontier_from_settings(settings, "acks", client)
    schedule = RevisitSchedule(client, frontier)

    async def plain(key: str) -> SetDedup:
        return SetDedup(key)

    enqueuer = run_sync(frontier.open_enqueuer(plain))
    urls = [f"http://h{i}.test/story" for i in range(6)]
    for url in urls:
        placement = frontier.placement(url)
        member = make_member(json.dumps({"url": url, "slot": placement.slot}), 0)
        run_sync(enqueuer.run("push", [placed_entry("", True, member, 0.0, placement)]))
    leases: list[bytes] = []
    for _ in range(50):  # bounded: a shard found empty is skipped until woken
        frontier.woken()
        leases += [lease.lease for lease in run_sync(frontier.lease(6, 60)).leases]
        if len(leases) == len(urls):
            break
        time.sleep(0.05)
    assert len(leases) == len(urls)
    records = first_visit_records(schedule, leases, [payload_url(split_member(lease).payload) for lease in leases])
    replies = run_sync(frontier.ack_recorded(leases, records))
    assert [int(reply[1]) for reply in replies] == [-1] * len(urls)  # every record written: first visits
    assert sum(client.zcard(part.keys.processing) for part in frontier.each_shard()) == 0


def test_source_registry_import_and_node_read_run_on_the_cluster(
    cluster: RedisClusterNodes, cluster_env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`dcrawl sources import` (one transaction over the registry and its version) and a node's
    control read (pause, overrides, version in one pipeline) on a real cluster."""
    outlets = tmp_path / "outlets.jsonl"
    outlets.write_text(json.dumps({"url": "https://www.lemonde.fr/", "name": "Le Monde", "tags": ["fr"]}) + "\n")
    assert "1 new (seeded into news:start_urls)" in dcrawl(capsys, "sources", "news", "import", str(outlets))
    keys = SpiderKeys.from_settings(Settings(), "news")
    client = cluster.client()
    assert client.get(keys.sources_version) == b"1" and client.hkeys(keys.sources) == [b"lemonde.fr"]
    pause, overrides, version = run_sync(CrawlControl.of(frontier_for_mode(client, keys, "host")).control_state())
    assert (pause, overrides, version) == (None, {}, b"1")
    assert json.loads(dcrawl(capsys, "sources", "news", "show", "Le Monde", "--json"))["tags"] == ["fr"]


@pytest.mark.parametrize("key", ["%(spider)s:start_urls", "{%(spider)s}:start_urls"])
@pytest.mark.parametrize("as_zset", [False, True])
def test_seed_take_and_reclaim_run_on_the_cluster(
    cluster: RedisClusterNodes, cluster_env: dict[str, str], key: str, as_zset: bool
) -> None:
    """seed_take.lua's two keys (the seed key and its taken zset) share a slot on a real cluster."""
    settings = Settings({"REDIS_START_URLS_KEY": key, "REDIS_START_URLS_AS_ZSET": as_zset, "SEED_LEASE_SECONDS": 0.2})
    seeds = SeedKey.from_settings(settings, "news")
    client = cluster.client()
    assert client.cluster_keyslot(seeds.taken) == client.cluster_keyslot(seeds.key)
    pipe = client.pipeline()
    seeds.push(pipe, [b"http://e.com/a", b"http://e.com/b"], [1, 2])
    pipe.execute()
    assert len(asyncio.run(seeds.take(client, 2, "n1")).seeds) == 2
    time.sleep(0.3)
    again = asyncio.run(seeds.take(client, 2, "n2"))
    assert again.reclaimed == 2 and sorted(again.seeds) == [b"http://e.com/a", b"http://e.com/b"]
    asyncio.run(seeds.done(client, again.holds))
    assert asyncio.run(seeds.count(client)) == (0, 0)


def test_cluster_setting_on_a_plain_server_is_one_clear_line(tmp_path: Path) -> None:
    server = RedisServer(tmp_path).start()
    try:
        error = one_error_line(crawl_preflight({"REDIS_URL": server.url}, "-s", "REDIS_CLUSTER=1"))
    finally:
        server.stop()
    assert "REDIS_CLUSTER is on but Redis at" in error and "is not a cluster node" in error


def test_cluster_node_without_the_setting_is_one_clear_line(cluster: RedisClusterNodes) -> None:
    error = one_error_line(crawl_preflight({"REDIS_URL": cluster.url}))
    assert "is a Redis Cluster node; set REDIS_CLUSTER=1" in error


def test_bad_cluster_settings_fail_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"REDIS_CLUSTER \(maybe\) must be true or false"):
        RedisConfig.from_settings(Settings({"REDIS_CLUSTER": "maybe"}))
    with pytest.raises(ValueError, match="Redis Cluster has db 0 only"):
        RedisConfig.from_settings(Settings({"REDIS_CLUSTER": True, "REDIS_URL": "redis://h:7000/3"}))
    with pytest.raises(ValueError, match="both set"):
        RedisConfig.from_settings(
            Settings({"REDIS_CLUSTER": True, "REDIS_SENTINELS": "h:26379", "REDIS_SENTINEL_MASTER": "m"})
        )


@pytest.mark.timeout(60)
def test_doorbell_rings_across_cluster_nodes(cluster: RedisClusterNodes, cluster_env: dict[str, str]) -> None:
    """enqueue.lua PUBLISHes on the spider's master; a subscriber the cluster client placed hears it."""
    keys = SpiderKeys.from_settings(Settings(), "news")
    config = RedisConfig.from_settings(Settings())

    async def ring() -> list[Any]:
        client = config.async_client()  # fresh: subscribe() must work before any other command
        try:
            pubsub = await subscribe(client, keys.doorbell)
            enqueuer = Enqueuer(frontier_for_mode(client, keys, "priority"), SetDedup(keys.dupefilter), keys.doorbell)
            await enqueuer.run("push", [("ab" * 16, False, make_member('{"url": "http://e.com/"}', 0))])
            messages = []
            for _ in range(10):
                message = await pubsub.get_message(timeout=1.0)
                if message is not None:
                    messages.append(message)
                    break
            await pubsub.aclose()
            return messages
        finally:
            await client.aclose()

    messages = asyncio.run(ring())
    assert [m["channel"] for m in messages] == [keys.doorbell.encode()]


@pytest.mark.timeout(90)
def test_whole_cluster_down_is_an_outage_not_a_crash(tmp_path: Path) -> None:
    """With every node down the cluster client raises a connection error (waited out), then recovers."""
    nodes = RedisClusterNodes(tmp_path / "cluster").start()
    config = RedisConfig.from_settings(Settings({"REDIS_URL": nodes.url, "REDIS_CLUSTER": True}))

    async def outage() -> tuple[set[str], int]:
        client = config.async_client()
        errors: set[str] = set()
        try:
            await client.set("{news}:probe", 1)
            nodes.stop()
            for _ in range(3):
                with pytest.raises(TRANSIENT_ERRORS) as caught:
                    await client.incr("{news}:probe")
                errors.add(type(caught.value).__name__)
            await asyncio.to_thread(nodes.restart_all, 0.5)
            for _ in range(100):  # bounded: the client rediscovers the slots on its own
                try:
                    return errors, await client.incr("{news}:probe")
                except TRANSIENT_ERRORS as exc:
                    errors.add(type(exc).__name__)
                    await asyncio.sleep(0.2)
            raise AssertionError(f"cluster client never recovered ({errors})")
        finally:
            await client.aclose()

    try:
        errors, value = asyncio.run(outage())
    finally:
        nodes.stop()
    assert value == 1  # the data is gone (no AOF here): what matters is that the client is back
    assert "ConnectionError" in errors, errors


@pytest.mark.timeout(120)
def test_without_pub_sub_nodes_poll_and_the_crawl_completes(site: NewsSite, tmp_path: Path) -> None:
    """A Redis that refuses SUBSCRIBE (as some proxies in front of a cluster do): logged once, polling."""
    server = RedisServer(tmp_path, "--rename-command", "SUBSCRIBE", "").start()
    workers = Workers(
        tmp_path,
        {
            "REDIS_URL": server.url,
            "STORAGE_URL": f"sqlite:///{tmp_path / 'items.db'}",
            "MAX_IDLE_TIME_BEFORE_CLOSE": "2",
        },
    )
    try:
        workers.start("node-a", "SCHEDULER_POLL_MAX_SECONDS=0.5")
        workers.wait_ready("node-a", timeout=60)
        client = redis.Redis.from_url(server.url)
        client.lpush("news:start_urls", site.url + "/")
        client.close()
        assert workers.wait_all(timeout=90) == {"node-a": 0}
    finally:
        workers.stop_all()
        server.stop()
    urls = [url for url, _ in stored_rows(tmp_path / "items.db")]
    assert len(urls) == len(set(urls)) and set(urls) == site.expected_urls()
    log = workers.log("node-a")
    assert log.count("Doorbell (pub/sub on") == 1, log[-3000:]
    assert "Traceback" not in log


# One crawl over every master: FRONTIER_SHARDS hash tags spread over the cluster's slots,
# each host's frontier on its shard. 24 hosts (one NewsSite per port: a host is host:port) so that
# every master holds some; 11 pages each. Politeness off (explicit: the defaults may change) so that
# the crawl is short; the loopback settings come from tests/conftest.py (LOOPBACK_SITE_SETTINGS).
FRONTIER_SHARDS = 6
SHARDED_HOSTS = 24
SHARDED_SETTINGS = (
    f"FRONTIER_SHARDS={FRONTIER_SHARDS}",
    "DOMAIN_RATE_LIMIT=0",
    "DOMAIN_MAX_IN_FLIGHT=0",
    "CONCURRENT_REQUESTS=4",
    "HEARTBEAT_INTERVAL=1",
)


def script_calls(ports: list[int]) -> dict[int, int]:
    """EVALSHA + EVAL + FCALL calls so far on each node (INFO commandstats): the frontier's scripts."""
    calls = {}
    for port in ports:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        try:
            stats = client.info("commandstats")
        finally:
            client.close()
        calls[port] = sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval", "fcall"))
    return calls


class ShardedCrawl:
    """A 3-master cluster, SHARDED_HOSTS sites, two workers; everything stopped on exit."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.nodes = RedisClusterNodes(tmp_path / "cluster")
        self.sites = [NewsSite(articles=6, per_page=20, delay=0.05) for _ in range(SHARDED_HOSTS)]
        self.workers: Workers | None = None

    def __enter__(self) -> ShardedCrawl:
        try:
            self.nodes.start()
            for site in self.sites:
                site.start()
            env = {
                "REDIS_URL": self.nodes.url,
                "REDIS_CLUSTER": "1",
                "STORAGE_URL": f"sqlite:///{self.tmp_path / 'items.db'}",
                "MAX_IDLE_TIME_BEFORE_CLOSE": "5",
            }
            self.workers = Workers(self.tmp_path, env)
            for node in ("node-a", "node-b"):
                self.workers.start(node, *SHARDED_SETTINGS)
            self.workers.wait_ready("node-a", "node-b", timeout=60)
        except BaseException:
            self.__exit__()
            raise
        return self

    def seed(self) -> None:
        client = self.nodes.client()
        try:
            client.lpush("news:start_urls", *(site.url + "/" for site in self.sites))
        finally:
            client.close()

    def expected(self) -> set[str]:
        return set().union(*(site.expected_urls() for site in self.sites))

    def stored(self) -> list[str]:
        return [url for url, _ in stored_rows(self.tmp_path / "items.db")]

    def items_scraped(self) -> int:
        """Items the workers passed to storage, from each one's closing stats: a page stored twice
        (the items table keeps one row per URL) shows as more items than rows."""
        assert self.workers is not None
        found = [re.search(r"'item_scraped_count': (\d+)", self.workers.log(node)) for node in self.workers.procs]
        return sum(int(match.group(1)) for match in found if match)

    def __exit__(self, *exc: object) -> None:
        if self.workers is not None:
            self.workers.stop_all()
        for site in self.sites:
            if site.url:
                site.stop()
        self.nodes.stop()


@pytest.mark.timeout(150)
def test_one_crawl_over_every_master_stores_every_page_once(tmp_path: Path) -> None:
    """FRONTIER_SHARDS over 3 masters: every page stored once, every master runs the frontier's scripts."""
    with ShardedCrawl(tmp_path) as crawl:
        assert crawl.workers is not None
        masters = crawl.nodes.master_ports()
        before = script_calls(masters)
        crawl.seed()
        codes = crawl.workers.wait_all(timeout=100)
        after = script_calls(masters)
        expected = crawl.expected()
    assert codes == {"node-a": 0, "node-b": 0}
    urls = crawl.stored()
    assert crawl.items_scraped() == len(urls), "a page was stored twice"
    assert set(urls) == expected, sorted(expected - set(urls))[:5]
    assert_clean_logs(crawl.workers)
    calls = {port: after[port] - before[port] for port in masters}
    share = {port: round(n / sum(calls.values()), 3) for port, n in calls.items()}
    print(f"FRONTIER_SHARDS={FRONTIER_SHARDS}: {len(expected)} pages, script calls per master {calls}, share {share}")
    assert min(share.values()) >= 0.1, share  # every master serves the crawl (24 hosts: ~1/3 each)


def test_a_connection_closed_under_a_command_is_a_connection_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """redis-py's failover race (AttributeError inside its connection module) becomes an outage;
    an AttributeError anywhere else is a bug and stays one."""
    namespace: dict[str, Any] = {}
    exec(compile("def send(*a, **k):\n    None.writelines\n", "/venv/redis/asyncio/connection.py", "exec"), namespace)

    async def in_redis(*args: Any, **kwargs: Any) -> Any:
        namespace["send"]()

    async def elsewhere(*args: Any, **kwargs: Any) -> Any:
        None.writelines  # type: ignore[attr-defined]  # noqa: B018

    client = AsyncClusterClient(host="127.0.0.1", port=1)  # never connects: the calls are replaced
    monkeypatch.setattr(redis.asyncio.cluster.RedisCluster, "execute_command", in_redis)
    with pytest.raises(redis.ConnectionError, match="topology change"):
        asyncio.run(client.execute_command("GET", "k"))
    monkeypatch.setattr(redis.asyncio.cluster.RedisCluster, "execute_command", elsewhere)
    with pytest.raises(AttributeError):
        asyncio.run(client.execute_command("GET", "k"))
    monkeypatch.setattr(redis.asyncio.cluster.ClusterPipeline, "execute", in_redis)
    with pytest.raises(redis.ConnectionError, match="topology change"):
        asyncio.run(client.pipeline().execute())


def test_a_six_shard_frontier_runs_on_every_master(cluster: RedisClusterNodes) -> None:
    """FRONTIER_SHARDS=6 on 3 masters: every script stays on one slot (no CROSSSLOT), every master
    holds part of the frontier, and counts, leases, acks and dead letters work across them."""
    client = cluster.client()
    try:
        settings = Settings({"FRONTIER_SHARDS": 6, "DOMAIN_RATE_LIMIT": 0, "DOMAIN_MAX_IN_FLIGHT": 0})
        frontier = frontier_from_settings(settings, "sharded", client)  # a spider of its own: the cluster is shared
        run_sync(frontier.check_layout())

        async def plain(key: str) -> SetDedup:
            return SetDedup(key)

        enqueuer = run_sync(frontier.open_enqueuer(plain))
        entries = []
        for i in range(120):
            url = f"http://h{i % 30}.test/{i}"
            placement = frontier.placement(url)
            member = make_member(json.dumps({"url": url, "slot": placement.slot}), 0)
            entries.append(placed_entry(url, False, member, 0.0, placement))
        assert sum(run_sync(enqueuer.run("push", entries))) == 120
        assert sum(run_sync(enqueuer.run("push", entries[:10]))) == 0  # each host's dedup slice on its shard
        assert run_sync(frontier.size()) == 120
        masters = {client.get_node_from_key(f"{{{tag}}}:pending").port for tag in shard_tags("sharded", 6)}
        assert len(masters) == 3
        leased = []
        for _ in range(20):
            leased += [x.lease for x in run_sync(frontier.lease(50, 60)).leases]
        assert len(leased) == 120
        run_sync(frontier.ack(leased[:100]))
        run_sync(frontier.expire(leased[100:]))
        assert run_sync(frontier.reclaim(max_deliveries=1, limit=100, failed_cap=100, node_id="t")) == (0, 20)
        counts = run_sync(frontier.counts())
        assert (counts.pending, counts.leased, counts.failed) == (0, 0, 20)
        assert client.llen("{sharded}:failed") == 20  # moved from the shards to the spider's list
        run_sync(frontier.flush())
        assert run_sync(frontier.size()) == 0
    finally:
        client.close()


def test_refused_requests_of_a_six_shard_frontier_ride_in_their_shards_push(cluster: RedisClusterNodes) -> None:
    """Refused links and successors in enqueue.lua on 3 masters: each letter on its URL's shard,
    beside that URL's dedup slice (no CROSSSLOT), the leases handed over removed, the letters
    moved to the spider's list by the reclaim round."""
    client = cluster.client()
    try:
        settings = Settings({"FRONTIER_SHARDS": 6, "DOMAIN_RATE_LIMIT": 0, "DOMAIN_MAX_IN_FLIGHT": 0})
        frontier = frontier_from_settings(settings, "refusing", client)  # a spider of its own: the cluster is shared
        run_sync(frontier.flush())
        client.delete("{refusing}:failed")
        run_sync(frontier.check_layout())

        async def plain(key: str) -> SetDedup:
            return SetDedup(key)

        enqueuer = run_sync(frontier.open_enqueuer(plain))
        pushed = []
        for i in range(12):
            url = f"http://p{i}.test/"
            placement = frontier.placement(url)
            member = make_member(json.dumps({"url": url, "slot": placement.slot}), 0)
            pushed.append(placed_entry(url, False, member, 0.0, placement))
        run_sync(enqueuer.run("push", pushed))
        leased = []
        for _ in range(20):
            leased += [x.lease for x in run_sync(frontier.lease(12, 60)).leases]
        assert len(leased) == 12

        def letter(url: str) -> str:
            return json.dumps({"url": url, "reason": "refused: private_address"})

        links = [refused_entry(f"http://r{i}.test/", letter(f"http://r{i}.test/"), 100) for i in range(30)]
        successors = [refused_entry("", letter(f"http://10.0.0.{i}/"), 100) for i in range(12)]
        assert run_sync(enqueuer.run("push", links + successors, leased)) == [1] * 42
        assert run_sync(enqueuer.run("push", links)) == [0] * 30  # each link dead-lettered once
        counts = run_sync(frontier.counts())
        assert (counts.pending, counts.leased) == (0, 0)
        run_sync(frontier.reclaim(max_deliveries=1, limit=100, failed_cap=100, node_id="t"))
        assert client.llen("{refusing}:failed") == 42
        run_sync(frontier.flush())
        client.delete("{refusing}:failed")
    finally:
        client.close()


def test_revisits_of_a_six_shard_frontier_run_on_every_master(cluster: RedisClusterNodes) -> None:
    """Revisits with FRONTIER_SHARDS=6 on 3 masters: each record and each shard's move is one
    script on one slot (no CROSSSLOT), the schedule is spread like the frontier, figures are sums."""
    client = cluster.client()
    try:
        frontier = frontier_from_settings(Settings({"FRONTIER_SHARDS": 6, "DOMAIN_RATE_LIMIT": 0}), "revisits", client)
        schedule = RevisitSchedule(client, frontier)
        urls = [f"http://h{i}.test/section" for i in range(30)]
        for n, url in enumerate(urls):
            member = make_member(json.dumps({"v": 1, "url": url, "slot": frontier.placement(url).slot}), 0)
            assert (
                run_sync(schedule.record(f"fp{n}", (60, 60), 2.0, "body", digest="d", member=member)).change == "first"
            )
        ports = {client.get_node_from_key(k.schedule).port for k in schedule.every_keys() if client.exists(k.schedule)}
        assert len(ports) == 3  # the schedule is on every master
        for n, url in enumerate(urls):
            client.zadd(schedule.keys_for(url).schedule, {f"fp{n}": 0})
        assert run_sync(schedule.move_due(100, 3600)).moved == 30
        assert run_sync(frontier.size()) == 30
        assert run_sync(schedule.summary(float(client.time()[0])))["scheduled"] == 30
        run_sync(frontier.flush())
        for keys in schedule.every_keys():
            client.delete(keys.schedule, keys.state)
    finally:
        client.close()
