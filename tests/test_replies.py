"""Redis replies parsed into their typed shape (connection/replies.py, frontier/unsharded.py): a
reply of the wrong shape is one ValueError naming the call, never a value passed on untyped."""

from __future__ import annotations

import asyncio
from collections.abc import Generator

import fakeredis
import pytest
from scrapy.settings import Settings

from distributed_crawler.connection.calls import bound, maybe_await, run_sync
from distributed_crawler.connection.replies import reply_bytes, reply_float, reply_int, reply_ints, reply_list
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.frontier.base import Moved, Reclaimed
from distributed_crawler.frontier.factory import frontier_from_settings
from distributed_crawler.frontier.unsharded import moved, reclaimed


def test_integers_come_as_int_bytes_or_str() -> None:
    assert [reply_int(v, "t") for v in (3, b"4", "5")] == [3, 4, 5]
    assert reply_ints([1, b"2"], "t", 2) == [1, 2]
    assert reply_float(b"1.5", "t") == 1.5 and reply_float(-1, "t") == -1.0
    assert reply_bytes("x", "t") == b"x" and reply_bytes(b"y", "t") == b"y"


@pytest.mark.parametrize("bad", [None, True, 1.5, [1], b"x1", {"a": 1}])
def test_an_integer_reply_of_another_shape_names_the_call(bad: object) -> None:
    with pytest.raises(ValueError, match="renew.lua: expected an integer reply"):
        reply_int(bad, "renew.lua")


def test_an_array_reply_too_short_or_not_an_array_is_refused() -> None:
    with pytest.raises(ValueError, match="reclaim.lua: expected an array reply of 2"):
        reply_list([1], "reclaim.lua", 2)
    with pytest.raises(ValueError, match="pop.lua"):
        reply_list(b"1", "pop.lua")
    with pytest.raises(ValueError, match="LRANGE"):
        reply_bytes(7, "LRANGE")


def test_script_replies_become_their_named_tuples() -> None:
    assert reclaimed([2, 1]) == Reclaimed(requeued=2, dead=1) == (2, 1)
    assert moved([3, 0, b"-1", 1]) == Moved(3, 0, None, 1)
    assert moved([0, 2, "4.250", 0]).next_due == 4.25
    with pytest.raises(ValueError, match="recrawl_move.lua"):
        moved([1, 2, "soon", 0])


class _Pending:
    def __await__(self) -> Generator[None, None, None]:
        yield


async def _suspends() -> None:
    await _Pending()


def test_one_coroutine_serves_a_sync_and_an_asyncio_client() -> None:
    async def both(client: AnyRedis) -> int:
        return reply_int(await maybe_await(client.incr("n")), "INCR")

    assert run_sync(both(fakeredis.FakeRedis())) == 1  # a sync client: never suspends
    assert asyncio.run(both(fakeredis.FakeAsyncRedis())) == 1
    with pytest.raises(RuntimeError, match="suspended"):  # what an asyncio client's command does
        run_sync(_suspends())


def test_a_frontier_built_on_no_client_has_keys_and_refuses_a_call() -> None:
    for shards in (1, 3):
        settings = Settings({"FRONTIER_SHARDS": shards})
        frontier = frontier_from_settings(settings, "news", None)
        assert frontier.dupefilter_keys()  # what the dupefilter needs of it before open
        with pytest.raises(RuntimeError, match="no Redis client yet"):
            frontier.client  # noqa: B018
        assert frontier.bind(fakeredis.FakeRedis()).client is not None
    with pytest.raises(RuntimeError, match="bind"):
        bound(None)
