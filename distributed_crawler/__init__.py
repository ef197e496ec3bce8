"""distributed_crawler: many Scrapy nodes, one Redis, one crawl."""

__version__ = "0.1.0"
