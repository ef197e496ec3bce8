"""scrapy-redis's RFPDupeFilter with the crawler's (canonical) request fingerprint.

Stock RFPDupeFilter keeps utm_*/gclid/fbclid, so on the test site it would fetch most articles
twice (every "previous article" link carries utm_campaign): a different workload, not a slower
scheduler. The Redis traffic (one SADD per offered request) is unchanged.
"""

from __future__ import annotations

from typing import Any

from scrapy_redis.dupefilter import RFPDupeFilter


class CanonicalRFPDupeFilter(RFPDupeFilter):
    fingerprinter: Any = None

    @classmethod
    def from_spider(cls, spider: Any) -> CanonicalRFPDupeFilter:
        df = super().from_spider(spider)
        df.fingerprinter = spider.crawler.request_fingerprinter
        return df

    def request_fingerprint(self, request: Any) -> str:
        return self.fingerprinter.fingerprint(request).hex()
