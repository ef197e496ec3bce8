"""Sentinel: 1 master + 1 replica + 1 sentinel; a crawl through Sentinel survives kill -9 of the master."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.exceptions import ClusterDownError, MasterDownError, ReadOnlyError, TryAgainError
from redis.sentinel import MasterNotFoundError
from scrapy.settings import Settings

from distributed_crawler.cli.main import main
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.clients import (
    TRANSIENT_ERRORS,
    NoReplicasError,
    RedisConfig,
    RedisUnavailable,
    parse_sentinels,
)
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from tests.conftest import RedisServer, Workers, crawl_preflight, free_port, one_error_line
from tests.redis_topologies import SentinelSet
from tests.site.server import NewsSite
from tests.test_e2e_crawl import stored_rows

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def sentinel_set(tmp_path: Path) -> Iterator[SentinelSet]:
    topology = SentinelSet(tmp_path / "sentinel").start()
    yield topology
    topology.stop()


def wait_until(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@pytest.mark.timeout(240)
def test_crawl_through_sentinel_survives_a_demoted_master(
    sentinel_set: SentinelSet,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    record_property: Callable[[str, object], None],
) -> None:
    """`SENTINEL FAILOVER` turns the live master into a replica, so workers still connected to it get
    READONLY until they follow Sentinel to the new master (a master killed: tests/test_product.py)."""
    for name, value in sentinel_set.env.items():
        monkeypatch.setenv(name, value)
    workers = Workers(
        tmp_path,
        {
            **sentinel_set.env,
            "STORAGE_URL": f"sqlite:///{tmp_path / 'items.db'}",
            "MAX_IDLE_TIME_BEFORE_CLOSE": "5",
        },
    )
    # Slow pages, few slots: the crawl is still running when the master dies. Short leases: a
    # lease whose ack the failover lost comes back (and is fetched again) within seconds.
    settings = ("CONCURRENT_REQUESTS=4", "SCHEDULER_LEASE_SECONDS=4", "HEARTBEAT_INTERVAL=1")
    with NewsSite(articles=120, per_page=20, delay=0.3) as site:
        try:
            workers.start("node-a", *settings)
            workers.start("node-b", *settings)
            workers.wait_ready("node-a", "node-b", timeout=60)
            assert "sentinel master dcmaster via" in workers.log("node-a")
            old_master = sentinel_set.master_port()
            replica = redis.Redis.from_url(sentinel_set.replica.url)
            replica.script_flush()  # the master-to-be has no script cached, whatever Redis replicates
            assert main(["seed", "news", site.url + "/"]) == 0  # the CLI goes through Sentinel too
            assert "seeded 1" in capsys.readouterr().out
            wait_until("20 articles fetched", lambda: site.hits("/article") >= 20, timeout=90)
            sentinel = sentinel_set.sentinel_client()
            sentinel.sentinel_failover(sentinel_set.master_name)
            sentinel.close()
            killed_at = site.hits()
            sentinel_set.wait_failover(timeout=60)
            assert sentinel_set.master_port() != old_master
            codes = workers.wait_all(timeout=150)
        finally:
            workers.stop_all()
        paths = site.requested_paths()
        expected = site.expected_urls()

    assert codes == {"node-a": 0, "node-b": 0}
    assert len(paths) > killed_at, "nothing was fetched after the failover"
    rows = stored_rows(tmp_path / "items.db")
    urls = [url for url, _ in rows]
    assert len(urls) == len(set(urls)), "a page was stored twice"
    assert set(urls) <= expected
    lost = sorted(expected - set(urls))
    # /flaky fails on purpose before it answers: its retries are not failover duplicates
    twice = sorted(p for p, n in Counter(paths).items() if n > 1 and site.url + p in expected and p != "/flaky")
    report = (
        f"Sentinel failover (demote) mid-crawl: {len(expected)} pages, {len(set(urls))} stored, "
        f"{len(lost)} lost {lost[:5]}, {len(twice)} fetched more than once {twice[:5]}, "
        f"{killed_at} requests before the kill"
    )
    print(report)
    record_property("sentinel_failover_demote", report)
    # With asynchronous replication a push the old master acked but never sent to the replica is
    # lost (docs/high-availability.md); here the replica is on the same host and in sync, so the
    # loss is at most a handful of pages, never a stalled or crashed crawl.
    assert len(lost) <= 10, report

    # The scripts were loaded again on the new master (EVALSHA -> NOSCRIPT -> SCRIPT LOAD).
    pop_sha = hashlib.sha1(lua_source("host_pop").encode()).hexdigest()  # host mode (the default)
    assert replica.script_exists(pop_sha) == [True]
    replica.close()

    for node in workers.procs:
        log = workers.log(node)
        assert "Traceback" not in log, log[-4000:]
        # once per outage for the node (the policy), not per call or per purpose
        assert log.count(" unreachable since ") <= 4, log[-4000:]


def test_sentinels_setting_forms() -> None:
    assert parse_sentinels("10.0.0.1:26379, 10.0.0.2:26380") == (("10.0.0.1", 26379), ("10.0.0.2", 26380))
    assert parse_sentinels(["s1", ("s2", 5000)]) == (("s1", 26379), ("s2", 5000))
    assert parse_sentinels("") == ()
    with pytest.raises(ValueError, match=r"REDIS_SENTINELS \(s1:x\) must be host:port"):
        parse_sentinels("s1:x")
    with pytest.raises(ValueError, match="REDIS_SENTINEL_MASTER is empty"):
        RedisConfig.from_settings(Settings({"REDIS_SENTINELS": "s1:26379"}))
    config = RedisConfig.from_settings(
        Settings(
            {
                "REDIS_SENTINELS": "s1:26379",
                "REDIS_SENTINEL_MASTER": "m",
                "REDIS_URL": "redis://u:pw@ignored:1/2",
            }
        )
    )
    assert config.masked_url == "sentinel master m via s1:26379" and "pw" not in config.masked_url


def test_unreachable_sentinel_is_one_clear_line() -> None:
    port = free_port()
    error = one_error_line(
        crawl_preflight({"REDIS_SENTINELS": f"127.0.0.1:{port}", "REDIS_SENTINEL_MASTER": "dcmaster"})
    )
    assert f"Cannot reach any Redis Sentinel of REDIS_SENTINELS (127.0.0.1:{port})" in error


def test_unknown_master_name_is_one_clear_line(sentinel_set: SentinelSet) -> None:
    error = one_error_line(
        crawl_preflight({"REDIS_SENTINELS": sentinel_set.sentinels, "REDIS_SENTINEL_MASTER": "nope"})
    )
    assert "monitors no master named 'nope' (it monitors: dcmaster); fix REDIS_SENTINEL_MASTER" in error


def test_failover_and_replica_errors_count_as_transient(tmp_path: Path) -> None:
    """A master short of replicas (min-replicas-to-write) refuses writes: an outage, not a bug."""
    server = RedisServer(tmp_path, "--min-replicas-to-write", "1").start()
    client = redis.Redis.from_url(server.url)
    try:
        with pytest.raises(TRANSIENT_ERRORS) as caught:
            client.zrem("{news}:processing", "lease")
        assert isinstance(caught.value, NoReplicasError)
        with pytest.raises(NoReplicasError):  # inside a script too
            keys = SpiderKeys.from_settings(Settings(), "news")
            run_sync(frontier_for_mode(client, keys, "priority").renew(["lease"], 60))
        client.config_set("min-replicas-to-write", 0)
        client.zrem("{news}:processing", "lease")
    finally:
        client.close()
        server.stop()
    for cls in (MasterNotFoundError, ReadOnlyError, ClusterDownError, MasterDownError, TryAgainError):
        assert issubclass(cls, TRANSIENT_ERRORS), cls


def test_password_from_redis_url_reaches_the_master_not_the_sentinel(tmp_path: Path) -> None:
    topology = SentinelSet(tmp_path / "auth", password="m4ster-pw").start()
    try:

        def config(url: str) -> RedisConfig:
            return RedisConfig.from_settings(
                Settings(
                    {
                        "REDIS_SENTINELS": topology.sentinels,
                        "REDIS_SENTINEL_MASTER": topology.master_name,
                        "REDIS_URL": url,
                    }
                )
            )

        good = config("redis://:m4ster-pw@unused/0")
        good.check_reachable()
        client = good.sync_client()
        try:
            client.set("k", "v")
            assert client.connection_pool.get_master_address()[1] == topology.master.port
        finally:
            client.close()
        with pytest.raises(RedisUnavailable) as caught:
            config("redis://:wrong-pw@unused/0").check_reachable()
        assert "refused the credentials" in str(caught.value) and "wrong-pw" not in str(caught.value)
    finally:
        topology.stop()


@pytest.mark.timeout(120)
def test_workers_follow_sentinel_while_the_old_master_still_takes_writes(tmp_path: Path) -> None:
    """The old master here can never be demoted (REPLICAOF disabled), as in a partition: writes
    keep succeeding there, so only asking Sentinel again moves a client to the new master."""
    no_demotion = ("--rename-command", "REPLICAOF", "", "--rename-command", "SLAVEOF", "")
    topology = SentinelSet(tmp_path / "partition", master_args=no_demotion).start()
    config = RedisConfig.from_settings(
        Settings(
            {
                "REDIS_SENTINELS": topology.sentinels,
                "REDIS_SENTINEL_MASTER": topology.master_name,
            }
        )
    )
    old = redis.Redis.from_url(topology.master.url)
    new = redis.Redis.from_url(topology.replica.url)

    async def writes_until_moved() -> int:
        client = config.async_client()
        try:
            await client.set("k", "before")
            sentinel = topology.sentinel_client()
            sentinel.sentinel_failover(topology.master_name)
            sentinel.close()
            await asyncio.to_thread(topology.wait_failover, 60)
            for i in range(100):  # bounded: ~10 s of writes, one every 0.1 s
                await client.set("k", f"after-{i}")
                if (new.get("k") or b"").startswith(b"after"):
                    return i
                await asyncio.sleep(0.1)
            raise AssertionError("the client kept writing to the old master")
        finally:
            await client.aclose()

    try:
        writes_on_old_master = asyncio.run(writes_until_moved())
        assert old.info("replication")["role"] == "master"  # still taking writes: split brain
    finally:
        old.close()
        new.close()
        topology.stop()
    assert writes_on_old_master <= 30, writes_on_old_master  # about SENTINEL_CHECK_SECONDS of them
