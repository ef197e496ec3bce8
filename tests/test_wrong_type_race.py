"""A key replaced by another Redis type between the TYPE check and the read (the chaos test's race).

`RacingRedis` is a real client on the session redis-server that replaces one key by a string right
before the n-th `command` on it, once TYPE has answered for it: the race the fuzzer of
tests/test_garbage_chaos.py wins now and then, here every time. Every operator read must then
skip the key and name it in `wrong_type` (or its one line), never raise.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.cli import main as cli_main
from distributed_crawler.cli.hosts import gather_hosts
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.defaults import DEFAULTS
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.monitoring.nodes import NodeKeys, beat, heartbeat_script
from distributed_crawler.monitoring.status import gather_status
from distributed_crawler.proxies.pool import ProxyPool
from distributed_crawler.recrawl.schedule import RecrawlKeys

SETTINGS = Settings()
KEYS = SpiderKeys.from_settings(SETTINGS, "news")
NODE_KEYS = NodeKeys.from_settings(SETTINGS, "news", KEYS)
SCHEDULE = RecrawlKeys.from_settings(SETTINGS, "news").schedule
LANGUAGE = "{news}:language:skipped"
PROXY_POOL_KEY = DEFAULTS["PROXY_POOL_KEY"]
DEAD = DEFAULTS["PROXY_DEAD_KEY"]


def _name(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Race:
    """Replace `key` by a string before the `nth` `command` on it that follows a TYPE of it."""

    def __init__(self, url: str, key: str, command: str, nth: int = 1) -> None:
        self.raw = redis.Redis.from_url(url)
        self.key, self.command, self.nth = key, command.upper(), nth
        self.typed = False
        self.seen = 0
        self.swapped = False

    def before(self, args: tuple[Any, ...]) -> None:
        name, target = _name(args[0]).upper(), _name(args[1]) if len(args) > 1 else ""
        if target != self.key:
            return
        if name == "TYPE":
            self.typed = True
        elif name == self.command and self.typed and not self.swapped:
            self.seen += 1
            if self.seen == self.nth:
                self.raw.delete(self.key)
                self.raw.set(self.key, "replaced by another writer")
                self.swapped = True


class RacingPipeline(redis.client.Pipeline):
    race: Race

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        for args, _ in self.command_stack:
            self.race.before(args)
        return super().execute(raise_on_error)


class RacingRedis(redis.Redis):
    race: Race

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.race.before(args)
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = RacingPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.race = self.race
        return pipe


def racing(url: str, key: str, command: str, nth: int = 1) -> RacingRedis:
    client = RacingRedis.from_url(url)
    client.race = Race(url, key, command, nth)
    return client


def fill(client: redis.Redis) -> None:
    """Every key the status and `dcrawl hosts` read, of the right type and readable."""
    run_sync(beat(heartbeat_script(client), NODE_KEYS, "n1", 10.0, {"state": "running"}, (5, 3, 1)))
    client.hset(NODE_KEYS.stats, mapping={"page_type:article:stored": 4})
    client.lpush(NODE_KEYS.alerts, json.dumps({"kind": "stall", "message": "m", "time": 1.0}))
    client.lpush(KEYS.failed, json.dumps({"url": "http://e.com/a", "reason": "HTTP 500"}))
    client.zadd(PROXY_POOL_KEY, {"http://127.0.0.1:9": 1})
    client.hset(DEAD, "http://127.0.0.1:8", json.dumps({"error": "x"}))
    client.zadd(SCHEDULE, {"fp": 1.0})
    client.zadd(LANGUAGE, {"e.com": 3})
    # three hosts: one due now, two due in an hour (sample 2 reads the latest-due too)
    client.zadd(KEYS.ready, {"a.com": 0, "b.com": 4e9, "c.com": 4e9})
    client.zadd(KEYS.over_budget, {"d.com": 1})
    client.hset(KEYS.refused, "private_address e.com", 2)


STATUS_READS = [
    (NODE_KEYS.nodes, "ZREVRANGEBYSCORE", 1),  # read_nodes
    (NODE_KEYS.stats, "HGETALL", 1),  # read_totals
    (NODE_KEYS.stats, "HGETALL", 2),  # page-type counts
    (NODE_KEYS.history, "HGETALL", 1),  # read_history
    (NODE_KEYS.alerts, "LRANGE", 1),
    (KEYS.failed, "LRANGE", 1),
    (PROXY_POOL_KEY, "ZCARD", 1),  # proxy_health (a pipeline)
    (DEAD, "HLEN", 1),
    (SCHEDULE, "ZCARD", 1),  # schedule_summary (a pipeline)
    (LANGUAGE, "ZREVRANGE", 1),  # languages' top hosts
    (KEYS.ready, "ZRANGE", 1),  # sample_hosts, hosts due soonest
    (KEYS.ready, "ZREVRANGEBYSCORE", 1),  # host_summary, hosts not due
    (KEYS.over_budget, "ZREVRANGE", 1),  # sample_hosts, over budget
]


@pytest.mark.parametrize(("key", "command", "nth"), STATUS_READS)
def test_status_survives_a_key_replaced_after_its_type_check(
    redis_url: str, redis_client: redis.Redis, key: str, command: str, nth: int
) -> None:
    fill(redis_client)
    client = racing(redis_url, key, command, nth)
    status = run_sync(gather_status(client, SETTINGS, "news"))
    assert client.race.swapped, f"{command} {key} was never read after its TYPE"
    wrong = {w["key"]: w for w in status["wrong_type"]}
    assert wrong[key]["fix"] == f"redis-cli del '{key}'"
    assert key in wrong[key]["message"]
    json.dumps(status, allow_nan=False)


def test_status_reads_everything_without_a_race(redis_url: str, redis_client: redis.Redis) -> None:
    """The fill is readable: what the race tests see as skipped is the race, not the data."""
    fill(redis_client)
    status = run_sync(gather_status(racing(redis_url, "no such key", "GET"), SETTINGS, "news"))
    assert status["wrong_type"] == [] and status["skipped"] == {}
    assert status["totals"]["pages"] == 5 and status["proxies"] == {"total": 1, "healthy": 1, "dead": 1}
    assert status["recrawl"]["scheduled"] == 1 and status["hosts"]["count"] == 4
    assert status["languages"]["top_hosts"] == [{"host": "e.com", "skipped": 3}]
    assert [a["kind"] for a in status["alerts"]] == ["stall"] and len(status["failures"]) == 1


HOSTS_READS = [
    (KEYS.ready, "ZRANGE", 1, 2),
    (KEYS.ready, "ZCARD", 2, 2),  # the size read when the sample is full (the pipeline's ZCARD is the 1st)
    (KEYS.ready, "ZSCAN", 1, 0),  # --scan 0: every host
    (KEYS.over_budget, "ZREVRANGE", 1, 2),
    (KEYS.over_budget, "ZSCAN", 1, 0),
    (KEYS.refused, "HSCAN", 1, 2),  # read_refusals
]


@pytest.mark.parametrize(("key", "command", "nth", "scan"), HOSTS_READS)
def test_hosts_survives_a_key_replaced_after_its_type_check(
    redis_url: str, redis_client: redis.Redis, key: str, command: str, nth: int, scan: int
) -> None:
    fill(redis_client)
    client = racing(redis_url, key, command, nth)
    data = run_sync(gather_hosts(client, KEYS, scan, 50))
    assert client.race.swapped, f"{command} {key} was never read after its TYPE"
    assert key in {w["key"] for w in data["wrong_type"]}


def test_failed_survives_the_list_replaced_after_its_type_check(redis_url: str, redis_client: redis.Redis) -> None:
    fill(redis_client)
    client = racing(redis_url, KEYS.failed, "LRANGE")
    raw, entries, unreadable, wrong = cli_main._failed_entries(client, KEYS.failed, 10)
    assert client.race.swapped
    assert (raw, entries, unreadable) == ([], [], 0) and KEYS.failed in wrong


def test_failed_table_survives_the_list_replaced_before_its_length(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fill(redis_client)
    client = racing(redis_url, KEYS.failed, "LLEN")
    monkeypatch.setattr(cli_main, "connect", lambda args: (SETTINGS, client, KEYS))
    assert cli_main.main(["failed", "news"]) == 0
    assert client.race.swapped
    assert "? entries (showing 1)" in capsys.readouterr().out


@pytest.mark.parametrize(("key", "command"), [(PROXY_POOL_KEY, "ZREVRANGE"), (DEAD, "HGETALL")])
def test_proxy_list_survives_a_key_replaced_after_its_type_check(
    redis_url: str, redis_client: redis.Redis, key: str, command: str
) -> None:
    fill(redis_client)
    client = racing(redis_url, key, command)
    entries, notes = cli_main._proxy_entries(ProxyPool(client, PROXY_POOL_KEY, DEAD))
    assert client.race.swapped
    assert [n for n in notes if key in n and "redis-cli del" in n]
    assert len(entries) == 1  # the other key is still listed


def test_dedup_stats_survives_the_filter_replaced_after_its_type_check(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    redis_client.sadd(KEYS.dupefilter, "fp1", "fp2")
    client = racing(redis_url, KEYS.dupefilter, "SCARD")
    monkeypatch.setattr(cli_main, "connect", lambda args: (SETTINGS, client, KEYS))
    assert cli_main.main(["dedup", "stats", "news", "--json"]) == 0
    assert client.race.swapped
    out = capsys.readouterr()
    assert json.loads(out.out)["backend"] == "none"
    assert f"redis-cli del '{KEYS.dupefilter}'" in out.err
