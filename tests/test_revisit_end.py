"""Schedules that end: ARTICLE_REVISITS (a fixed plan after an article's first fetch) and a rule's
horizon, against the real scripts on a real redis-server. Time is moved by writing an older first
fetch into the state (as the rq tests write old lease scores), never by sleeping."""

from __future__ import annotations

import json

import pytest
import redis
from scrapy import Request

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.recrawl.rules import RecrawlConfig, Revisit, parse_article_revisits
from distributed_crawler.recrawl.schedule import RevisitSchedule, parse_state
from tests.test_recrawl_schedule import KEYS, SPIDER_KEYS, member

PLAN = (10.0, 20.0, 30.0)


@pytest.fixture
def schedule(redis_client: redis.Redis) -> RevisitSchedule:
    redis_client.delete(KEYS.schedule, KEYS.state)
    return RevisitSchedule(redis_client, frontier_for_mode(redis_client, SPIDER_KEYS, "host"))


def state_of(schedule: RevisitSchedule, fp: str):  # type: ignore[no-untyped-def]
    state = run_sync(schedule.state(fp))
    assert state is not None
    return state


def age(client: redis.Redis, fp: str, seconds: float) -> None:
    """Move the URL's first fetch `seconds` into the past (what the clock would have done)."""
    raw = client.hget(KEYS.state, fp)
    assert raw is not None
    timing, rest = raw.decode().split("\n", 1)
    iv, born, step, ends = timing.split(";")
    older = f"{iv};{float(born) - seconds:.3f};{step};{float(ends) - seconds:.3f}"
    client.hset(KEYS.state, fp, older + "\n" + rest)


def test_an_article_is_fetched_once_plus_its_plan_then_leaves(
    schedule: RevisitSchedule, redis_client: redis.Redis
) -> None:
    m = member("http://site.test/story")
    fetches = 0
    recorded = run_sync(schedule.record("a", (10, 10), 2.0, "body", digest="v1", member=m, plan=PLAN))
    fetches += 1
    assert (recorded.change, recorded.ended) == ("first", False)
    born = state_of(schedule, "a").born
    for step, offset in enumerate(PLAN):
        state = state_of(schedule, "a")
        assert (state.born, state.step, state.ends) == (born, step, born + PLAN[-1])
        assert redis_client.zscore(KEYS.schedule, "a") == pytest.approx(
            born + offset, abs=0.002
        )  # due at first + offset
        outcome = "304" if step == 1 else "body"  # a 304 and an error count as a visit too
        recorded = run_sync(schedule.record("a", (10, 10), 2.0, outcome, digest=f"v{step}", plan=PLAN))
        fetches += 1
    assert recorded.ended and fetches == 1 + len(PLAN)
    assert redis_client.exists(KEYS.schedule, KEYS.state) == 0  # left the schedule for good
    # a late record of the same URL without a member is not a new schedule
    assert run_sync(schedule.record("a", (10, 10), 2.0, "body", digest="x", plan=PLAN)).change == "not_stored"


def test_an_empty_plan_ends_a_scheduled_article_at_its_next_visit(schedule: RevisitSchedule) -> None:
    run_sync(schedule.record("a", (10, 10), 2.0, "body", digest="v", member=member("http://site.test/a"), plan=PLAN))
    assert run_sync(schedule.record("a", (10, 10), 2.0, "body", digest="v", plan=())).ended  # ARTICLE_REVISITS = []
    assert run_sync(schedule.state("a")) is None


def test_a_late_revisit_is_still_made_then_the_plan_goes_on(
    schedule: RevisitSchedule, redis_client: redis.Redis
) -> None:
    run_sync(schedule.record("a", (10, 10), 2.0, "body", digest="v", member=member("http://site.test/a"), plan=PLAN))
    age(redis_client, "a", 25)  # the first revisit (due at +10) is fetched at +25
    recorded = run_sync(schedule.record("a", (10, 10), 2.0, "body", digest="v", plan=PLAN))
    assert not recorded.ended and 0 < recorded.interval <= 20.001  # the second, at first fetch + 20
    state = state_of(schedule, "a")
    assert redis_client.zscore(KEYS.schedule, "a") == pytest.approx(state.born + 20, abs=0.002)


def test_a_rule_with_a_horizon_ends(schedule: RevisitSchedule, redis_client: redis.Redis) -> None:
    m = member("http://site.test/live")
    assert not run_sync(schedule.record("h", (10, 10), 2.0, "body", digest="a", member=m, horizon=25)).ended
    assert not run_sync(schedule.record("h", (10, 10), 2.0, "body", digest="b", horizon=25)).ended
    age(redis_client, "h", 20)  # next due would be first fetch + 30 > horizon 25: that was the last
    assert run_sync(schedule.record("h", (10, 10), 2.0, "body", digest="c", horizon=25)).ended
    assert redis_client.exists(KEYS.schedule, KEYS.state) == 0
    # without a horizon an adaptive rule never ends (as before)
    run_sync(schedule.record("n", (10, 10), 2.0, "body", digest="a", member=m))
    age(redis_client, "n", 10**6)
    assert not run_sync(schedule.record("n", (10, 10), 2.0, "body", digest="a")).ended


def test_the_move_removes_an_ended_url_whose_last_visit_never_reported(
    schedule: RevisitSchedule, redis_client: redis.Redis
) -> None:
    run_sync(schedule.record("a", (10, 10), 2.0, "body", digest="v", member=member("http://site.test/a"), plan=PLAN))
    run_sync(schedule.record("b", (10, 10), 2.0, "body", digest="v", member=member("http://site.test/b"), plan=PLAN))
    age(redis_client, "a", PLAN[-1] + 2 * 60 + 1)  # past its end by more than twice the pending time
    age(redis_client, "b", PLAN[-1] + 60)  # past its end, within it: one more try
    redis_client.zadd(KEYS.schedule, {"a": 0, "b": 0})
    moved = run_sync(schedule.move_due(100, 60))
    assert (moved.moved, moved.ended, moved.dropped) == (1, 1, 0)
    assert redis_client.zrange(KEYS.schedule, 0, -1) == [b"b"]


def test_states_of_an_older_release_still_read_and_start_their_plan(
    schedule: RevisitSchedule, redis_client: redis.Redis
) -> None:
    old = "600.000\nd\n\n\n" + member("http://site.test/a")
    redis_client.hset(KEYS.state, "a", old)
    state = parse_state(old)
    assert state is not None and (state.interval, state.born, state.step, state.ends) == (600, None, 0, 0)
    run_sync(schedule.record("a", (10, 10), 2.0, "body", digest="d", plan=PLAN))  # its first record on the plan
    assert state_of(schedule, "a").step == 0
    assert parse_state("600;1;2\nd\n\n\n" + member("http://x.test/")) is None  # timing neither form
    assert parse_state("600;1;x;3\nd\n\n\n" + member("http://x.test/")) is None


def test_article_revisits_setting_and_horizon_rules_parse() -> None:
    assert RecrawlConfig.from_settings({}).article_revisits == (3600, 21600, 86400)
    assert parse_article_revisits([]) == ()
    assert parse_article_revisits("[60, 120]") == (60, 120)
    assert parse_article_revisits("60,120") == (60, 120)
    for bad in ([120, 60], [0], "often", [True], list(range(1, 30))):
        with pytest.raises(ValueError, match="ARTICLE_REVISITS"):
            parse_article_revisits(bad)
    config = RecrawlConfig.from_settings(
        {"RECRAWL_RULES": json.dumps({"/live/": {"interval": [60, 600], "horizon": 86400}}), "ARTICLE_REVISITS": "[5]"}
    )
    assert config.revisit_for(Request("http://s.test/live/1")) == Revisit((60, 600), 86400)
    flagged = Request("http://s.test/story", meta={"article_revisit": True})
    assert config.revisit_for(flagged) == Revisit((5, 5), 0, (5,), article=True)
    assert config.revisit_for(Request("http://s.test/story", meta={"article_revisit": "yes"})) is None  # untrusted
    assert config.revisit_for(Request("http://s.test/live/2", meta={"article_revisit": True})).horizon == 86400  # type: ignore[union-attr]
    for rule, message in (
        ({"interval": 60, "until": 5}, "must be"),
        ({"interval": 60, "horizon": -1}, "horizon"),
        ({"horizon": 60}, "must be"),
    ):
        with pytest.raises(ValueError, match=message):
            RecrawlConfig.from_settings({"RECRAWL_RULES": {"/a": rule}})
