"""Trap defences (core/traps.py): URL shapes refused at enqueue, hosts per registered domain capped
cluster-wide in Redis, each refusal one dead letter with its reason."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio
from scrapy import Request
from scrapy.settings import Settings

from distributed_crawler.connection.lua import lua_source
from distributed_crawler.core.traps import (
    DomainHosts,
    hash_tag,
    path_segments,
    registered_domain,
    repeated_run,
    url_shape_check,
)
from distributed_crawler.dedup.dupefilter import flush_crawl
from distributed_crawler.defaults import DEFAULTS
from distributed_crawler.frontier.codec import payload_url
from distributed_crawler.frontier.factory import frontier_for_mode, frontier_from_settings
from distributed_crawler.frontier.shards import shard_of, shard_tags
from distributed_crawler.meta import LEASE_META
from tests.test_admission import _drain, _letters, _scheduler


def _settings(**values: object) -> Settings:
    settings = Settings({**DEFAULTS, **values})
    return settings


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://site.test/2026/12/04/story.html", None),
        ("http://site.test/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p", None),  # 16 segments
        ("http://site.test/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q", "path_segments"),
        ("http://site.test/a/a/a/", "repeated_segments"),
        ("http://site.test/news/a/a/a/page", "repeated_segments"),
        ("http://site.test/x/y/x/y/x/y/", "repeated_segments"),
        ("http://site.test/x/y/x/y/", None),  # twice is a coincidence
        ("http://site.test/2024/01/01/", None),
        ("http://site.test//a//a/b/", None),  # empty segments do not count
        ("http://site.test/" + "a" * 2100, "url_length"),
    ],
)
def test_url_shapes(url: str, reason: str | None) -> None:
    check = url_shape_check(_settings())
    assert check is not None
    refusal = check(Request(url))
    assert (refusal.reason if refusal else None) == reason
    if refusal:  # the detail names the setting that decides
        assert any(name in refusal.detail for name in ("URL_MAX_SEGMENTS", "URL_MAX_REPEATS", "URLLENGTH_LIMIT"))


def test_repeats_and_segments_helpers() -> None:
    assert path_segments("http://h/a//b/?q=/c/c/c") == ["a", "b"]
    assert repeated_run(["p", "x", "y", "x", "y", "x", "y"], 3) == ("x", "y")
    assert repeated_run(["a", "b", "a", "b"], 3) is None


def test_url_checks_are_settings() -> None:
    assert url_shape_check(_settings(URL_MAX_SEGMENTS=0, URL_MAX_REPEATS=0, URLLENGTH_LIMIT=0)) is None
    loose = url_shape_check(_settings(URL_MAX_SEGMENTS=40, URL_MAX_REPEATS=0))
    assert loose is not None and loose(Request("http://site.test" + "/a" * 30)) is None
    with pytest.raises(ValueError, match=r"URL_MAX_REPEATS \(1\) must be 0 \(off\) or >= 2"):
        url_shape_check(_settings(URL_MAX_REPEATS=1))


@pytest.mark.parametrize(
    ("host", "domain"),
    [
        ("a.b.example.co.uk", "example.co.uk"),
        ("www.example.com", "example.com"),
        ("someone.blogspot.com", "someone.blogspot.com"),  # a private suffix: each blog its own domain
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("localhost", "localhost"),
        ("news.site.test", "news.site.test"),  # no public suffix: its own domain
    ],
)
def test_registered_domain(host: str, domain: str) -> None:
    assert registered_domain(host) == domain


@pytest.fixture(autouse=True)
def _clean(redis_client: redis.Redis) -> None:
    redis_client.flushdb()


def test_hosts_per_domain_are_capped_for_the_whole_cluster(redis_url: str, redis_client: redis.Redis) -> None:
    first = _scheduler(redis_url, DOMAIN_MAX_HOSTS=3)
    for i in range(5):
        assert first.enqueue_request(Request(f"http://h{i}.example.com/"))
    assert first.enqueue_request(Request("http://h0.example.com/second-page"))  # a known host: fine
    assert first.enqueue_request(Request("http://www.other.org/"))
    _drain(first)
    assert redis_client.scard("{adm}:domain:example.com") == 3
    letters = _letters(redis_client, first)
    assert sorted(x["url"] for x in letters) == ["http://h3.example.com/", "http://h4.example.com/"]
    assert {x["reason"] for x in letters} == {"domain_max_hosts"}
    assert all("DOMAIN_MAX_HOSTS" in x["detail"] and payload_url(x["payload"]) == x["url"] for x in letters)
    assert first.stats.get_value("dc/refused/domain_max_hosts") == 2
    assert first.stats.get_value("scheduler/enqueued/redis") == 5
    # the node remembers Redis's answer: a further link to a refused host stops at once
    assert not first.enqueue_request(Request("http://h4.example.com/again"))
    # another node asks Redis and gets the same answers
    second = _scheduler(redis_url, DOMAIN_MAX_HOSTS=3)
    assert second.enqueue_request(Request("http://h1.example.com/more"))
    assert second.enqueue_request(Request("http://h9.example.com/"))
    _drain(second)
    assert "http://h9.example.com/" in [x["url"] for x in _letters(redis_client, second)]
    assert second.stats.get_value("scheduler/enqueued/redis") == 1
    assert redis_client.hget(first.frontier.keys.refused, "domain_max_hosts h9.example.com") == b"1"
    asyncio.run(
        flush_crawl(frontier_for_mode(redis_client, first.frontier.keys, "host"), first.frontier.keys.dupefilter)
    )  # a new crawl starts with no host counted
    assert redis_client.keys("{adm}:domain:*") == []


def test_a_redirect_to_a_host_over_the_cap_finishes_its_lease(redis_url: str, redis_client: redis.Redis) -> None:
    scheduler = _scheduler(redis_url, DOMAIN_MAX_HOSTS=1)
    assert scheduler.enqueue_request(Request("http://a.example.com/"))
    _drain(scheduler, close=False)
    lease = b"0:0:the-redirecting-page"
    redis_client.zadd(scheduler.frontier.keys.processing, {lease: 1e12})
    scheduler.leases.buffered(lease)
    scheduler.leases.started(lease)
    assert scheduler.enqueue_request(Request("http://b.example.com/", meta={LEASE_META: lease}))
    _drain(scheduler)
    assert not redis_client.zscore(scheduler.frontier.keys.processing, lease)
    assert [x["reason"] for x in _letters(redis_client, scheduler)] == ["domain_max_hosts"]


def test_no_cap_asks_nothing(redis_url: str, redis_client: redis.Redis) -> None:
    scheduler = _scheduler(redis_url, DOMAIN_MAX_HOSTS=0)
    for i in range(5):
        assert scheduler.enqueue_request(Request(f"http://h{i}.example.com/"))
    _drain(scheduler)
    assert redis_client.keys("{adm}:domain:*") == []
    assert scheduler.stats.get_value("scheduler/enqueued/redis") == 5
    assert DomainHosts(scheduler.frontier.keys.domain_hosts, 0).unknown(["a.example.com"]) == []


def test_with_shards_each_domains_set_is_on_its_shard(redis_url: str, redis_client: redis.Redis) -> None:
    frontier = frontier_from_settings(_settings(FRONTIER_SHARDS=6), "adm", redis_client)
    domains = [f"example{i}.com" for i in range(8)]
    hosts = DomainHosts(frontier.domain_hosts_key, 2)

    async def ask() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            await hosts.ask(client, [f"h{i}.{domain}" for domain in domains for i in range(3)])
        finally:
            await client.aclose()

    asyncio.run(ask())
    tags = shard_tags("adm", 6)
    assert len({shard_of(domain, 6) for domain in domains}) > 1
    for domain in domains:
        key = "{" + tags[shard_of(domain, 6)] + "}:domain:" + domain
        assert frontier.domain_hosts_key(domain) == key
        assert redis_client.scard(key) == 2  # the cap held, on the domain's shard
        assert [hosts.allowed(f"h{i}.{domain}") for i in range(3)] == [True, True, False]
    assert redis_client.keys("{adm}:domain:*") == []  # nothing on the spider's own tag
    one = frontier_from_settings(_settings(FRONTIER_SHARDS=1), "adm", redis_client)
    assert one.domain_hosts_key("example0.com") == "{adm}:domain:example0.com"  # one shard: today's key


def test_ask_sends_one_script_call_per_hash_tag(redis_url: str) -> None:
    keys = {"a.com": "{s~0}:domain:a.com", "b.com": "{s~1}:domain:b.com", "c.com": "{s~0}:domain:c.com"}
    hosts = DomainHosts(lambda domain: keys[domain], 5)
    calls: list[list[str]] = []

    async def ask() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        script = client.register_script(lua_source("domain_hosts"))

        async def recorded(keys: list[str], args: list[object]) -> object:
            calls.append(keys)
            return await script(keys=keys, args=args)

        recorded.registered_client = client  # type: ignore[attr-defined]
        hosts._script = recorded
        try:
            await hosts.ask(client, ["x.a.com", "y.b.com", "z.c.com", "w.a.com"])
        finally:
            await client.aclose()

    asyncio.run(ask())
    assert sorted(calls) == [
        ["{s~0}:domain:a.com", "{s~0}:domain:c.com", "{s~0}:domain:a.com"],
        ["{s~1}:domain:b.com"],
    ]
    assert all(hosts.allowed(h) for h in ["x.a.com", "y.b.com", "z.c.com", "w.a.com"])
    assert [hash_tag(k) for k in ("{a}:x", "x{}:{b}", "plain", "{}x")] == ["a", "x{}:{b}", "plain", "{}x"]
