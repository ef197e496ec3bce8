"""The revisit schedule against a real redis-server: recrawl_record.lua's adaptive
interval and validators, recrawl_move.lua's atomic move into the frontier (host mode and the single
queue), garbage in the new keys, and RECRAWL_RULES parsing."""

from __future__ import annotations

import json

import pytest
import redis
from scrapy import Request

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.frontier.envelope import make_member, split_member
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.recrawl.rules import RecrawlConfig, parse_interval
from distributed_crawler.recrawl.schedule import RecrawlKeys, RevisitSchedule, iter_states, parse_state
from distributed_crawler.storage.digest import content_digest
from tests.frontiers import with_mode

SPIDER_KEYS = SpiderKeys(
    "r",
    "r:start_urls",
    "{r}:requests",
    "{r}:processing",
    "{r}:delayed",
    "{r}:dupefilter",
    "{r}:failed",
    "{r}:seq",
    "{r}:stats",
    "{r}:nodes",
    "{r}:node:%(node)s",
    "{r}:doorbell",
)
KEYS = RecrawlKeys("{r}:recrawl", "{r}:recrawl:state")


@pytest.fixture
def schedule(redis_client: redis.Redis) -> RevisitSchedule:
    return RevisitSchedule(redis_client, frontier_for_mode(redis_client, SPIDER_KEYS, "host"))


def in_mode(schedule: RevisitSchedule, mode: str) -> RevisitSchedule:
    return RevisitSchedule(schedule.client, with_mode(schedule.frontier, mode))


def member(url: str, slot: str = "site.test") -> str:
    return make_member(json.dumps({"v": 1, "url": url, "slot": slot, "again": 1}, separators=(",", ":")), 0)


def due_in(client: redis.Redis, fp: str) -> float:
    score = client.zscore(KEYS.schedule, fp)
    assert score is not None
    server = client.time()
    return score - (server[0] + server[1] / 1e6)


def test_intervals_adapt_as_documented(schedule: RevisitSchedule, redis_client: redis.Redis) -> None:
    m = member("http://site.test/section")
    first = run_sync(schedule.record("fp1", (10, 80), 2.0, "body", digest="a", member=m))
    assert (first.interval, first.change) == (10, "first")
    assert 0 < due_in(redis_client, "fp1") <= 10  # server now + min (generous: a loaded machine is slow)
    unchanged = [
        run_sync(schedule.record("fp1", (10, 80), 2.0, "body", digest="a", member=m)).interval for _ in range(4)
    ]
    assert unchanged == [20, 40, 80, 80]  # x2 up to max
    changed = run_sync(schedule.record("fp1", (10, 80), 2.0, "body", digest="b", member=m))
    assert (changed.interval, changed.change) == (40, "changed")  # / 2 down to min
    assert run_sync(schedule.record("fp1", (10, 80), 2.0, "304")).interval == 80  # a 304 is "unchanged"
    kept = run_sync(schedule.record("fp1", (10, 80), 2.0, "error"))
    assert (kept.interval, kept.change) == (80, "error")
    assert [run_sync(schedule.record("fp1", (10, 80), 2.0, "body", digest=d)).interval for d in "cdef"] == [
        40,
        20,
        10,
        10,
    ]
    assert run_sync(schedule.record("fp1", (5, 30), 2.0, "error")).interval == 10  # new rule bounds apply at once
    assert run_sync(schedule.record("fp1", (60, 60), 2.0, "body", digest="f")).interval == 60  # fixed interval
    assert redis_client.zcard(KEYS.schedule) == 1  # one URL, one entry, however often it is recorded


def test_validators_and_member_are_kept_as_documented(schedule: RevisitSchedule) -> None:
    m = member("http://site.test/a")
    run_sync(schedule.record("fp", (10, 10), 2.0, "body", digest="x", etag='"v1"', last_modified="Mon", member=m))
    state = run_sync(schedule.state("fp"))
    assert state is not None
    assert (state.etag, state.last_modified, state.digest, state.member) == ('"v1"', "Mon", "x", m)
    assert state.url == "http://site.test/a"
    run_sync(schedule.record("fp", (10, 10), 2.0, "304"))  # no validators sent back, no member: all kept
    state = run_sync(schedule.state("fp"))
    assert state is not None and (state.etag, state.last_modified, state.digest, state.member) == (
        '"v1"',
        "Mon",
        "x",
        m,
    )
    run_sync(schedule.record("fp", (10, 10), 2.0, "304", etag='"v2"'))
    assert run_sync(schedule.state("fp")).etag == '"v2"'  # type: ignore[union-attr]
    run_sync(schedule.record("fp", (10, 10), 2.0, "body", digest="y"))  # a 200 without validators forgets them
    state = run_sync(schedule.state("fp"))
    assert state is not None and (state.etag, state.last_modified, state.digest) == ("", "", "y")
    # nothing stored and no member given: nothing to revisit, nothing written
    assert run_sync(schedule.record("new", (10, 10), 2.0, "304")).change == "not_stored"
    assert run_sync(schedule.state("new")) is None


def test_move_pushes_due_urls_into_their_host_queue_once(schedule: RevisitSchedule, redis_client: redis.Redis) -> None:
    m = member("http://site.test/section")
    run_sync(schedule.record("fp", (1, 1), 2.0, "body", digest="x", member=m))
    redis_client.zadd(KEYS.schedule, {"fp": 0})  # due now
    moved = run_sync(schedule.move_due(100, 3600))
    assert (moved.moved, moved.dropped) == (1, 0)
    assert redis_client.lrange(SPIDER_KEYS.host_list("site.test"), 0, -1) == [m.encode()]  # priority 0: the list
    assert redis_client.zscore(SPIDER_KEYS.ready, "site.test") is not None
    assert 3500 < due_in(redis_client, "fp") <= 3600  # still scheduled: the pending backstop
    assert moved.next_due is not None and moved.next_due > 3500
    assert run_sync(schedule.move_due(100, 3600)).moved == 0  # not due: nothing moves twice
    redis_client.zadd(KEYS.schedule, {"fp": 0})  # the backstop fires while the copy still waits
    assert run_sync(schedule.move_due(100, 3600)).moved == 1
    assert redis_client.llen(SPIDER_KEYS.host_list("site.test")) == 1  # same member: not duplicated
    # the frontier serves it like any request (its payload says "again": no budget page counted)
    scripts = frontier_for_mode(redis_client, SPIDER_KEYS, "host")
    popped = run_sync(scripts.lease(10, 60))
    assert [split_member(h.lease).payload for h in popped.leases] == [split_member(m).payload]
    assert redis_client.hget(SPIDER_KEYS.host("site.test"), "pages") is None


def test_move_into_the_single_queue_and_the_limit(schedule: RevisitSchedule, redis_client: redis.Redis) -> None:
    for i in range(5):
        run_sync(schedule.record(f"fp{i}", (1, 1), 2.0, "body", digest="x", member=member(f"http://site.test/{i}")))
        redis_client.zadd(KEYS.schedule, {f"fp{i}": 0})
    first = run_sync(in_mode(schedule, "priority").move_due(3, 60))
    assert first.moved == 3 and first.next_due == 0  # two more are due now
    assert run_sync(in_mode(schedule, "priority").move_due(3, 60)).moved == 2
    assert redis_client.zcard(SPIDER_KEYS.requests) == 5


def test_garbage_states_are_dropped_never_fatal(schedule: RevisitSchedule, redis_client: redis.Redis) -> None:
    good = member("http://site.test/ok")
    run_sync(schedule.record("ok", (1, 1), 2.0, "body", digest="x", member=good))
    garbage = {
        "g1": b"not a state",
        "g2": b"nan\n\n\n\nx",
        "g3": b"10\nd\ne\nl\nno member envelope",
        "g4": b"\xff\xfe\n\n\n\n",
        "g5": b"-5\nd\n\n\n0:0:{}",
    }
    redis_client.hset(KEYS.state, mapping=garbage)
    redis_client.zadd(KEYS.schedule, {name: 0 for name in [*garbage, "ok", "missing"]})
    moved = run_sync(schedule.move_due(100, 60))
    assert (moved.moved, moved.dropped) == (1, 6)
    assert redis_client.hkeys(KEYS.state) == [b"ok"]
    assert all(parse_state(v) is None for v in garbage.values())
    # a garbage state being recorded over counts as a first visit
    redis_client.hset(KEYS.state, "g", "junk")
    assert run_sync(schedule.record("g", (5, 50), 2.0, "body", digest="x", member=good)).change == "first"
    assert sorted(fp for fp, _ in iter_states(redis_client, KEYS)) == ["g", "ok"]


def test_a_key_of_the_wrong_type_raises_wrongtype(schedule: RevisitSchedule, redis_client: redis.Redis) -> None:
    redis_client.set(KEYS.schedule, "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        run_sync(schedule.move_due(10, 60))


def test_rules_first_match_wins_and_meta_overrides() -> None:
    config = RecrawlConfig.from_settings(
        {"RECRAWL_RULES": json.dumps({r"/feed": 300, r"/(section|$)": [600, 3600], r"/article/": [60, 120]})}
    )

    def interval(request: Request) -> tuple[float, float] | None:
        revisit = config.revisit_for(request)
        return None if revisit is None else revisit.interval

    assert interval(Request("http://s.test/feed.xml")) == (300, 300)
    assert interval(Request("http://s.test/section/2")) == (600, 3600)
    assert interval(Request("http://s.test/")) == (600, 3600)
    assert interval(Request("http://s.test/other")) is None  # no rule: never
    assert interval(Request("http://s.test/other", meta={"recrawl": 30})) == (30, 30)
    assert interval(Request("http://s.test/feed", meta={"recrawl": 0})) is None
    assert interval(Request("http://s.test/x", meta={"recrawl": [5, 50]})) == (5, 50)
    assert interval(Request("http://s.test/feed", meta={"recrawl": "junk"})) == (300, 300)


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"(": 10}, "not a regex"),
        ({"/a": 0}, "remove the rule"),
        ({"/a": [10, 5]}, "0 < min <= max"),
        ({"/a": "often"}, "seconds or \\[min_seconds, max_seconds\\]"),
        ({"/a": [1, float("inf")]}, "0 < min <= max"),
    ],
)
def test_bad_rules_fail_at_start_with_the_fix(rules: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RecrawlConfig.from_settings({"RECRAWL_RULES": rules})


def test_bad_numbers_fail_at_start() -> None:
    with pytest.raises(ValueError, match="RECRAWL_INTERVAL_FACTOR"):
        RecrawlConfig.from_settings({"RECRAWL_INTERVAL_FACTOR": 0.5})
    for not_seconds in (True, [True, 2], [1, 2, 3], "10"):
        with pytest.raises(ValueError, match="must be seconds"):
            parse_interval(not_seconds, "x")


def test_digest_ignores_whitespace_only() -> None:
    assert content_digest("a  b\n c") == content_digest(" a b c ")
    assert content_digest("a b c") != content_digest("a b d")
    assert len(content_digest("x")) == 16


def test_a_revisit_still_waiting_keeps_its_place(schedule: RevisitSchedule, redis_client: redis.Redis) -> None:
    """The pending time passed while the revisit still waits behind others: not pushed behind again."""
    m = member("http://site.test/section")
    run_sync(schedule.record("fp", (1, 1), 2.0, "body", digest="x", member=m))
    redis_client.zadd(KEYS.schedule, {"fp": 0})
    run_sync(schedule.move_due(10, 60))
    queue = SPIDER_KEYS.host_list("site.test")  # priority 0: its host's list
    redis_client.rpush(queue, "later")  # queued after the revisit
    redis_client.zadd(KEYS.schedule, {"fp": 0})
    assert run_sync(schedule.move_due(10, 60)).moved == 1  # rescheduled...
    assert redis_client.lrange(queue, 0, -1) == [m.encode(), b"later"]  # ...and still first
    for _ in range(2):  # the same in the single "priority" queue
        redis_client.zadd(KEYS.schedule, {"fp": 0})
        assert run_sync(in_mode(schedule, "priority").move_due(10, 60)).moved == 1
    assert redis_client.zcard(SPIDER_KEYS.requests) == 1
