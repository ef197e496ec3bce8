"""`DUPEFILTER_CLASS`: the cluster's shared set of seen fingerprints.

Our scheduler folds the check into its enqueue script (one round trip for dedup and push) and only
asks this class for the key and the fingerprint. `request_seen` keeps Scrapy's dupefilter interface
working for code that calls it directly.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.dupefilters import BaseDupeFilter

from distributed_crawler.connection import RedisConfig
from distributed_crawler.keys import SpiderKeys

if TYPE_CHECKING:
    import redis
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.utils.request import RequestFingerprinterProtocol

logger = logging.getLogger(__name__)


class RedisSetDupeFilter(BaseDupeFilter):
    """Fingerprints (hex SHA1 of the canonical request) in one Redis set shared by every node."""

    def __init__(
        self,
        redis_config: RedisConfig,
        key: str,
        fingerprinter: RequestFingerprinterProtocol,
        debug: bool = False,
    ) -> None:
        self.redis_config = redis_config
        self.key = key
        self.fingerprinter = fingerprinter
        self.debug = debug
        self._client: redis.Redis | None = None
        self._logged_once = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisSetDupeFilter:
        assert crawler.spider is not None, "the dupefilter is built once the spider exists"
        keys = SpiderKeys.from_settings(crawler.settings, crawler.spider.name)
        assert crawler.request_fingerprinter is not None
        return cls(
            RedisConfig.from_settings(crawler.settings),
            keys.dupefilter,
            crawler.request_fingerprinter,
            debug=crawler.settings.getbool("DUPEFILTER_DEBUG"),
        )

    def fingerprint_hex(self, request: Request) -> str:
        return self.fingerprinter.fingerprint(request).hex()

    def request_seen(self, request: Request) -> bool:
        """Check and add in one SADD (one blocking round trip: for direct callers only)."""
        if self._client is None:
            self._client = self.redis_config.sync_client()
        return self._client.sadd(self.key, self.fingerprint_hex(request)) == 0

    def log(self, request: Request, spider: Spider) -> None:
        if self.debug:
            logger.debug("Filtered duplicate request: %s", request)
        elif not self._logged_once:
            logger.debug(
                "Filtered duplicate request: %s - no more duplicates will be shown "
                "(see DUPEFILTER_DEBUG to show all duplicates)",
                request,
            )
            self._logged_once = True

    def close(self, reason: str) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
