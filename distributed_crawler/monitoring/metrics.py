"""`PrometheusMetrics`: this node's metrics on `http://PROMETHEUS_HOST:PROMETHEUS_PORT/metrics`.

Off unless `PROMETHEUS_PORT` is set (env var or setting; one port per node on a host). Node
counters are read from Scrapy's stats when Prometheus scrapes; cluster gauges (queue depths, proxy
pool health) come from Redis every `HEARTBEAT_INTERVAL`, in the reactor's loop, never on a scrape.

| metric | type | labels |
|---|---|---|
| `dcrawl_pages_total`, `dcrawl_items_total`, `dcrawl_errors_total` | counter | spider, node |
| `dcrawl_leases_held`, `dcrawl_in_flight`, `dcrawl_rss_bytes`, `dcrawl_browser_pages` | gauge | spider, node |
| `dcrawl_queue_requests` | gauge | spider, queue (pending, leased, delayed, failed, seeds) |
| `dcrawl_proxies` | gauge | spider, health (healthy, unhealthy) |
| `dcrawl_node_info` | gauge (1) | spider, node, host, version |
| `dcrawl_events_total`, `dcrawl_publish_lag_seconds` | counter, histogram | events/metrics.py |
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError
from scrapy import signals
from scrapy.exceptions import NotConfigured

from distributed_crawler import __version__
from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.policy import Purpose
from distributed_crawler.connection.untrusted import OnceLog, is_wrong_type
from distributed_crawler.core.context import RedisContext
from distributed_crawler.core.crawl_control import CrawlControl
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.events.extension import ChangeFeedExtension
from distributed_crawler.events.metrics import feed_metrics
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.monitoring.control import control_summary
from distributed_crawler.monitoring.heartbeat import sample_node
from distributed_crawler.proxies.pool import ProxyPool, pool_keys

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MetricsConfig:
    port: int = 0
    host: str = "127.0.0.1"
    refresh: float = 10.0

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> MetricsConfig:
        read = SettingsReader(settings)
        raw = read.raw("PROMETHEUS_PORT") or 0
        try:
            port = int(raw)
        except ValueError:
            raise ValueError(f"PROMETHEUS_PORT ({raw}) must be a port number (0 = off)") from None
        if not 0 <= port <= 65535:
            raise ValueError(f"PROMETHEUS_PORT ({port}) must be between 1 and 65535 (0 = off)")
        return cls(port, read.str("PROMETHEUS_HOST"), read.float("HEARTBEAT_INTERVAL", above=0, hint="seconds"))


class PrometheusMetrics:
    def __init__(self, crawler: Crawler, config: MetricsConfig, redis_config: RedisConfig, node_id: str) -> None:
        self.crawler = crawler
        self.config = config
        self.redis_config = redis_config
        self.node_id = node_id
        self.spider = ""
        self.host = socket.gethostname()
        self.queues: dict[str, int | None] = {}
        self.proxies: dict[str, int] = {}
        self.control: dict[str, Any] | None = None  # monitoring/control.py: pause, overrides, blocks
        self.server: Any = None
        self._task: asyncio.Task | None = None
        self._bad_data = OnceLog(logger)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PrometheusMetrics:
        config = MetricsConfig.from_settings(crawler.settings)
        if not config.port:  # off by default: one INFO line, not Scrapy's WARNING for a reasoned NotConfigured
            logger.info("Prometheus metrics off (PROMETHEUS_PORT is not set)")
            raise NotConfigured
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            raise ValueError(
                "PROMETHEUS_PORT is set but prometheus-client is not installed: pip install -r requirements.txt"
            ) from None
        context = RedisContext.of(crawler)
        ext = cls(crawler, config, context.config, context.node_id)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self, spider: Spider) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        self.spider = spider.name
        registry = CollectorRegistry()
        registry.register(self)
        try:
            self.server, _ = start_http_server(self.config.port, addr=self.config.host, registry=registry)
        except OSError as exc:
            logger.error(
                "Prometheus metrics off: cannot listen on %s:%d (%s); set PROMETHEUS_PORT to a free port",
                self.config.host,
                self.config.port,
                exc,
            )
            return
        logger.info("Prometheus metrics on http://%s:%d/metrics", self.config.host, self.config.port)
        keys = getattr(spider, "keys", None)
        keys = keys if isinstance(keys, SpiderKeys) else RedisContext.of(self.crawler).keys_for(spider.name)
        self._task = asyncio.get_running_loop().create_task(self._refresh(keys), name="dc-metrics")

    async def spider_closed(self, spider: Spider) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.server is not None:
            server, self.server = self.server, None
            await asyncio.to_thread(server.shutdown)
            server.server_close()

    async def _refresh(self, keys: SpiderKeys) -> None:
        context = RedisContext.of(self.crawler).acquire()
        client = context.client
        pool = ProxyPool(client, *pool_keys(self.crawler.settings))
        try:
            while True:

                async def refresh() -> None:
                    frontier = context.frontier_for(keys.spider)
                    counts = await frontier.counts(seeds=True)
                    self.control = await control_summary(CrawlControl.of(frontier), time.time())
                    self.queues = {
                        "pending": counts.pending,
                        "leased": counts.leased,
                        "delayed": counts.delayed,
                        "failed": counts.failed,
                        "seeds": counts.seeds,
                        "seeds_taken": counts.seeds_taken,
                    }
                    self.proxies = await pool.health()

                async def refused(exc: BaseException) -> None:
                    if not isinstance(exc, ResponseError):  # a bug
                        raise exc
                    self._bad_data.skipped(  # a key of the wrong type (or garbage a script refused)
                        "wrong_type" if is_wrong_type(exc) else "response_error",
                        "Prometheus cluster gauges not refreshed (%s); run `dcrawl status %s` to see which key "
                        "holds bad data",
                        exc,
                        keys.spider,
                        level=logging.ERROR,
                    )

                # Redis away: the gauges keep their last values (the node's outage line says why)
                await context.policy.run(Purpose.STATS, refresh, on_error=refused)
                await asyncio.sleep(self.config.refresh)
        finally:
            await context.release()

    # -- prometheus_client collector -------------------------------------------------------
    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        sample = sample_node(self.crawler)
        labels = [self.spider, self.node_id]
        for name, value, help_text in (
            ("dcrawl_pages", sample.pages, "Responses received by this node"),
            ("dcrawl_items", sample.items, "Rows this node stored (committed to STORAGE_URL)"),
            ("dcrawl_errors", sample.errors, "Download and callback errors on this node"),
        ):
            counter = CounterMetricFamily(name, help_text, labels=["spider", "node"])
            counter.add_metric(labels, value)
            yield counter
        for name, value, help_text in (
            ("dcrawl_leases_held", sample.leases, "Leases this node holds"),
            ("dcrawl_in_flight", sample.in_flight, "Requests this node is downloading"),
            ("dcrawl_rss_bytes", sample.rss, "Resident memory of this node"),
            ("dcrawl_browser_pages", sample.browser_pages, "Browser pages open on this node"),
        ):
            gauge = GaugeMetricFamily(name, help_text, labels=["spider", "node"])
            gauge.add_metric(labels, value)
            yield gauge
        queues = GaugeMetricFamily(
            "dcrawl_queue_requests", "Requests of the whole cluster by queue", labels=["spider", "queue"]
        )
        for queue, count in self.queues.items():
            if count is not None:  # pending unknown (counter missing, docs/frontier.md): no sample
                queues.add_metric([self.spider, queue], count)
        yield queues
        if self.proxies.get("total"):
            proxies = GaugeMetricFamily(
                "dcrawl_proxies", "Proxies in the shared pool by health", labels=["spider", "health"]
            )
            proxies.add_metric([self.spider, "healthy"], self.proxies["healthy"])
            proxies.add_metric([self.spider, "unhealthy"], self.proxies["total"] - self.proxies["healthy"])
            yield proxies
        control = self.control
        if control is not None:  # live control (docs/operations.md): counts, never a label per host
            for name, value, help_text in (
                ("dcrawl_paused", 1 if control["paused"] else 0, "1 while the crawl is paused (dcrawl pause)"),
                ("dcrawl_host_overrides", control["overrides"], "Per-host overrides set by operators"),
                ("dcrawl_hosts_blocked", control["blocked"], "Hosts or domains an operator blocked, not expired"),
            ):
                gauge = GaugeMetricFamily(name, help_text, labels=["spider"])
                gauge.add_metric([self.spider], value)
                yield gauge
        feed = ChangeFeedExtension.feed_of(self.crawler)
        if feed is not None:  # the change feed (docs/events.md)
            yield from feed_metrics(feed, self.spider, self.node_id)
        info = GaugeMetricFamily("dcrawl_node_info", "This node", labels=["spider", "node", "host", "version"])
        info.add_metric([self.spider, self.node_id, self.host, __version__], 1)
        yield info
