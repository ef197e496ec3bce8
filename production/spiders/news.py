"""`news`: articles of news sites from links, sitemaps and feeds, one row per story (docs/news.md).

Everything is in distributed_crawler/spiders/news.py; rows carry every field the spider extracts.
"""

from __future__ import annotations

from distributed_crawler.spiders.news import NewsSpider as BaseNewsSpider


class NewsSpider(BaseNewsSpider):
    name = "news"
