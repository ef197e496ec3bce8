"""The crawl command's watch on how a crawler's start ends (asyncio task or Twisted Deferred)."""

from __future__ import annotations

import asyncio
import gc

import pytest
from twisted.internet.defer import Deferred

from distributed_crawler.commands.crawl import StartWatch


def test_a_failed_start_task_is_kept_and_not_logged_by_asyncio(caplog: pytest.LogCaptureFixture) -> None:
    async def start() -> None:
        raise ValueError("SOME_SETTING ('x') must be a number")

    async def run() -> StartWatch:
        watch = StartWatch(asyncio.get_running_loop().create_task(start()))
        await asyncio.sleep(0.01)
        return watch

    watch = asyncio.run(run())
    gc.collect()  # an unretrieved task exception is logged when the task is collected
    assert isinstance(watch.error, ValueError) and "SOME_SETTING" in str(watch.error)
    assert "never retrieved" not in caplog.text


def test_a_started_task_and_a_cancelled_one_keep_no_error() -> None:
    async def run() -> list[StartWatch]:
        loop = asyncio.get_running_loop()
        done = loop.create_task(asyncio.sleep(0))
        cancelled = loop.create_task(asyncio.sleep(10))
        watches = [StartWatch(done), StartWatch(cancelled)]
        cancelled.cancel()
        await asyncio.sleep(0.01)
        return watches

    assert [w.error for w in asyncio.run(run())] == [None, None]


def test_a_failed_start_deferred_is_kept_and_consumed() -> None:
    started: Deferred[None] = Deferred()
    watch = StartWatch(started)
    started.errback(RuntimeError("a bug"))
    assert isinstance(watch.error, RuntimeError)
    results: list[object] = []
    started.addBoth(results.append)
    assert results == [None]  # nothing left for Twisted to log as unhandled
