"""Revisits with FRONTIER_SHARDS: one contract for 1 and 4 shards, on fakeredis and on a real
redis-server. A URL's revisit is recorded on its host's shard (the tag of its queue), due revisits
of every shard are moved into that shard's queues (a bounded batch per shard), the figures are sums
over the shards; `dcrawl schedule` / `dcrawl recrawl --all` act on every shard; a dupefilter's
`request_seen` uses the slice of the request's host shard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from scrapy import Request, Spider
from scrapy.settings import Settings
from scrapy.utils.project import get_project_settings
from scrapy.utils.test import get_crawler

from distributed_crawler.cli import project as cli_project
from distributed_crawler.cli.main import main
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.dedup.dupefilter import RedisSetDupeFilter, SetDedup
from distributed_crawler.dedup.fingerprint import CanonicalFingerprinter, FingerprintConfig
from distributed_crawler.frontier.base import Frontier, FrontierLayoutError, placed_entry
from distributed_crawler.frontier.codec import RequestCodec, payload_url
from distributed_crawler.frontier.envelope import make_member, split_member
from distributed_crawler.frontier.factory import frontier_from_settings
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.recrawl.schedule import FINGERPRINT_CHARS, RecrawlKeys, RevisitSchedule
from distributed_crawler.storage.backends import open_storage

HOSTS = [f"h{i}.test" for i in range(8)]
URLS = [f"http://{host}/section" for host in HOSTS]


def fingerprint(url: str) -> str:
    return CanonicalFingerprinter(FingerprintConfig()).fingerprint(Request(url)).hex()[:FINGERPRINT_CHARS]


def settings_of(shards: int, mode: str = "host") -> Settings:
    return Settings({"FRONTIER_SHARDS": shards, "DOMAIN_RATE_LIMIT": 0, "SCHEDULER_QUEUE_CLASS": mode})


@pytest.fixture(params=[(mode, shards) for mode in ("host", "priority") for shards in (1, 4)], ids=str)
def schedule(request: pytest.FixtureRequest, client: redis.Redis) -> RevisitSchedule:
    mode, shards = request.param
    return RevisitSchedule(client, frontier_from_settings(settings_of(shards, mode), "news", client))


def member_of(frontier: Frontier, url: str) -> str:
    slot = frontier.placement(url).slot
    payload = {"v": 1, "url": url, **({"slot": slot, "again": 1} if slot else {})}
    return make_member(json.dumps(payload, separators=(",", ":")), 0)


def record_all(schedule: RevisitSchedule, urls: list[str] = URLS) -> None:
    for n, url in enumerate(urls):
        recorded = run_sync(
            schedule.record(f"fp{n}", (60, 60), 2.0, "body", digest="d", member=member_of(schedule.frontier, url))
        )
        assert recorded.change == "first"


def make_all_due(schedule: RevisitSchedule) -> int:
    chosen: dict[RecrawlKeys, list[str]] = {}
    for keys, fp, _ in schedule.iter_states():
        chosen.setdefault(keys, []).append(fp)
    return run_sync(schedule.make_due(chosen, 0))


def leased_urls(frontier: Frontier) -> list[str]:
    urls = []
    for _ in range(10):  # a sharded lease walks the shards: a few calls find everything
        urls += [payload_url(split_member(x.lease).payload) for x in run_sync(frontier.lease(100, 60)).leases]
    return sorted(urls)


def test_a_revisit_is_recorded_on_its_hosts_shard(schedule: RevisitSchedule, client: redis.Redis) -> None:
    record_all(schedule)
    frontier = schedule.frontier
    for n, url in enumerate(URLS):
        home = RecrawlKeys.of(frontier.shard_for(url).keys)
        assert schedule.keys_for(url) == home
        assert client.zscore(home.schedule, f"fp{n}") is not None
        where = [keys for keys in schedule.every_keys() if client.zscore(keys.schedule, f"fp{n}") is not None]
        assert where == [home]  # once, on its host's shard only
        state = run_sync(schedule.state(f"fp{n}", url))
        assert state is not None and state.url == url
    if frontier.shards > 1:
        assert not client.exists("{news}:recrawl", "{news}:recrawl:state")  # nothing on the spider's own tag
        assert len({keys.schedule for keys in schedule.every_keys() if client.zcard(keys.schedule)}) > 1
    else:
        assert schedule.every_keys() == [RecrawlKeys("{news}:recrawl", "{news}:recrawl:state")]  # today's keys


def test_due_revisits_of_every_shard_are_moved_into_their_shards_queue(
    schedule: RevisitSchedule, client: redis.Redis
) -> None:
    record_all(schedule)
    assert run_sync(schedule.move_due(100, 3600)).moved == 0  # none due yet
    assert make_all_due(schedule) == len(URLS)
    before = int(client.time()[0])  # the move's clock is at least this: moved URLs are due after the hour
    moved = run_sync(schedule.move_due(100, 3600))
    assert (moved.moved, moved.dropped) == (len(URLS), 0)
    assert moved.next_due is not None and moved.next_due > 3500  # the pending backstop, every shard
    assert run_sync(schedule.frontier.size()) == len(URLS)
    assert leased_urls(schedule.frontier) == sorted(URLS)  # each on its host's shard: leased as any request
    assert run_sync(schedule.move_due(100, 3600)).moved == 0  # nothing moves twice
    # read at `before`, not now: a second boundary crossed since the move would count them in the hour
    assert run_sync(schedule.summary(before)) == {
        "scheduled": len(URLS),
        "due_now": 0,
        "due_next_hour": 0,
    }


def test_the_move_is_a_bounded_batch_per_shard(schedule: RevisitSchedule) -> None:
    urls = [f"http://{host}/s{i}" for host in HOSTS for i in range(3)]
    record_all(schedule, urls)
    make_all_due(schedule)
    shards = schedule.frontier.shards
    rounds = []
    for _ in range(len(urls)):
        moved = run_sync(schedule.move_due(1, 3600))
        rounds.append(moved.moved)
        assert moved.moved <= shards  # at most the batch on each shard
        if moved.next_due is None or moved.next_due > 0:
            break
        assert moved.next_due == 0  # more is due now: the mover goes again at once
    assert sum(rounds) == len(urls) and len(rounds) <= len(urls) // shards + 3
    assert run_sync(schedule.move_due(1, 3600)).moved == 0


def test_figures_sum_over_the_shards(schedule: RevisitSchedule, client: redis.Redis) -> None:
    record_all(schedule)
    now = float(client.time()[0])
    assert run_sync(schedule.summary(now)) == {"scheduled": 8, "due_now": 0, "due_next_hour": 8}
    for n, url in enumerate(URLS[:3]):
        client.zadd(schedule.keys_for(url).schedule, {f"fp{n}": 0})
    assert run_sync(schedule.summary(now)) == {"scheduled": 8, "due_now": 3, "due_next_hour": 5}
    assert [fp for fp, _, _ in run_sync(schedule.soonest(3))] == ["fp0", "fp1", "fp2"]  # over every shard
    assert run_sync(schedule.scheduled([*URLS[:2], "http://other.test/"], ["fp0", "fp1", "fp-none"])) == [
        True,
        True,
        False,
    ]


def test_a_shard_with_a_wrong_type_key_does_not_stop_the_others(schedule: RevisitSchedule, client: redis.Redis) -> None:
    record_all(schedule)
    make_all_due(schedule)
    broken = schedule.keys_for(URLS[0])
    client.delete(broken.schedule)
    client.set(broken.schedule, "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        run_sync(schedule.move_due(100, 3600))
    healthy = [url for url in URLS if schedule.keys_for(url) != broken]
    assert run_sync(schedule.frontier.size()) == len(healthy)  # the other shards moved theirs


# -- dcrawl schedule / recrawl on a real redis-server ---------------------------------------------


@pytest.fixture(params=[1, 4], ids=lambda n: f"{n}-shards")
def shards(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """dcrawl reads FRONTIER_SHARDS from the project settings; no per-host interval (the test leases
    the same hosts twice in a row)."""

    def project_settings() -> Settings:
        settings = get_project_settings()
        settings.set("FRONTIER_SHARDS", request.param, priority="project")
        settings.set("DOMAIN_RATE_LIMIT", 0, priority="project")
        return settings

    monkeypatch.setattr(cli_project, "get_project_settings", project_settings)
    return int(request.param)


def test_dcrawl_schedule_and_recrawl_all_act_on_every_shard(
    shards: int, redis_url: str, redis_client: redis.Redis, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    frontier = frontier_from_settings(settings_of(shards), "news", redis_client)
    schedule = RevisitSchedule(redis_client, frontier)
    codec = RequestCodec(None)
    sections = URLS[:6]
    for url in sections:  # as the nodes record them: due in an hour
        member = make_member(codec.encode(Request(url), slot=frontier.placement(url).slot, again=True), 0)
        run_sync(schedule.record(fingerprint(url), (3600, 3600), 2.0, "body", digest="d", member=member))
    source = f"sqlite:///{tmp_path / 'items.db'}"
    backend = open_storage(source)
    articles = [f"http://{host}/article" for host in HOSTS]
    backend.upsert_many([{"url": u, "text": u} for u in [*articles, *sections]])
    backend.close()

    assert main(["schedule", "news", "--json", "--redis-url", redis_url]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["scheduled"], shown["due_now"], shown["due_next_hour"]) == (6, 0, 6)
    assert {e["url"] for e in shown["next"]} == set(sections)
    assert main(["status", "news", "--json", "--redis-url", redis_url]) == 0
    assert json.loads(capsys.readouterr().out)["recrawl"] == {"scheduled": 6, "due_now": 0, "due_next_hour": 6}

    assert main(["recrawl", "news", "--all", "--from", source, "--redis-url", redis_url]) == 0
    assert "6 scheduled URLs due now, 8 stored URLs queued" in capsys.readouterr().out
    assert run_sync(schedule.summary(redis_client.time()[0] + 1))["due_now"] == 6
    for url, host in zip(articles, HOSTS):  # each stored URL queued on its host's shard
        assert redis_client.llen(frontier.shard_for(url).keys.host_list(host)) == 1  # priority 0: the list
    assert leased_urls(frontier) == sorted(articles)
    assert run_sync(schedule.move_due(100, 3600)).moved == 6  # what the nodes' movers do next
    frontier.woken()  # the move rang the doorbell
    assert leased_urls(frontier) == sorted(sections)


# -- a dupefilter's request_seen, called directly ------------------------------------------------


def test_request_seen_uses_the_slice_of_the_requests_host_shard(redis_client: redis.Redis, redis_url: str) -> None:
    values = {"FRONTIER_SHARDS": 4, "DOMAIN_RATE_LIMIT": 0, "REDIS_URL": redis_url}
    settings = Settings(values)
    crawler = get_crawler(Spider, values)
    crawler.spider = Spider("news")
    df = RedisSetDupeFilter.from_crawler(crawler)
    frontier = frontier_from_settings(settings, "news", redis_client)
    try:
        assert df.request_seen(Request(URLS[0])) is False
        assert df.request_seen(Request(URLS[0])) is True
        home = frontier.shard_for(URLS[0]).keys.dupefilter
        assert redis_client.scard(home) == 1 and not redis_client.exists(
            SpiderKeys.from_settings(settings, "news").dupefilter
        )

        async def plain(key: str) -> SetDedup:
            return SetDedup(key)

        enqueuer = run_sync(frontier.open_enqueuer(plain))

        def push(url: str) -> int:
            placement = frontier.placement(url)
            member = make_member(json.dumps({"url": url, "slot": placement.slot}), 0)
            entry = placed_entry(df.fingerprint_hex(Request(url)), False, member, 0.0, placement)
            return int(sum(run_sync(enqueuer.run("push", [entry]))))

        assert push(URLS[0]) == 0  # the scheduler's push sees what request_seen added...
        assert push(URLS[1]) == 1
        assert df.request_seen(Request(URLS[1])) is True  # ...and request_seen what the scheduler pushed
        df.clear()  # every shard's slice
        assert all(not redis_client.exists(key) for key in frontier.dupefilter_keys())
    finally:
        df.close()


@pytest.mark.parametrize(("before", "after"), [(1, 4), (4, 1)])
def test_another_shard_count_is_refused_while_revisits_are_scheduled(
    client: redis.Redis, before: int, after: int
) -> None:
    """A drained frontier may change its count, but its revisit schedule lives on the old tags."""
    old = frontier_from_settings(settings_of(before), "news", client)
    run_sync(old.check_layout())
    record_all(RevisitSchedule(client, old))
    new = frontier_from_settings(settings_of(after), "news", client)
    with pytest.raises(
        FrontierLayoutError, match=f"start with FRONTIER_SHARDS={before}, or delete the revisit"
    ) as info:
        run_sync(new.check_layout())
    assert "redis-cli" in str(info.value) and "\n" not in str(info.value)
    for keys in RevisitSchedule(client, old).every_keys():
        client.delete(keys.schedule, keys.state)
    run_sync(new.check_layout())  # nothing left on the old tags: the new count is recorded
    assert client.get("{news}:shards") == str(after).encode()
