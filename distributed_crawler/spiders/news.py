"""`NewsSpider`: articles from links, sitemaps and feeds, one row per story (docs/news.md).

Callbacks (seeds may name them: `{"url": ..., "callback": "parse_site"}`):
- `parse`: a page -> one item (main text and metadata, `EXTRACT_MAIN_TEXT`) + its same-host links;
  a sitemap or feed pushed as a plain seed is recognised by its first element and read as one.
- `parse_site` (`dcrawl seed SPIDER --site URL`): the home page as `parse`, plus its feed links and
  the `Sitemap:` lines of its robots.txt (from the cluster's robots.txt cache, fetched once).
- `parse_robots`, `parse_sitemap`, `parse_feed`: discovery; their requests bypass the seen-filter
  (a rerun re-reads them) and entries older than `SITEMAP_SINCE` are skipped.

Only the page types in STORE_PAGE_TYPES (and, when set, the LANGUAGES) become items; every page's
links are followed. Pages stored and not stored are counted for the cluster (news/counts.py).
A page's same-site `<link rel="canonical">` is its item's url and goes into the seen-filter, so
aliases and AMP copies make one row. An article whose main text is a near-duplicate of one stored
before (any URL, site or node) gets `duplicate_of`; the one stored first stays the original, whatever
date a page claims. Its text is emptied only when the original is on the same site
(`NEAR_DUPLICATE_KEEP_TEXT`): a page of one site never empties a row of another.
A sitemap or feed that cannot be read is one WARNING line and a dead letter in `{spider}:failed`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from itemadapter import ItemAdapter, is_item
from lxml import etree
from redis.exceptions import ResponseError
from scrapy import Request, signals
from scrapy.http import Response, TextResponse
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.sitemap import sitemap_urls_from_robots

from distributed_crawler.connection.clients import refused_for_good
from distributed_crawler.connection.policy import NodeStopping, Purpose, RedisPolicy
from distributed_crawler.connection.types import AsyncRedis
from distributed_crawler.connection.untrusted import EpisodeLog
from distributed_crawler.core.context import RedisContext
from distributed_crawler.core.registry import SourceCache
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.downloadermiddlewares.robotstxt import cache_key, cached_robots_body
from distributed_crawler.events.coverage import NEAR_DUPLICATE, NOT_ARTICLE, SKIPPED, STORED, CoverageLog
from distributed_crawler.events.extension import ChangeFeedExtension
from distributed_crawler.events.feed import ARTICLE_TYPES
from distributed_crawler.frontier.deadletters import DeadLetters, failure_entry
from distributed_crawler.internals import node_stopping, scheduler_of
from distributed_crawler.meta import (
    BACKFILL_META,
    COVERAGE_URL_META,
    DEPTH_RESET_META,
    DONT_OBEY_ROBOTSTXT_META,
    DONT_RENDER_META,
    DOWNLOAD_MAXSIZE_META,
    ENTRY_DATE_META,
    ENTRY_TITLE_META,
    FRAMES_META,
    LISTED_META,
    NEWS_SITE_META,
    SITEMAP_DEPTH_META,
    SITEMAP_GUESSED_META,
)
from distributed_crawler.news.backfill import Window, window_from_meta
from distributed_crawler.news.canonical import canonical_link, same_site
from distributed_crawler.news.config import NewsConfig
from distributed_crawler.news.counts import FLUSH_SECONDS, NewsCounts
from distributed_crawler.news.documents import Document, DocumentError, feed_links, parse_feed, parse_sitemap, sniff
from distributed_crawler.news.extract import Article, OffReactor, extract_article, page_basics
from distributed_crawler.news.nearduplicate import Match, NearDuplicateIndex, fingerprint, without_title
from distributed_crawler.news.robots_meta import RobotsMeta, header_values, robots_meta
from distributed_crawler.news.rules import SiteRules
from distributed_crawler.news.storing import page_type_of
from distributed_crawler.rendering.frames import frames_text, static_iframe_urls
from distributed_crawler.spiders.redis_spider import RedisSpider
from distributed_crawler.urlhost import url_host

logger = logging.getLogger(__name__)

DISCOVERY_PRIORITY = 10  # robots.txt, sitemaps and feeds before the pages they list
CLOSE_FLUSH_SECONDS = 5.0  # longest wait for one flush of the page counts
TRUNCATED_FLAG = "truncated"  # response flag: the body was cut to EXTRACT_MAX_BYTES (bounded)
# EXTRACT_MAIN_TEXT off: a page up to this size is read on the reactor thread, where its parse costs
# less than the handoff to an extraction thread and back (measured: docs/benchmarks.md)
INLINE_MAX_BYTES = 16 * 1024
# what parsel's `a::attr(href)` and `title::text` translate to, compiled once (not per page)
_HREFS = etree.XPath("descendant-or-self::a/@href", smart_strings=False)
_TITLE = etree.XPath("descendant-or-self::title/text()", smart_strings=False)


def with_window(meta: dict[str, Any], window: Window | None) -> dict[str, Any]:
    """A listing request's meta, with the backfill window when there is one."""
    if window is not None:
        meta[BACKFILL_META] = window.as_meta()
    return meta


class NewsSpider(RedisSpider):
    """A RedisSpider for news sites; a subclass sets `name` and `item_class` (fields: docs/news.md)."""

    item_class: Callable[..., Any] = dict

    news: NewsConfig

    def setup_redis(self, crawler: Any = None) -> None:
        super().setup_redis(crawler)
        if hasattr(self, "news"):  # once, as the seeds' part
            return
        crawler = crawler or self.crawler
        self.news = NewsConfig.from_settings(crawler.settings)
        read = SettingsReader(crawler.settings)
        self.follow_static_iframes = read.bool("IFRAME_FOLLOW_STATIC")
        self.obey_robots = crawler.settings.getbool("ROBOTSTXT_OBEY")
        self.robots_key_template = read.str("ROBOTS_CACHE_KEY")
        self.off_reactor = OffReactor(self.news.extract_threads)
        self._index: NearDuplicateIndex | None = None
        self._context: RedisContext | None = None
        self._news_errors = EpisodeLog(logger)
        self._counts = NewsCounts(None, self.keys.stats, self.news.skipped_hosts_key(self.name))
        self._robots_counts = NewsCounts(None, self.keys.stats, self.news.robots_skipped_hosts_key(self.name))
        self.bot_name = crawler.settings.get("BOT_NAME") or ""
        self._counts_task: asyncio.Task[None] | None = None
        crawler.signals.connect(self._news_opened, signal=signals.spider_opened)
        crawler.signals.connect(self._news_closed, signal=signals.spider_closed)
        crawler.signals.connect(self._item_stored, signal=signals.item_scraped)

    def _news_opened(self, spider: Any) -> None:
        self._context = RedisContext.of(self.crawler).acquire()
        self._counts.client = self._robots_counts.client = self._context.client
        self._counts_task = asyncio.get_running_loop().create_task(self._flush_counts(), name="dc-news-counts")

    async def _news_closed(self, spider: Any) -> None:
        self.off_reactor.close()
        if self._counts_task is not None:
            self._counts_task.cancel()
            await asyncio.gather(self._counts_task, return_exceptions=True)
            await self._flush_counts_once(timeout=CLOSE_FLUSH_SECONDS)
        context = self._context
        self._context = None
        if context is not None:
            await context.release()

    async def _flush_counts(self) -> None:
        """Page counts to the cluster's `{spider}:stats` every few seconds (news/counts.py)."""
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self._flush_counts_once(timeout=CLOSE_FLUSH_SECONDS)

    async def _flush_counts_once(self, timeout: float) -> None:
        """STATS: Redis away, the counts stay on this node for the next flush."""

        async def flush() -> None:
            await asyncio.wait_for(self._counts.flush(), timeout)
            await asyncio.wait_for(self._robots_counts.flush(), timeout)

        async def refused(exc: BaseException) -> None:  # a key of the wrong type or a bug: named once, retried
            self._news_errors.failed(
                "page counts",
                "Page counts not added to %s (%s); kept on this node and tried again",
                self.keys.stats,
                exc,
            )

        async def added() -> None:
            self._news_errors.ok("page counts")

        await self._policy.run(Purpose.STATS, flush, on_error=refused, on_ok=added)

    @property
    def _policy(self) -> RedisPolicy:
        return (self._context or RedisContext.of(self.crawler)).policy

    @property
    def _client(self) -> AsyncRedis:
        return (self._context or RedisContext.of(self.crawler)).client

    def _robots_tag(self, url: str) -> str:
        """The robots.txt cache sits on the host's frontier shard, where the middleware reads it."""
        return (self._context or RedisContext.of(self.crawler)).frontier_for(self.name).host_tag(url)

    # -- pages ------------------------------------------------------------------------------
    async def parse(self, response: Response, **kwargs: Any) -> AsyncIterator[Any]:
        kind = sniff(response.body)
        if kind:  # a sitemap or feed seeded as a plain URL
            async for out in self._parse_listing(response, kind):
                yield out
            return
        if not isinstance(response, TextResponse):
            return
        response = bounded(response, self.news.extract_max_bytes, self.crawler.stats)
        asks = self.robots_meta(response)
        if asks.noindex:
            self.crawler.stats.inc_value("news/pages")
            self.crawler.stats.inc_value("news/skipped/robots/noindex")
            self._robots_counts.skipped("robots", "noindex", url_host(response.url))
            self._coverage_outcome(response, SKIPPED)
        else:
            item = await self.page_item(response)
            if item is not None:
                yield item
        if asks.nofollow:
            self.crawler.stats.inc_value("news/robots/nofollow")
            return
        if BACKFILL_META in response.meta:  # a backfill takes the listed stories of its window, no more
            return
        for request in self.page_links(response):
            yield request

    def robots_meta(self, response: TextResponse) -> RobotsMeta:
        """What the page asks of robots (news/robots_meta.py); nothing when ROBOTS_META_OBEY is off.

        Read here, not in a downloader middleware: storing a page and following its links are this
        spider's decisions, made on the tree it parses anyway (a middleware would parse the page
        a second time and could only flag it for the spider)."""
        if not self.news.robots_meta_obey:
            return RobotsMeta()
        return robots_meta(
            response.selector.root, header_values(response.headers.getlist("X-Robots-Tag")), self.bot_name
        )

    async def page_item(self, response: TextResponse) -> Any:  # an `item_class` item: any type itemadapter takes
        """The page's row (canonical url, main text and metadata, near-duplicate mark), or None when
        STORE_PAGE_TYPES / LANGUAGES leave the page out (its links are followed all the same)."""
        url = await self._canonical_url(response)
        # the page's registered source's `extraction` over EXTRACTION_RULES (docs/sources.md)
        rules = SourceCache.of(self.crawler).table.extraction_rules(response.url, self.news.extraction_rules)
        if not self.news.extract_main_text and len(response.body) <= INLINE_MAX_BYTES:
            article = extract_page(self.news, response, rules)
        else:
            article = await self.off_reactor.run(extract_page, self.news, response, rules)
        self.crawler.stats.inc_value("news/pages")
        skip = self.news.store.skip_reason(article.page_type, article.lang)
        if skip is not None:
            self._not_stored(page_type_of(article.page_type), skip, response.url)
            self._coverage_outcome(response, NOT_ARTICLE if skip[0] == "page_type" else SKIPPED)
            return None
        fields = page_fields(article, response)
        duplicate = await self._near_duplicate(article, fields["text"], url)
        # emptied only for another URL of the same site: a copy on another site keeps its text (security.md)
        if duplicate is not None and not self.news.near_duplicate_keep_text and same_site(duplicate.original, url):
            fields["text"] = ""
        return self.item_class(
            url=url,
            **fields,
            duplicate_of=duplicate.original if duplicate is not None else None,
            fetched_at=datetime.now(UTC).isoformat(timespec="seconds"),
            status=response.status,
            node=self.node_id,
            truncated=article.truncated,
        )

    def _not_stored(self, page_type: str, why: tuple[str, str], url: str) -> None:
        kind, value = why
        self.crawler.stats.inc_value(f"news/skipped/{kind}/{value}")
        self._counts.not_stored(page_type, why, url_host(url))

    def _item_stored(self, item: Any, response: Any, spider: Any) -> None:
        """item_scraped: the item is committed (the storage pipeline returns it only then). The
        cluster's count of stored rows is the change feed's (a row counted once, when its insert
        commits, in its event's write: a redelivered page is not counted twice); without the feed,
        this node counts each commit."""
        page_type = ItemAdapter(item).get("page_type") if is_item(item) else None
        if spider is self and is_item(item) and response is not None:
            adapter = ItemAdapter(item)
            state = NOT_ARTICLE if page_type not in ARTICLE_TYPES else STORED
            if state == STORED and adapter.get("duplicate_of"):
                state = NEAR_DUPLICATE
            self._coverage_outcome(response, state, str(adapter.get("url") or ""))
        if spider is self and page_type is not None:
            kind = page_type_of(page_type)
            self.crawler.stats.inc_value(f"news/stored/page_type/{kind}")
            if ChangeFeedExtension.feed_of(self.crawler) is None:
                self._counts.stored(kind)

    def _coverage(self) -> CoverageLog | None:
        feed = ChangeFeedExtension.feed_of(self.crawler)
        return feed.coverage if feed is not None else None

    def _coverage_outcome(self, response: Response, state: int, *also: str) -> None:
        """What became of this page, for its source's coverage (events/coverage.py)."""
        log = self._coverage()
        if log is not None:
            log.outcome(response.url, response.meta, state, *also)

    def _covers(self, url: str) -> bool:
        """A listed URL counts for coverage unless its registered source's scope refuses it (the
        operator's own choice: never fetched, so never missing)."""
        try:
            host = (urlsplit(url).hostname or "").lower()
        except ValueError:
            return False
        table = SourceCache.of(self.crawler).table
        found = table.find(host) if host and table.sites else None
        return found is None or found.refusal(url, host, 1, False) is None

    def page_links(self, response: TextResponse) -> Iterator[Request]:
        """Same-host links (and, unrendered, same-site static iframes with IFRAME_FOLLOW_STATIC)."""
        if FRAMES_META not in response.meta and self.follow_static_iframes:
            for url in static_iframe_urls(response):
                yield response.follow(url, callback=self.parse, meta={DONT_RENDER_META: True})
        host = urlsplit(response.url).hostname
        encoding = response.encoding  # what response.follow would give each Request
        # ~5 of a page's 6 links are ones this node queued lately (home, sections, neighbours): the
        # scheduler would drop them; asked first, they skip the middlewares and the engine
        already_sent = getattr(scheduler_of(self.crawler), "already_sent", None)
        for href in _HREFS(response.selector.root):
            try:
                url = response.urljoin(href.strip())
                parts = urlsplit(url)
            except ValueError:
                continue
            if parts.scheme in ("http", "https") and parts.hostname == host:
                # absolute already: response.follow would join (and split) it once more
                request = Request(url, callback=self.parse, encoding=encoding)
                if already_sent is None or not already_sent(request):
                    yield request

    async def _canonical_url(self, response: TextResponse) -> str:
        """The item's url: the page's same-site canonical link (then in the seen-filter), else its own."""
        url, canonical = item_url(self.crawler.request_fingerprinter, response)
        if canonical == url:
            return url
        self.crawler.stats.inc_value("news/canonical_alias")
        scheduler = scheduler_of(self.crawler)
        if hasattr(scheduler, "mark_seen"):
            await scheduler.mark_seen([Request(canonical)])
        return canonical

    async def _near_duplicate(self, article: Article, text: str, url: str) -> Match | None:
        if not self.news.near_duplicates or not article.main_text:
            return None
        body = without_title(text, article.title)
        value = await self.off_reactor.run(fingerprint, body, self.news.near_duplicate_min_words)
        if value is None:
            return None
        if self._index is None:
            self._index = NearDuplicateIndex(
                self._client,
                self.news.key(self.name),
                self.news.near_duplicate_distance,
                self.news.near_duplicate_window,
            )
        unchecked = object()

        async def unusable(exc: BaseException) -> None:
            if not isinstance(exc, ResponseError):
                raise exc
            self._news_errors.failed(
                "near-duplicate index",
                "Near-duplicate index %s unusable (%s): articles are stored without the check until it works",
                self.news.key(self.name),
                exc,
            )

        # CACHE: Redis away (or refusing the index) -> stored without the check
        match = await self._policy.run(
            Purpose.CACHE, partial(self._index.check_add, value, url), default=unchecked, on_error=unusable
        )
        if match is unchecked:
            self.crawler.stats.inc_value("news/near_duplicate_unchecked")
            return None
        self._news_errors.ok("near-duplicate index")
        if match is not None:
            self.crawler.stats.inc_value("news/near_duplicates")
        return match

    # -- discovery --------------------------------------------------------------------------
    async def parse_site(self, response: Response, **kwargs: Any) -> AsyncIterator[Any]:
        """A site's home page: its feeds, its robots.txt sitemaps, then the page itself (not in a
        backfill: only the window's stories, news/backfill.py)."""
        site = response.url
        window = window_from_meta(response.meta.get(BACKFILL_META))
        if isinstance(response, TextResponse) and not sniff(response.body):
            for url in feed_links(response.selector.root, response.url):
                if self._on_site(url, site, "feed_link"):
                    yield self.feed_request(url, site, window)
        parts = urlsplit(site)
        robots_url = f"{parts.scheme}://{parts.netloc}/robots.txt"
        body = None
        if self.obey_robots:
            # CACHE: Redis away or refusing -> not cached: fetched
            cached = partial(
                cached_robots_body,
                self._client,
                cache_key(self.robots_key_template, self._robots_tag(site), parts.netloc),
            )
            body = await self._policy.run(Purpose.CACHE, cached, on_error=_not_cached)
        if body is None:  # not cached for the cluster (ROBOTSTXT_OBEY off, or expired): fetch it
            yield Request(
                robots_url,
                callback=self.parse_robots,
                dont_filter=True,
                priority=DISCOVERY_PRIORITY,
                meta={
                    NEWS_SITE_META: site,
                    DONT_OBEY_ROBOTSTXT_META: True,
                    **({BACKFILL_META: window.as_meta()} if window else {}),
                },
            )
        else:
            for request in self.robots_requests(body, robots_url, site, window):
                yield request
        if window is not None:
            return
        async for out in self.parse(response):
            yield out

    async def parse_robots(self, response: Response, **kwargs: Any) -> AsyncIterator[Request]:
        site = response.meta.get(NEWS_SITE_META) or response.urljoin("/")
        window = window_from_meta(response.meta.get(BACKFILL_META))
        for request in self.robots_requests(response.body, response.url, site, window):
            yield request

    def robots_requests(
        self, body: bytes, robots_url: str, site: str, window: Window | None = None
    ) -> Iterator[Request]:
        """Its `Sitemap:` lines, else the conventional /sitemap.xml."""
        urls = [url for url in sitemap_urls_from_robots(body[: 512 * 1024], base_url=robots_url)][:50]
        urls = [url for url in urls if urlsplit(url).scheme in ("http", "https")]
        urls = [url for url in urls if self._on_site(url, robots_url, "robots_sitemap")]
        for url in urls:
            yield self.sitemap_request(url, site, 0, window)
        if not urls:
            guess = self.sitemap_request(robots_url.rsplit("/", 1)[0] + "/sitemap.xml", site, 0, window)
            guess.meta[SITEMAP_GUESSED_META] = True
            yield guess

    def sitemap_request(self, url: str, site: str, depth: int, window: Window | None = None) -> Request:
        meta = {NEWS_SITE_META: site, SITEMAP_DEPTH_META: depth}
        return self._listing_request(url, self.parse_sitemap, with_window(meta, window))

    def feed_request(self, url: str, site: str, window: Window | None = None) -> Request:
        return self._listing_request(url, self.parse_feed, with_window({NEWS_SITE_META: site}, window))

    def _listing_request(self, url: str, callback: Callable[..., Any], meta: dict[str, Any]) -> Request:
        """A sitemap or feed: fetched whenever listed, ahead of articles, at most SITEMAP_MAX_BYTES;
        at depth 0 (Scrapy's `depth_reset`), so its entries start at depth 1 of DEPTH_LIMIT."""
        meta[DOWNLOAD_MAXSIZE_META] = self.news.sitemap_max_bytes
        meta[DEPTH_RESET_META] = True
        return Request(
            url,
            callback=callback,
            errback=self.listing_failed,
            dont_filter=True,
            priority=DISCOVERY_PRIORITY,
            meta=meta,
        )

    async def listing_failed(self, failure: Any) -> AsyncIterator[Request]:
        """A sitemap or feed answered with an HTTP error (404, 410, 500 after its retries): a dead
        letter, as an unreadable one is (`dcrawl seed --site` says they show in `dcrawl failed`);
        a guessed /sitemap.xml that is not there is no error. Other failures are the retry's."""
        request = failure.request
        if failure.check(HttpError) and not request.meta.get(SITEMAP_GUESSED_META):
            kind = "sitemap" if request.callback == self.parse_sitemap else "feed"
            await self._dead_letter(failure.value.response, kind, f"HTTP {failure.value.response.status}")
        return
        yield  # an async generator, as the callbacks are

    async def parse_sitemap(self, response: Response, **kwargs: Any) -> AsyncIterator[Request]:
        async for request in self._parse_listing(response, "sitemap"):
            yield request

    async def parse_feed(self, response: Response, **kwargs: Any) -> AsyncIterator[Request]:
        async for request in self._parse_listing(response, "feed"):
            yield request

    async def _parse_listing(self, response: Response, expected: str) -> AsyncIterator[Request]:
        """A sitemap, sitemap index or feed, read as what its first element says it is (robots.txt and
        sitemap indexes may list feeds), else as *expected* ("sitemap" or "feed")."""
        kind = sniff(response.body) or expected
        doc = await self._read(response, kind, parse_sitemap if kind == "sitemap" else parse_feed)
        if doc is None:
            return
        site = response.meta.get(NEWS_SITE_META) or response.url
        depth = _int(response.meta.get(SITEMAP_DEPTH_META))
        if doc.kind == "sitemapindex" and depth + 1 >= self.news.sitemap_max_depth:
            self._skip(f"sitemap index {response.url} is {depth + 1} indexes deep (SITEMAP_MAX_DEPTH)")
            return
        what = "sitemap_index_entry" if doc.kind == "sitemapindex" else f"{kind}_entry"
        window = window_from_meta(response.meta.get(BACKFILL_META))
        coverage = self._coverage() if window is None and doc.kind != "sitemapindex" else None
        for entry in self._recent(doc) if window is None else self._in_window(doc, window):
            # sitemaps.org: a sitemap lists its own site's URLs; so does an index (and the site we came for)
            if not (self._on_site(entry.url, response.url, what) and self._on_site(entry.url, site, what)):
                continue
            if doc.kind == "sitemapindex":
                yield self.sitemap_request(entry.url, site, depth + 1, window)
            else:
                request = self.entry_request(entry.url, entry.date, entry.title, entry.story)
                if window is not None:
                    request.meta[BACKFILL_META] = window.as_meta()
                if coverage is not None and self._covers(entry.url):
                    request.meta[COVERAGE_URL_META] = coverage.listed(entry.url)
                yield request

    def _on_site(self, url: str, of: str, what: str) -> bool:
        """`url` is on the registered domain of `of`; else it is dropped and counted
        (news/off_site/<what>): a sitemap, robots.txt or feed naming another site (or an internal
        address) is not followed."""
        if same_site(url, of):
            return True
        self.crawler.stats.inc_value(f"news/off_site/{what}")
        return False

    def entry_request(self, url: str, date: datetime | None, title: str | None, story: bool = False) -> Request:
        meta: dict[str, Any] = {LISTED_META: True} if story else {}
        if date is not None:
            meta[ENTRY_DATE_META] = date.isoformat()
        if title:
            meta[ENTRY_TITLE_META] = title
        return Request(url, callback=self.parse, meta=meta)

    async def _read(self, response: Response, kind: str, parse: Callable[..., Document]) -> Document | None:
        stats = self.crawler.stats
        args: tuple[Any, ...] = (
            response.body,
            response.url,
            self.news.sitemap_max_bytes,
            self.news.sitemap_max_entries,
        )
        if kind == "feed":
            args += ((response.headers.get("Content-Type") or b"").decode("latin-1"),)
        try:
            doc = await self.off_reactor.run(parse, *args)
        except DocumentError as exc:
            await self._dead_letter(response, kind, str(exc))
            return None
        stats.inc_value(f"news/{kind}s")
        stats.inc_value(f"news/{kind}_entries", len(doc.entries))
        if doc.warning:
            await self._dead_letter(
                response, kind, f"read with problems, {len(doc.entries)} entries used: {doc.warning}"
            )
        if doc.truncated:
            self._skip(
                f"{kind} {response.url}: only its first {self.news.sitemap_max_entries} entries read (SITEMAP_MAX_ENTRIES)"
            )
        return doc

    def _recent(self, doc: Document) -> Iterator[Any]:
        """Entries dated after now - SITEMAP_SINCE (undated ones too)."""
        cutoff = datetime.now(UTC) - timedelta(seconds=self.news.sitemap_since) if self.news.sitemap_since else None
        for entry in doc.entries:
            if cutoff is not None and entry.date is not None and entry.date < cutoff:
                self.crawler.stats.inc_value("news/entries_too_old")
                continue
            yield entry

    def _in_window(self, doc: Document, window: Window) -> Iterator[Any]:
        """A backfill's entries: stories dated in the window; an index's sitemaps that may list some."""
        for entry in doc.entries:
            keep = window.may_list(entry.url, entry.date) if doc.kind == "sitemapindex" else window.contains(entry.date)
            if keep:
                yield entry
            else:
                self.crawler.stats.inc_value("news/backfill/outside")

    def _skip(self, why: str) -> None:
        self.crawler.stats.inc_value("news/documents_cut")
        logger.warning("%s", why)

    async def _dead_letter(self, response: Response, kind: str, reason: str) -> None:
        self.crawler.stats.inc_value(f"news/bad_{kind}s")
        logger.warning(
            "Bad %s %s: %s; dead-lettered (`dcrawl failed %s` lists it)", kind, response.url, reason, self.name
        )
        entry = failure_entry(response.url, f"bad {kind}: {reason}", self.node_id, source=kind, kind=f"bad_{kind}")
        dead_letters = DeadLetters(self._client, self.keys.failed, self.node_id, self._failed_max)

        async def push() -> str:
            try:
                await dead_letters.push([entry])
            except ResponseError as exc:  # the failed list is of another type: not written
                if not refused_for_good(exc):
                    raise  # a full Redis: DEADLETTER waits until it has room
                return f"Redis refused it: {str(exc)[:200]}"
            return ""

        try:  # DEADLETTER: retried through an outage; the page is acked only once it is written
            refused = await self._policy.run(Purpose.DEADLETTER, push, stopped=lambda: node_stopping(self.crawler))
        except NodeStopping:
            refused = "Redis unreachable as the node stops"
        if refused:
            logger.warning("Dead letter for %s not written (%s)", response.url, refused)


async def _not_cached(exc: BaseException) -> None:
    """`on_error` for the shared robots.txt cache: Redis refusing the key means "not cached"."""
    if not isinstance(exc, ResponseError):
        raise exc


def extract_page(news: NewsConfig, response: TextResponse, rules: Mapping[str, SiteRules] | None = None) -> Article:
    """What the page says (blocking: the spider runs it off the reactor): main text and metadata,
    or with EXTRACT_MAIN_TEXT off the visible text and declared language; `truncated` when
    `bounded` cut the page."""
    if news.extract_main_text:
        article = extract_article(
            response.text,
            response.url,
            listed=bool(response.meta.get(LISTED_META)),
            rules=news.extraction_rules if rules is None else rules,
        )
    else:
        article = page_basics(response.text, response.url, listed=bool(response.meta.get(LISTED_META)))
    return dataclasses.replace(article, truncated=True) if TRUNCATED_FLAG in response.flags else article


def item_url(fingerprinter: Any, response: TextResponse) -> tuple[str, str]:
    """The page's own canonical URL, and its item's: its same-site `<link rel=canonical>`, else its own."""
    url = str(fingerprinter.canonical_url(response.url))
    link = canonical_link(response)
    return url, str(fingerprinter.canonical_url(link)) if link else url


def page_fields(article: Article, response: TextResponse) -> dict[str, Any]:
    """The item fields a page's extraction gives (with its sitemap/feed entry's title and date as
    fallbacks, and a rendered page's frames' text): what `dcrawl extract` shows, too."""
    meta = response.meta
    return {
        "title": article.title or meta.get(ENTRY_TITLE_META) or _title(response),
        "text": " ".join(filter(None, (article.text, frames_text(meta.get(FRAMES_META))))),
        "authors": list(article.authors),
        "published_at": article.published_at or meta.get(ENTRY_DATE_META),
        "modified_at": article.modified_at,
        "lang": article.lang,
        "description": article.description,
        "page_type": article.page_type,
        "paywalled": article.paywalled,
        "image": article.image,
        "section": article.section,
        "tags": list(article.tags),
        "site_name": article.site_name,
    }


def bounded(response: TextResponse, max_bytes: int, stats: Any = None) -> TextResponse:
    """The page cut to its first `max_bytes` (EXTRACT_MAX_BYTES), flagged TRUNCATED_FLAG: what
    extraction, link extraction and SimHash work on, so their cost has a bound whatever the site sends."""
    if not max_bytes or len(response.body) <= max_bytes:
        return response
    if stats is not None:
        stats.inc_value("news/truncated")
    logger.info(
        "Page %s has %d bytes: only its first %d are read (EXTRACT_MAX_BYTES)",
        response.url,
        len(response.body),
        max_bytes,
    )
    return response.replace(body=response.body[:max_bytes], flags=[*response.flags, TRUNCATED_FLAG])


def _title(response: TextResponse) -> str:
    return " ".join((_TITLE(response.selector.root)[:1] or [""])[0].split())


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
