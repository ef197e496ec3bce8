"""ROBOTS_META_OBEY: a page's robots meta and X-Robots-Tag header, parsed (pure) and obeyed by the
news spider (against a real Redis: the per-host count is the cluster's)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from scrapy import Request
from scrapy.http import HtmlResponse
from scrapy.settings import Settings

from distributed_crawler.defaults import SettingsReader
from distributed_crawler.downloadermiddlewares.robots_cache import CLAIMED, HIT, RobotsCache
from distributed_crawler.keyspace import fill
from distributed_crawler.news.counts import NewsCounts
from distributed_crawler.news.extract import parse_html
from distributed_crawler.news.robots_meta import robots_meta
from tests.test_news_spider import Spider, collect, run

STORY = "".join(f"<p>Paragraph {i}: the harbour bridge reopened on Friday, the council said.</p>" for i in range(12))


def page(head: str = "") -> str:
    links = "".join(f'<a href="/story-{i}">Story {i}</a> ' for i in range(3))
    return f"<html><head><title>Bridge</title>{head}</head><body><article>{STORY}</article>{links}</body></html>"


def meta(content: str, name: str = "robots") -> str:
    return f'<meta name="{name}" content="{content}">'


@pytest.mark.parametrize(
    ("head", "headers", "expected"),
    [
        ("", [], (False, False)),
        (meta("noindex"), [], (True, False)),
        (meta("NOINDEX, NOFOLLOW"), [], (True, True)),
        (meta("none"), [], (True, True)),
        (meta("nofollow"), [], (False, True)),
        (meta("index, follow"), [], (False, False)),
        (meta("noindex", name="dcbot"), [], (True, False)),  # our own agent
        (meta("noindex", name="otherbot"), [], (False, False)),  # another agent's
        ("", ["noindex"], (True, False)),
        ("", ["none"], (True, True)),
        ("", ["dcbot: nofollow"], (False, True)),
        ("", ["otherbot: noindex, nofollow"], (False, False)),
        ("", ["unavailable_after: 25 Jun 2010 15:00:00 PST"], (False, False)),  # a directive, not an agent
        ("", ["otherbot: noindex", "nofollow"], (False, True)),
    ],
)
def test_directives_from_metas_and_headers(head: str, headers: list[str], expected: tuple[bool, bool]) -> None:
    asks = robots_meta(parse_html(page(head)), headers, "DCBot")
    assert (asks.noindex, asks.nofollow) == expected


def crawl(redis_url: str, head: str, headers: dict[str, str] | None = None, **settings: Any) -> tuple[list[Any], Any]:
    url = "http://news.example/2026/12/01/harbour-bridge-reopens-after-repairs"
    response = HtmlResponse(url, body=page(head).encode(), headers=headers or {}, request=Request(url))

    async def body(spider: Spider) -> tuple[list[Any], Any]:
        out = await collect(spider.parse(response))
        await spider._flush_counts_once(timeout=5)
        return out, dict(spider.crawler.stats.get_stats())

    # NEAR_DUPLICATES off: each case stores the same story
    return run(redis_url, body, NEAR_DUPLICATES=False, BOT_NAME="dcbot", **settings)


def test_noindex_is_not_stored_but_followed_and_counted_per_host(redis_url: str, redis_client: redis.Redis) -> None:
    redis_client.flushall()
    out, stats = crawl(redis_url, meta("noindex"))
    assert [o for o in out if not isinstance(o, Request)] == []
    assert len([o for o in out if isinstance(o, Request)]) == 3
    assert stats["news/skipped/robots/noindex"] == 1
    assert redis_client.hget("{t}:stats", "robots:noindex:skipped") == b"1"
    assert redis_client.zrange("{t}:robots:skipped", 0, -1, withscores=True) == [(b"news.example", 1.0)]


def test_nofollow_header_stores_the_page_but_follows_no_link(redis_url: str, redis_client: redis.Redis) -> None:
    redis_client.flushall()
    out, stats = crawl(redis_url, "", {"X-Robots-Tag": "dcbot: nofollow"})
    assert [o for o in out if isinstance(o, Request)] == []
    assert len(out) == 1 and stats["news/robots/nofollow"] == 1


def test_robots_meta_obey_off_stores_and_follows(redis_url: str, redis_client: redis.Redis) -> None:
    redis_client.flushall()
    # ROBOTS_META_OBEY lifted: this test checks that the switch turns the reading off
    out, stats = crawl(redis_url, meta("none"), ROBOTS_META_OBEY=False)
    assert len([o for o in out if not isinstance(o, Request)]) == 1
    assert len([o for o in out if isinstance(o, Request)]) == 3
    assert not [k for k in stats if "robots" in k]


def test_a_host_named_skipped_keeps_its_robots_txt_apart_from_the_noindex_counter(redis_client: redis.Redis) -> None:
    """The robots.txt cache of host `skipped` and the per-host noindex counter are different keys
    with the default settings: each keeps its type and its data."""
    redis_client.flushall()
    settings = SettingsReader(Settings())
    counter = fill(settings.str("ROBOTS_META_SKIPPED_KEY"), "t")
    entry = {"status": 200, "body": "User-agent: *\nDisallow: /private/", "fetched_at": 1.0}
    url = redis_client.connection_pool.connection_kwargs
    template = settings.str("ROBOTS_CACHE_KEY")

    async def scenario() -> tuple[str, str]:
        client = aioredis.Redis(host=url["host"], port=url["port"])
        counts = NewsCounts(client, "{t}:stats", counter)
        cache = RobotsCache(client, template, "t", None, None, 30, 1.0, "robots.txt pending")
        counts.skipped("robots", "noindex", "skipped")
        await counts.flush()
        claimed = await cache.claim("skipped", "skipped")
        await cache.store("skipped", "skipped", entry, 60, None, lift=False, holding=False)
        counts.skipped("robots", "noindex", "skipped")
        await counts.flush()
        again = await cache.claim("skipped", "skipped")
        await client.aclose()
        return claimed.verdict, again.verdict

    assert asyncio.run(scenario()) == (CLAIMED, HIT)
    assert redis_client.zrange(counter, 0, -1, withscores=True) == [(b"skipped", 2.0)]
    assert redis_client.hget("{t}:stats", "robots:noindex:skipped") == b"2"
