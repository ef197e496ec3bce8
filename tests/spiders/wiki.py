"""`wiki`: the news spider under another name, so its keys carry another hash tag (`{wiki}`).

Used by the Redis Cluster test: two spiders' keys must land on different masters.
"""

from __future__ import annotations

from demo.spiders.news import NewsSpider


class WikiSpider(NewsSpider):
    name = "wiki"
