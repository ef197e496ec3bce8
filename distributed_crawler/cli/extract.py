"""`dcrawl extract URL|FILE [--json]`: what the crawler would store for one page, and why.

A URL is fetched the way a node fetches it: the project's settings through the add-on, its
downloader middlewares and download handlers (robots.txt, proxies from the shared pool, the
cluster-wide rate, rendering), in a one-off in-process crawl of that one request. It never
touches the crawl: Scrapy's own scheduler instead of the shared queue, no storage, no
heartbeat, no revisit schedule, no near-duplicate index, local retries instead of
`{spider}:delayed` and `{spider}:failed`. A FILE is read as the page (`--url` gives its address,
else its file:// URI). The fields come from the news spider's own code (spiders/news.py), each
with the signal it came from (Article.signals), plus whether STORE_PAGE_TYPES and LANGUAGES would
store the page. This is how a user tunes a site (docs/news.md).

It is what the crawl would store: the add-on's components run even outside a project (settings
with `-s NAME=VALUE`), a URL first passes the scheduler's admission checks (scheme, literal private
addresses, URL traps) and connects through the private-address guard; the page's robots meta is
obeyed (ROBOTS_META_OBEY); the near-duplicate verdict is read from the cluster's index without
writing to it, and a same-site copy shows the empty text the crawl would store. Every failure is
one line (exit 2: the page could not be had; 1: a setting or Redis).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError
from rich.console import Console
from rich.table import Table
from scrapy import Request
from scrapy.http import HtmlResponse, TextResponse
from scrapy.settings import Settings
from scrapy.utils.project import get_project_settings

from distributed_crawler.addon import Addon, with_addon
from distributed_crawler.cli.output import print_json
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.clients import RedisConfig, RedisUnavailable
from distributed_crawler.core.admission import Admission
from distributed_crawler.dedup.fingerprint import CanonicalFingerprinter, FingerprintConfig
from distributed_crawler.meta import LISTED_META
from distributed_crawler.news.canonical import same_site
from distributed_crawler.news.config import NewsConfig
from distributed_crawler.news.nearduplicate import Match, NearDuplicateIndex, fingerprint, without_title
from distributed_crawler.news.robots_meta import RobotsMeta, header_values, robots_meta
from distributed_crawler.news.storing import language_name

ADDON_PATHS = ("distributed_crawler.Addon", "distributed_crawler.addon.Addon")
EXIT_UNAVAILABLE = 2  # the page could not be had: unreachable, refused, missing file
SHOWN_TEXT = 600  # characters of the text in the table (--json has all of it)

# What a one-off fetch leaves out of a node's components: the crawl's queue, storage, node
# accounting, revisits and archives. Set at "cmdline" priority, above the add-on's.
ONE_OFF: dict[str, Any] = {
    "SCHEDULER": "scrapy.core.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter",
    "TELNETCONSOLE_ENABLED": False,
    "HEARTBEAT_ENABLED": False,
    "LOG_LEVEL": "CRITICAL",  # what went wrong is the one line this command prints
}
ONE_OFF_COMPONENTS: dict[str, dict[str, int | None]] = {
    "DOWNLOADER_MIDDLEWARES": {
        # retries in this process (Scrapy's), never through {spider}:delayed / {spider}:failed
        "distributed_crawler.downloadermiddlewares.retry.DistributedRetryMiddleware": None,
        "scrapy.downloadermiddlewares.retry.RetryMiddleware": 550,
        "distributed_crawler.recrawl.middleware.RecrawlMiddleware": None,  # a 304 would hide the page
        "distributed_crawler.downloadermiddlewares.warc.WarcMiddleware": None,
    },
    "SPIDER_MIDDLEWARES": {"distributed_crawler.recrawl.spidermiddleware.RecrawlSpiderMiddleware": None},
    "EXTENSIONS": {
        "distributed_crawler.monitoring.heartbeat.Heartbeat": None,
        "distributed_crawler.monitoring.metrics.PrometheusMetrics": None,
        "distributed_crawler.recrawl.mover.RecrawlMover": None,
    },
    "ITEM_PIPELINES": {"distributed_crawler.storage.pipeline.StoragePipeline": None},
}


class PageUnavailable(Exception):
    """The page could not be fetched or read: one line, exit 2."""


def command_settings(args: argparse.Namespace) -> Settings:
    """The project's settings (Scrapy's defaults outside a project) with our add-on listed, so the
    page is fetched and read by the components a node runs; `-s` and `--redis-url` on top."""
    settings = get_project_settings()
    addons = settings.getdict("ADDONS")
    if not any(path is Addon or path in ADDON_PATHS for path in addons):
        settings.set("ADDONS", {**addons, "distributed_crawler.Addon": 0}, priority="cmdline")
    if args.redis_url:
        settings.set("REDIS_URL", args.redis_url, priority="cmdline")
    for pair in args.set or ():
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"-s ({pair}) must be NAME=VALUE")
        settings.set(name.strip(), value, priority="cmdline")
    return settings


def fetch(settings: Any, url: str, spider: str, meta: dict[str, Any]) -> tuple[TextResponse, Any]:
    """The page at `url` as a node would download it, and the crawl's request fingerprinter."""
    import scrapy
    from scrapy.crawler import CrawlerProcess

    node = with_addon(settings)
    refusal = Admission.from_settings(node).check(Request(url))
    if refusal is not None:
        raise PageUnavailable(f"{url} is refused ({refusal.reason}): {refusal.detail}; a node would not fetch it")
    if str(node.get("SCHEDULER", "")).startswith("distributed_crawler."):
        RedisConfig.from_settings(node).check_reachable()  # the add-on's middlewares need the cluster's Redis
    settings = settings.copy()
    for name, value in ONE_OFF.items():
        settings.set(name, value, priority="cmdline")
    for name, components in ONE_OFF_COMPONENTS.items():
        settings.set(name, {**settings.getdict(name), **components}, priority="cmdline")
    got: dict[str, Any] = {}

    class OnePage(scrapy.Spider):
        name = spider

        async def start(self) -> AsyncIterator[Request]:
            yield Request(url, callback=self.page, errback=self.failed, dont_filter=True, meta=meta)

        def page(self, response: Any) -> None:
            got["response"] = response
            got["fingerprinter"] = self.crawler.request_fingerprinter

        def failed(self, failure: Any) -> None:
            got["error"] = failure.value

    process = CrawlerProcess(settings)
    crawler = process.create_crawler(OnePage)
    process.crawl(crawler).addErrback(lambda failure: got.setdefault("error", failure.value))
    process.start()
    if "response" in got:
        response = got["response"]
        if not isinstance(response, TextResponse):
            raise PageUnavailable(f"{url} is not a text page ({type(response).__name__})")
        return response, got["fingerprinter"]
    error = got.get("error")
    if error is None:
        reason = crawler.stats.get_value("finish_reason") if crawler.stats else None
        raise PageUnavailable(f"{url} was not fetched (crawl finished: {reason or 'no response'})")
    response = getattr(error, "response", None)
    if response is not None:
        raise PageUnavailable(f"{url} answered HTTP {response.status}; a node would not store it either")
    text = " ".join(str(error).split())[:300] or type(error).__name__
    raise PageUnavailable(f"cannot fetch {url}: {type(error).__name__}: {text}")


def read_file(path: str, url: str | None, meta: dict[str, Any]) -> TextResponse:
    file = Path(path.removeprefix("file://")).expanduser()
    try:
        body = file.read_bytes()
    except OSError as exc:
        raise PageUnavailable(f"cannot read {path}: {exc.strerror or exc}") from None
    address = url or file.absolute().as_uri()
    return HtmlResponse(address, body=body, request=Request(address, meta=meta))


def report(
    news: NewsConfig,
    response: TextResponse,
    fingerprinter: Any,
    source: str,
    near_duplicate: Callable[[int, str], Match | None] | None = None,
    bot_name: str = "",
) -> dict[str, Any]:
    """What the news spider makes of the page: its item fields, their signals, stored or not.
    `near_duplicate(fingerprint, url)`: the cluster index's read-only verdict (None: not asked)."""
    from distributed_crawler.spiders.news import bounded, extract_page, item_url, page_fields  # trafilatura: when run

    response = bounded(response, news.extract_max_bytes)  # as the crawl reads it
    article = extract_page(news, response)
    _, url = item_url(fingerprinter, response)
    fields = page_fields(article, response)
    asks = (
        robots_meta(response.selector.root, header_values(response.headers.getlist("X-Robots-Tag")), bot_name)
        if news.robots_meta_obey
        else RobotsMeta()
    )
    skip = news.store.skip_reason(article.page_type, article.lang)
    why = None
    if asks.noindex:
        why = f"the page asks robots not to index it (noindex, {asks.source}); ROBOTS_META_OBEY"
    elif skip is not None:
        kind, value = skip
        why = (
            f"page type {value} is not in STORE_PAGE_TYPES ({','.join(news.store.page_types)})"
            if kind == "page_type"
            else f"language {value} ({language_name(value)}) is not in LANGUAGES ({','.join(news.store.languages)})"
        )
    duplicate = None
    if why is None and near_duplicate is not None and news.near_duplicates and article.main_text:
        simhash = fingerprint(without_title(fields["text"], article.title), news.near_duplicate_min_words)
        duplicate = near_duplicate(simhash, url) if simhash is not None else None
    if duplicate is not None and not news.near_duplicate_keep_text and same_site(duplicate.original, url):
        fields["text"] = ""  # what the crawl stores for a same-site copy
    return {
        "url": url,
        "source": source,  # "fetched" or "file"
        "fetched_url": response.url,
        "status": response.status if source == "fetched" else None,
        "stored": why is None,
        "not_stored_because": why,
        "fields": {"url": url, **fields, "duplicate_of": duplicate.original if duplicate else None},
        "signals": dict(article.signals),
        "main_text": article.main_text,
        "truncated": article.truncated,
        "near_duplicate": {"original": duplicate.original, "distance": duplicate.distance} if duplicate else None,
        "nofollow": asks.nofollow,
    }


def index_reader(settings: Any, news: NewsConfig, spider: str) -> Callable[[int, str], Match | None]:
    """The cluster's near-duplicate index, read and never written (NearDuplicateIndex.lookup)."""

    def lookup(value: int, url: str) -> Match | None:
        client = RedisConfig.from_settings(settings).sync_client()
        try:
            index = NearDuplicateIndex(
                client, news.key(spider), news.near_duplicate_distance, news.near_duplicate_window
            )
            return run_sync(index.lookup(value, url))
        except RedisError as exc:
            raise RedisUnavailable(
                f"cannot read the near-duplicate index {news.key(spider)} ({exc}); "
                "check REDIS_URL, or -s NEAR_DUPLICATES=False to leave the check out"
            ) from None
        finally:
            client.close()

    return lookup


def _shown(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    text = str(value)
    return text if len(text) <= SHOWN_TEXT else text[:SHOWN_TEXT] + f"… ({len(text):,} characters)"


def print_report(result: dict[str, Any]) -> None:
    verdict = "stored" if result["stored"] else f"NOT stored: {result['not_stored_because']}"
    origin = f"HTTP {result['status']}" if result["source"] == "fetched" else "from a file"
    table = Table(title=f"{result['url']} ({origin}): {verdict}", title_justify="left")
    for column in ("field", "value", "from"):
        table.add_column(column, overflow="fold")
    signals = result["signals"]
    for name, value in result["fields"].items():
        table.add_row(name, _shown(value), str(signals.get(name, "")))
    if not result["main_text"]:
        table.add_row("", "no main text found: the text is the page's visible text", "")
    if result["truncated"]:
        table.add_row("", "the page was cut to the extraction size limit first", "")
    Console().print(table)


def cmd_extract(args: argparse.Namespace) -> int:
    settings = command_settings(args)
    news = NewsConfig.from_settings(with_addon(settings))  # a bad setting fails before any fetch
    meta = {LISTED_META: True} if args.listed else {}
    try:
        if args.page.startswith(("http://", "https://")):
            if args.url:
                raise ValueError("--url is for a FILE; a URL is fetched from where it points")
            response, fingerprinter = fetch(settings, args.page, args.spider, meta)
            source = "fetched"
        else:
            source = "file"
            response = read_file(args.page, args.url, meta)
            fingerprinter = CanonicalFingerprinter(FingerprintConfig.from_settings(with_addon(settings)))
    except PageUnavailable as exc:
        print(f"dcrawl: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if not hasattr(fingerprinter, "canonical_url"):  # a project's own fingerprinter: the crawl's URLs are ours
        fingerprinter = CanonicalFingerprinter(FingerprintConfig.from_settings(with_addon(settings)))
    node = with_addon(settings)
    result = report(news, response, fingerprinter, source, index_reader(node, news, args.spider), node.get("BOT_NAME"))
    if args.json:
        print_json(result)
    else:
        print_report(result)
    return 0


def add_parser(command: Any) -> None:
    p = command("extract", cmd_extract, "what the crawler would store for one page (URL or FILE), and why", True)
    p.add_argument("page", help="an http(s) URL (fetched as a node fetches it) or a FILE (an HTML page)")
    p.add_argument("--url", help="for a FILE: the page's address (default: its file:// URI)")
    p.add_argument("--spider", default="news", help="spider name for the cluster's keys (robots.txt cache, rates)")
    p.add_argument("--listed", action="store_true", help="as if a news sitemap or a feed listed the URL")
    p.add_argument("-s", "--set", action="append", metavar="NAME=VALUE", help="a setting, as with scrapy crawl -s")
