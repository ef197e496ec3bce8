"""Every purpose of the Redis failure policy through a real outage: a redis-server stopped mid-work
and started again (same port, its AOF replayed), as a node's calls see it."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy.settings import Settings
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from distributed_crawler.cli.main import main
from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.policy import BEHAVIOUR, Purpose, RedisPolicy, RedisUnreachable
from distributed_crawler.core.checks import Refusal
from distributed_crawler.core.refusals import RefusalLog
from distributed_crawler.monitoring.dashboard import DashboardServer
from tests.conftest import RedisServer

pytestmark = [pytest.mark.e2e]

CALLS = 20  # acks and pushes in flight when Redis goes away
LOGGER = "distributed_crawler.connection.policy"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server that keeps its data across a restart (AOF, fsync always)."""
    redis_server = RedisServer(tmp_path, "--appendonly", "yes", "--appendfsync", "always").start()
    yield redis_server
    redis_server.stop()


def policy_lines(caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    return [m for m in messages if "unreachable since" in m], [m for m in messages if " back after " in m]


async def wait_for(condition: Any, what: str) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow  # over 5 s
def test_each_purpose_through_a_real_outage(server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    """During the outage: ACK/PUSH/DEADLETTER retry, LEASE/SEED/PERMIT wait, HEARTBEAT/STATS/CACHE
    skip their round (counts kept locally), READ stops with one line. One outage line and one
    "back" line for all of them; once Redis is back every held call lands, nothing lost."""
    stats = MemoryStatsCollector(get_crawler())
    # backoff longer than the test: every held call retries only because Redis is back
    policy = RedisPolicy(RedisConfig(url=server.url).masked_url, stats, first_delay=600, max_delay=600)
    setup = redis.Redis.from_url(server.url)
    setup.zadd("{t}:processing", {f"lease-{i}": i for i in range(CALLS)})
    setup.rpush("{t}:ready", "work-1")
    setup.rpush("t:start_urls", "https://example.org/")
    setup.set("{t}:robots:example.org", "cached")
    refusals = RefusalLog(stats, "n1")

    async def scenario() -> dict[str, Any]:
        client = RedisConfig(url=server.url, socket_timeout=2.0).async_client(max_connections=4)
        assert await client.ping()

        def run(purpose: Purpose, call: Any, **kwargs: Any) -> asyncio.Future[Any]:
            return asyncio.ensure_future(policy.run(purpose, call, **kwargs))

        async def heartbeat_round() -> Any:
            return await policy.run(
                Purpose.HEARTBEAT, lambda: client.hset("{t}:node:n1", "beat", "1"), default="skipped"
            )

        async def stats_round() -> None:
            async def push() -> None:
                await refusals.push_counts(client, "{t}:refused")

            await policy.run(Purpose.STATS, push)

        server.stop()  # SIGTERM: the AOF is complete
        acks = [run(Purpose.ACK, lambda i=i: client.zrem("{t}:processing", f"lease-{i}")) for i in range(CALLS)]
        pushes = [run(Purpose.PUSH, lambda i=i: client.rpush("{t}:queue", f"request-{i}")) for i in range(CALLS)]
        dead_letter = run(Purpose.DEADLETTER, lambda: client.rpush("{t}:failed", "letter"))
        lease = run(Purpose.LEASE, lambda: client.lpop("{t}:ready"))
        seed = run(Purpose.SEED, lambda: client.lpop("t:start_urls"))
        permit = run(Purpose.PERMIT, lambda: client.set("{t}:rate:example.org", "1", nx=True, px=1000))
        held = [*acks, *pushes, dead_letter, lease, seed, permit]

        # DEGRADE: the round is skipped at once, its counts stay on the node
        assert await heartbeat_round() == "skipped"
        for _ in range(3):
            refusals.note("http://10.0.0.1/", Refusal("private_address", "a private address"), "test")
            await stats_round()
        assert refusals.counting, "refusal counts must be kept while Redis is away"
        cache = await policy.run(Purpose.CACHE, lambda: client.get("{t}:robots:example.org"), default="fetch here")
        assert cache == "fetch here"
        # STOP: an operator's read is one line naming the URL and the fix
        with pytest.raises(RedisUnreachable) as stopped:
            await policy.run(Purpose.READ, lambda: client.get("{t}:stats"))

        def all_held() -> bool:
            return (
                all(
                    stats.get_value(f"redis/{p.value}/{BEHAVIOUR[p].value}") == n
                    for p, n in ((Purpose.ACK, CALLS), (Purpose.PUSH, CALLS), (Purpose.LEASE, 1), (Purpose.PERMIT, 1))
                )
                and stats.get_value("redis/seed/waited") == stats.get_value("redis/deadletter/retried") == 1
            )

        await wait_for(all_held, "every held call to meet the outage")
        assert not any(task.done() for task in held), "a RETRY/WAIT call gave up during the outage"
        assert policy.down

        server.start()  # same port and dir: the AOF is replayed
        assert await heartbeat_round() is not None  # the next heartbeat reaches Redis: the outage ends
        await stats_round()  # and the kept counts go with the next round
        results = await asyncio.wait_for(asyncio.gather(*held), 60)
        policy.close()  # the node stops before GRACE has passed: the outage is logged as over now
        await client.aclose()
        return {"results": results, "line": str(stopped.value)}

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        done = asyncio.run(scenario())

    results = done["results"]
    assert results[:CALLS] == [1] * CALLS, "every ack removed its lease exactly once"
    assert setup.zcard("{t}:processing") == 0
    queued = setup.lrange("{t}:queue", 0, -1)
    assert sorted(queued) == sorted(f"request-{i}".encode() for i in range(CALLS)), "a push was lost or doubled"
    assert setup.lrange("{t}:failed", 0, -1) == [b"letter"]
    assert results[-3:] == [b"work-1", b"https://example.org/", True], "lease, seed and permit got their answer"
    assert setup.hget("{t}:refused", "private_address 10.0.0.1") == b"3", "counts kept locally, then added once"
    assert not refusals.counting

    line = done["line"]
    assert line.startswith(f"cannot reach Redis at redis://127.0.0.1:{server.port}/0: ConnectionError: "), line
    assert line.endswith("; check REDIS_URL and that Redis runs") and "\n" not in line

    started, back = policy_lines(caplog)
    assert len(started) == 1 and len(back) == 1, caplog.text
    assert f"127.0.0.1:{server.port}" in started[0]
    assert "ack, push, deadletter: retry until it is back" in started[0]
    assert "lease, seed, permit: wait for it" in started[0]
    assert "heartbeat: skip rounds (counted locally)" in started[0]  # the purposes this node had used by then
    for fragment in (f"ack retried {CALLS}x", f"push retried {CALLS}x", "lease waited 1x", "heartbeat degraded 1x"):
        assert fragment in back[0], back[0]
    assert stats.get_value("redis/outages") == 1
    assert stats.get_value("redis/outage_seconds") > 0
    assert stats.get_value("redis/heartbeat/degraded") == 1
    assert stats.get_value("redis/stats/degraded") == 3
    assert stats.get_value("redis/cache/degraded") == 1
    assert stats.get_value("redis/read/stopped") == 1


def test_the_dashboard_and_the_cli_stop_with_one_line(server: RedisServer, capsys: pytest.CaptureFixture[str]) -> None:
    """READ outside a node: the dashboard answers 503 with the line, `dcrawl status` prints one line."""
    settings = Settings({"REDIS_URL": server.url})
    dashboard = DashboardServer(("127.0.0.1", 0), settings, "news", "")
    threading.Thread(target=dashboard.serve_forever, daemon=True).start()
    try:
        server.stop()
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(dashboard.url + "api/status", timeout=30)
        assert answer.value.code == 503
        error = json.loads(answer.value.read())["error"]
        assert error.startswith(f"cannot reach Redis at redis://127.0.0.1:{server.port}/0: ")
        assert error.endswith("check REDIS_URL and that Redis runs")
    finally:
        dashboard.shutdown()
        dashboard.server_close()
    assert main(["status", "news", "--redis-url", server.url]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"127.0.0.1:{server.port}" in err and "Traceback" not in err, err
