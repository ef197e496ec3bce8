"""Admission (core/admission.py): a refused request is dead-lettered once with its reason, counted
per host in Redis (bounded), never pushed; a redirect's lease handed to a refused successor is removed."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

import pytest
import redis
from scrapy import Request, Spider
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from distributed_crawler.cli.hosts import gather_hosts
from distributed_crawler.core.admission import CHECKS, Admission, Refusal
from distributed_crawler.core.refusals import RefusalLog
from distributed_crawler.core.scheduler import RedisScheduler
from distributed_crawler.frontier.codec import payload_url
from distributed_crawler.meta import LEASE_META


class _Spider(Spider):
    name = "adm"

    def parse(self, response: object) -> None:
        return None


def _scheduler(redis_url: str, **settings: object) -> RedisScheduler:
    """A node's scheduler with its parts open on a real client (no background task), on an event
    loop of its own kept until `_drain(scheduler)` (or `_close`): `scheduler.runner.run(coro)`."""
    crawler = get_crawler(
        _Spider,
        settings_dict={"ADDONS": {"distributed_crawler.Addon": 0}, "NODE_ID": "n1", "REDIS_URL": redis_url, **settings},
    )
    crawler.spider = _Spider.from_crawler(crawler)
    crawler.stats.open_spider()
    scheduler = RedisScheduler.from_crawler(crawler)
    scheduler.runner = asyncio.Runner()  # type: ignore[attr-defined]
    scheduler.runner.run(scheduler.open_parts(crawler.spider))  # type: ignore[attr-defined]
    return scheduler


def _drain(scheduler: RedisScheduler, close: bool = True) -> None:
    """The outbox task until everything enqueued is written; then (`close`) the node's client released."""

    async def drain() -> None:
        outbox = scheduler.parts.outbox
        task = asyncio.create_task(outbox.run())
        try:
            for _ in range(200):
                if not outbox.entries:
                    break
                await asyncio.sleep(0.01)
            assert not outbox.entries
            await outbox.push_refusal_counts()  # the lease task's (at most every FLUSH_SECONDS)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    scheduler.runner.run(drain())  # type: ignore[attr-defined]
    if close:
        _close(scheduler)


def _close(scheduler: RedisScheduler) -> None:
    scheduler.runner.run(scheduler.context.release())  # type: ignore[attr-defined]
    scheduler.runner.close()  # type: ignore[attr-defined]


def _letters(client: redis.Redis, scheduler: RedisScheduler) -> list[dict]:
    return [json.loads(x) for x in client.lrange(scheduler.frontier.keys.failed, 0, -1)]


@pytest.fixture(autouse=True)
def _clean(redis_client: redis.Redis) -> None:
    redis_client.flushdb()


def test_refused_links_are_dead_lettered_once_counted_and_never_queued(
    redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = _scheduler(redis_url)
    with caplog.at_level(logging.WARNING, logger="distributed_crawler.core.refusals"):
        assert scheduler.enqueue_request(Request("http://site.test/ok"))
        for _ in range(3):  # the same refused link found on three pages
            assert not scheduler.enqueue_request(Request("http://2130706433/secret"))
        assert not scheduler.enqueue_request(Request("http://0x7f.1/other"))
        assert not scheduler.enqueue_request(Request("file:///etc/passwd"))
        _drain(scheduler)
    letters = _letters(redis_client, scheduler)
    assert sorted((x["url"], x["reason"]) for x in letters) == [
        ("file:///etc/passwd", "scheme"),
        ("http://0x7f.1/other", "private_address"),
        ("http://2130706433/secret", "private_address"),
    ]
    private = next(x for x in letters if x["url"] == "http://2130706433/secret")
    assert "127.0.0.1" in private["detail"] and "ALLOWED_PRIVATE_NETWORKS" in private["detail"]
    assert private["source"] == "enqueue" and payload_url(private["payload"]) == private["url"]
    stats = scheduler.stats
    assert stats.get_value("dc/refused/private_address") == 2  # the local cache drops the two repeats
    assert stats.get_value("dc/refused/scheme") == 1
    assert stats.get_value("scheduler/enqueued/redis") == 1
    # one WARNING per host per minute: 2130706433 and 0x7f.1 are two hosts, plus the file: one
    assert len([r for r in caplog.records if "Refused" in r.getMessage()]) == 3
    data = asyncio.run(_gather(redis_url, scheduler))
    from rich.console import Console

    from distributed_crawler.cli.hosts import render_refused

    console = Console(width=200, record=True)
    console.print(render_refused(data))
    table = console.export_text()
    assert "2130706433" in table and "private_address 1" in table and "scheme 1" in table
    refused = {row["host"]: row["reasons"] for row in data["refused"]}
    assert refused == {"2130706433": {"private_address": 1}, "0x7f.1": {"private_address": 1}, "?": {"scheme": 1}}


async def _gather(redis_url: str, scheduler: RedisScheduler) -> dict:
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        return await gather_hosts(client, scheduler.frontier.keys, 100, 50)
    finally:
        await client.aclose()


def test_a_refused_link_is_one_dead_letter_across_nodes(redis_url: str, redis_client: redis.Redis) -> None:
    for _ in range(2):  # two nodes: each refuses it, the shared filter lets one dead letter through
        scheduler = _scheduler(redis_url)
        assert not scheduler.enqueue_request(Request("http://127.0.0.1/x"))
        _drain(scheduler)
    assert len(_letters(redis_client, scheduler)) == 1
    assert redis_client.hget(scheduler.frontier.keys.refused, "private_address 127.0.0.1") == b"2"


def test_a_redirect_to_a_refused_address_finishes_its_lease(redis_url: str, redis_client: redis.Redis) -> None:
    scheduler = _scheduler(redis_url)
    lease = b"0:0:the-redirecting-page"
    redis_client.zadd(scheduler.frontier.keys.processing, {lease: 1e12})
    scheduler.leases.buffered(lease)
    scheduler.leases.started(lease)  # downloading: a request carrying its lease is its successor
    successor = Request("http://[::ffff:127.0.0.1]/admin", meta={LEASE_META: lease})
    assert not scheduler.enqueue_request(successor)
    assert len(scheduler.leases) == 0
    _drain(scheduler)
    assert not redis_client.zscore(scheduler.frontier.keys.processing, lease)  # removed with the dead letter
    (letter,) = _letters(redis_client, scheduler)
    assert letter["reason"] == "private_address" and "carries 127.0.0.1" in letter["detail"]


def test_allowed_networks_let_the_site_through(redis_url: str) -> None:
    scheduler = _scheduler(redis_url, ALLOWED_PRIVATE_NETWORKS="127.0.0.0/8, ::1/128")
    assert scheduler.enqueue_request(Request("http://127.0.0.1:8000/"))
    assert scheduler.enqueue_request(Request("http://[::1]:8000/"))
    assert not scheduler.enqueue_request(Request("http://10.0.0.1/"))
    _close(scheduler)


def test_a_bad_cidr_fails_at_start_with_one_line() -> None:
    with pytest.raises(ValueError, match=r"^ALLOWED_PRIVATE_NETWORKS \(10.0.0.0/33\) must be CIDRs"):
        Admission.from_settings(Settings({"ALLOWED_PRIVATE_NETWORKS": ["127.0.0.0/8", "10.0.0.0/33"]}))


def test_checks_run_in_order_and_a_factory_may_turn_its_check_off() -> None:
    seen: list[str] = []

    def first(settings: Settings) -> Callable[[Request], Refusal | None]:
        return lambda request: seen.append("first") or None  # type: ignore[func-returns-value]

    def off(settings: Settings) -> None:
        return None

    def refuse(settings: Settings) -> Callable[[Request], Refusal | None]:
        return lambda request: Refusal("test_reason", "refused by the test")

    admission = Admission.from_settings(Settings(), (first, off, refuse, *CHECKS))
    assert len(admission.checks) == 2 + len(CHECKS)
    assert admission.check(Request("http://site.test/")) == Refusal("test_reason", "refused by the test")
    assert seen == ["first"]


def test_counts_stay_bounded(redis_client: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("distributed_crawler.core.refusals.COUNTED_FIELDS_MAX", 3)
    log = RefusalLog(_Stats(), "n1")
    for i in range(10):
        log.note(f"http://h{i}.test/", Refusal("depth", "too deep"), "enqueue")

    async def push() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            await log.push_counts(client, "{adm}:refused")
        finally:
            await client.aclose()

    asyncio.run(push())
    counts = {k.decode(): int(v) for k, v in redis_client.hgetall("{adm}:refused").items()}
    assert len(counts) == 4 and counts["depth *"] == 7 and sum(counts.values()) == 10


class _Stats:
    def inc_value(self, key: str, n: int = 1) -> None:
        return None
