"""A node closed at MEMUSAGE_LIMIT_MB gives its running requests back with a delivery counted (they
may be what filled its memory), and the ones it never started back for free."""

from __future__ import annotations

import inspect

import redis
from scrapy.extensions.memusage import MemoryUsage

from distributed_crawler.core.scheduler import MEMUSAGE_CLOSE
from distributed_crawler.frontier.envelope import make_member
from tests.conftest import queued_members
from tests.test_admission import _close, _scheduler


def test_running_requests_come_back_counted_buffered_ones_free(redis_url: str, redis_client: redis.Redis) -> None:
    scheduler = _scheduler(redis_url, SCHEDULER_QUEUE_CLASS="priority")
    running, buffered = (make_member(f'{{"url": "http://site.test/{n}"}}', 0, 1).encode() for n in ("a", "b"))
    deadline = redis_client.time()[0] + 60
    redis_client.zadd(scheduler.frontier.keys.processing, {running: deadline, buffered: deadline})
    for lease in (running, buffered):
        scheduler.leases.buffered(lease)
    scheduler.leases.started(running)

    try:
        kept = scheduler.runner.run(scheduler.parts.keeper.expire_running([running, buffered]))  # type: ignore[attr-defined]
    finally:
        _close(scheduler)
    assert kept == [buffered]  # released by the caller, as at any close
    assert redis_client.zrange(scheduler.frontier.keys.processing, 0, -1) == [buffered]
    assert queued_members(redis_client, "adm") == [running]  # reclaimed: its next pop counts delivery 2


def test_the_close_reason_is_scrapys() -> None:
    assert f'reason="{MEMUSAGE_CLOSE}"' in inspect.getsource(MemoryUsage)
