"""The Lua scripts against a real redis-server: dedup+push, pop with lease, renew, reclaim, release."""

from __future__ import annotations

import json
import threading

import pytest
import redis

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.dedup.dupefilter import SetDedup
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.codec import payload_url
from distributed_crawler.frontier.enqueue import Enqueuer
from distributed_crawler.frontier.envelope import make_member, split_member
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from tests.frontiers import pop as lease_flat
from tests.frontiers import with_mode

Q, DF, SEQ, PROC, FAILED = "{t}:requests", "{t}:dupefilter", "{t}:seq", "{t}:processing", "{t}:failed"
KEYS_T = SpiderKeys(
    "t",
    "t:start_urls",
    Q,
    PROC,
    "{t}:delayed",
    DF,
    FAILED,
    SEQ,
    "{t}:stats",
    "{t}:nodes",
    "{t}:node:%(node)s",
    "{t}:doorbell",
)


@pytest.fixture
def scripts(redis_client: redis.Redis) -> Frontier:
    return frontier_for_mode(redis_client, KEYS_T, "priority")


def payload(url: str) -> str:
    return json.dumps({"url": url})


def enqueue(
    scripts: Frontier, qtype: str, items: list[tuple[str, int]], dont_filter: bool = False, handover: list[str] = ()
) -> list[int]:
    entries = [(url, dont_filter, make_member(payload(url), prio)) for url, prio in items]
    enqueuer = Enqueuer(with_mode(scripts, qtype), SetDedup(DF))
    return run_sync(enqueuer.run("push", entries, list(handover)))


def pop(scripts: Frontier, qtype: str, n: int, lease: float = 60) -> list[str]:
    return [m.decode() for m in lease_flat(with_mode(scripts, qtype), n, lease)]


def urls(members: list[str]) -> list[str]:
    return [payload_url(split_member(m).payload) for m in members]


def test_enqueue_dedups_atomically(scripts: Frontier) -> None:
    assert enqueue(scripts, "priority", [("a", 0), ("b", 0), ("a", 0)]) == [1, 1, 0]
    assert enqueue(scripts, "priority", [("a", 0)]) == [0]
    assert enqueue(scripts, "priority", [("a", 0)], dont_filter=True) == [1]


@pytest.mark.parametrize(
    ("qtype", "order"),
    [
        ("priority", ["hi", "a", "b", "c", "lo"]),
        ("fifo", ["a", "b", "c", "hi", "lo"]),
        ("lifo", ["lo", "hi", "c", "b", "a"]),
    ],
)
def test_queue_orders(scripts: Frontier, qtype: str, order: list[str]) -> None:
    enqueue(scripts, qtype, [("a", 0), ("b", 0), ("c", 0), ("hi", 5), ("lo", -5)])
    assert urls(pop(scripts, qtype, 10)) == order


@pytest.mark.parametrize("qtype", ["priority", "fifo", "lifo"])
def test_pop_leases_with_server_time_and_counts_deliveries(
    scripts: Frontier, redis_client: redis.Redis, qtype: str
) -> None:
    enqueue(scripts, qtype, [("a", 3)])
    (lease,) = pop(scripts, qtype, 5, lease=30)
    assert split_member(lease).deliveries == 1 and split_member(lease).priority == 3
    now = float(redis_client.time()[0])
    deadline = redis_client.zscore(PROC, lease)
    assert now + 28 <= deadline <= now + 32
    assert redis_client.exists(Q) == 0  # in processing, not in the queue


def test_handover_removes_the_old_lease_with_the_push(scripts: Frontier, redis_client: redis.Redis) -> None:
    enqueue(scripts, "priority", [("a", 0)])
    (lease,) = pop(scripts, "priority", 1)
    enqueue(scripts, "priority", [("a-retry", 0)], dont_filter=True, handover=[lease])
    assert redis_client.zcard(PROC) == 0
    assert urls(pop(scripts, "priority", 1)) == ["a-retry"]


def test_renew_extends_but_never_resurrects(scripts: Frontier, redis_client: redis.Redis) -> None:
    enqueue(scripts, "priority", [("a", 0), ("b", 0)])
    a, b = pop(scripts, "priority", 2, lease=5)
    redis_client.zrem(PROC, b)  # acked (or reclaimed) meanwhile
    assert run_sync(scripts.renew([a, b], 100)) == 1
    assert redis_client.zscore(PROC, a) > float(redis_client.time()[0]) + 90
    assert redis_client.zscore(PROC, b) is None


def expire(redis_client: redis.Redis) -> None:
    """Age every lease instead of sleeping."""
    for member in redis_client.zrange(PROC, 0, -1):
        redis_client.zadd(PROC, {member: 1})


def reclaim(scripts: Frontier, qtype: str = "priority", max_deliveries: int = 5) -> tuple[int, int]:
    return run_sync(with_mode(scripts, qtype).reclaim(max_deliveries, limit=1000, failed_cap=1000, node_id="test"))


def test_reclaim_returns_expired_to_the_front_of_their_priority(scripts: Frontier, redis_client: redis.Redis) -> None:
    enqueue(scripts, "priority", [("x", 1), ("y", 1)])
    (x,) = pop(scripts, "priority", 1)
    enqueue(scripts, "priority", [("z", 1), ("low", 0)])
    assert reclaim(scripts) == (0, 0)  # not expired yet
    expire(redis_client)
    assert reclaim(scripts) == (1, 0)
    assert urls(pop(scripts, "priority", 10)) == ["x", "y", "z", "low"]


def test_reclaim_twice_concurrently_moves_each_lease_once(
    scripts: Frontier, redis_url: str, redis_client: redis.Redis
) -> None:
    n = 2000
    for i in range(0, n, 500):
        enqueue(scripts, "fifo", [(f"u{j}", 0) for j in range(i, i + 500)])
    pop(scripts, "fifo", n)
    expire(redis_client)
    results = []

    def run() -> None:
        client = redis.Redis.from_url(redis_url)
        s = frontier_for_mode(client, KEYS_T, "fifo")
        for _ in range(10):
            results.append(run_sync(s.reclaim(max_deliveries=5, limit=150, failed_cap=1000, node_id="t"))[0])

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(results) == n
    assert redis_client.llen(Q) == n and redis_client.zcard(PROC) == 0
    assert len(set(urls(pop(scripts, "fifo", n)))) == n


def test_poison_request_goes_to_failed_after_max_deliveries(scripts: Frontier, redis_client: redis.Redis) -> None:
    enqueue(scripts, "priority", [("poison", 2)])
    for delivery in range(1, 4):
        (lease,) = pop(scripts, "priority", 1)
        assert split_member(lease).deliveries == delivery
        expire(redis_client)
        requeued, dead = reclaim(scripts, max_deliveries=3)
    assert (requeued, dead) == (0, 1)
    assert redis_client.zcard(PROC) == 0 and redis_client.zcard(Q) == 0
    entry = json.loads(redis_client.lindex(FAILED, 0))
    assert entry["url"] == "poison" and entry["attempts"] == 3 and entry["priority"] == 2
    assert json.loads(entry["payload"]) == {"url": "poison"}


def test_release_gives_back_without_counting_a_delivery(scripts: Frontier, redis_client: redis.Redis) -> None:
    enqueue(scripts, "lifo", [("a", 0), ("b", 0)])
    (b,) = pop(scripts, "lifo", 1)
    released = run_sync(with_mode(scripts, "lifo").release([b, "0:0:gone"]))
    assert released == 1
    (again,) = pop(scripts, "lifo", 1)
    assert urls([again]) == ["b"] and split_member(again).deliveries == 1


def test_foreign_member_is_leased_for_dead_lettering(scripts: Frontier, redis_client: redis.Redis) -> None:
    redis_client.lpush(Q, b"\x80\x04garbage")
    (lease,) = lease_flat(with_mode(scripts, "fifo"), 1, 60)
    assert lease.startswith(b"1:0:") and redis_client.zcard(PROC) == 1


def test_enqueue_rings_the_doorbell_only_when_it_pushed(scripts: Frontier, redis_client: redis.Redis) -> None:
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe("{t}:doorbell")
    pubsub.get_message(timeout=1)  # subscription confirmation

    def ring(url: str) -> None:
        enqueuer = Enqueuer(frontier_for_mode(redis_client, KEYS_T, "fifo"), SetDedup(DF), "{t}:doorbell")
        run_sync(enqueuer.run("push", [(url, False, make_member(payload(url), 0))]))

    ring("a")
    message = pubsub.get_message(timeout=2)
    assert message is not None and message["data"].startswith(b"1 t ")  # queued, hash tag, sequence
    ring("a")  # a duplicate: nothing pushed, no ring
    assert pubsub.get_message(timeout=0.3) is None
    pubsub.close()
