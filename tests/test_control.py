"""Live control (docs/operations.md): `dcrawl host` / `overrides` / `audit` against a real redis-server,
and the host-mode lease honouring an override at its next pop (no restart, no round trip per page)."""

from __future__ import annotations

import json

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.cli.main import main
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.core.control import BadInput, parse_duration, parse_host
from distributed_crawler.core.crawl_control import CrawlControl
from distributed_crawler.frontier.factory import frontier_for_mode, frontier_from_settings
from distributed_crawler.frontier.keys import SpiderKeys
from tests.test_frontier_lua import KEYS_H, READY, pop, push


def test_durations_and_hosts() -> None:
    assert [parse_duration(d) for d in ("90s", "15m", "2h", "1d", "30")] == [90, 900, 7200, 86400, 30]
    for bad in ("", "5x", "-1s", "0", "h"):
        with pytest.raises(BadInput):
            parse_duration(bad)
    assert parse_host("News.Example.com") == ("news.example.com", "host")
    assert parse_host("example.com") == ("example.com", "domain")
    assert parse_host("example.co.uk") == ("example.co.uk", "domain")
    assert parse_host("127.0.0.1:8080") == ("127.0.0.1:8080", "host")
    for bad in ("http://x.com/", "a b", "-x.com", "x..com", ""):
        with pytest.raises(BadInput):
            parse_host(bad)


def _dcrawl(redis_url: str, *args: str) -> int:
    return main([*args, "--redis-url", redis_url])


def test_bad_input_is_one_line_and_exit_2(redis_url: str, capsys: pytest.CaptureFixture) -> None:
    for args in (
        ("host", "news", "a b", "show"),
        ("host", "news", "x.com", "set", "--delay", "-1"),
        ("host", "news", "x.com", "set", "--concurrency", "0"),
        ("host", "news", "x.com", "block", "--for", "5x"),
        ("host", "news", "x.com", "set"),
    ):
        assert _dcrawl(redis_url, *args) == 2, args
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert main(["host", "news", "x.com", "show", "--redis-url", "redis://127.0.0.1:1/0"]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_set_block_unblock_overrides_and_audit(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("USER", "alice")
    assert _dcrawl(redis_url, "host", "news", "new.example.org", "set", "--delay", "2.5", "--concurrency", "3") == 0
    out = capsys.readouterr().out
    assert "note: no request of new.example.org is known yet" in out and "delay 2.5" in out
    assert _dcrawl(redis_url, "host", "news", "example.com", "block", "--for", "15m", "--reason", "complaint") == 0
    capsys.readouterr()
    assert _dcrawl(redis_url, "overrides", "news", "--json") == 0
    rows = {r["target"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["new.example.org"]["delay"] == 2.5 and rows["new.example.org"]["concurrency"] == 3
    assert rows["new.example.org"]["scope"] == "host" and rows["new.example.org"]["by"] == "alice"
    assert rows["example.com"]["scope"] == "domain" and rows["example.com"]["reason"] == "complaint"
    assert _dcrawl(redis_url, "host", "news", "example.com", "unblock", "--by", "bob") == 0
    capsys.readouterr()
    assert redis_client.hget("{news}:overrides", "example.com") is None  # nothing left: removed
    assert _dcrawl(redis_url, "audit", "news", "--json") == 0
    audit = json.loads(capsys.readouterr().out)
    assert [(e["action"], e["target"], e["by"], e["source"]) for e in audit] == [
        ("set", "new.example.org", "alice", "cli"),
        ("block", "example.com", "alice", "cli"),
        ("unblock", "example.com", "bob", "cli"),
    ]
    assert json.loads(audit[2]["old"])["reason"] == "complaint" and json.loads(audit[2]["new"]) is None


def test_the_lease_honours_overrides_of_a_host_and_of_its_domain(redis_client: redis.Redis) -> None:
    frontier = frontier_for_mode(redis_client, KEYS_H, "host")
    control = CrawlControl.of(frontier)
    push(frontier, [(f"http://a.example.com/{i}", "a.example.com") for i in range(6)], interval=0.0)
    run_sync(control.write_override("example.com", json.dumps({"until": 4e9, "reason": "x"})))  # the domain blocked
    assert pop(frontier, 5).leases == []
    run_sync(control.write_override("example.com", None))
    run_sync(control.write_override("a.example.com", json.dumps({"concurrency": 2})))  # the host's own entry wins
    redis_client.zadd(READY, {"a.example.com": 0})
    assert len(pop(frontier, 5).leases) == 2  # capped at 2 in flight
    run_sync(control.write_override("a.example.com", json.dumps({"delay": 30, "concurrency": 5})))
    redis_client.delete(KEYS_H.processing)  # the two leases ended
    redis_client.zadd(READY, {"a.example.com": 0})
    assert len(pop(frontier, 5).leases) == 1  # a delay: one per pop, due again 30 s later
    assert redis_client.zscore(READY, "a.example.com") - redis_client.time()[0] > 25


def test_purge_drops_pending_counted_and_dead_letters(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture
) -> None:
    frontier = frontier_for_mode(redis_client, KEYS_H, "host")
    push(frontier, [(f"http://a.example.com/{i}", "a.example.com") for i in range(4)], interval=0.0)
    push(frontier, [(f"http://b.example.com/{i}", "b.example.com") for i in range(3)], interval=0.0)
    push(frontier, [(f"http://other.org/{i}", "other.org") for i in range(2)], interval=0.0)
    assert int(redis_client.get(KEYS_H.pending)) == 9
    assert int(run_sync(frontier.purge("example.com", "domain", True, 100, "cli:t", 0))) == 7
    assert int(redis_client.get(KEYS_H.pending)) == 2
    failed = [json.loads(x) for x in redis_client.lrange(KEYS_H.failed, 0, -1)]
    assert len(failed) == 7 and {f["reason"] for f in failed} == {"purged"}
    assert redis_client.zscore(READY, "a.example.com") is None and redis_client.zscore(READY, "other.org") is not None
    # the command on the spider `news`, without dead letters
    news = frontier_for_mode(redis_client, SpiderKeys.from_settings(Settings(), "news"), "host")
    push(news, [(f"http://c.org/{i}", "c.org") for i in range(3)], interval=0.0)
    assert _dcrawl(redis_url, "host", "news", "c.org", "purge") == 0
    assert "purged 3 pending request(s)" in capsys.readouterr().out
    assert redis_client.llen("{news}:failed") == 0 and int(redis_client.get("{news}:pending")) == 0


def test_pause_resume_status_and_audit(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from distributed_crawler.monitoring.status import status_now

    monkeypatch.setenv("USER", "carol")
    assert _dcrawl(redis_url, "pause") == 2  # neither SPIDER nor --all
    capsys.readouterr()
    assert _dcrawl(redis_url, "pause", "news", "--drain") == 0
    assert "paused news" in capsys.readouterr().out
    status = status_now(redis_client, Settings({"REDIS_URL": redis_url}), "news")
    assert status["control"]["paused"]["by"] == "carol" and status["control"]["paused"]["drain"] is True
    assert _dcrawl(redis_url, "host", "news", "x.org", "block", "--for", "1h") == 0
    status = status_now(redis_client, Settings({"REDIS_URL": redis_url}), "news")
    assert status["control"]["overrides"] == 1 and status["control"]["blocks"][0]["target"] == "x.org"
    assert _dcrawl(redis_url, "status", "news") == 0
    out = capsys.readouterr().out
    assert "paused since" in out and "by carol" in out and "x.org until" in out
    redis_client.set("{news}:paused", "garbage")  # still paused, by someone unknown
    status = status_now(redis_client, Settings({"REDIS_URL": redis_url}), "news")
    assert status["control"]["paused"]["by"] == "unknown"
    assert _dcrawl(redis_url, "resume", "news") == 0
    assert redis_client.get("{news}:paused") is None
    capsys.readouterr()
    assert _dcrawl(redis_url, "audit", "news", "--json", "--since", "1h") == 0
    assert [e["action"] for e in json.loads(capsys.readouterr().out)] == ["pause", "block", "resume"]


def test_the_audit_stream_is_capped(redis_client: redis.Redis) -> None:
    control = CrawlControl.of(frontier_for_mode(redis_client, SpiderKeys.from_settings(Settings(), "news"), "host"))
    for i in range(300):
        run_sync(control.audit({"action": "set", "target": f"h{i}"}, 100))
    assert redis_client.xlen("{news}:audit") < 200  # MAXLEN ~ 100: trimmed by whole nodes


def test_a_sharded_frontier_keeps_overrides_on_every_shard_and_purges_each(redis_client: redis.Redis) -> None:
    settings = Settings({"FRONTIER_SHARDS": 4, "DOMAIN_RATE_LIMIT": 0, "DOMAIN_MAX_IN_FLIGHT": 0})
    frontier = frontier_from_settings(settings, "news", redis_client)
    run_sync(CrawlControl.of(frontier).write_override("example.com", json.dumps({"until": 4e9})))
    assert all(redis_client.hget(k.overrides, "example.com") for k in frontier.part_keys())
    urls = [f"http://h{i}.example.com/{j}" for i in range(8) for j in range(2)]
    for url in urls:
        slot = frontier.placement(url).slot or ""
        part = frontier.parts[frontier.shard_of_url(url)]  # type: ignore[attr-defined]
        push(part, [(url, slot)], interval=0.0)
    assert run_sync(frontier.lease(50, 60)).leases == []  # the domain is blocked on every shard
    assert int(run_sync(frontier.purge("example.com", "domain", False, 100, "t", 0))) == 16


def test_prometheus_shows_the_pause_and_counts_of_overrides_not_a_label_per_host(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import time
    from types import SimpleNamespace

    from scrapy import Spider
    from scrapy.utils.test import get_crawler

    from distributed_crawler.connection.clients import RedisConfig
    from distributed_crawler.monitoring.control import control_summary
    from distributed_crawler.monitoring.metrics import MetricsConfig, PrometheusMetrics

    control = CrawlControl.of(frontier_for_mode(redis_client, SpiderKeys.from_settings(Settings(), "news"), "host"))
    run_sync(control.pause("ops", False, "cli", time.time()))
    for i in range(30):
        run_sync(control.write_override(f"h{i}.org", json.dumps({"delay": 2})))
    run_sync(control.write_override("x.org", json.dumps({"until": time.time() + 60, "reason": "r"})))
    node = SimpleNamespace(pages=0, items=0, errors=0, leases=0, in_flight=0, rss=0, browser_pages=0)
    monkeypatch.setattr("distributed_crawler.monitoring.metrics.sample_node", lambda crawler: node)
    metrics = PrometheusMetrics(get_crawler(Spider), MetricsConfig(), RedisConfig.from_settings(Settings()), "n1")
    metrics.spider = "news"
    metrics.control = asyncio.run(control_summary(control, time.time()))
    families = {f.name: f for f in metrics.collect()}
    assert [s.value for s in families["dcrawl_paused"].samples] == [1]
    assert [(s.labels, s.value) for s in families["dcrawl_host_overrides"].samples] == [({"spider": "news"}, 31)]
    assert [s.value for s in families["dcrawl_hosts_blocked"].samples] == [1]


def test_hosts_shows_the_overrides_blocks_and_pause(redis_url: str, capsys: pytest.CaptureFixture) -> None:
    assert _dcrawl(redis_url, "host", "news", "slow.example.org", "set", "--delay", "4") == 0
    assert _dcrawl(redis_url, "host", "news", "example.net", "block", "--for", "2h", "--reason", "junk") == 0
    assert _dcrawl(redis_url, "pause", "news") == 0
    capsys.readouterr()
    assert _dcrawl(redis_url, "hosts", "news", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["control"]["paused"] and data["control"]["overrides"] == 2 and data["control"]["blocked"] == 1
    assert [o["target"] for o in data["overrides"]] == ["example.net", "slow.example.org"]  # blocks first
    assert _dcrawl(redis_url, "hosts", "news") == 0
    out = capsys.readouterr().out
    assert "paused since" in out and "slow.example.org" in out and "delay 4" in out and "junk" in out


def test_the_rendering_path_honours_render_overrides() -> None:
    from scrapy import Request, Spider
    from scrapy.http.request import NO_CALLBACK
    from scrapy.utils.test import get_crawler

    from distributed_crawler.core.overrides import OverrideCache
    from distributed_crawler.meta import DONT_RENDER_META, PLAYWRIGHT_META
    from distributed_crawler.rendering.middleware import RenderingMiddleware

    crawler = get_crawler(Spider, {"PLAYWRIGHT_URL_PATTERNS": [r"/js/"]})
    mw = RenderingMiddleware.from_crawler(crawler)
    cache = OverrideCache.of(crawler)
    cache.table = {
        "example.com": {"render": "on"},
        "static.example.com": {"render": "off"},
        "x.org": {"render": "auto"},
    }

    def rendered(url: str, **kw: object) -> bool:
        request = Request(url, **kw)  # type: ignore[arg-type]
        mw.process_request(request)
        return bool(request.meta.get(PLAYWRIGHT_META))

    assert rendered("http://news.example.com/a")  # on, for every subdomain of the domain
    assert not rendered("http://static.example.com/js/a")  # off wins over PLAYWRIGHT_URL_PATTERNS
    request = Request("http://static.example.com/b")
    mw.process_request(request)
    assert request.meta[DONT_RENDER_META] is True  # PLAYWRIGHT_AUTO stays away too
    assert rendered("http://x.org/js/a") and not rendered("http://x.org/b")  # auto: the settings decide
    assert not rendered("http://news.example.com/robots.txt", callback=NO_CALLBACK)


def test_the_politeness_path_honours_overrides_in_the_single_queue_modes(redis_url: str) -> None:
    import asyncio
    import time

    from scrapy import Request, Spider
    from scrapy.utils.test import get_crawler

    from distributed_crawler.downloadermiddlewares.politeness import DomainRateLimitMiddleware
    from distributed_crawler.meta import LEASE_META, RETRY_DELAY_META

    settings = {"REDIS_URL": redis_url, "SCHEDULER_QUEUE_CLASS": "priority", "DOMAIN_MAX_IN_FLIGHT": 0}
    crawler = get_crawler(Spider, settings)
    mw = DomainRateLimitMiddleware.from_crawler(crawler)
    crawler.crawling = True

    async def run() -> tuple[object, float]:
        mw.spider_opened(crawler.spider)
        assert mw.overrides is not None
        mw.overrides.table = {"blocked.org": {"until": time.time() + 600}, "slow.org": {"delay": 0.4}}
        back = await mw.process_request(Request("http://a.blocked.org/", meta={LEASE_META: b"1:0:x"}))
        began = time.monotonic()
        for _ in range(3):
            assert await mw.process_request(Request("http://slow.org/")) is None
        took = time.monotonic() - began
        await mw.spider_closed(crawler.spider)
        return back, took

    back, took = asyncio.run(run())
    assert isinstance(back, Request) and back.meta[RETRY_DELAY_META] == 60.0  # to delayed, looked at again
    assert took >= 0.75  # three slots 0.4 s apart
    # the waits Redis handed out (slot - now; a slow process only makes them shorter): 0.4 s apart,
    # where the setting's 1/s would make them add up to 3 s
    assert crawler.stats.get_value("politeness/wait_seconds") < 1.2


def test_a_node_reads_the_pause_and_the_overrides_in_one_round_trip_a_second(
    redis_url: str, redis_client: redis.Redis
) -> None:
    import asyncio
    import time

    import redis.asyncio as aioredis

    from distributed_crawler.connection.policy import RedisPolicy
    from distributed_crawler.core.overrides import OverrideCache
    from distributed_crawler.core.pause import PauseWatch

    keys = SpiderKeys.from_settings(Settings(), "news")
    control = CrawlControl.of(frontier_for_mode(redis_client, keys, "host"))
    run_sync(control.write_override("example.com", json.dumps({"render": "off"})))
    run_sync(control.pause("ops", True, "cli", time.time()))
    redis_client.hset("{news}:overrides", "junk.org", "not json")

    async def run() -> tuple[PauseWatch, OverrideCache, int]:
        client = aioredis.Redis.from_url(redis_url)
        frontier = frontier_for_mode(client, keys, "host")
        cache = OverrideCache()
        watch = PauseWatch(frontier, RedisPolicy("redis://test"), cache)
        redis_client.config_resetstat()
        await watch.refresh()
        stats = redis_client.info("commandstats")
        await client.aclose()
        return watch, cache, sum(int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_get", "cmdstat_hgetall"))

    watch, cache, commands = asyncio.run(run())
    assert watch.paused and watch.drain and watch.state["by"] == "ops"
    assert cache.get("news.example.com") == json.loads(redis_client.hget("{news}:overrides", "example.com"))
    assert cache.get("junk.org") is None and cache.get("other.org") is None
    assert commands == 3  # GET pause, HGETALL overrides, GET registry version: pipelined, one round trip


def test_purge_without_per_host_queues_says_so_in_one_line(redis_url: str, capsys: pytest.CaptureFixture) -> None:
    from distributed_crawler.cli.main import main as dcrawl_main

    code = dcrawl_main(["host", "news", "x.org", "purge", "--redis-url", redis_url])
    assert code == 0  # host mode by default: nothing pending, 0 purged
    capsys.readouterr()
    frontier = frontier_for_mode(redis.Redis.from_url(redis_url), SpiderKeys.from_settings(Settings(), "news"), "fifo")
    with pytest.raises(ValueError, match="purge needs the per-host frontier"):
        run_sync(frontier.purge("x.org", "host", False, 10, "t", 0))


def test_unset_removes_one_override_or_all_and_is_audited(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture
) -> None:
    host = "slow.example.org"
    assert _dcrawl(redis_url, "host", "news", host, "set", "--delay", "4", "--concurrency", "1", "--render", "on") == 0
    assert _dcrawl(redis_url, "host", "news", host, "block", "--for", "1h", "--reason", "complaint") == 0
    capsys.readouterr()
    assert _dcrawl(redis_url, "host", "news", host, "unset", "--delay", "--render") == 0
    assert "delay, render removed" in capsys.readouterr().out
    left = json.loads(redis_client.hget("{news}:overrides", host))
    assert "delay" not in left and "render" not in left and left["concurrency"] == 1 and left["reason"] == "complaint"
    assert _dcrawl(redis_url, "host", "news", host, "unset") == 0  # no flag: every override, the block too
    assert "every override removed; now no override left" in capsys.readouterr().out
    assert redis_client.hget("{news}:overrides", host) is None
    assert _dcrawl(redis_url, "audit", "news", "--json") == 0
    unsets = [e for e in json.loads(capsys.readouterr().out) if e["action"] == "unset"]
    assert [json.loads(e["new"]) is None for e in unsets] == [False, True]
    assert json.loads(unsets[0]["old"])["delay"] == 4 and "delay" not in json.loads(unsets[0]["new"])
    # set still needs its values (a bare flag is for unset)
    assert _dcrawl(redis_url, "host", "news", host, "set", "--delay") == 2
    assert "set --delay needs a value" in capsys.readouterr().err


def test_host_show_speaks_words(redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture) -> None:
    host = "news.example.org"
    redis_client.hset(
        f"{{news}}:host:{host}",
        mapping={
            "iv": "1",
            "cd": "0",
            "bo": "0",
            "cap": "2",
            "pages": "4",
            "max": "10",
            "until": "5",
            "why": "robots.txt pending",
        },
    )
    redis_client.zadd(f"{{news}}:q:{host}", {"/a": 1, "/b": 2})
    assert _dcrawl(redis_url, "host", "news", host, "show") == 0
    out = capsys.readouterr().out
    assert "pending 2" in out
    assert "pace: 1s between two requests, at most 2 in flight" in out
    assert "pages: 4 fetched of a budget of 10" in out
    assert "not blocked (last block: robots.txt pending)" in out
    assert "bo 0" not in out and "iv 1" not in out  # no raw field names


def test_unblock_and_unset_make_the_host_due_now_not_when_the_old_block_would_end(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture
) -> None:
    news = frontier_for_mode(redis_client, SpiderKeys.from_settings(Settings(), "news"), "host")
    ready = news.keys.ready
    for host in ("a.example.com", "b.example.com", "other.org"):
        push(news, [(f"http://{host}/{i}", host) for i in range(2)], interval=0.0)
    assert _dcrawl(redis_url, "host", "news", "a.example.com", "block", "--for", "1h") == 0
    assert _dcrawl(redis_url, "host", "news", "example.com", "set", "--delay", "600") == 0
    assert _dcrawl(redis_url, "host", "news", "other.org", "block", "--for", "1h") == 0
    assert [x.slot for x in pop(news, 10).leases] == ["b.example.com"]  # the rest blocked, or 600 s on
    later = redis_client.time()[0] + 500
    redis_client.zadd(ready, {"a.example.com": later + 3000, "b.example.com": later, "other.org": later + 3000})
    assert _dcrawl(redis_url, "host", "news", "a.example.com", "unblock") == 0
    assert _dcrawl(redis_url, "host", "news", "example.com", "unset", "--delay") == 0  # every host of it
    now = redis_client.time()[0] + 1
    assert redis_client.zscore(ready, "a.example.com") <= now and redis_client.zscore(ready, "b.example.com") <= now
    assert redis_client.zscore(ready, "other.org") > now + 3000  # still blocked: untouched
    assert sorted(x.slot for x in pop(news, 10).leases) == ["a.example.com", "a.example.com", "b.example.com"]
