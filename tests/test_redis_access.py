"""Redis ACL refusals and TLS failures as pure logic: how they are told apart, what a node needs,
what the policy does with a refusal (fake calls raising the replies Redis 7.0 and 7.2 send)."""

from __future__ import annotations

import asyncio
import logging
import ssl

import pytest
import redis
from redis.exceptions import NoPermissionError, ResponseError
from scrapy.settings import Settings
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from distributed_crawler.connection import policy as policy_module
from distributed_crawler.connection.permissions import (
    AccessNeeds,
    AccessReport,
    PermissionDenied,
    denied_command,
    is_permission_error,
    what_was_denied,
)
from distributed_crawler.connection.policy import NodeStopping, Purpose, RedisPolicy, RedisUnreachable
from distributed_crawler.connection.tls import tls_hint
from distributed_crawler.core.access import node_needs, script_commands

URL = "redis://crawler:***@10.0.0.9:6379/0"

# Replies as redis-py raises them (Redis 7.0 first, then 7.2+ where they differ).
REFUSALS = [
    (NoPermissionError("this user has no permissions to run the 'evalsha' command"), "run 'evalsha'"),
    (NoPermissionError("User crawler has no permissions to run the 'script|load' command"), "run 'script|load'"),
    (NoPermissionError("this user has no permissions to access one of the keys used as arguments"), "use a key"),
    (NoPermissionError("No permissions to access a key"), "use a key"),
    (
        NoPermissionError("this user has no permissions to access one of the channels used as arguments"),
        "use a channel",
    ),
    (
        ResponseError(
            "The user executing the script can't run this command or subcommand script: 2fe0, on @user_script:1."
        ),
        "run a command a Lua script calls",
    ),
    (
        ResponseError(
            "The user executing the script can't access at least one of the keys mentioned in the command "
            "arguments script: fa83, on @user_script:1."
        ),
        "use a key",
    ),
    (
        ResponseError(
            "The user executing the script can't publish to the channel mentioned in the command script: 2416"
        ),
        "use a channel",
    ),
    (
        ResponseError("ACL failure in script: User crawler has no permissions to run the 'time' command script: 8a2f"),
        "run 'time'",
    ),
]


@pytest.mark.parametrize(("exc", "what"), REFUSALS)
def test_acl_refusals_are_told_apart(exc: Exception, what: str) -> None:
    assert is_permission_error(exc)
    assert what_was_denied(exc) == what


@pytest.mark.parametrize(
    "exc",
    [
        ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        ResponseError("ERR value is not an integer or out of range script: 1c2d, on @user_script:7."),
        redis.ConnectionError("Error 111 connecting to 10.0.0.9:6379. Connection refused."),
    ],
)
def test_data_errors_and_outages_are_not_refusals(exc: Exception) -> None:
    assert not is_permission_error(exc)


def test_the_denied_command_is_read_from_the_reply() -> None:
    assert denied_command(NoPermissionError("this user has no permissions to run the 'evalsha' command")) == "evalsha"
    assert denied_command(NoPermissionError("No permissions to access a key")) is None


def test_the_line_names_the_acl_setuser_to_run_and_all_a_node_needs() -> None:
    needs = node_needs(Settings(), "news")
    report = AccessReport(
        "crawler", commands=["evalsha", "zadd"], key_patterns=["{news}*"], channels=["{news}:doorbell"]
    )
    line = report.line(URL, needs)
    assert "Redis user 'crawler' at " + URL in line
    assert "ACL SETUSER crawler +@scripting +zadd ~{news}* &{news}:doorbell" in line
    assert needs.rule in line and "\n" not in line
    assert AccessReport("crawler").ok and not report.ok


# -- what a node needs ---------------------------------------------------------------------------
def test_a_node_needs_its_tag_its_seeds_the_proxy_pool_and_the_doorbell() -> None:
    needs = node_needs(Settings(), "news")
    assert needs.patterns == ("{news}*", "news:start_urls", "{news:start_urls}*", "dc:proxies", "dc:proxies:dead")
    assert needs.channels == ("{news}:doorbell",)
    assert needs.rule == (
        "~{news}* ~news:start_urls ~{news:start_urls}* ~dc:proxies ~dc:proxies:dead &{news}:doorbell "
        "+@all -@admin -flushall -flushdb"
    )
    keys = dict(needs.keys)
    assert keys["{news}:requests"] == keys["{news}:q:x"] == "{news}*"  # a template's placeholder filled
    assert {"evalsha", "script|load", "eval", "subscribe", "zadd", "time"} <= set(needs.commands)


def test_shards_and_single_queue_modes_add_their_keys() -> None:
    sharded = node_needs(Settings({"FRONTIER_SHARDS": 3}), "news").patterns
    assert [p for p in sharded if p.startswith("{news~")] == ["{news~0.0}*", "{news~1.0}*", "{news~2.0}*"]
    assert "dc:rate:*" not in sharded  # a per-host frontier keeps politeness on its own keys
    single = node_needs(Settings({"SCHEDULER_QUEUE_CLASS": "fifo"}), "news").patterns
    assert "dc:rate:*" in single and "dc:inflight:*" in single


def test_configured_key_names_are_the_ones_needed() -> None:
    settings = Settings({"REDIS_START_URLS_KEY": "seeds:%(spider)s", "PROXY_POOL_KEY": "pool:{shared}"})
    patterns = node_needs(settings, "news").patterns
    assert "seeds:news" in patterns and "{seeds:news}*" in patterns and "pool:{shared}" in patterns
    assert "news:start_urls" not in patterns and "dc:proxies" not in patterns


def test_a_pattern_another_covers_is_left_out() -> None:
    needs = AccessNeeds("x", (("a:1", "a:*"), ("a:b:2", "a:b:*"), ("c", "c")), (), ())
    assert needs.patterns == ("a:*", "c")


def test_every_command_of_the_scripts_is_checked() -> None:
    commands = script_commands()
    assert {"zadd", "zrem", "hset", "time", "publish", "lpush"} <= set(commands)
    assert all(c == c.lower() for c in commands)


# -- the policy ------------------------------------------------------------------------------------
def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def refused_then(result: object, refusals: int) -> tuple[object, list[int]]:
    tries = [0]

    async def call() -> object:
        tries[0] += 1
        if tries[0] <= refusals:
            raise NoPermissionError("this user has no permissions to run the 'evalsha' command")
        return result

    return call, tries


def make_policy() -> tuple[RedisPolicy, MemoryStatsCollector]:
    stats = MemoryStatsCollector(get_crawler())
    needs = "a node of spider 'news' needs `~{news}* +@all -@admin`"
    return RedisPolicy(URL, stats, first_delay=0.001, max_delay=0.005, grace=0, needs=lambda: needs), stats


def test_a_refused_retry_call_waits_with_one_error_line_then_lands(caplog: pytest.LogCaptureFixture) -> None:
    policy, stats = make_policy()
    call, tries = refused_then("landed", 20)
    with caplog.at_level(logging.WARNING):
        assert run(policy.run(Purpose.ACK, call, on_error=pytest.fail)) == "landed"
    assert tries[0] == 21
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    line = errors[0].getMessage()
    assert "may not run 'evalsha'" in line and "add `+@scripting` to the user's ACL rule" in line
    assert "`~{news}* +@all -@admin`" in line and "ack calls wait" in line
    assert "corrupt" not in line and not errors[0].exc_info
    assert stats.get_value("redis/denied") == 20
    back = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(back) == 1 and "ack calls work again after" in back[0]
    assert not policy.down  # not an outage: nothing else waits for it


def test_a_refusal_that_goes_on_is_logged_again_each_minute(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy, _ = make_policy()
    monkeypatch.setattr(policy_module, "DENIED_LOG_SECONDS", 0.0)
    call, _ = refused_then("landed", 3)
    with caplog.at_level(logging.ERROR):
        run(policy.run(Purpose.PUSH, call))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and "1 refused since the last line" in lines[1]


def test_a_refused_degraded_call_is_skipped_and_a_refused_read_is_one_line() -> None:
    policy, _ = make_policy()
    call, tries = refused_then("never", 99)
    assert run(policy.run(Purpose.STATS, call, default="skipped")) == "skipped" and tries[0] == 1
    with pytest.raises(PermissionDenied, match="may not run 'evalsha'.*needs `~{news}"):
        run(policy.run(Purpose.READ, call))
    assert policy.run_sync(Purpose.HEARTBEAT, _raise_refusal, default=0) == 0
    with pytest.raises(PermissionDenied) as refused:
        with policy.reading():
            _raise_refusal()
    assert isinstance(refused.value, RedisUnreachable)  # the dashboard and `status --watch` show it as such


def test_a_refused_call_ends_when_the_node_stops() -> None:
    policy, _ = make_policy()
    call, tries = refused_then("never", 10**6)
    stop = [False]

    async def stop_soon() -> None:
        await asyncio.sleep(0.05)
        stop[0] = True

    async def both() -> None:
        task = asyncio.ensure_future(stop_soon())
        with pytest.raises(NodeStopping):
            await policy.run(Purpose.LEASE, call, stopped=lambda: stop[0])
        await task

    run(both())
    assert tries[0] >= 1


def _raise_refusal() -> None:
    raise NoPermissionError("No permissions to access a key")


# -- TLS -----------------------------------------------------------------------------------------
def _ssl_error(text: str) -> redis.ConnectionError:
    try:
        raise ssl.SSLError(1, text)
    except ssl.SSLError as cause:
        try:
            raise redis.ConnectionError(f"Error 1 connecting to 10.0.0.9:6380. {text}.") from cause
        except redis.ConnectionError as exc:
            return exc


@pytest.mark.parametrize(
    ("url", "text", "says"),
    [
        (
            "rediss://h:6380/0",
            "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain",
            "ssl_ca_certs",
        ),
        (
            "rediss://h:6380/0",
            "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate",
            "ssl_ca_certs",
        ),
        (
            "rediss://h:6380/0",
            "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: IP address mismatch, certificate is not valid",
            "subjectAltName",
        ),
        (
            "rediss://h:6380/0",
            "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required",
            "ssl_certfile",
        ),
        (
            "rediss://h:6380/0",
            "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: certificate has expired",
            "renew",
        ),
        ("rediss://h:6379/0", "[SSL: WRONG_VERSION_NUMBER] wrong version number", "use redis://"),
        ("redis://h:6380/0", "Error while reading from h:6380 : (104, 'Connection reset by peer')", "use rediss://"),
    ],
)
def test_tls_failures_name_their_fix(url: str, text: str, says: str) -> None:
    hint = tls_hint(url, _ssl_error(text))
    assert hint is not None and says in hint


def test_other_connection_failures_are_not_tls() -> None:
    refused = redis.ConnectionError("Error 111 connecting to h:6379. Connection refused.")
    assert tls_hint("rediss://h:6380/0", refused) is None
    assert tls_hint("redis://h:6379/0", refused) is None
