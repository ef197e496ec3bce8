"""Settings of the scrapy-redis baseline: our demo project's settings with scrapy-redis's core."""

from __future__ import annotations

from importlib.util import find_spec

BOT_NAME = "scrapy_redis_bench"
SPIDER_MODULES = ["bench.scrapy_redis_project.spiders"]
NEWSPIDER_MODULE = "bench.scrapy_redis_project.spiders"

SCHEDULER = "scrapy_redis.scheduler.Scheduler"
# Must be set explicitly on Scrapy >= 2.14: scrapy-redis reads DUPEFILTER_CLASS and would otherwise
# call `from_settings` on Scrapy's own RFPDupeFilter. The subclass only swaps the fingerprint
# function for our canonical one (same SADD per request), so both sides fetch the same pages.
DUPEFILTER_CLASS = "bench.scrapy_redis_project.dupefilter.CanonicalRFPDupeFilter"
SCHEDULER_QUEUE_CLASS = "scrapy_redis.queue.PriorityQueue"
# True is the only sane value with several workers: scrapy-redis's default (False) makes the first
# worker that closes delete the shared queue and dupefilter under the others.
SCHEDULER_PERSIST = True
REQUEST_FINGERPRINTER_CLASS = "distributed_crawler.dedup.fingerprint.CanonicalFingerprinter"

ITEM_PIPELINES = {"distributed_crawler.storage.pipeline.StoragePipeline": 300}
# The same robots.txt middleware as our project when it has one (a fix to Scrapy's, unrelated to
# scheduling), so that only the distributed core differs between the two sides.
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

REDIS_URL = "redis://127.0.0.1:6379/0"  # the harness passes -s REDIS_URL=...
MAX_IDLE_TIME_BEFORE_CLOSE = 0  # the harness passes -s MAX_IDLE_TIME_BEFORE_CLOSE=...
