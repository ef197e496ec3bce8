"""The two places the change feed looks at a request: its items' delivery, and a vanished page.

`RedeliveredItemsMiddleware` (spider middleware) marks the items of a request delivered before
(the queue member's delivery count, frontier/envelope.py): the storage publishes their events even
when their rows did not change, since the node that stored them may have died before publishing.
`RemovedPageMiddleware` (downloader middleware) turns a 404 or 410 on a revisit of a page the
recrawl schedule has fetched before into a `removed` event (the row itself is kept), and counts
each source's errors (other statuses >= 400, failed downloads) and refusals (401, 403, 429, 451).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from itemadapter import is_item
from scrapy.exceptions import IgnoreRequest, NotConfigured

from distributed_crawler.core.checks import ForbiddenByRobots
from distributed_crawler.events.coverage import FAILED, REFUSED
from distributed_crawler.events.extension import ChangeFeedExtension
from distributed_crawler.frontier.envelope import split_member
from distributed_crawler.meta import LEASE_META, NEWS_SITE_META, RECRAWL_TICKET_META
from distributed_crawler.recrawl.node import RecrawlNode

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from distributed_crawler.events.feed import ChangeFeed

logger = logging.getLogger(__name__)

REMOVED_STATUSES = frozenset({404, 410})
# The site refused us (auth wall, forbidden, rate limited, legal block): counted apart from errors.
REFUSAL_STATUSES = frozenset({401, 403, 429, 451})


def delivered_before(request: Request | None) -> bool:
    """The scheduler leased this request more than once (a node died or lost its ack)."""
    lease = request.meta.get(LEASE_META) if request is not None else None
    if not isinstance(lease, (bytes, str)):
        return False
    try:
        return split_member(lease).deliveries >= 2
    except ValueError:
        return False


def _feed(crawler: Crawler) -> ChangeFeed:
    feed = ChangeFeedExtension.feed_of(crawler)
    if feed is None:
        raise NotConfigured("EVENTS_ENABLED is off (or the ChangeFeedExtension is not in EXTENSIONS)")
    return feed


class RedeliveredItemsMiddleware:
    def __init__(self, feed: ChangeFeed) -> None:
        self.feed = feed

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedeliveredItemsMiddleware:
        return cls(_feed(crawler))

    async def process_spider_output(self, response: Response, result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        again = delivered_before(response.request)
        async for output in result:
            if again and is_item(output):
                self.feed.marks.mark(output)
            yield output


class RemovedPageMiddleware:
    def __init__(self, feed: ChangeFeed, crawler: Crawler) -> None:
        self.feed = feed
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RemovedPageMiddleware:
        return cls(_feed(crawler), crawler)

    async def fetched_before(self, request: Request) -> bool:
        """The recrawl schedule holds a digest for this URL: a page of it was stored or seen."""
        ticket = request.meta.get(RECRAWL_TICKET_META)
        if ticket is None:
            return False
        try:
            state = await RecrawlNode.of(self.crawler).schedule.state(ticket.fingerprint)
        except Exception as exc:  # noqa: BLE001 - unreadable: no removed event rather than a wrong one
            logger.debug("Revisit state of %s unreadable: %r", request.url, exc)
            return False
        return state is not None and bool(state.digest)

    async def process_response(self, request: Request, response: Response) -> Response:
        if response.status in REMOVED_STATUSES and await self.fetched_before(request):
            await self.feed.removed(request.url)
        if request.url.endswith("/robots.txt"):  # not a page of the source
            return response
        if response.status in REFUSAL_STATUSES:
            await self.feed.record_failure(request.url, "refusal")
            self._coverage(request, REFUSED)
        elif response.status >= 400:
            await self.feed.record_failure(request.url, "error")
            self._coverage(request, FAILED)
        return response

    async def process_exception(self, request: Request, exception: Exception) -> None:
        """A download that failed (timeout, DNS, connection refused): an error of its source. A
        request this node refused itself (robots.txt, admission, a trap rule: IgnoreRequest) never
        reached the site: not the source's error, and no Redis call (robots.txt's refusal is one
        for coverage, counted with the next write)."""
        if isinstance(exception, IgnoreRequest):
            if isinstance(exception, ForbiddenByRobots):
                self._coverage(request, REFUSED)
            return
        await self.feed.record_failure(request.url, "error")
        self._coverage(request, FAILED)

    def _coverage(self, request: Request, state: int) -> None:
        """A page's failure for its source's coverage (a sitemap's or feed's own is not a page)."""
        if NEWS_SITE_META not in request.meta:
            self.feed.coverage.outcome(request.url, request.meta, state)
