"""Downloader middlewares of the project."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware as ScrapyRobotsTxtMiddleware
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.defer import Deferred

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.robotstxt import RobotParser


class RobotsTxtMiddleware(ScrapyRobotsTxtMiddleware):
    """Scrapy's, minus a bypass: every request waiting for robots.txt gets the parser.

    Scrapy 2.19 lets all requests that arrive while robots.txt is downloading await the same
    Deferred through `asFuture()`, which consumes its result: from the second waiter on, the
    parser is None and the request is allowed whatever robots.txt says. A crawler that starts
    many requests at once on a new site (every node of a cluster) hits this on its first pages.
    Each waiter here awaits its own Deferred, fed from the shared one.
    """

    async def robot_parser(self, request: Request) -> RobotParser | None:
        pending = self._parsers.get(urlparse_cached(request).netloc)
        if not isinstance(pending, Deferred):
            return await super().robot_parser(request)
        mine: Deferred = Deferred()

        def relay(result: object) -> object:
            mine.callback(result)
            return result  # leave the result in place for the next waiter

        pending.addBoth(relay)
        return await maybe_deferred_to_future(mine)
