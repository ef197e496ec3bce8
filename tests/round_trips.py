"""What the round-trip tests share: redis-py's asyncio socket writes counted (one write = one round
trip, as bench/probe.py counts them; the `round_trips` fixture in tests/conftest.py), a URL pushed
and leased as the scheduler would, first-visit revisit records for leases, and a scheduler of a bare
crawler that components reach."""

from __future__ import annotations

import functools
import json
import time
from types import SimpleNamespace
from typing import Any

import pytest
import redis.asyncio.connection as async_connection
from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.utils.test import get_crawler

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.core.scheduler import RedisScheduler
from distributed_crawler.dedup.dupefilter import SetDedup
from distributed_crawler.frontier.base import Frontier, placed_entry
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.frontier.replies import Lease
from distributed_crawler.recrawl.schedule import RevisitRecord, RevisitSchedule


def count_writes(monkeypatch: pytest.MonkeyPatch, sent: list[str]) -> None:
    """Append the first command of every socket write of redis-py's asyncio connections in this
    process to `sent`, until `monkeypatch` undoes it."""
    original = async_connection.AbstractConnection.send_packed_command

    @functools.wraps(original)
    async def counted(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        raw = command if isinstance(command, bytes | bytearray) else b"".join(bytes(c) for c in command)
        sent.append(bytes(raw).split(b"\r\n")[2].decode("ascii", "replace").lower())
        return await original(self, command, *args, **kwargs)

    monkeypatch.setattr(async_connection.AbstractConnection, "send_packed_command", counted)


async def _plain(key: str) -> SetDedup:
    return SetDedup(key)


def member_of(frontier: Frontier, url: str) -> str:
    return make_member(json.dumps({"url": url, "slot": frontier.placement(url).slot}), 0)


def push_and_lease(frontier: Frontier, url: str, pause: float = 0.05) -> Lease:
    """Push `url` and lease it (sync client): the lease the scheduler would hand the engine."""
    entry = placed_entry("", True, member_of(frontier, url), 0.0, frontier.placement(url))
    run_sync(run_sync(frontier.open_enqueuer(_plain)).run("push", [entry]))
    for _ in range(50):  # bounded: a sharded frontier skips a shard it found empty until woken, and a
        frontier.woken()  # cluster that just formed may answer a lease empty at first
        leases = run_sync(frontier.lease(1, 60)).leases
        if leases:
            return leases[0]
        time.sleep(pause)
    raise AssertionError(f"{url} not leased")


def first_visit_records(
    schedule: RevisitSchedule, leases: list[bytes], urls: list[str], digest: str = ""
) -> list[tuple[bytes, RevisitRecord]]:
    """Each lease with the record of a first fetch of the URL beside it (fingerprint = its index,
    1-10 min interval): what the spider middleware hands `ack_recorded`."""
    return [
        (
            lease,
            schedule.revisit_record(
                f"{i:016x}", (60.0, 600.0), 2.0, "body", digest=digest, member=make_member(json.dumps({"url": url}), 0)
            ),
        )
        for i, (lease, url) in enumerate(zip(leases, urls, strict=True))
    ]


def scheduler_for(spider_class: type[Spider], settings: dict[str, Any]) -> tuple[Crawler, Spider, RedisScheduler]:
    """A crawler with the add-on on node n1, its spider, and a scheduler that its components reach
    through the engine (internals.py), without starting the engine."""
    crawler = get_crawler(
        spider_class, settings_dict={"NODE_ID": "n1", "ADDONS": {"distributed_crawler.Addon": 0}, **settings}
    )
    spider = crawler.spider = spider_class.from_crawler(crawler)
    crawler.stats.open_spider()
    scheduler = RedisScheduler.from_crawler(crawler)
    crawler.engine = SimpleNamespace(_slot=SimpleNamespace(scheduler=scheduler))  # type: ignore[assignment]
    return crawler, spider, scheduler
