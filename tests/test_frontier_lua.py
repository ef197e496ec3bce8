"""The host-mode frontier scripts against a real redis-server: enqueue into per-host
queues, pop from due hosts with their interval and budget, reclaim / release back to the host,
due retries from delayed, and garbage in every new key (style of test_lua_garbage.py)."""

from __future__ import annotations

import json
import time

import pytest
import redis

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.dedup.dupefilter import SetDedup
from distributed_crawler.frontier.base import Frontier, Leased
from distributed_crawler.frontier.codec import payload_url
from distributed_crawler.frontier.config import FrontierConfig, slot_of
from distributed_crawler.frontier.enqueue import Enqueuer
from distributed_crawler.frontier.envelope import make_member, split_member
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys

KEYS_H = SpiderKeys(
    "h",
    "h:start_urls",
    "{h}:requests",
    "{h}:processing",
    "{h}:delayed",
    "{h}:dupefilter",
    "{h}:failed",
    "{h}:seq",
    "{h}:stats",
    "{h}:nodes",
    "{h}:node:%(node)s",
    "{h}:doorbell",
)
READY, OVER, PROC, DELAYED, FAILED = KEYS_H.ready, KEYS_H.over_budget, KEYS_H.processing, KEYS_H.delayed, KEYS_H.failed
GARBAGE = [b"nan", b"inf", b"-inf", b"abc", b"", b"\xff\xfe", b"1e308", b"99999999999999999999"]


@pytest.fixture
def scripts(redis_client: redis.Redis) -> Frontier:
    return frontier_for_mode(redis_client, KEYS_H, "host")


def member(url: str, priority: int = 0, slot: str | None = None, deliveries: int = 0) -> str:
    d: dict = {"url": url}
    if slot is not None:
        d["slot"] = slot
    return make_member(json.dumps(d), priority, deliveries)


def push(
    scripts: Frontier,
    items: list[tuple[str, str]],
    interval: float | None = 0.0,
    budget: int | None = -1,
    priority: int = 0,
    delay: float = 0.0,
    cap: int | None = None,
) -> list[int]:
    """items: (url, slot); slot "" = Lua finds it in the payload."""
    entries = [
        (url, False, member(url, priority, slot or None), delay, slot, interval, budget, cap) for url, slot in items
    ]
    enqueuer = Enqueuer(scripts, SetDedup(KEYS_H.dupefilter))
    return run_sync(enqueuer.run("push", entries))


def pop(scripts: Frontier, n: int) -> Leased:
    return run_sync(scripts.lease(n, 60))


def urls(result: Leased) -> list[str]:
    return [payload_url(split_member(h.lease).payload) for h in result.leases]


def test_slot_of_groups_by_rate_domain_and_keeps_ports() -> None:
    config = FrontierConfig(rates={"example.com": 2.0})
    assert slot_of("http://WWW.example.com/a", config) == "example.com"
    assert slot_of("http://127.0.0.2:8080/a", config) == "127.0.0.2:8080"
    assert slot_of("https://other.org:443/", config) == "other.org"
    assert slot_of("data:,hello", config) == ""
    assert config.interval("example.com") == 0.5 and config.interval("other.org") == 0


def test_frontier_config_errors_say_what_to_do() -> None:
    from scrapy.settings import Settings

    from distributed_crawler.defaults import DEFAULTS

    def config(**values: object) -> FrontierConfig:
        return FrontierConfig.from_settings(Settings({**DEFAULTS, **values}))

    assert config(DOMAIN_MAX_PAGES=20).budget("a.org") == 20
    assert config(DOMAIN_MAX_PAGES="20").budget("a.org") == 20
    by_domain = config(DOMAIN_MAX_PAGES='{"a.org": 5}')
    assert by_domain.budget("x.a.org") == 5 and by_domain.budget("b.org") == -1
    assert config(DOMAIN_MAX_PAGES=0).budget("a.org") == -1
    for bad in ("lots", -3, 1.5, "{bad json", '{"a.org": "x"}', True):
        with pytest.raises(ValueError, match="DOMAIN_MAX_PAGES"):
            config(DOMAIN_MAX_PAGES=bad)
    assert config(DOMAIN_MAX_IN_FLIGHT=2).limits("a.org:8080") == (1.0, -1, 2)  # DOMAIN_RATE_LIMIT 1 by default
    capped = config(DOMAIN_MAX_IN_FLIGHT='{"a.org": 1}', DOMAIN_RATE_LIMIT=4)
    assert capped.limits("x.a.org") == (0.25, -1, 1) and capped.in_flight_cap("b.org") == -1
    for bad in ("many", -1, '{"a.org": 1.5}'):
        with pytest.raises(ValueError, match=r"DOMAIN_MAX_IN_FLIGHT.* requests in flight per host"):
            config(DOMAIN_MAX_IN_FLIGHT=bad)
    with pytest.raises(ValueError, match="DOMAIN_RATE_LIMITS"):
        config(DOMAIN_RATE_LIMITS='{"a.org": -1}')
    with pytest.raises(ValueError, match="end with %\\(host\\)s"):
        config(SCHEDULER_HOST_QUEUE_KEY="{%(spider)s}:q:%(host)s:x")


def waiting(client: redis.Redis, host: str) -> int:
    """A host's pending requests: its queue zset and its list (lua/lib/host.lua host_list)."""
    return int(client.zcard(KEYS_H.host_queue(host))) + int(client.llen(KEYS_H.host_list(host)))


def test_enqueue_queues_per_host_and_marks_ready(scripts: Frontier, redis_client: redis.Redis) -> None:
    assert push(scripts, [("http://a/1", "a"), ("http://b/1", "b"), ("http://a/1", "a")], interval=0.5, budget=7) == [
        1,
        1,
        0,
    ]
    assert waiting(redis_client, "a") == 1 and waiting(redis_client, "b") == 1
    assert sorted(redis_client.zrange(READY, 0, -1)) == [b"a", b"b"]
    assert redis_client.hgetall(KEYS_H.host("a")) == {b"iv": b"0.5", b"max": b"7"}
    assert not redis_client.exists(KEYS_H.requests)
    # slot "" = read from the payload's url (the CLI requeue path)
    push(scripts, [("http://c.org:81/x", "")], interval=None, budget=None)
    assert waiting(redis_client, "c.org:81") == 1
    assert not redis_client.exists(KEYS_H.host("c.org:81"))


def test_pop_round_robins_hosts_and_keeps_priority_inside_a_host(scripts: Frontier) -> None:
    push(scripts, [(f"http://a/{i}", "a") for i in range(10)])
    push(scripts, [(f"http://b/{i}", "b") for i in range(10)])
    push(scripts, [("http://a/hi", "a")], priority=5)
    got = pop(scripts, 6)
    assert sorted(h.slot for h in got.leases) == ["a", "a", "a", "b", "b", "b"]
    assert urls(got)[0] == "http://a/hi" or "http://a/hi" in urls(got)
    assert all(h.backoff == 0 for h in got.leases)
    assert got.next_due == 0


def test_interval_host_gives_one_per_call_and_waits(scripts: Frontier, redis_client: redis.Redis) -> None:
    push(scripts, [(f"http://slow/{i}", "slow") for i in range(5)], interval=30)
    push(scripts, [(f"http://fast/{i}", "fast") for i in range(5)], interval=0)
    got = pop(scripts, 10)
    assert sorted(h.slot for h in got.leases) == ["fast"] * 5 + ["slow"]
    again = pop(scripts, 10)
    assert (
        again.leases == [] and again.next_due is not None and 29 < again.next_due <= 30.05
    )  # + the send spread allowance
    assert waiting(redis_client, "slow") == 4


def test_emptied_interval_host_keeps_its_due_time(scripts: Frontier, redis_client: redis.Redis) -> None:
    push(scripts, [("http://slow/1", "slow")], interval=30)
    assert len(pop(scripts, 5).leases) == 1
    push(scripts, [("http://slow/2", "slow")], interval=30)  # cannot jump the interval
    assert pop(scripts, 5).leases == []
    redis_client.zadd(READY, {"slow": 0})  # due now
    assert urls(pop(scripts, 5)) == ["http://slow/2"]


def _server_now(redis_client: redis.Redis) -> float:
    seconds, micros = redis_client.time()
    return seconds + micros / 1e6


def test_the_interval_is_a_minimum_gap_after_the_pop(scripts: Frontier, redis_client: redis.Redis) -> None:
    """Next due = one interval after the pop, however late the pop was: lateness is never made up by a
    shorter gap (the site never sees two requests closer than the interval)."""
    push(scripts, [(f"http://r/{i}", "r") for i in range(5)], interval=0.5)
    push(scripts, [(f"http://idle/{i}", "idle") for i in range(5)], interval=0.5)
    now = _server_now(redis_client)
    redis_client.zadd(READY, {"r": now - 0.1, "idle": now - 10})  # 0.1 s late, and idle for 10 s
    assert sorted(h.slot for h in pop(scripts, 10).leases) == ["idle", "r"]
    assert redis_client.zscore(READY, "r") == pytest.approx(now + 0.5, abs=0.05)
    assert redis_client.zscore(READY, "idle") == pytest.approx(now + 0.5, abs=0.05)


def test_crawl_delay_is_a_minimum_gap_with_no_catch_up(scripts: Frontier, redis_client: redis.Redis) -> None:
    push(scripts, [(f"http://cd/{i}", "cd") for i in range(3)], interval=0.0)
    redis_client.hset(KEYS_H.host("cd"), "cd", 2)
    now = _server_now(redis_client)
    redis_client.zadd(READY, {"cd": now - 1.5})
    assert len(pop(scripts, 5).leases) == 1
    assert redis_client.zscore(READY, "cd") == pytest.approx(now + 2.05, abs=0.05)  # + the send spread allowance


def test_budget_moves_a_host_over_and_counts_leftovers(scripts: Frontier, redis_client: redis.Redis) -> None:
    push(scripts, [(f"http://a/{i}", "a") for i in range(10)], budget=3)
    push(scripts, [(f"http://b/{i}", "b") for i in range(4)], budget=-1)
    got = pop(scripts, 20)
    assert sorted(h.slot for h in got.leases) == ["a"] * 3 + ["b"] * 4
    pop(scripts, 20)
    assert redis_client.zscore(OVER, "a") == 7 and redis_client.zscore(READY, "a") is None
    push(scripts, [("http://a/new", "a")], budget=3)  # a new request of an over-budget host: counted, not served
    assert redis_client.zscore(OVER, "a") == 8 and pop(scripts, 5).leases == []
    # a released first delivery gives its page back: the host is served again
    run_sync(scripts.release([got.leases[0].lease]))
    assert redis_client.zscore(READY, "a") is not None and redis_client.zscore(OVER, "a") is None
    assert len(pop(scripts, 5).leases) == 1


def test_in_flight_cap_counts_leases_held_across_the_cluster(scripts: Frontier, redis_client: redis.Redis) -> None:
    push(scripts, [(f"http://a/{i}", "a") for i in range(10)], cap=2)
    push(scripts, [(f"http://b/{i}", "b") for i in range(4)])
    assert redis_client.hget(KEYS_H.host("a"), "cap") == b"2"
    first = pop(scripts, 20)  # a: 2 (its cap), b: all 4
    assert sorted(h.slot for h in first.leases) == ["a", "a"] + ["b"] * 4
    assert pop(scripts, 20).leases == []  # another node: a still holds 2
    assert 0 < redis_client.zscore(READY, "a") - _server_now(redis_client) <= 0.06  # looked at again shortly
    a_leases = [h.lease for h in first.leases if h.slot == "a"]
    redis_client.zrem(PROC, a_leases[0])  # an ack
    time.sleep(0.06)
    assert [h.slot for h in pop(scripts, 20).leases] == ["a"]  # one lease ended: one more
    assert redis_client.scard(KEYS_H.host_in_flight("a")) == 2  # the acked one left the set
    # released, reclaimed or expired leases end too, whoever ended them
    run_sync(scripts.release([a_leases[1]]))
    redis_client.zadd(PROC, {lease: 1 for lease in redis_client.smembers(KEYS_H.host_in_flight("a"))}, xx=True)
    time.sleep(0.06)
    assert [h.slot for h in pop(scripts, 20).leases] == ["a", "a"]
    assert 0 < redis_client.ttl(KEYS_H.host_in_flight("a")) <= 180  # 3 lease lengths of 60 s
    # the cap can be lifted: -1 = none
    push(scripts, [("http://a/new", "a")], cap=-1)
    time.sleep(0.06)
    assert len(pop(scripts, 20).leases) == 7


def test_in_flight_cap_garbage_is_never_fatal(scripts: Frontier, redis_client: redis.Redis) -> None:
    push(scripts, [(f"http://a/{i}", "a") for i in range(5)], cap=1)
    redis_client.sadd(KEYS_H.host_in_flight("a"), "garbage", b"\xff")  # not leases in processing: dropped
    assert len(pop(scripts, 5).leases) == 1
    assert redis_client.smembers(KEYS_H.host_in_flight("a")) == {redis_client.zrange(PROC, 0, 0)[0]}
    redis_client.delete(KEYS_H.host_in_flight("a"))
    redis_client.set(KEYS_H.host_in_flight("a"), "not a set")  # wrong type: no lease counted, key kept
    redis_client.zadd(READY, {"a": 0})
    assert len(pop(scripts, 5).leases) == 1 and redis_client.get(KEYS_H.host_in_flight("a")) == b"not a set"
    for raw in GARBAGE:
        redis_client.hset(KEYS_H.host("a"), "cap", raw)
        redis_client.zadd(READY, {"a": 0})
        pop(scripts, 1)


def test_a_host_queue_of_the_wrong_type_is_named_to_the_node(scripts: Frontier, redis_client: redis.Redis) -> None:
    push(scripts, [("http://a/1", "a"), ("http://b/1", "b")])
    redis_client.delete(KEYS_H.host_queue("b"))
    redis_client.set(KEYS_H.host_queue("b"), "not a zset")
    got = pop(scripts, 10)
    assert urls(got) == ["http://a/1"] and got.broken == ["b"]


def test_reclaim_and_release_return_to_the_host_front(scripts: Frontier, redis_client: redis.Redis) -> None:
    push(scripts, [("http://a/1", "a"), ("http://a/2", "a")])
    got = pop(scripts, 1)
    (lease,) = [h.lease for h in got.leases]
    assert run_sync(scripts.release([lease])) == 1
    assert urls(pop(scripts, 1)) == ["http://a/1"]
    redis_client.zadd(PROC, {member("http://b/9", 0, "b", deliveries=1): 1})  # expired
    redis_client.zadd(PROC, {member("http://c.org/9", 0, None, deliveries=1): 1})  # no slot: from the url
    assert run_sync(scripts.reclaim(5, 100, 100, "n")) == (2, 0)
    assert waiting(redis_client, "b") == 1 and waiting(redis_client, "c.org") == 1
    assert {b"b", b"c.org"} <= set(redis_client.zrange(READY, 0, -1))


def test_due_retries_go_back_to_their_host(scripts: Frontier, redis_client: redis.Redis) -> None:
    push(scripts, [("http://a/r", "a")], delay=0.001)
    assert redis_client.zcard(DELAYED) == 1 and waiting(redis_client, "a") == 0
    redis_client.zadd(DELAYED, {member("http://a/r", 0, "a"): 0})  # due now (server time)
    redis_client.zremrangebyscore(DELAYED, "(0", "+inf")
    redis_client.zadd(DELAYED, {member("http://b/x", 0, "b"): 0, b"garbage \xff": float("inf")})
    got = pop(scripts, 10)
    assert sorted(urls_or_raw(got)) == sorted(["http://a/r", "http://b/x", "garbage"])
    assert redis_client.zcard(DELAYED) == 0


@pytest.mark.parametrize("kind", ["zset", "list", "string"])
def test_a_single_queue_left_from_another_mode_is_drained_into_the_hosts(
    scripts: Frontier, redis_client: redis.Redis, kind: str
) -> None:
    """A queue from before host mode (or after switching SCHEDULER_QUEUE_CLASS) is crawled, not left
    to keep the cluster from ever going idle; anything else in that key is not ours and stays."""
    legacy = [member("http://a/old", 0, None), member("http://b/old", 5, "b"), "not ours \xff"]
    if kind == "zset":
        redis_client.zadd(KEYS_H.requests, {m: i for i, m in enumerate(legacy)})
    elif kind == "list":
        redis_client.lpush(KEYS_H.requests, *legacy)
    else:
        redis_client.set(KEYS_H.requests, "a string")
    got = pop(scripts, 10)
    if kind == "string":
        assert got.leases == [] and redis_client.get(KEYS_H.requests) == b"a string"
        return
    assert sorted(urls_or_raw(got)) == ["garbage", "http://a/old", "http://b/old"]
    assert not redis_client.exists(KEYS_H.requests)


def urls_or_raw(result: Leased) -> list[str]:
    out = []
    for h in result.leases:
        out.append(payload_url(split_member(h.lease).payload) or "garbage")
    return out


@pytest.mark.parametrize("raw", GARBAGE)
@pytest.mark.parametrize("field", ["iv", "cd", "bo", "until", "pages", "max", "cap"])
def test_garbage_in_the_host_hash_reads_as_defaults(
    scripts: Frontier, redis_client: redis.Redis, field: str, raw: bytes
) -> None:
    push(scripts, [("http://a/1", "a"), ("http://a/2", "a")], interval=None, budget=None)
    redis_client.hset(KEYS_H.host("a"), field, raw)
    got = pop(scripts, 5)
    assert len(got.leases) >= 1  # garbage never blocks or kills the host
    push(scripts, [("http://a/3", "a")], interval=0.0, budget=-1)
    run_sync(scripts.release([h.lease for h in got.leases]))
    assert run_sync(scripts.reclaim(5, 100, 100, "n")) == (0, 0)


def test_garbage_in_ready_over_and_host_keys_is_never_fatal(scripts: Frontier, redis_client: redis.Redis) -> None:
    push(scripts, [("http://a/1", "a"), ("http://b/1", "b")])
    redis_client.zadd(READY, {"ghost": 0, "forever": float("inf"), b"\xff\x00": 0})
    redis_client.zadd(OVER, {"junk": 3})
    redis_client.set(KEYS_H.host_queue("b"), "not a zset")  # wrong type: b leaves ready, its key stays
    redis_client.set(KEYS_H.host("a"), "not a hash")  # wrong type: defaults
    got = pop(scripts, 10)
    assert urls(got) == ["http://a/1"]
    assert redis_client.zrange(READY, 0, -1) == []  # ghosts removed; "a" served and emptied: out at once
    assert redis_client.get(KEYS_H.host_queue("b")) == b"not a zset"
    assert pop(scripts, 10).leases == []
    # a member without a valid envelope is leased for dead-lettering
    redis_client.zadd(KEYS_H.host_queue("a"), {b"\x80pickle": 0})
    redis_client.zadd(READY, {"a": 0})
    assert [h.lease for h in pop(scripts, 10).leases] == [b"1:0:\x80pickle"]


def test_wrong_type_of_a_declared_key_raises_wrongtype(scripts: Frontier, redis_client: redis.Redis) -> None:
    redis_client.set(READY, "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        pop(scripts, 1)


def test_depth_travels_through_redis_so_depth_limit_holds_across_nodes(
    scripts: Frontier, redis_client: redis.Redis
) -> None:
    """Scrapy's DepthMiddleware reads meta["depth"] of the parent response: it must survive the queue."""
    from scrapy import Request

    from distributed_crawler.frontier.codec import RequestCodec

    codec = RequestCodec(None)
    request = Request("http://a/deep", meta={"depth": 3, "depth_checked": True})
    entry = ("", True, make_member(codec.encode(request, slot="a"), 0), 0.0, "a", 0.0, -1)
    run_sync(Enqueuer(scripts, SetDedup(KEYS_H.dupefilter)).run("push", [entry]))
    (leased,) = pop(scripts, 1).leases
    again = codec.decode(split_member(leased.lease).payload)  # another node
    assert again.meta == {"depth": 3} and leased.slot == "a"


def test_a_retry_or_hand_back_does_not_count_against_the_budget(scripts: Frontier, redis_client: redis.Redis) -> None:
    """A page retried (or handed back to wait for robots.txt / a blocked host) is still one page."""
    again = make_member(json.dumps({"url": "http://a/1", "slot": "a", "again": 1}, separators=(",", ":")), 0)
    push(scripts, [("http://a/2", "a")], budget=5)
    redis_client.zadd(KEYS_H.host_queue("a"), {again: 0})
    got = pop(scripts, 10)
    assert len(got.leases) == 2
    assert redis_client.hget(KEYS_H.host("a"), "pages") == b"1"
