import os

from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class DmozSpider(CrawlSpider):
    """Follow categories and extract links (a plain CrawlSpider: start_urls, no Redis seeds)."""

    name = "dmoz"
    allowed_domains = ["127.0.0.1"]
    start_urls = [os.environ.get("COMPAT_SITE_URL", "http://127.0.0.1:8000") + "/"]

    rules = [
        Rule(LinkExtractor(), callback="parse_directory", follow=True),
    ]

    def parse_directory(self, response):
        yield {"name": response.css("title::text").extract_first(), "url": response.url}
