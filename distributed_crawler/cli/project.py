"""What every `dcrawl` command opens: the project's settings (with the add-on), its Redis, its keys.

Its own module so the command modules (seed, hosts, recrawl, ...) and cli/main.py, which registers
them, both import it and not each other.
"""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

from redis.exceptions import RedisError
from scrapy.settings import Settings
from scrapy.utils.misc import load_object
from scrapy.utils.project import get_project_settings

from distributed_crawler.addon import with_addon
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.permissions import PermissionDenied
from distributed_crawler.connection.types import SyncRedis
from distributed_crawler.core.access import check_node_access
from distributed_crawler.core.crawl_control import CrawlControl
from distributed_crawler.dedup.dupefilter import SetDedup
from distributed_crawler.dedup.fingerprint import CanonicalFingerprinter, FingerprintConfig
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.enqueue import Pusher
from distributed_crawler.frontier.factory import frontier_from_settings
from distributed_crawler.frontier.keys import SpiderKeys


class CliError(Exception):
    """A one-line message for the operator; exit code 1."""


def project_settings(args: argparse.Namespace) -> Settings:
    settings = with_addon(get_project_settings())
    if args.redis_url:
        settings.set("REDIS_URL", args.redis_url, priority="cmdline")
    return settings


def connect(args: argparse.Namespace) -> tuple[Settings, SyncRedis, SpiderKeys]:
    settings = project_settings(args)
    config = RedisConfig.from_settings(settings)
    config.check_reachable()
    return settings, config.sync_client(), SpiderKeys.from_settings(settings, args.spider)


def open_frontier(settings: Any, client: SyncRedis, keys: SpiderKeys) -> Frontier:
    """The spider's frontier (SCHEDULER_QUEUE_CLASS, FRONTIER_SHARDS) on the CLI's sync client;
    a FRONTIER_SHARDS that differs from the frontier's in Redis is refused (ValueError, one line)."""
    frontier = frontier_from_settings(settings, keys.spider, client, keys)
    run_sync(frontier.check_layout())
    return frontier


def open_control(settings: Any, client: SyncRedis, keys: SpiderKeys) -> CrawlControl:
    """The spider's CrawlControl (pause, overrides, registry, audit) on the CLI's sync client."""
    return CrawlControl.of(open_frontier(settings, client, keys))


def open_enqueuer(settings: Any, client: SyncRedis, keys: SpiderKeys, dupefilter: Any = None) -> Pusher:
    """The frontier's Enqueuer on the CLI's client: the configured dupefilter's backend for each of
    the frontier's filter keys (one per shard), or, without `dupefilter`, a set (pushes that skip
    the filter: requeues, revisits)."""
    frontier = open_frontier(settings, client, keys)

    async def plain(key: str) -> SetDedup:
        return SetDedup(key)

    make = plain if dupefilter is None else partial(dupefilter.open_dedup_at, client)
    return run_sync(frontier.open_enqueuer(make))


def open_dupefilter(settings: Any, client: SyncRedis, keys: SpiderKeys) -> tuple[Any, Any]:
    """The configured dupefilter and its backend, opened on a sync client."""
    dupefilter_cls = load_object(settings["DUPEFILTER_CLASS"])
    options = dupefilter_cls.options(settings)
    df = dupefilter_cls(
        RedisConfig.from_settings(settings),
        keys,
        CanonicalFingerprinter(FingerprintConfig.from_settings(settings)),
        **options,
    )
    return df, run_sync(df.open_dedup(client))


def explain_denial(args: argparse.Namespace) -> str | None:
    """Redis's ACL refused a call: what the user lacks of what a node of the command's spider needs
    (the keys by pattern, the commands, the channels), as `scrapy crawl` says it; None if unknown."""
    spider = getattr(args, "spider", None)
    if not isinstance(spider, str) or not spider:
        return None
    try:
        settings = project_settings(args)
        check_node_access(settings, RedisConfig.from_settings(settings), spider)
    except PermissionDenied as exc:
        return str(exc)
    except (RedisError, ValueError, OSError):  # the line Redis gave stands
        return None
    return None
