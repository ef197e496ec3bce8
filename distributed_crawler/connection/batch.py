"""Commands and Lua script calls sent together: one round trip per Redis server, on every topology.

Every pipelined script call of the package goes through `Batch` (tests/test_batch.py checks it),
because redis-py's own ways fail or cost a trip:
- redis-py 8.1's Cluster pipeline refuses EVALSHA ("Calling pipelined function evalsha is
  blocked when running redis in cluster mode"), and `Script(..., client=pipe)` sends exactly that;
- on one server, a pipeline holding Scripts first asks SCRIPT EXISTS (a round trip more).
A `Batch` queues EVALSHA as a plain command, which both pipelines route like any keyed command:
the Cluster one by the hash slot of the call's keys, so a batch costs one round trip per master it
touches (every key of one script call must share a slot, as on any Cluster). A script the server
does not know (a restart or a failover emptied its script cache) is loaded, and only the calls
that answered NOSCRIPT are sent again: a call that ran is never run twice. A connection lost
during `execute` raises, and what was sent may have run (at least once, as with any pipeline).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.types import AnyPipeline, AnyRedis, AnyScript

Script = AnyScript  # a registered script (redis-py's `register_script`): its SHA1 and its text


class Batch:
    """Queue plain commands on `commands` (redis-py's pipeline methods) and script calls with
    `script()`; `await execute()` sends them. Works with sync and asyncio clients of one server,
    Sentinel or Cluster. Not transactional: each script is atomic, the batch is not."""

    def __init__(self, client: AnyRedis) -> None:
        self.client = client
        self.commands: AnyPipeline = client.pipeline(transaction=False)
        self._calls: dict[int, tuple[Script, Sequence[Any], Sequence[Any]]] = {}  # position -> call

    def __len__(self) -> int:
        return len(self.commands)

    def script(self, script: Script, keys: Sequence[Any], args: Sequence[Any] = ()) -> Batch:
        self._calls[len(self.commands)] = (script, keys, args)
        # the command itself, not the pipeline's `evalsha` method (blocked on a Cluster pipeline)
        self.commands.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        return self

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Every reply, in the order queued. `raise_on_error=False`: a command's error is returned
        in its place (the others ran), so a caller can send again only what failed."""
        try:
            replies = list(await maybe_await(self.commands.execute(raise_on_error=False)))
        finally:
            await maybe_await(self.commands.reset())  # an asyncio pipeline gives its connection back here
        lost = [at for at in self._calls if isinstance(replies[at], NoScriptError)]
        if lost:
            for script in {id(s): s for s, _, _ in (self._calls[at] for at in lost)}.values():
                await maybe_await(self.client.script_load(script.script))  # a Cluster client: on every master
            again = Batch(self.client)
            for at in lost:
                again.script(*self._calls[at])
            for at, reply in zip(lost, await again.execute(raise_on_error=False)):
                replies[at] = reply
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        return replies


async def run_scripts(client: AnyRedis, calls: Sequence[tuple[Script, Sequence[Any], Sequence[Any]]]) -> list[Any]:
    """(script, keys, args) calls, e.g. one a shard: one round trip per Redis server they touch."""
    batch = Batch(client)
    for script, keys, args in calls:
        batch.script(script, keys, args)
    return await batch.execute()


class Coalescer:
    """Script calls made about the same time by separate callers, sent together in one `Batch`: each
    caller awaits its own reply (or error), the batch costs one round trip per Redis server. A call
    waits for the callers that run in the same turn of the event loop (`linger` 0) or for `linger`
    seconds after the first; replies and errors are the caller's, as with a call of its own. Each
    call stays its own script run, in the order queued; asyncio clients only."""

    def __init__(self, client: AnyRedis, linger: float = 0.0) -> None:
        self.client = client
        self.linger = linger
        self._queued: list[tuple[Script, Sequence[Any], Sequence[Any], asyncio.Future[Any]]] = []
        self._sending: set[asyncio.Task[None]] = set()  # kept referenced until done

    def call(self, script: Script, keys: Sequence[Any], args: Sequence[Any] = ()) -> asyncio.Future[Any]:
        """The reply of `script` (awaitable): queued for the next batch."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queued.append((script, keys, args, future))
        if len(self._queued) == 1:
            task = loop.create_task(self._send())
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        return future

    async def _send(self) -> None:
        await asyncio.sleep(self.linger)  # 0: the callers woken in this turn queue theirs first
        queued, self._queued = self._queued, []
        batch = Batch(self.client)
        for script, keys, args, _ in queued:
            batch.script(script, keys, args)
        try:
            replies = await batch.execute(raise_on_error=False)
        except BaseException as exc:  # a lost connection, a cancel: every caller learns it
            for *_, future in queued:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception) else ConnectionError(str(exc)))
            if not isinstance(exc, Exception):
                raise
            return
        for (*_, future), reply in zip(queued, replies):
            if not future.done():  # a caller that gave up (cancelled) is skipped
                if isinstance(reply, Exception):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
