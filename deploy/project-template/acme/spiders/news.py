"""`news`: articles of news sites from links, sitemaps and feeds, one row per story (docs/news.md)."""

from __future__ import annotations

from distributed_crawler.spiders.news import NewsSpider as BaseNewsSpider


class NewsSpider(BaseNewsSpider):
    name = "news"
