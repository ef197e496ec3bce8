"""Settings of the plain-Scrapy baseline: our demo project's settings without the distributed core.

Scrapy's own scheduler (memory queues) and RFPDupeFilter; the same canonical fingerprinter,
robots.txt middleware and storage pipeline as our side, so only the Redis core differs.
"""

from __future__ import annotations

from importlib.util import find_spec

BOT_NAME = "plain_scrapy_bench"
SPIDER_MODULES = ["bench.plain_scrapy_project.spiders"]
NEWSPIDER_MODULE = "bench.plain_scrapy_project.spiders"

REQUEST_FINGERPRINTER_CLASS = "distributed_crawler.dedup.fingerprint.CanonicalFingerprinter"
ITEM_PIPELINES = {"distributed_crawler.storage.pipeline.StoragePipeline": 300}
if find_spec("distributed_crawler.downloadermiddlewares.robotstxt") is not None:
    DOWNLOADER_MIDDLEWARES = {
        "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
        "distributed_crawler.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": 100,
    }

ROBOTSTXT_OBEY = True
CONCURRENT_REQUESTS = 32
CONCURRENT_REQUESTS_PER_DOMAIN = 32
DOWNLOAD_TIMEOUT = 30
RETRY_TIMES = 2
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
FEED_EXPORT_ENCODING = "utf-8"
