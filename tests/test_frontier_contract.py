"""One contract for every Frontier (frontier/base.py): each queue mode, with 1 and 4 shards
(FRONTIER_SHARDS), on fakeredis and on a real redis-server, keeps the same promises: push / lease / ack / release / reclaim / expiry / size /
hosts / flush, and a pending count that is exact after any mix of them."""

from __future__ import annotations

import json

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.dedup.dupefilter import SetDedup
from distributed_crawler.frontier.base import Frontier, Placement, placed_entry
from distributed_crawler.frontier.codec import payload_url
from distributed_crawler.frontier.doorbell import Ring
from distributed_crawler.frontier.enqueue import refused_entry
from distributed_crawler.frontier.envelope import make_member, split_member
from distributed_crawler.frontier.factory import frontier_from_settings
from distributed_crawler.frontier.keys import SpiderKeys

MODES = ["host", "priority", "fifo", "lifo"]
KEYS = SpiderKeys.from_settings(Settings(), "contract")


@pytest.fixture(params=[(mode, shards) for mode in MODES for shards in (1, 4)], ids=lambda p: f"{p[0]}-{p[1]}")
def frontier(request: pytest.FixtureRequest, client: redis.Redis) -> Frontier:
    mode, shards = request.param
    settings = Settings(
        {"SCHEDULER_QUEUE_CLASS": mode, "FRONTIER_SHARDS": shards, "DOMAIN_RATE_LIMIT": 0, "DOMAIN_MAX_IN_FLIGHT": 0}
    )
    return frontier_from_settings(settings, "contract", client)


async def plain(key: str) -> SetDedup:
    return SetDedup(key)


def push(frontier: Frontier, urls: list[str], expires_at: int = 0) -> int:
    entries = []
    for url in urls:
        placement = frontier.placement(url)
        payload = json.dumps({"url": url, **({"slot": placement.slot} if placement.slot else {})})
        member = make_member(payload, 0, expires_at=expires_at)
        entries.append(placed_entry(url, False, member, 0.0, placement))
    return sum(run_sync(run_sync(frontier.open_enqueuer(plain)).run("push", entries)))


def size(frontier: Frontier) -> int | None:
    return run_sync(frontier.size())


def urls_of(leases: list[bytes]) -> list[str]:
    return [payload_url(split_member(lease).payload) for lease in leases]


URLS = [f"http://h{i % 3}.test/{i}" for i in range(9)]


def test_push_counts_every_new_request_once(frontier: Frontier) -> None:
    assert push(frontier, URLS) == 9
    assert push(frontier, URLS[:4]) == 0  # seen: the dedup check and the push are one script
    assert size(frontier) == 9


def test_lease_then_ack_empties_the_frontier(frontier: Frontier, client: redis.Redis) -> None:
    push(frontier, URLS)
    leased = run_sync(frontier.lease(100, 60)).leases
    assert sorted(urls_of([x.lease for x in leased])) == sorted(URLS)
    assert size(frontier) == 0
    assert run_sync(frontier.counts()).leased == 9
    assert all(bool(x.slot) == (frontier.host_control() is not None) for x in leased)
    run_sync(frontier.ack([x.lease for x in leased]))
    assert run_sync(frontier.lease(100, 60)).leases == []  # finds nothing (a per-host one drops its drained hosts)
    counts = run_sync(frontier.counts())
    assert (counts.pending, counts.leased) == (0, 0)
    assert not counts.frontier_busy


def test_release_gives_back_without_a_delivery(frontier: Frontier) -> None:
    push(frontier, URLS[:3])
    leases = [x.lease for x in run_sync(frontier.lease(3, 60)).leases]
    assert all(split_member(lease).deliveries == 1 for lease in leases)
    assert run_sync(frontier.release(leases)) == 3
    assert size(frontier) == 3
    again = [x.lease for x in run_sync(frontier.lease(3, 60)).leases]
    assert sorted(urls_of(again)) == sorted(URLS[:3])
    assert all(split_member(lease).deliveries == 1 for lease in again)  # not a redelivery


def test_reclaim_returns_expired_leases_with_a_delivery_counted(frontier: Frontier, client: redis.Redis) -> None:
    push(frontier, URLS[:2])
    leases = [x.lease for x in run_sync(frontier.lease(2, 60)).leases]
    run_sync(frontier.expire(leases))  # an old deadline, as a dead node leaves it
    assert run_sync(frontier.reclaim(max_deliveries=5, limit=100, failed_cap=100, node_id="t")) == (2, 0)
    assert size(frontier) == 2
    again = [x.lease for x in run_sync(frontier.lease(2, 60)).leases]
    assert all(split_member(lease).deliveries == 2 for lease in again)


def test_renew_keeps_a_lease_from_reclaim(frontier: Frontier) -> None:
    push(frontier, URLS[:1])
    (lease,) = [x.lease for x in run_sync(frontier.lease(1, 60)).leases]
    assert run_sync(frontier.renew([lease], 60)) == 1
    assert run_sync(frontier.reclaim(5, 100, 100, "t")) == (0, 0)


def test_expired_requests_are_dropped_at_lease(frontier: Frontier, client: redis.Redis) -> None:
    now = int(client.time()[0])
    push(frontier, URLS[:2], expires_at=now - 10)
    push(frontier, URLS[2:3], expires_at=now + 3600)
    leased = run_sync(frontier.lease(10, 60))
    assert leased.expired == 2
    assert urls_of([x.lease for x in leased.leases]) == URLS[2:3]
    assert size(frontier) == 0


def test_hosts_name_the_hosts_with_work(frontier: Frontier) -> None:
    push(frontier, URLS)
    hosts = run_sync(frontier.hosts())
    counts = run_sync(frontier.counts())
    if frontier.host_control() is not None:
        assert hosts == {"h0.test": 3, "h1.test": 3, "h2.test": 3}
        assert counts.hosts == 3
    else:
        assert hosts == {} and counts.hosts == 0


def test_flush_removes_the_whole_frontier(frontier: Frontier, client: redis.Redis) -> None:
    push(frontier, URLS)
    run_sync(frontier.lease(2, 60))
    run_sync(frontier.flush())
    assert size(frontier) == 0
    assert [k for k in client.keys("*") if b":dupefilter" not in k] == []


def test_the_pending_count_stays_exact_through_every_operation(frontier: Frontier, client: redis.Redis) -> None:
    urls = [f"http://h{i % 7}.test/{i}" for i in range(60)]
    push(frontier, urls)
    leases = [x.lease for x in run_sync(frontier.lease(30, 60)).leases]
    run_sync(frontier.ack(leases[:10]))
    run_sync(frontier.release(leases[10:15]))
    run_sync(frontier.expire(leases[15:20]))
    run_sync(frontier.reclaim(5, 100, 100, "t"))
    push(frontier, urls[:5] + [f"http://h9.test/{i}" for i in range(4)])  # 4 new
    expected = 60 - 30 + 5 + 5 + 4
    assert size(frontier) == expected
    drained = []
    for _ in range(100):
        got = [x.lease for x in run_sync(frontier.lease(50, 60)).leases]
        if not got:
            break
        drained += got
    assert len(drained) == expected
    assert size(frontier) == 0


def test_placement_is_the_frontiers_own(frontier: Frontier) -> None:
    placement = frontier.placement("http://Example.COM:8080/a")
    if frontier.host_control() is not None:
        assert placement.slot == "example.com:8080"
        control = frontier.host_control()
        assert control is not None
        push(frontier, ["http://blocked.test/1", "http://open.test/1"])
        run_sync(control.block_host("blocked.test", 60, "test", 1.0, 60.0, 0.5))  # on the host's shard
        leased = [x.lease for x in run_sync(frontier.lease(10, 60)).leases]
        assert urls_of(leased) == ["http://open.test/1"]
    else:
        assert placement == Placement() and frontier.host_control() is None


def test_a_sharded_frontier_spreads_hosts_over_its_shards(client: redis.Redis) -> None:
    settings = Settings({"FRONTIER_SHARDS": 4, "DOMAIN_RATE_LIMIT": 0, "DOMAIN_MAX_IN_FLIGHT": 0})
    sharded = frontier_from_settings(settings, "contract", client)
    urls = [f"http://h{i}.test/{i}" for i in range(40)]
    assert push(sharded, urls) == 40
    tags = {k.split(b"}")[0] for k in client.keys("{contract~*:pending")}
    assert len(tags) == 4  # every shard holds hosts
    assert run_sync(sharded.size()) == 40
    for url in urls[:8]:  # a host's queue is on its shard only
        host = url.split("/")[2]
        # its queue zset and its list (`<queue key>/`)
        keys = client.keys(f"{{contract~*}}:q:{host}*")
        assert sum(client.llen(k) if client.type(k) == b"list" else client.zcard(k) for k in keys) == 1


def test_a_sharded_lease_needs_one_round_trip_per_batch_while_shards_have_work(client: redis.Redis) -> None:
    settings = Settings(
        {"FRONTIER_SHARDS": 4, "DOMAIN_RATE_LIMIT": 0, "DOMAIN_MAX_IN_FLIGHT": 0, "SCHEDULER_QUEUE_CLASS": "priority"}
    )
    sharded = frontier_from_settings(settings, "contract", client)
    push(sharded, [f"http://h{i}.test/{i}" for i in range(400)])
    calls = []
    for part in sharded.parts:  # type: ignore[attr-defined]
        lease = part.lease
        part.lease = lambda *a, _lease=lease, **k: calls.append(1) or _lease(*a, **k)  # type: ignore[method-assign]
    for _ in range(8):
        assert len(run_sync(sharded.lease(10, 60)).leases) == 10
    assert len(calls) == 8
    for _ in range(10):
        run_sync(sharded.lease(100, 60))
    sharded.woken()  # the doorbell rang: every shard is asked again
    calls.clear()
    assert run_sync(sharded.lease(10, 60)).leases == []
    assert run_sync(sharded.lease(10, 60)).leases == []  # empty shards are not asked again until woken or the recheck
    assert len(calls) == 4
    sharded.woken()
    run_sync(sharded.lease(10, 60))
    assert len(calls) == 8


def test_a_successor_push_removes_its_predecessors_lease(frontier: Frontier) -> None:
    """A redirect to another host (with shards: maybe another shard) hands its lease over with the push."""
    push(frontier, ["http://from.test/a"])
    (lease,) = [x.lease for x in run_sync(frontier.lease(1, 60)).leases]
    url = "http://elsewhere.test/b"
    placement = frontier.placement(url)
    payload = json.dumps({"url": url, **({"slot": placement.slot} if placement.slot else {})})
    entry = placed_entry(url, False, make_member(payload, 0), 0.0, placement)
    enqueuer = run_sync(frontier.open_enqueuer(plain))
    assert run_sync(enqueuer.run("push", [entry], [lease])) == [1]
    counts = run_sync(frontier.counts())
    assert (counts.pending, counts.leased) == (1, 0)
    assert urls_of([x.lease for x in run_sync(frontier.lease(5, 60)).leases]) == [url]


def test_a_refused_request_rides_in_the_push_as_a_dead_letter(frontier: Frontier, client: redis.Redis) -> None:
    """A refused link adds its fingerprint and, if new, writes its dead letter; a refused successor
    always, removing the lease it replaces; the failed list trimmed to its cap; nothing queued."""
    push(frontier, ["http://from.test/a", "http://seen.test/b"])
    (lease,) = [x.lease for x in run_sync(frontier.lease(1, 60)).leases]
    enqueuer = run_sync(frontier.open_enqueuer(plain))

    def letter(url: str) -> str:
        return json.dumps({"url": url, "reason": "refused: private_address"})

    entries = [
        refused_entry("http://new.test/c", letter("http://new.test/c"), 2),
        refused_entry("http://seen.test/b", letter("http://seen.test/b"), 2),  # pushed before: no letter
        refused_entry("http://new.test/c", letter("http://new.test/c"), 2),  # the same link again: none
        refused_entry("", letter("http://10.0.0.1/x"), 2),  # the lease's successor
        refused_entry("", letter("http://10.0.0.2/y"), 2),
    ]
    assert run_sync(enqueuer.run("push", entries, [lease])) == [1, 0, 0, 1, 1]
    failed = [json.loads(x)["url"] for part in frontier.each_shard() for x in client.lrange(part.keys.failed, 0, -1)]
    assert len(failed) <= 2 * len(frontier.each_shard()) and "http://seen.test/b" not in failed  # capped at 2
    assert "http://10.0.0.2/y" in failed
    counts = run_sync(frontier.counts())
    assert (counts.pending, counts.leased) == (1, 0)  # the lease went with its successor's letter
    assert run_sync(enqueuer.run("check", [("http://new.test/c", False, "")], (), ["http://new.test/c"])) == [0]


def test_a_doorbell_ring_for_a_push_the_last_lease_saw_is_stale(client: redis.Redis) -> None:
    """enqueue.lua rings "<queued> <tag> <sequence>"; a lease that read the sequence at or past it
    took that push into account: the feeder does not lease again for the ring."""
    settings = Settings({"DOMAIN_RATE_LIMIT": 0, "DOMAIN_MAX_IN_FLIGHT": 0})
    frontier = frontier_from_settings(settings, "rings", client)
    push(frontier, ["http://a.test/1"])
    assert len(run_sync(frontier.lease(10, 60)).leases) == 1
    seen = frontier.pushes_seen.seq  # type: ignore[attr-defined]
    assert seen is not None and seen >= 1
    assert frontier.stale_ring(Ring.parse(f"1 rings {seen}".encode()))
    assert not frontier.stale_ring(Ring.parse(f"1 rings {seen + 1}".encode()))  # a push after the lease
    assert not frontier.stale_ring(Ring.parse(b"1 rings -1"))  # no push (a host unblocked): always heard
    assert not frontier.stale_ring(Ring.parse(b"1"))  # an older node's ring: always heard


def test_a_sharded_frontier_wakes_only_the_rung_shard(client: redis.Redis) -> None:
    settings = Settings({"FRONTIER_SHARDS": 4, "DOMAIN_RATE_LIMIT": 0, "DOMAIN_MAX_IN_FLIGHT": 0})
    sharded = frontier_from_settings(settings, "rung", client)
    calls: list[int] = []
    for i, part in enumerate(sharded.parts):  # type: ignore[attr-defined]
        lease = part.lease
        part.lease = lambda *a, _i=i, _lease=lease, **k: calls.append(_i) or _lease(*a, **k)  # type: ignore[method-assign]
    assert run_sync(sharded.lease(10, 60)).leases == []
    assert sorted(calls) == [0, 1, 2, 3]
    calls.clear()
    tag = sharded.parts[2].keys.processing.partition("{")[2].partition("}")[0]  # type: ignore[attr-defined]
    sharded.woken(Ring.parse(f"1 {tag} 5".encode()))
    run_sync(sharded.lease(10, 60))
    assert calls == [2]  # the other shards stay skipped until rung or the recheck
    calls.clear()
    sharded.woken(Ring.parse(b"1"))  # a ring naming no shard (an older node's): every shard is asked again
    run_sync(sharded.lease(10, 60))
    assert sorted(calls) == [0, 1, 2, 3]


def test_a_lease_that_drains_the_queue_tells_the_other_nodes(client: redis.Redis) -> None:
    """host_pop.lua publishes "0 <tag> <sequence>" when it left no due host: another node's rings
    up to that sequence are then stale (it does not lease for work already taken)."""
    settings = Settings({"DOMAIN_RATE_LIMIT": 0, "DOMAIN_MAX_IN_FLIGHT": 0})
    mine, other = (frontier_from_settings(settings, "drain", client) for _ in range(2))
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(mine.doorbell)
    pubsub.get_message(timeout=1)
    push(mine, ["http://a.test/1", "http://a.test/2"])
    ring = pubsub.get_message(timeout=2)
    assert ring is not None and not other.stale_ring(Ring.parse(ring["data"]))
    assert len(run_sync(mine.lease(1, 60)).leases) == 1  # one left: not drained, nothing published
    assert pubsub.get_message(timeout=0.3) is None
    assert len(run_sync(mine.lease(10, 60)).leases) == 1
    drained = pubsub.get_message(timeout=2)
    assert drained is not None and drained["data"].startswith(b"0 drain ")
    assert other.saw(Ring.parse(drained["data"])) and other.stale_ring(Ring.parse(ring["data"]))
    assert not other.saw(Ring.parse(ring["data"]))  # a ring is not a notice
    pubsub.close()


def test_the_shards_are_counted_in_one_pipelined_round_trip(client: redis.Redis) -> None:
    """counts.lua of every shard in one pipeline (the heartbeat and the idle count run it each
    second): exact sums, and a server that lost its script cache is answered after one reload."""
    settings = Settings({"FRONTIER_SHARDS": 4, "DOMAIN_RATE_LIMIT": 0, "DOMAIN_MAX_IN_FLIGHT": 0})
    sharded = frontier_from_settings(settings, "tally", client)
    push(sharded, [f"http://h{i}.test/{i}" for i in range(40)])
    sent: list[int] = []
    execute = redis.client.Pipeline.execute

    def counted(pipe: redis.client.Pipeline, *args: object, **kwargs: object) -> object:
        sent.append(len(pipe.command_stack))
        return execute(pipe, *args, **kwargs)

    redis.client.Pipeline.execute = counted  # type: ignore[method-assign]
    try:
        client.script_flush()
        counts = run_sync(sharded.counts())
    finally:
        redis.client.Pipeline.execute = execute  # type: ignore[method-assign]
    assert counts.pending == 40 and counts.hosts == 40
    assert sent == [4, 4]  # refused once (NOSCRIPT), loaded, then one pipeline of the 4 shards


def test_the_sharded_frontier_composes_its_parts_and_inherits_nothing() -> None:
    """A method added to the Frontier Protocol must be written for the sharded frontier too: it
    cannot fall through to a base class running against the spider's unsharded keys."""
    from distributed_crawler.frontier.sharded import ShardedFrontier
    from distributed_crawler.frontier.unsharded import UnshardedFrontier

    assert ShardedFrontier.__mro__ == (ShardedFrontier, object)
    members = {name for name in vars(Frontier) if not name.startswith("_")} | set(Frontier.__annotations__)
    assert members - {"client", "keys"} <= set(vars(ShardedFrontier)), "a Protocol member the sharded frontier lacks"
    assert members - {"client", "keys"} <= set(dir(UnshardedFrontier))
