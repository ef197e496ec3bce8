"""`stalled`: a news spider that stops yielding items after a few pages but keeps following links."""

from __future__ import annotations

from typing import Any

from scrapy import Request

from demo.spiders.news import NewsSpider


class StalledSpider(NewsSpider):
    name = "stalled"
    items_before_stall = 3

    async def parse(self, response: Any, **kwargs: Any) -> Any:
        async for output in super().parse(response, **kwargs):
            if isinstance(output, Request):
                yield output
            elif self.items_before_stall > 0:
                self.items_before_stall -= 1
                yield output
