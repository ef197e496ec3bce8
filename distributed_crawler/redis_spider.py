"""Public path kept for existing projects (README); the code lives in `distributed_crawler.spiders.redis_spider`."""

from distributed_crawler.spiders.redis_spider import RedisCrawlSpider, RedisMixin, RedisSpider

__all__ = ["RedisCrawlSpider", "RedisMixin", "RedisSpider"]
