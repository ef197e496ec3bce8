"""The Redis failure policy as pure logic: fake calls that raise redis.ConnectionError."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import redis
from redis.exceptions import OutOfMemoryError, ResponseError
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from distributed_crawler.connection.policy import (
    BEHAVIOUR,
    Behaviour,
    NodeStopping,
    Purpose,
    RedisPolicy,
    RedisUnreachable,
)
from distributed_crawler.core.context import RedisContext

URL = "redis://:***@10.0.0.9:6379/0"


def sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test body in its own event loop (the suite has no asyncio plugin)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def make_policy() -> tuple[RedisPolicy, MemoryStatsCollector]:
    stats = MemoryStatsCollector(get_crawler())
    return RedisPolicy(URL, stats, first_delay=0.001, max_delay=0.005, grace=0), stats


def flaky(failures: int, result: Any = "done", exc: BaseException | None = None) -> tuple[Callable, list[int]]:
    """An async call that fails `failures` times, then returns `result`; counts its tries."""
    tries = [0]

    async def call() -> Any:
        tries[0] += 1
        if tries[0] <= failures:
            raise exc or redis.ConnectionError("Error 111 connecting to 10.0.0.9:6379. Connection refused.")
        return result

    return call, tries


def outage_lines(caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
    messages = [r.getMessage() for r in caplog.records if r.name == "distributed_crawler.connection.policy"]
    return [m for m in messages if "unreachable since" in m or "is full" in m], [
        m for m in messages if "back after" in m
    ]


def test_every_purpose_has_a_behaviour() -> None:
    assert set(BEHAVIOUR) == set(Purpose)
    assert BEHAVIOUR[Purpose.ACK] is BEHAVIOUR[Purpose.PUSH] is Behaviour.RETRY
    assert BEHAVIOUR[Purpose.LEASE] is Behaviour.WAIT
    assert BEHAVIOUR[Purpose.HEARTBEAT] is BEHAVIOUR[Purpose.STATS] is Behaviour.DEGRADE
    assert BEHAVIOUR[Purpose.READ] is Behaviour.STOP


@pytest.mark.parametrize("purpose", [p for p in Purpose if BEHAVIOUR[p] in (Behaviour.RETRY, Behaviour.WAIT)])
@sync
async def test_retry_and_wait_run_the_call_until_it_succeeds(
    purpose: Purpose, caplog: pytest.LogCaptureFixture
) -> None:
    policy, stats = make_policy()
    call, tries = flaky(5)
    with caplog.at_level(logging.WARNING):
        assert await policy.run(purpose, call) == "done"
    assert tries[0] == 6
    started, back = outage_lines(caplog)
    assert len(started) == 1 and len(back) == 1, caplog.text
    assert "10.0.0.9" in started[0] and "ConnectionError" in started[0] and purpose.value in started[0]
    assert f"{purpose.value} {BEHAVIOUR[purpose].value} 5x" in back[0]
    assert stats.get_value("redis/outages") == 1
    assert stats.get_value("redis/outage_seconds") >= 0
    assert stats.get_value(f"redis/{purpose.value}/{BEHAVIOUR[purpose].value}") == 1  # one call held up


@pytest.mark.parametrize("purpose", [p for p in Purpose if BEHAVIOUR[p] is Behaviour.DEGRADE])
@sync
async def test_degrade_returns_the_default_at_once(purpose: Purpose) -> None:
    policy, stats = make_policy()
    call, tries = flaky(2)
    assert await policy.run(purpose, call, default="local") == "local"
    assert await policy.run(purpose, call, default="local") == "local"
    assert tries[0] == 2  # no retry inside a round
    assert policy.down
    assert stats.get_value(f"redis/{purpose.value}/degraded") == 2
    assert await policy.run(purpose, call, default="local") == "done"
    assert not policy.down
    assert stats.get_value("redis/outages") == 1


@sync
async def test_stop_raises_one_line_with_the_masked_url_and_the_fix() -> None:
    policy, stats = make_policy()
    call, tries = flaky(1)
    with pytest.raises(RedisUnreachable) as raised:
        await policy.run(Purpose.READ, call)
    line = str(raised.value)
    assert line.startswith(f"cannot reach Redis at {URL}: ConnectionError") and line.endswith(
        "check REDIS_URL and that Redis runs"
    )
    assert "\n" not in line and tries[0] == 1
    assert stats.get_value("redis/read/stopped") == 1
    with pytest.raises(RedisUnreachable), policy.reading():
        raise redis.TimeoutError("Timeout reading from socket")
    with pytest.raises(RedisUnreachable):
        policy.run_sync(Purpose.READ, lambda: (_ for _ in ()).throw(redis.ConnectionError("refused")))


def test_run_sync_degrades_and_refuses_blocking_behaviours() -> None:
    policy, stats = make_policy()

    def down() -> int:
        raise redis.ConnectionError("refused")

    assert policy.run_sync(Purpose.STATS, down, default=7) == 7
    assert policy.run_sync(Purpose.STATS, lambda: 3, default=7) == 3
    assert stats.get_value("redis/outages") == 1 and not policy.down
    with pytest.raises(ValueError, match="ACK"):
        policy.run_sync(Purpose.ACK, lambda: 1)


@sync
async def test_one_outage_for_many_calls_and_purposes(caplog: pytest.LogCaptureFixture) -> None:
    """Concurrent acks, leases and heartbeats in one outage: one start line, one back line."""
    policy, stats = make_policy()
    down = [True]

    async def call() -> str:
        await asyncio.sleep(0)
        if down[0]:
            raise redis.ConnectionError("refused")
        return "ok"

    async def heartbeats() -> None:
        for _ in range(5):
            await policy.run(Purpose.HEARTBEAT, call, default=None)
            await asyncio.sleep(0.002)

    with caplog.at_level(logging.WARNING):
        tasks = [asyncio.ensure_future(policy.run(p, call)) for p in (Purpose.ACK, Purpose.ACK, Purpose.LEASE)]
        await heartbeats()
        down[0] = False
        assert await asyncio.gather(*tasks) == ["ok"] * 3
    started, back = outage_lines(caplog)
    assert len(started) == 1 and len(back) == 1, caplog.text
    assert "ack retried" in back[0] and "lease waited" in back[0] and "heartbeat degraded 5x" in back[0]
    assert stats.get_value("redis/outages") == 1
    assert stats.get_value("redis/ack/retried") == 2
    assert stats.get_value("redis/lease/waited") == 1
    assert stats.get_value("redis/heartbeat/degraded") == 5


@sync
async def test_waiters_wake_as_soon_as_redis_is_back() -> None:
    """A WAIT call sleeping a long backoff retries at once when another call of the node succeeds."""
    policy = RedisPolicy(URL, None, first_delay=60, max_delay=60, grace=0)
    call, tries = flaky(1)
    task = asyncio.ensure_future(policy.run(Purpose.LEASE, call))
    for _ in range(100):
        if policy.down:
            break
        await asyncio.sleep(0.001)

    async def fine() -> int:
        return 1

    assert await policy.run(Purpose.STATS, fine) == 1  # Redis answers: the outage ends
    assert await asyncio.wait_for(task, 5) == "done"
    assert tries[0] == 2


@sync
async def test_stopping_ends_retry_loops_without_running_the_call_again() -> None:
    policy, _ = make_policy()
    call, tries = flaky(10**9)
    stop = [False]
    task = asyncio.ensure_future(policy.run(Purpose.PUSH, call, stopped=lambda: stop[0]))
    while tries[0] < 3:
        await asyncio.sleep(0.001)
    stop[0] = True
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    policy.close()
    assert not policy.down  # the open outage was accounted at close
    with pytest.raises(NodeStopping):  # closed: one try, no retry
        await policy.run(Purpose.ACK, call)
    assert await policy.run(Purpose.ACK, flaky(0)[0]) == "done"  # a last ack at close still goes


@sync
async def test_other_errors_go_to_on_error_or_propagate() -> None:
    policy, stats = make_policy()
    wrong = ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    call, _ = flaky(1, exc=wrong)
    with pytest.raises(ResponseError):
        await policy.run(Purpose.ACK, call)
    seen: list[BaseException] = []

    async def on_error(exc: BaseException) -> None:
        seen.append(exc)

    call, tries = flaky(2, exc=wrong)
    assert await policy.run(Purpose.ACK, call, on_error=on_error) == "done"  # logged, backed off, retried
    assert tries[0] == 3 and seen == [wrong, wrong]
    call, _ = flaky(1, exc=wrong)
    assert await policy.run(Purpose.STATS, call, default=0, on_error=on_error) == 0
    assert stats.get_value("redis/outages") is None  # data errors are not outages


@sync
async def test_a_full_redis_is_one_error_line_with_the_fix(caplog: pytest.LogCaptureFixture) -> None:
    policy, _ = make_policy()
    call, _ = flaky(2, exc=OutOfMemoryError("OOM command not allowed when used memory > 'maxmemory'."))
    with caplog.at_level(logging.WARNING):
        assert await policy.run(Purpose.PUSH, call) == "done"
    started, back = outage_lines(caplog)
    assert len(started) == 1 and "maxmemory" in started[0] and len(back) == 1


@sync
async def test_the_crawler_context_holds_one_policy_counting_into_crawler_stats() -> None:
    crawler = get_crawler(settings_dict={"REDIS_URL": "redis://:secret@127.0.0.1:1/0"})
    policy = RedisContext.of(crawler).policy
    assert policy is RedisContext.of(crawler).policy
    assert "secret" not in policy.masked_url
    call, _ = flaky(1)
    assert await policy.run(Purpose.STATS, call, default=0) == 0
    assert crawler.stats.get_value("redis/stats/degraded") == 1


def test_reading_leaves_errors_of_the_code_around_it_alone() -> None:
    """A command's own OSError (a missing file, a closed stdout) is not a Redis outage."""
    policy, _ = make_policy()
    with pytest.raises(FileNotFoundError), policy.reading():
        open("/nonexistent/seeds.txt")
    with pytest.raises(BrokenPipeError), policy.reading():
        raise BrokenPipeError("stdout closed")
    with pytest.raises(RedisUnreachable), policy.reading():
        raise ConnectionRefusedError(111, "Connection refused")


@sync
async def test_an_outage_inside_the_error_or_ok_hooks_is_the_policys_too() -> None:
    """Diagnosing a WRONGTYPE (a TYPE call) or checking a fix may meet the outage: never raised."""
    policy, stats = make_policy()
    wrong = ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")

    async def diagnose(exc: BaseException) -> None:
        raise redis.ConnectionError("gone while diagnosing")

    call, tries = flaky(1, exc=wrong)
    assert await policy.run(Purpose.PUSH, call, on_error=diagnose) == "done"
    assert tries[0] == 2 and stats.get_value("redis/push/retried") == 1
    assert await policy.run(Purpose.STATS, flaky(1, exc=wrong)[0], default=0, on_error=diagnose) == 0

    async def gone() -> None:
        raise redis.ConnectionError("gone after the call")

    assert await policy.run(Purpose.ACK, flaky(0)[0], on_ok=gone) == "done"
    assert policy.down


@sync
async def test_a_data_error_backs_off_even_without_an_outage() -> None:
    """A WRONGTYPE retried by ACK waits its backoff: no outage to wake it early, no busy loop."""
    policy = RedisPolicy(URL, None, first_delay=600, max_delay=600)

    async def logged(exc: BaseException) -> None:
        pass

    call, tries = flaky(10**9, exc=ResponseError("WRONGTYPE Operation against a key"))
    task = asyncio.ensure_future(policy.run(Purpose.ACK, call, on_error=logged))
    for _ in range(50):
        await asyncio.sleep(0)
    assert tries[0] == 1
    policy.close()
    with pytest.raises(NodeStopping):
        await asyncio.wait_for(task, 5)


@sync
async def test_flaps_within_the_grace_are_one_outage(caplog: pytest.LogCaptureFixture) -> None:
    """A full Redis answers reads and refuses writes: fail, answer, fail... is one outage, logged
    once; it ends once calls have worked for `grace` seconds (or at close)."""
    stats = MemoryStatsCollector(get_crawler())
    policy = RedisPolicy(URL, stats, first_delay=0.001, max_delay=0.005, grace=60)
    full = OutOfMemoryError("OOM command not allowed when used memory > 'maxmemory'.")

    async def read() -> int:
        return 1

    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            assert await policy.run(Purpose.HEARTBEAT, flaky(1, exc=full)[0], default=0) == 0  # a write refused
            assert policy.down
            assert await policy.run(Purpose.CACHE, read) == 1  # a read answered: waiters wake
            assert not policy.down
        started, back = outage_lines(caplog)
        assert len(started) == 1 and back == [], caplog.text
        policy.close()
    started, back = outage_lines(caplog)
    assert len(started) == 1 and len(back) == 1 and "heartbeat degraded 5x" in back[0]
    assert stats.get_value("redis/outages") == 1


@sync
async def test_listeners_hear_when_redis_answers_again() -> None:
    """E.g. the scheduler forgets its recent links: a failover may have lost acknowledged writes."""
    policy, _ = make_policy()
    heard: list[bool] = []
    policy.when_back(lambda: heard.append(policy.down))
    assert await policy.run(Purpose.STATS, flaky(0)[0]) == "done"
    assert heard == []  # no outage: nothing to hear
    assert await policy.run(Purpose.PUSH, flaky(2)[0]) == "done"
    assert heard == [False]


def test_a_cli_command_that_loses_redis_midway_prints_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """READ for a whole `dcrawl` command: no traceback, one line with the masked URL, exit code 1."""
    from distributed_crawler.cli import main as cli

    def status(args: Any) -> int:
        raise redis.ConnectionError("Error 104 while reading from 10.0.0.9:6379 : Connection reset by peer")

    monkeypatch.setattr(cli, "cmd_status", status)
    assert cli.main(["status", "news", "--redis-url", "redis://:secret@10.0.0.9:6379/0"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "dcrawl: cannot reach Redis at redis://:***@10.0.0.9:6379/0: ConnectionError: Error 104 while reading "
        "from 10.0.0.9:6379 : Connection reset by peer; check REDIS_URL and that Redis runs\n"
    )
