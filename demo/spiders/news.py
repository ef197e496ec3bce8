"""`news`: articles of news sites from links, sitemaps and feeds, one row per story (docs/news.md).

Seed pages (`dcrawl seed news URL`) or whole sites (`dcrawl seed news --site URL`: robots.txt
sitemaps, /sitemap.xml, feed links). Everything is in distributed_crawler/spiders/news.py; this
project only names the spider and its item.
"""

from __future__ import annotations

from demo.items import PageItem
from distributed_crawler.spiders.news import NewsSpider as BaseNewsSpider


class NewsSpider(BaseNewsSpider):
    name = "news"
    item_class = PageItem
