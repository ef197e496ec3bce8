from distributed_crawler.redis_spider import RedisSpider


class MySpider(RedisSpider):
    """Spider that reads urls from redis queue (myspider:start_urls)."""

    name = "myspider_redis"
    redis_key = "myspider:start_urls"

    def __init__(self, *args, **kwargs):
        # Dynamically define the allowed domains list. The example's `filter(...)` is a list here:
        # Scrapy 2.19's OffsiteMiddleware reads allowed_domains twice, and a spent filter object
        # then blocks every request (with scrapy-redis too): the one line changed in this file.
        domain = kwargs.pop("domain", "")
        self.allowed_domains = list(filter(None, domain.split(",")))
        super().__init__(*args, **kwargs)

    def parse(self, response):
        return {
            "name": response.css("title::text").extract_first(),
            "url": response.url,
            "job": response.meta.get("job-id"),
        }
