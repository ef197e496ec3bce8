from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import Rule

from distributed_crawler.redis_spider import RedisCrawlSpider


class MyCrawler(RedisCrawlSpider):
    """Spider that reads urls from redis queue (mycrawler:start_urls)."""

    name = "mycrawler_redis"
    redis_key = "mycrawler:start_urls"

    rules = (
        # follow all links
        Rule(LinkExtractor(), callback="parse_page", follow=True),
    )

    def __init__(self, *args, **kwargs):
        # Dynamically define the allowed domains list. The example's `filter(...)` is a list here:
        # Scrapy 2.19's OffsiteMiddleware reads allowed_domains twice, and a spent filter object
        # then blocks every request (with scrapy-redis too): the one line changed in this file.
        domain = kwargs.pop("domain", "")
        self.allowed_domains = list(filter(None, domain.split(",")))
        super().__init__(*args, **kwargs)

    def parse_page(self, response):
        return {
            "name": response.css("title::text").extract_first(),
            "url": response.url,
        }
