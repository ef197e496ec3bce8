"""A scrapy-redis project of the three shapes of scrapy-redis's example-project, moved over the
way docs/migrating-from-scrapy-redis.md says: its spiders import from `distributed_crawler`
instead of `scrapy_redis`; settings.py keeps REDIS_HOST/REDIS_PORT and adds the add-on."""
