"""NewsSpider's callbacks on the test publisher's pages, against a real Redis (no crawl, no processes)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.http import HtmlResponse, Response, XmlResponse
from scrapy.utils.test import get_crawler

from distributed_crawler.core.context import RedisContext
from distributed_crawler.meta import (
    DOWNLOAD_MAXSIZE_META,
    ENTRY_DATE_META,
    ENTRY_TITLE_META,
    LISTED_META,
    SITEMAP_DEPTH_META,
)
from distributed_crawler.news.nearduplicate import NearDuplicateIndex
from distributed_crawler.spiders import news
from distributed_crawler.spiders.news import NewsSpider
from tests.site.news_portal import BOILERPLATE, NewsPortal

BASE = "http://news.example"
WIRE = "http://wire.example"


class Spider(NewsSpider):
    name = "t"


@pytest.fixture(scope="module")
def portal() -> NewsPortal:
    site = NewsPortal()
    site.publisher_url, site.wire_url = BASE, WIRE
    return site


def response(portal: NewsPortal, url: str, meta: dict[str, Any] | None = None) -> Response:
    base, _, path = url.partition("/")[2].partition("/")[2].partition("/")
    render = portal.render_wire if url.startswith(WIRE) else portal.render_publisher
    status, ctype, body = render("/" + path)
    request = Request(url, meta=meta or {})
    cls = HtmlResponse if "html" in ctype else XmlResponse if "xml" in ctype else Response
    return cls(url, status=status, body=body, headers={"Content-Type": ctype}, request=request)


def run(redis_url: str, body: Callable[[Spider], Awaitable[Any]], **settings: Any) -> Any:
    crawler = get_crawler(
        Spider,
        {"ADDONS": {"distributed_crawler.Addon": 0}, "REDIS_URL": redis_url, "SITEMAP_SINCE": "2d", **settings},
    )
    spider = Spider.from_crawler(crawler)
    crawler.spider = spider

    async def main() -> Any:
        spider._news_opened(spider)
        try:
            return await body(spider)
        finally:
            await spider._news_closed(spider)
            await RedisContext.of(crawler).aclose()

    return asyncio.run(main())


async def collect(gen: Any) -> list[Any]:
    return [out async for out in gen]


def test_sitemap_index_skips_old_sitemaps_and_bypasses_the_seen_filter(redis_url: str, portal: NewsPortal) -> None:
    out = run(redis_url, lambda s: collect(s.parse_sitemap(response(portal, BASE + "/sitemap_index.xml.gz"))))
    assert [r.url for r in out] == [
        BASE + "/sitemaps/recent.xml",
        BASE + "/sitemaps/garbage.xml",
        BASE + "/sitemaps/bomb.xml.gz",
    ]
    for request in out:
        assert request.dont_filter and request.callback.__name__ == "parse_sitemap"
        assert request.meta[SITEMAP_DEPTH_META] == 1 and request.meta[DOWNLOAD_MAXSIZE_META] == 50 * 1024 * 1024


def test_sitemap_indexes_end_at_the_depth_limit(
    redis_url: str, portal: NewsPortal, caplog: pytest.LogCaptureFixture
) -> None:
    deep = response(portal, BASE + "/sitemap_index.xml.gz", {SITEMAP_DEPTH_META: 2})
    assert run(redis_url, lambda s: collect(s.parse_sitemap(deep))) == []
    assert "SITEMAP_MAX_DEPTH" in caplog.text


def test_google_news_sitemap_entries_are_dated_requests(redis_url: str, portal: NewsPortal) -> None:
    out = run(redis_url, lambda s: collect(s.parse_sitemap(response(portal, BASE + "/news-sitemap.xml"))))
    assert [r.url for r in out] == [portal.url(2)]  # story 6 is older than SITEMAP_SINCE
    assert not out[0].dont_filter and out[0].callback.__name__ == "parse"
    assert out[0].meta[ENTRY_DATE_META] == portal.stories[2].published.isoformat()
    assert out[0].meta[ENTRY_TITLE_META] == portal.stories[2].title
    assert out[0].meta[LISTED_META] is True  # a news sitemap lists stories: a page-type signal
    every = run(
        redis_url, lambda s: collect(s.parse_sitemap(response(portal, BASE + "/news-sitemap.xml"))), SITEMAP_SINCE=0
    )
    assert [r.url for r in every] == [portal.url(2), portal.url(6)]


def test_entries_of_another_site_are_not_followed(redis_url: str) -> None:
    body = b"""<urlset><url><loc>https://www.herald.co.uk/a</loc></url><url><loc>https://other.co.uk/b</loc></url>
    <url><loc>https://sport.herald.co.uk/c</loc></url></urlset>"""
    url = "https://sitemaps.herald.co.uk/s.xml"
    sitemap = XmlResponse(url, body=body, request=Request(url))
    out = run(redis_url, lambda s: collect(s.parse_sitemap(sitemap)))
    assert [r.url for r in out] == ["https://www.herald.co.uk/a", "https://sport.herald.co.uk/c"]


@pytest.mark.parametrize(
    ("path", "kind", "reason"),
    [
        ("/sitemaps/garbage.xml", "sitemap", "malformed XML"),
        ("/sitemaps/bomb.xml.gz", "sitemap", "zip bomb"),
        ("/broken-feed.xml", "feed", "not an RSS or Atom feed"),
    ],
)
def test_bad_documents_are_one_line_and_a_dead_letter(
    redis_url: str,
    redis_client: redis.Redis,
    portal: NewsPortal,
    caplog: pytest.LogCaptureFixture,
    path: str,
    kind: str,
    reason: str,
) -> None:
    doc = response(portal, BASE + path)
    parse = "parse_feed" if kind == "feed" else "parse_sitemap"
    with caplog.at_level(logging.WARNING):
        out = run(redis_url, lambda s: collect(getattr(s, parse)(doc)), SITEMAP_MAX_BYTES=1024 * 1024)
    assert out == []
    lines = [r for r in caplog.records if r.name == news.__name__]
    assert len(lines) == 1 and reason in lines[0].getMessage() and "\n" not in lines[0].getMessage()
    (raw,) = redis_client.lrange("{t}:failed", 0, -1)
    entry = json.loads(raw)
    assert entry["url"] == BASE + path and entry["kind"] == f"bad_{kind}" and reason in entry["reason"]


def test_a_feed_read_with_repairs_is_used_and_dead_lettered(
    redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    body = '<?xml version="1.0" encoding="utf-8"?><rss version="2.0"><channel><item><title>Caf\xe9</title>'
    body += f"<link>{BASE}/cafe</link></item></channel></rss>"
    feed = XmlResponse(BASE + "/feed", body=body.encode("latin-1"), request=Request(BASE + "/feed"))
    with caplog.at_level(logging.WARNING):
        out = run(redis_url, lambda s: collect(s.parse_feed(feed)))
    assert [r.url for r in out] == [BASE + "/cafe"]
    (raw,) = redis_client.lrange("{t}:failed", 0, -1)
    assert "read with problems, 1 entries used" in json.loads(raw)["reason"]
    assert len([r for r in caplog.records if r.name == news.__name__]) == 1


def test_a_feed_listed_as_a_sitemap_is_read_as_a_feed(redis_url: str, portal: NewsPortal) -> None:
    out = run(redis_url, lambda s: collect(s.parse_sitemap(response(portal, BASE + "/feed.rss"))))
    assert [r.url for r in out] == [portal.url(3)]


def test_a_sitemap_or_feed_seeded_as_a_plain_url_is_read_as_one(redis_url: str, portal: NewsPortal) -> None:
    out = run(redis_url, lambda s: collect(s.parse(response(portal, BASE + "/feed.atom"))))
    assert [r.url for r in out] == [portal.url(4)]
    out = run(redis_url, lambda s: collect(s.parse(response(portal, BASE + "/sitemap_index.xml.gz"))))
    assert len(out) == 3 and all(r.callback.__name__ == "parse_sitemap" for r in out)


def test_site_seed_reads_sitemaps_from_the_cluster_robots_cache(
    redis_url: str, redis_client: redis.Redis, portal: NewsPortal
) -> None:
    _, _, robots = portal.render_publisher("/robots.txt")
    entry = {"status": 200, "body": robots.decode(), "fetched_at": 0}
    redis_client.set("{t}:robots:news.example", json.dumps(entry))
    out = run(redis_url, lambda s: collect(s.parse_site(response(portal, BASE + "/"))), ROBOTSTXT_OBEY=True)
    discovery = [(r.url, r.callback.__name__) for r in out if isinstance(r, Request) and r.callback.__name__ != "parse"]
    assert discovery == [
        (BASE + "/feed.rss", "parse_feed"),
        (BASE + "/feed.atom", "parse_feed"),
        (BASE + "/broken-feed.xml", "parse_feed"),
        (BASE + "/sitemap_index.xml.gz", "parse_sitemap"),
        (BASE + "/news-sitemap.xml", "parse_sitemap"),
    ]
    items = [o for o in out if isinstance(o, dict)]
    assert [i["url"] for i in items] == [BASE + "/"]  # the home page is a page too
    links = [r.url for r in out if isinstance(r, Request) and r.callback.__name__ == "parse"]
    assert links == [BASE + "/story?id=1", BASE + "/amp/story-1"]


def test_site_seed_without_a_cached_robots_txt_fetches_it(redis_url: str, portal: NewsPortal) -> None:
    out = run(redis_url, lambda s: collect(s.parse_site(response(portal, WIRE + "/"))), ROBOTSTXT_OBEY=False)
    robots = [r for r in out if isinstance(r, Request) and r.callback.__name__ == "parse_robots"]
    assert [(r.url, r.dont_filter) for r in robots] == [(WIRE + "/robots.txt", True)]
    none_listed = run(
        redis_url, lambda s: collect(s.parse_robots(response(portal, WIRE + "/robots.txt", robots[0].meta)))
    )
    assert [r.url for r in none_listed] == [WIRE + "/sitemap.xml"]  # the conventional place


def test_articles_canonical_url_near_duplicate_and_keep_text(
    redis_url: str, redis_client: redis.Redis, portal: NewsPortal, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    class Scheduler:
        async def mark_seen(self, requests: list[Request]) -> list[bool]:
            seen.extend(r.url for r in requests)
            return [True] * len(requests)

    monkeypatch.setattr(news, "scheduler_of", lambda crawler: Scheduler())

    async def crawl(spider: Spider) -> list[Any]:
        items = []
        for url in (BASE + "/amp/story-1", portal.url(2), WIRE + "/wire/story-2", portal.url(2)):
            items.append(await spider.page_item(response(portal, url)))
        return items

    amp, original, copy, again = run(redis_url, crawl)
    story = portal.stories[1]
    assert amp["url"] == portal.url(1) and seen == [portal.url(1)]
    assert all(s in amp["text"] for s in story.sentences) and not [m for m in BOILERPLATE if m in amp["text"]]
    assert (amp["title"], amp["authors"], amp["lang"]) == (story.title, [story.author], "en")
    assert amp["published_at"] == story.published.isoformat() and amp["description"] == story.description
    assert original["duplicate_of"] is None and again["duplicate_of"] is None  # fetched again: not its own copy
    assert copy["url"] == WIRE + "/wire/story-2"  # the canonical link to another site is ignored
    assert copy["duplicate_of"] == portal.url(2) and copy["text"] == ""
    redis_client.flushall()
    _, _, copy = run(redis_url, crawl, NEAR_DUPLICATE_KEEP_TEXT=True)[:3]
    assert copy["duplicate_of"] == portal.url(2) and portal.stories[2].sentences[0] in copy["text"]


def test_items_carry_page_type_paywall_modified_and_the_sites_rules_win(redis_url: str, portal: NewsPortal) -> None:
    async def one(spider: Spider) -> Any:
        return await spider.page_item(response(portal, portal.url(3), {LISTED_META: True}))

    item = run(redis_url, one, NEAR_DUPLICATES=False)
    assert (item["page_type"], item["paywalled"], item["modified_at"]) == ("article", None, None)
    ruled = run(redis_url, one, NEAR_DUPLICATES=False, EXTRACTION_RULES='{"news.example": {"text": "p.byline"}}')
    story = portal.stories[3]
    assert ruled["text"] == f"By {story.author}, {story.published:%d %B %Y}"


def test_extract_main_text_off_stores_the_visible_text(redis_url: str, portal: NewsPortal) -> None:
    async def one(spider: Spider) -> Any:
        return await spider.page_item(response(portal, portal.url(3)))

    item = run(redis_url, one, EXTRACT_MAIN_TEXT=False, NEAR_DUPLICATES=False)
    assert "Footer-copyright-marker" in item["text"] and portal.stories[3].sentences[0] in item["text"]
    assert item["title"] == portal.stories[3].title + " | Harbour Herald" and item["duplicate_of"] is None


def test_near_duplicates_across_nodes_one_original(redis_url: str) -> None:
    # Ten "nodes" race to store near-identical copies: exactly one is the original, the others
    # point to it; memory stays at one fingerprint.
    async def race() -> list[Any]:
        from redis.asyncio import Redis

        clients = [Redis.from_url(redis_url) for _ in range(10)]
        indexes = [NearDuplicateIndex(c, "{t}:simhash", 3) for c in clients]
        value = 0x0123_4567_89AB_CDEF
        results = await asyncio.gather(
            *(index.check_add(value ^ (1 << i), f"http://site{i}.example/s") for i, index in enumerate(indexes))
        )
        for c in clients:
            await c.aclose()
        return results

    results = asyncio.run(race())
    originals = [r for r in results if r is None]
    assert len(originals) == 1
    winner = {r.original for r in results if r is not None}
    assert len(winner) == 1 and all(r.distance <= 2 for r in results if r is not None)
    client = redis.Redis.from_url(redis_url)
    assert client.hlen("{t}:simhash:urls") == 1
    client.close()
