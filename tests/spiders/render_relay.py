"""`render_relay`: a news spider whose plain index queues rendered requests carrying PageMethods.

Used to show that a rendered request (meta `render` plus scrapy-playwright `PageMethod`s) pushed
into Redis by one node is popped and rendered correctly by another. `-s RENDER_RELAY_STALL=1`
instead asks for a page method that never returns, to exercise the hard render deadline (the render
is cancelled).
"""

from __future__ import annotations

from typing import Any

from scrapy_playwright.page import PageMethod

from demo.spiders.news import NewsSpider
from tests.site.render_site import GOOD_PAGES

# Adds "pm-token-42" to the main document (the token is assembled in the browser).
ADD_TOKEN = "document.body.insertAdjacentHTML('beforeend', '<p>' + 'pm-tok' + 'en-' + (6 * 7) + '</p>')"


class RenderRelaySpider(NewsSpider):
    name = "render_relay"

    async def parse(self, response: Any, **kwargs: Any) -> Any:
        if response.meta.get("playwright"):
            async for output in super().parse(response, **kwargs):
                yield output
            return
        if self.settings.getbool("RENDER_RELAY_STALL"):
            method = PageMethod("evaluate", "new Promise(function () {})")  # never settles
            yield response.follow(
                "/r/main",
                callback=self.parse,
                meta={"render": True, "render_timeout": 2, "playwright_page_methods": [method]},
            )
            return
        for path in GOOD_PAGES:
            yield response.follow(
                path,
                callback=self.parse,
                meta={
                    "render": True,
                    "playwright_page_methods": [PageMethod("evaluate", ADD_TOKEN)],
                },
            )
