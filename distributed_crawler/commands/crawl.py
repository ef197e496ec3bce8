"""`scrapy crawl`, with a preflight: an unreachable Redis or storage is one clear line, exit 2.

So is a Redis ACL user that lacks a command, key or channel the node needs (core/access.py): the
line names the `ACL SETUSER` that adds it, instead of a traceback or a node retrying forever.

Without it, a missing Redis surfaces as a traceback from deep inside the engine, and a missing
database as a crawl that closes at once with exit code 0. A setting refused while the crawler
starts (the spider's, the scheduler's, a middleware's: they raise ValueError naming the setting)
is one line too, exit 2, instead of asyncio's "Task exception was never retrieved" traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.exceptions import UsageError
from scrapy.utils.misc import load_object
from twisted.python.failure import Failure

from distributed_crawler.addon import with_addon
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.clients import RedisConfig, RedisUnavailable
from distributed_crawler.core.access import check_node_access
from distributed_crawler.dedup.dupefilter import BloomConfig, BloomDupeFilter, DedupError, choose_dedup
from distributed_crawler.downloadermiddlewares.politeness import DomainRateLimitMiddleware, PolitenessConfig
from distributed_crawler.downloadermiddlewares.proxy import ProxyPoolMiddleware
from distributed_crawler.downloadermiddlewares.retry import DistributedRetryMiddleware, RetryConfig
from distributed_crawler.frontier.enqueue import DedupDataError
from distributed_crawler.frontier.factory import frontier_from_settings
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.seedkey import SeedKey
from distributed_crawler.internals import command_crawler
from distributed_crawler.proxies.pool import ProxyConfig
from distributed_crawler.rendering.config import RenderConfig
from distributed_crawler.storage.backends import StorageError, open_storage
from distributed_crawler.storage.pipeline import StorageConfig, StoragePipeline

logger = logging.getLogger(__name__)


class Command(ScrapyCrawlCommand):
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        settings = with_addon(self.settings)  # add-ons run later, in the crawler: see what ours sets
        try:
            redis_config = RedisConfig.from_settings(settings)
            redis_config.check_reachable()
            if args:
                check_node_access(settings, redis_config, args[0])  # ACL: one line naming the rule to add
                SeedKey.from_settings(settings, args[0])  # e.g. both REDIS_START_URLS_AS_SET and _AS_ZSET
                check_dupefilter(settings, redis_config, args[0])
                check_frontier(settings, redis_config, args[0])
            if any(
                ProxyPoolMiddleware is _load(m)
                for m, on in settings.getdict("DOWNLOADER_MIDDLEWARES").items()
                if on is not None
            ):
                ProxyConfig.from_settings(settings)  # a malformed proxy URL: one line, exit 2
            middlewares = {_load(m) for m, on in settings.getdict("DOWNLOADER_MIDDLEWARES").items() if on is not None}
            if DistributedRetryMiddleware in middlewares:
                RetryConfig.from_settings(settings)  # e.g. RETRY_BACKOFF_MAX below the base
            if DomainRateLimitMiddleware in middlewares:
                PolitenessConfig.from_settings(settings)  # e.g. DOMAIN_RATE_LIMITS not a dict
            # imported here, not with the module: every `scrapy` command imports this one, and the
            # handler brings Playwright (~0.1 s); a crawl loads it anyway
            from distributed_crawler.rendering.handler import RenderingDownloadHandler

            if any(RenderingDownloadHandler is _load(h) for h in settings.getdict("DOWNLOAD_HANDLERS").values()):
                RenderConfig.from_settings(settings)  # Scrapy would log it and crawl without the handler
            if any(StoragePipeline is _load(p) for p in settings.getdict("ITEM_PIPELINES")):
                open_storage(StorageConfig.from_settings(settings).url).close()
        except (RedisUnavailable, StorageError, DedupError, ValueError) as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            self.exitcode = 2
            return
        if len(args) != 1:
            super().run(args, opts)  # Scrapy's usage errors
            return
        self._crawl(args[0], opts)

    def _crawl(self, spider: str, opts: argparse.Namespace) -> None:
        """Scrapy's `crawl` run, watching how the crawler's start ends."""
        process: Any = self.crawler_process
        if process is None:
            raise UsageError("no crawler process")
        try:
            crawler = command_crawler(self, spider)
        except KeyError as exc:  # Scrapy's spider loader: "Spider not found", as a traceback
            if "Spider not found" not in str(exc):
                raise
            known = ", ".join(sorted(process.spider_loader.list())) or "none"
            print(f"ERROR: no spider named {spider!r} in this project (its spiders: {known})", file=sys.stderr)
            self.exitcode = 2
            return
        start = StartWatch(process.crawl(crawler, **opts.spargs))
        process.start()
        if isinstance(start.error, ValueError):
            print(f"ERROR: {start.error}", file=sys.stderr)
            logger.debug("The crawler did not start", exc_info=start.error)
            self.exitcode = 2
        elif start.error is not None:
            logger.error("The crawler did not start", exc_info=start.error)
            self.exitcode = 1
        elif process.bootstrap_failed:
            self.exitcode = 1


class StartWatch:
    """Keeps the exception a crawler's start ended with (an asyncio task or a Twisted Deferred)."""

    def __init__(self, started: Any) -> None:
        self.error: BaseException | None = None
        if isinstance(started, asyncio.Future):
            started.add_done_callback(self._task_done)
        elif started is not None:
            started.addErrback(self._failed)

    def _task_done(self, task: asyncio.Future[Any]) -> None:
        if not task.cancelled():
            self.error = task.exception()  # retrieved here: asyncio does not log it again

    def _failed(self, failure: Failure) -> None:
        self.error = failure.value


def check_dupefilter(settings: Any, redis_config: RedisConfig, spider: str) -> None:
    """A forced Bloom backend the server lacks, or a filter of another kind: fail now."""
    if _load(settings.get("DUPEFILTER_CLASS")) is not BloomDupeFilter:
        return
    client = redis_config.sync_client()
    try:
        key = SpiderKeys.from_settings(settings, spider).dupefilter
        run_sync(choose_dedup(client, key, BloomConfig.from_settings(settings)))
    except DedupDataError as exc:
        # bad data, not a bad setting: the node starts and waits for the fix (no supervisor crash loop)
        print(f"WARNING: {exc}", file=sys.stderr)
    finally:
        client.close()


def check_frontier(settings: Any, redis_config: RedisConfig, spider: str) -> None:
    """SCHEDULER_QUEUE_CLASS / FRONTIER_SHARDS unusable, or FRONTIER_SHARDS changed on a frontier
    that still holds work: fail now (ValueError, one line)."""
    client = redis_config.sync_client()
    try:
        run_sync(frontier_from_settings(settings, spider, client).check_layout())
    finally:
        client.close()


def _load(path: object) -> object:
    try:
        return load_object(path) if isinstance(path, str) else path
    except (ImportError, NameError, ValueError):
        return None
