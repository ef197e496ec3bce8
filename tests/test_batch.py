"""connection/batch.py: commands and script calls in one round trip, on every topology.

Against the session redis-server (sync and asyncio clients): scripts run without SCRIPT EXISTS,
a server that lost its script cache gets the script again and only the calls that answered NOSCRIPT
are sent again, errors come back in place. On a Cluster client (built, never connected): a batch
queues script calls where redis-py's own way is refused. And a check over the package's source:
no pipelined script call outside connection/batch.py (the Cluster would refuse it at run time).
On a real Cluster: tests/test_events_cluster_e2e.py.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.connection
from redis.exceptions import RedisClusterException, ResponseError

from distributed_crawler.connection.batch import Batch, Coalescer, run_scripts
from distributed_crawler.connection.cluster_client import AsyncClusterClient

PACKAGE = Path(__file__).resolve().parent.parent / "distributed_crawler"
INCR = "return redis.call('INCRBY', KEYS[1], ARGV[1])"


def command_calls(client: redis.Redis, name: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{name}", {}).get("calls", 0))


async def mixed_batch(client: Any) -> list[Any]:
    """XADD, a script, XADD, the script again: what the change feed sends per committed batch."""
    script = client.register_script(INCR)
    batch = Batch(client)
    batch.commands.xadd("{t}:events", {"n": "1"})
    batch.script(script, ["{t}:count"], [2])
    batch.commands.xadd("{t}:events", {"n": "2"})
    batch.script(script, ["{t}:count"], [3])
    return await batch.execute()


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_a_batch_runs_commands_and_scripts_in_order_without_script_exists(
    kind: str, redis_url: str, redis_client: redis.Redis
) -> None:
    async def run() -> list[Any]:
        if kind == "sync":
            return await mixed_batch(redis_client)
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            return await mixed_batch(client)
        finally:
            await client.aclose()

    redis_client.script_load(INCR)  # known to the server: one round trip, no SCRIPT EXISTS first
    asked = command_calls(redis_client, "script|exists")
    replies = asyncio.run(run())
    assert replies[1::2] == [2, 5]
    assert redis_client.xlen("{t}:events") == 2
    assert command_calls(redis_client, "script|exists") == asked


def test_calls_of_one_turn_share_a_round_trip_and_keep_their_own_replies(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Coalescer: callers of one turn of the event loop share one pipeline; each gets its own reply,
    a refused call's error goes to its caller only."""
    redis_client.delete("{t}:count", "{t}:text")
    redis_client.set("{t}:text", "not a number")
    writes = [0]  # socket writes of redis-py's asyncio connections: round trips
    original = redis.asyncio.connection.AbstractConnection.send_packed_command

    async def counted(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        writes[0] += 1
        return await original(self, command, *args, **kwargs)

    monkeypatch.setattr(redis.asyncio.connection.AbstractConnection, "send_packed_command", counted)

    async def run() -> tuple[list[Any], int]:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            script = client.register_script(INCR)
            await script(keys=["{t}:warm"], args=[1])  # the connection open, the script loaded
            sent, writes[0] = command_calls(redis_client, "evalsha"), 0
            coalescer = Coalescer(client)
            keys = ["{t}:count", "{t}:text", "{t}:count"]
            replies = await asyncio.gather(
                *(coalescer.call(script, [key], [2]) for key in keys), return_exceptions=True
            )
            return list(replies), command_calls(redis_client, "evalsha") - sent
        finally:
            await client.aclose()

    replies, evalshas = asyncio.run(run())
    assert replies[0] == 2 and replies[2] == 4, replies  # in the order queued
    assert isinstance(replies[1], ResponseError), replies
    assert evalshas == 3 and writes[0] == 1  # three script runs, one round trip


def test_a_lost_script_cache_reloads_and_resends_only_what_answered_noscript(redis_client: redis.Redis) -> None:
    redis_client.script_flush()  # a restart or failover emptied the cache
    loaded = command_calls(redis_client, "script|load")
    replies = asyncio.run(mixed_batch(redis_client))
    assert replies[1::2] == [2, 5]
    assert int(redis_client.get("{t}:count") or 0) == 5, "a script call ran twice"
    assert redis_client.xlen("{t}:events") == 2, "a command that ran was sent again"
    assert command_calls(redis_client, "script|load") == loaded + 1


def test_errors_come_back_in_place_and_the_rest_runs(redis_client: redis.Redis) -> None:
    redis_client.set("{t}:events", "not a stream")
    script = redis_client.register_script(INCR)

    def batch() -> Batch:
        queued = Batch(redis_client)
        queued.commands.xadd("{t}:events", {"n": "1"})
        queued.script(script, ["{t}:count"], [1])
        return queued

    replies = asyncio.run(batch().execute(raise_on_error=False))
    assert isinstance(replies[0], ResponseError) and "WRONGTYPE" in str(replies[0])
    assert replies[1] == 1
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        asyncio.run(batch().execute())
    assert redis_client.get("{t}:count") == b"2"  # the script ran both times: only the XADD failed


def test_run_scripts_returns_each_calls_reply(redis_client: redis.Redis) -> None:
    script = redis_client.register_script(INCR)
    calls = [(script, [f"{{s{i}}}:n"], [i]) for i in range(1, 4)]
    assert asyncio.run(run_scripts(redis_client, calls)) == [1, 2, 3]


def test_a_cluster_batch_queues_script_calls_that_redis_py_refuses() -> None:
    """The reason Batch exists (redis-py 8.1): its Cluster pipeline refuses a Script called on it,
    at queue time. If redis-py stops refusing it, this test says so: Batch could then be simpler."""
    client = AsyncClusterClient.from_url("redis://127.0.0.1:1/0")  # built, never connected
    script = client.register_script(INCR)
    with pytest.raises(RedisClusterException, match="evalsha is blocked"):
        asyncio.run(script(keys=["{t}:count"], args=[1], client=client.pipeline(transaction=False)))
    batch = Batch(client)
    batch.commands.xadd("{t}:events", {"n": "1"})
    batch.script(script, ["{t}:count"], [1])
    batch.script(script, ["{u}:count"], [1])  # another slot: another master, the same batch
    assert len(batch) == 3


def _pipelined_script_calls(tree: ast.AST) -> list[tuple[int, str]]:
    """EVALSHA/EVAL sent by hand, and Scripts called on another client (`client=`: a pipeline)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "evalsha":
            found.append((node.lineno, ".evalsha()"))
        keywords = {kw.arg for kw in node.keywords}
        if {"keys", "client"} <= keywords:
            found.append((node.lineno, "a Script called with client="))
        if isinstance(func, ast.Attribute) and func.attr == "execute_command" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and str(first.value).upper() in ("EVALSHA", "EVAL"):
                found.append((node.lineno, f"execute_command({first.value!r})"))
    return found


def test_no_pipelined_script_call_outside_the_batch() -> None:
    """A Script run on a pipeline fails on a Cluster (at run time, after a commit): every pipelined
    script call goes through connection/batch.py's Batch."""
    allowed = PACKAGE / "connection" / "batch.py"
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != allowed
        for line, what in _pipelined_script_calls(ast.parse(path.read_text(), str(path)))
    ]
    assert not offenders, "use connection.batch.Batch:\n" + "\n".join(offenders)


def test_the_source_check_sees_what_it_forbids() -> None:
    code = (
        "async def f(client, script):\n"
        "    pipe = client.pipeline()\n"
        "    await script(keys=['k'], args=[1], client=pipe)\n"
        "    pipe.evalsha('sha', 1, 'k')\n"
        "    pipe.execute_command('EVALSHA', 'sha', 1, 'k')\n"
    )
    assert sorted(line for line, _ in _pipelined_script_calls(ast.parse(code))) == [3, 4, 5]
