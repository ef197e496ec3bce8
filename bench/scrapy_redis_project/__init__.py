"""The `news` crawl on scrapy-redis 0.9.1, the baseline of the benchmarks.

Same site, same parse/link logic (`bench/page_parse.py`), same fingerprint (canonical URL), same
storage pipeline as ours; only the distributed core differs: `scrapy_redis.scheduler.Scheduler`,
`scrapy_redis.dupefilter.RFPDupeFilter`, `scrapy_redis.spiders.RedisSpider`. Run with
`SCRAPY_SETTINGS_MODULE=bench.scrapy_redis_project.settings scrapy crawl news -s REDIS_URL=...`.
"""
