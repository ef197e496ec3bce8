"""Adaptive delay (DOMAIN_DELAY_FACTOR, off by default): a slow host is asked less often.

Heritrix's delay factor: the wait between two requests of a host is at least DOMAIN_DELAY_FACTOR
times the host's recent response time (a moving average of Scrapy's `download_latency`), capped
by DOMAIN_DELAY_MAX. Each node measures what it fetches. In host mode the node writes the delay
to the host's state (`HostControl.set_adaptive_delay`), where the lease script spaces the host for
every node; it writes only when the delay moved by a fifth or more, at most once per
WRITE_EVERY seconds per host, so no page costs a round trip. In the single-queue modes the delay
rides on each request (`_dc_min_interval` meta) to the politeness middleware's rate slot.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured

from distributed_crawler.bounded import BoundedDict
from distributed_crawler.connection.policy import Purpose
from distributed_crawler.core.context import RedisContext
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.downloadermiddlewares.retry import slot_of_request
from distributed_crawler.meta import MIN_INTERVAL_META

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

    from distributed_crawler.frontier.base import HostControl

logger = logging.getLogger(__name__)

WEIGHT = 0.3  # weight of the newest response time in the moving average
WRITE_EVERY = 2.0  # seconds between two writes of one host's delay (host mode)
CHANGE = 0.2  # a delay is written again once it moved by this fraction
HOSTS_MAX = 10_000  # hosts whose average (and last written delay) a node keeps, least recently used forgotten
IDLE_SECONDS = 600.0  # ... and a host not fetched for this long is forgotten: measured again from scratch


@dataclass(frozen=True)
class AdaptiveDelayConfig:
    factor: float = 0.0
    cap: float = 30.0

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> AdaptiveDelayConfig:
        read = SettingsReader(settings)
        return cls(read.float("DOMAIN_DELAY_FACTOR", min=0), read.float("DOMAIN_DELAY_MAX", above=0))


class ResponseTimes:
    """Moving average of response times per slot, and the delay they call for."""

    def __init__(self, config: AdaptiveDelayConfig) -> None:
        self.config = config
        self.average: BoundedDict[str, float] = BoundedDict(HOSTS_MAX, IDLE_SECONDS)

    def record(self, slot: str, seconds: float) -> float:
        """Take one response time; returns the slot's delay now."""
        if seconds >= 0:
            old = self.average.get(slot)
            self.average[slot] = seconds if old is None else old + WEIGHT * (seconds - old)
        return self.delay(slot)

    def delay(self, slot: str) -> float:
        return min(self.config.cap, self.config.factor * self.average.get(slot, 0.0))


class AdaptiveDelayMiddleware:
    """Downloader middleware (715, before the politeness middleware's 720)."""

    def __init__(self, crawler: Crawler, config: AdaptiveDelayConfig) -> None:
        self.crawler = crawler
        self.times = ResponseTimes(config)
        self.hosts: HostControl | None = None
        # slot -> (delay written, when)
        self._written: BoundedDict[str, tuple[float, float]] = BoundedDict(HOSTS_MAX, IDLE_SECONDS)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> AdaptiveDelayMiddleware:
        config = AdaptiveDelayConfig.from_settings(crawler.settings)
        if config.factor <= 0:
            raise NotConfigured
        mw = cls(crawler, config)
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        return mw

    def spider_opened(self, spider: Spider) -> None:
        self.hosts = RedisContext.of(self.crawler).frontier_for(spider.name).host_control()

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        if self.hosts is None:
            delay = self.times.delay(slot_of_request(request))
            if delay > 0:
                request.meta[MIN_INTERVAL_META] = delay

    async def process_response(self, request: Request, response: Response, spider: Spider | None = None) -> Response:
        latency = request.meta.get("download_latency")
        if not isinstance(latency, (int, float)):
            return response
        slot = slot_of_request(request)
        delay = self.times.record(slot, float(latency))
        if self.hosts is not None:
            await self._write(slot, delay)
        return response

    async def _write(self, slot: str, delay: float) -> None:
        """Host mode: the delay to the host's state when it moved enough and not too often."""
        written, when = self._written.get(slot, (0.0, 0.0))
        now = time.monotonic()
        if now - when < WRITE_EVERY or abs(delay - written) <= CHANGE * max(written, 0.05):
            return
        self._written[slot] = (delay, now)
        hosts = self.hosts

        async def write() -> None:
            await hosts.set_adaptive_delay(slot, delay)  # type: ignore[union-attr]

        async def refused(exc: BaseException) -> None:
            logger.debug("adaptive delay of %s not written: %s", slot, exc)

        # a hint: Redis away or the host hash refused -> written again at the next change
        await RedisContext.of(self.crawler).policy.run(Purpose.CACHE, write, on_error=refused)
        self.crawler.stats.set_value("politeness/adaptive_delay_max", max(self._max_written(), delay))

    def _max_written(self) -> float:
        return max((d for d, _ in self._written.values()), default=0.0)
