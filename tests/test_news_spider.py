"""NewsSpider's callbacks on the test publisher's pages, against a real Redis (no crawl, no processes)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
from scrapy import Request, signals
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
from distributed_crawler.news.config import NewsConfig
from distributed_crawler.news.extract import Article
from distributed_crawler.news.nearduplicate import NearDuplicateIndex
from distributed_crawler.news.storing import StorePolicy
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
        {
            "ADDONS": {"distributed_crawler.Addon": 0},
            "REDIS_URL": redis_url,
            "SITEMAP_SINCE": "2d",
            "STORE_PAGE_TYPES": "article,list,other",  # these tests check every page's item
            **settings,
        },
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
    redis_client.set("{t}:robots.txt:news.example", json.dumps(entry))
    out = run(redis_url, lambda s: collect(s.parse_site(response(portal, BASE + "/"))), ROBOTSTXT_OBEY=True)
    discovery = [(r.url, r.callback.__name__) for r in out if isinstance(r, Request) and r.callback.__name__ != "parse"]
    assert discovery == [
        (BASE + "/feed.rss", "parse_feed"),
        (BASE + "/feed.atom", "parse_feed"),
        (BASE + "/broken-feed.xml", "parse_feed"),
        (BASE + "/gone-feed.xml", "parse_feed"),
        (BASE + "/sitemap_index.xml.gz", "parse_sitemap"),
        (BASE + "/news-sitemap.xml", "parse_sitemap"),
    ]
    items = [o for o in out if isinstance(o, dict)]
    assert [i["url"] for i in items] == [BASE + "/"]  # the home page is a page too
    links = [r.url for r in out if isinstance(r, Request) and r.callback.__name__ == "parse"]
    assert links == [BASE + "/story?id=1", BASE + "/amp/story-1"]


def test_site_seed_reads_the_robots_cache_on_the_hosts_shard(
    redis_url: str, redis_client: redis.Redis, portal: NewsPortal
) -> None:
    """With shards the robots.txt middleware caches on the host's shard: the spider reads it there."""
    _, _, robots = portal.render_publisher("/robots.txt")
    entry = json.dumps({"status": 200, "body": robots.decode(), "fetched_at": 0})

    async def body(s: Spider) -> list[Any]:
        tag = RedisContext.of(s.crawler).frontier_for(s.name).host_tag(BASE + "/")
        assert tag != s.name  # a shard's tag, not the spider's
        redis_client.set(f"{{{tag}}}:robots.txt:news.example", entry)
        return await collect(s.parse_site(response(portal, BASE + "/")))

    out = run(redis_url, body, ROBOTSTXT_OBEY=True, FRONTIER_SHARDS=4)
    assert not [r for r in out if isinstance(r, Request) and r.callback.__name__ == "parse_robots"]
    assert (BASE + "/feed.rss", "parse_feed") in [(r.url, r.callback.__name__) for r in out if isinstance(r, Request)]


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
    # a copy on another site is marked, never emptied: no page of one site empties a row of another
    assert copy["duplicate_of"] == portal.url(2) and portal.stories[2].sentences[0] in copy["text"]


def test_a_same_site_near_duplicate_is_emptied_unless_keep_text(
    redis_url: str, redis_client: redis.Redis, portal: NewsPortal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(news, "scheduler_of", lambda crawler: None)

    async def crawl(spider: Spider) -> list[Any]:
        first = await spider.page_item(response(portal, portal.url(2)))
        page = response(portal, portal.url(2))
        # the same story at another URL of the site, naming no canonical URL (a print version)
        print_version = page.replace(url=BASE + "/print/story-2", body=page.body.replace(b'"canonical"', b'"x"'))
        return [first, await spider.page_item(print_version)]

    original, alias = run(redis_url, crawl)
    assert original["duplicate_of"] is None and original["text"]
    assert alias["duplicate_of"] == portal.url(2) and alias["text"] == ""
    redis_client.flushall()
    _, alias = run(redis_url, crawl, NEAR_DUPLICATE_KEEP_TEXT=True)
    assert alias["duplicate_of"] == portal.url(2) and portal.stories[2].sentences[0] in alias["text"]


def test_the_copy_stored_first_stays_the_original_whatever_date_a_page_claims(
    redis_url: str, redis_client: redis.Redis, portal: NewsPortal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copier crawled first stays the original even if the genuine page claims an earlier date;
    the genuine page keeps its text (another site), and the copier's row is never touched."""
    monkeypatch.setattr(news, "scheduler_of", lambda crawler: None)
    genuine_url = portal.url(2)

    async def crawl(spider: Spider) -> list[Any]:
        copier = await spider.page_item(response(portal, WIRE + "/wire/story-2"))
        genuine = await spider.page_item(
            response(portal, genuine_url, meta={ENTRY_DATE_META: "1999-01-01T00:00:00+00:00"})
        )
        copier_again = await spider.page_item(response(portal, WIRE + "/wire/story-2"))
        return [copier, genuine, copier_again]

    copier, genuine, copier_again = run(redis_url, crawl)
    assert copier["duplicate_of"] is None and copier_again["duplicate_of"] is None
    assert genuine["duplicate_of"] == WIRE + "/wire/story-2"
    assert portal.stories[2].sentences[0] in genuine["text"]
    assert copier_again["text"] == copier["text"] and copier["text"]


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


def test_extract_main_text_off_reads_small_pages_inline_and_large_ones_on_the_threads(
    redis_url: str, portal: NewsPortal
) -> None:
    async def both(spider: Spider) -> Any:
        handed: list[Any] = []
        pool_run = spider.off_reactor.run

        async def counted(func: Any, *args: Any, **kwargs: Any) -> Any:
            handed.append(func)
            return await pool_run(func, *args, **kwargs)

        spider.off_reactor.run = counted  # type: ignore[method-assign]
        page = response(portal, portal.url(3))
        assert len(page.body) <= news.INLINE_MAX_BYTES
        large = page.replace(body=page.body + b"<!-- " + b"x" * news.INLINE_MAX_BYTES + b" -->")
        return handed, await spider.page_item(page), await spider.page_item(large)

    handed, small, large = run(redis_url, both, EXTRACT_MAIN_TEXT=False, NEAR_DUPLICATES=False)
    assert handed == [news.extract_page]
    assert {**small, "fetched_at": None} == {**large, "fetched_at": None}


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


def test_a_page_over_extract_max_bytes_is_read_up_to_it_and_flagged(
    redis_url: str, portal: NewsPortal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(news, "scheduler_of", lambda crawler: None)
    page = response(portal, portal.url(2))
    links = b"".join(b'<a href="/far/%d">x</a>' % i for i in range(20_000))
    huge = page.replace(body=page.body.replace(b"</body>", links + b"</body>"))

    async def crawl(spider: Spider) -> list[Any]:
        return await collect(spider.parse(huge))

    item, *requests = run(redis_url, crawl, EXTRACT_MAX_BYTES=len(page.body) + 2000)
    assert item["truncated"] is True and portal.stories[2].sentences[0] in item["text"]
    assert 0 < len(requests) < 200  # only the links within the cap were read
    small, *_ = run(redis_url, lambda s: collect(s.parse(page)), NEAR_DUPLICATES=False)
    assert small["truncated"] is False


def test_sitemap_index_robots_and_feed_links_off_the_site_are_dropped_and_counted(redis_url: str) -> None:
    """sitemaps.org: a sitemap (and an index, and robots.txt's Sitemap: lines) lists its own site."""
    index = XmlResponse(
        BASE + "/index.xml",
        body=b"""<sitemapindex><sitemap><loc>http://news.example/s1.xml</loc></sitemap>
        <sitemap><loc>http://127.0.0.2:8080/internal.xml</loc></sitemap>
        <sitemap><loc>http://169.254.169.254/latest/</loc></sitemap></sitemapindex>""",
        request=Request(BASE + "/index.xml"),
    )
    robots = Response(
        BASE + "/robots.txt",
        body=b"Sitemap: http://news.example/s2.xml\nSitemap: http://10.0.0.1/s.xml\n",
        request=Request(BASE + "/robots.txt", meta={news.NEWS_SITE_META: BASE + "/"}),
    )
    home = HtmlResponse(
        BASE + "/",
        body=b'<html><head><link rel="alternate" type="application/rss+xml" href="http://127.0.0.2/feed">'
        b'<link rel="alternate" type="application/rss+xml" href="/feed.rss"></head><body></body></html>',
        request=Request(BASE + "/"),
    )

    async def body(spider: Spider) -> tuple[list[str], list[str], list[str], dict[str, Any]]:
        listed = [r.url for r in await collect(spider.parse_sitemap(index))]
        from_robots = [r.url for r in await collect(spider.parse_robots(robots))]
        out = await collect(spider.parse_site(home))
        feeds = [r.url for r in out if isinstance(r, Request) and r.callback.__name__ == "parse_feed"]
        return listed, from_robots, feeds, spider.crawler.stats.get_stats()

    listed, from_robots, feeds, stats = run(redis_url, body, ROBOTSTXT_OBEY=False)
    assert listed == [BASE + "/s1.xml"] and from_robots == [BASE + "/s2.xml"] and feeds == [BASE + "/feed.rss"]
    assert stats["news/off_site/sitemap_index_entry"] == 2
    assert stats["news/off_site/robots_sitemap"] == 1 and stats["news/off_site/feed_link"] == 1


def _extracting(monkeypatch: pytest.MonkeyPatch, page_type: str, lang: str | None) -> None:
    """Extraction says what the page is (the classifier and the language detector are tested apart)."""
    real = news.extract_article

    def classified(html: str, url: str, **options: Any) -> Article:
        return dataclasses.replace(real(html, url, **options), page_type=page_type, lang=lang)

    monkeypatch.setattr(news, "extract_article", classified)


@pytest.mark.parametrize(
    ("settings", "page_type", "lang", "skipped"),
    [
        ({}, "list", "en", ("page_type", "list")),  # the default: articles only
        ({}, "other", "en", ("page_type", "other")),
        ({"STORE_PAGE_TYPES": ["article", "list"]}, "list", "en", None),
        ({"LANGUAGES": "de,fr"}, "article", "en", ("language", "en")),
        ({"LANGUAGES": "de,fr"}, "article", "de-AT", None),
        ({"LANGUAGES": "de"}, "article", None, None),  # unknown language: stored
        ({"LANGUAGES": "de"}, "list", "en", ("page_type", "list")),  # the type decides first
    ],
)
def test_pages_not_stored_are_crawled_for_links_and_counted_for_the_cluster(
    redis_url: str,
    redis_client: redis.Redis,
    portal: NewsPortal,
    monkeypatch: pytest.MonkeyPatch,
    settings: dict[str, Any],
    page_type: str,
    lang: str | None,
    skipped: tuple[str, str] | None,
) -> None:
    redis_client.flushall()
    _extracting(monkeypatch, page_type, lang)
    settings = {"STORE_PAGE_TYPES": "article", "NEAR_DUPLICATES": False, **settings}

    async def crawl(spider: Spider) -> tuple[list[Any], dict[str, Any]]:
        out = await collect(spider.parse(response(portal, BASE + "/")))
        for item in [o for o in out if not isinstance(o, Request)]:
            spider.crawler.signals.send_catch_log(signal=signals.item_scraped, item=item, response=None, spider=spider)
        return out, dict(spider.crawler.stats.get_stats())

    out, stats = run(redis_url, crawl, **settings)
    links = [o.url for o in out if isinstance(o, Request)]
    items = [o for o in out if not isinstance(o, Request)]
    assert BASE + "/story?id=1" in links  # followed either way
    cluster = {k.decode(): int(v) for k, v in redis_client.hgetall("{t}:stats").items()}
    hosts = redis_client.zrange("{t}:language:skipped", 0, -1, withscores=True)
    if skipped is None:
        assert [(i["page_type"], i["lang"]) for i in items] == [(page_type, lang)]
        assert stats[f"news/stored/page_type/{page_type}"] == 1 and not [k for k in stats if "skipped" in k]
        assert cluster == {f"page_type:{page_type}:stored": 1} and hosts == []
        return
    kind, value = skipped
    assert items == []
    assert stats[f"news/skipped/{kind}/{value}"] == 1 and not [k for k in stats if "/stored/" in k]
    expected = {f"page_type:{page_type}:skipped": 1, f"{kind}:{value}:skipped": 1}
    assert cluster == expected  # one field when the page type is the reason
    assert hosts == ([(b"news.example", 1.0)] if kind == "language" else [])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"STORE_PAGE_TYPES": "article,stories"},
            "STORE_PAGE_TYPES (stories) must be page types among article, list, other",
        ),
        ({"STORE_PAGE_TYPES": ""}, "STORE_PAGE_TYPES (empty) must be page types"),
        ({"LANGUAGES": "en,english"}, "LANGUAGES (english) must be ISO 639-1 codes"),
        ({"LANGUAGES": ["en-GB"]}, "LANGUAGES (en-gb) must be ISO 639-1 codes"),
        ({"LANGUAGES": "xx"}, "LANGUAGES (xx) must be ISO 639-1 codes"),
    ],
)
def test_bad_store_settings_are_one_line_at_start(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as raised:
        NewsConfig.from_settings(settings)
    assert "\n" not in str(raised.value)


def test_store_settings_read_lists_and_comma_separated_text() -> None:
    assert NewsConfig.from_settings({}).store == StorePolicy(("article",), ())
    config = NewsConfig.from_settings({"STORE_PAGE_TYPES": "Article, list", "LANGUAGES": ["DE", "en", "de"]})
    assert config.store == StorePolicy(("article", "list"), ("de", "en"))


def test_counts_refused_by_redis_are_one_error_line_and_kept(
    redis_url: str,
    redis_client: redis.Redis,
    portal: NewsPortal,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    redis_client.set("{t}:stats", "someone's string")
    _extracting(monkeypatch, "list", "en")

    async def crawl(spider: Spider) -> Any:
        for _ in range(2):
            await collect(spider.parse(response(portal, BASE + "/")))
            await spider._flush_counts_once(timeout=5)
        return spider._counts.pending()

    with caplog.at_level(logging.ERROR, logger="distributed_crawler.spiders.news"):
        kept = run(redis_url, crawl, STORE_PAGE_TYPES="article")
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("Page counts not added to {t}:stats (WRONGTYPE")
    assert kept == {"page_type:list:skipped": 2}


def test_sitemap_and_feed_entries_start_at_depth_1(redis_url: str) -> None:
    """DEPTH_LIMIT counts links from a listing, not the hops that led to it (Scrapy's depth_reset)."""
    from scrapy.spidermiddlewares.depth import DepthMiddleware

    page = HtmlResponse(BASE + "/deep/page", body=b"<html></html>", request=Request(BASE + "/deep/page"))
    page.meta["depth"] = 19

    async def body(spider: Spider) -> list[int]:
        depth = DepthMiddleware.from_crawler(spider.crawler)
        listing = depth.get_processed_request(spider.sitemap_request(BASE + "/sitemap.xml", BASE + "/", 0), page)
        feed = depth.get_processed_request(spider.feed_request(BASE + "/feed.rss", BASE + "/"), page)
        assert listing is not None and feed is not None
        sitemap = XmlResponse(
            listing.url,
            body=b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://news.example/a</loc></url></urlset>',
            request=listing,
        )
        (entry,) = await collect(spider.parse_sitemap(sitemap))
        processed = depth.get_processed_request(entry, sitemap)
        assert processed is not None
        return [listing.meta["depth"], feed.meta["depth"], processed.meta["depth"]]

    assert run(redis_url, body) == [0, 0, 1]


def test_links_the_node_sent_lately_are_not_yielded(
    redis_url: str, portal: NewsPortal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler would drop them (dedup/recent.py): asked first, they never enter the middlewares."""
    page = response(portal, portal.url(1))
    asked: list[str] = []

    class Scheduler:
        def already_sent(self, request: Request) -> bool:
            asked.append(request.url)
            return request.url == asked[0]

    async def links(spider: Spider) -> list[str]:
        return [r.url for r in spider.page_links(page)]

    monkeypatch.setattr(news, "scheduler_of", lambda crawler: None)  # Scrapy's scheduler: no such question
    every = run(redis_url, links)
    monkeypatch.setattr(news, "scheduler_of", lambda crawler: Scheduler())
    fresh = run(redis_url, links)
    assert len(every) >= 2 and asked == every and fresh == every[1:]
