"""`RecrawlMiddleware` (downloader, 580): conditional requests for revisitable URLs, and 304s.

A revisitable request (RECRAWL_RULES match or meta["recrawl"]) gets the validators stored at its
last fetch as `If-None-Match` / `If-Modified-Since` (one HGET, only for revisitable URLs). A 304
answer to them is recorded as "unchanged" (the interval grows) and dropped with IgnoreRequest:
no parse, no item, no storage write. Any other non-2xx status is recorded as an error (the
interval is kept); 2xx responses are recorded by RecrawlSpiderMiddleware once their items are
known (the digest needs the extracted text).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

from redis.exceptions import ResponseError
from scrapy.exceptions import IgnoreRequest

from distributed_crawler.connection.policy import Purpose
from distributed_crawler.meta import RECRAWL_TICKET_META
from distributed_crawler.recrawl.node import RecrawlNode
from distributed_crawler.recrawl.schedule import clean_header

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


class RecrawlMiddleware:
    def __init__(self, node: RecrawlNode) -> None:
        self.node = node
        self.stats = node.stats
        self._lookup_failed = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RecrawlMiddleware:
        return cls(RecrawlNode.of(crawler))

    async def process_request(self, request: Request) -> None:
        if RECRAWL_TICKET_META in request.meta:  # a retry or redirect of this delivery: done already
            return
        ticket = self.node.ticket(request)
        if ticket is None:
            return
        # CACHE: Redis away (or refusing) -> fetch unconditionally: costs bytes, not pages
        state = await self.node.policy.run(
            Purpose.CACHE,
            partial(self.node.schedule.state, ticket.fingerprint, request.url),
            on_error=self._unreadable,
            on_ok=self._readable,
        )
        conditional = False
        if state is not None:  # ours to set: a redirect may carry another URL's validator over
            for header, value in ((b"If-None-Match", state.etag), (b"If-Modified-Since", state.last_modified)):
                if value:
                    request.headers[header] = value
                    conditional = True
        if conditional:
            self.stats.inc_value("recrawl/conditional")
        request.meta[RECRAWL_TICKET_META] = ticket._replace(conditional=conditional)

    async def _unreadable(self, exc: BaseException) -> None:
        if not isinstance(exc, ResponseError):
            raise exc
        if not self._lookup_failed:
            self._lookup_failed = True
            logger.warning("Revisit validators unreadable (%s); fetching without If-None-Match meanwhile", exc)

    async def _readable(self) -> None:
        self._lookup_failed = False

    async def process_response(self, request: Request, response: Response) -> Response:
        ticket = request.meta.get(RECRAWL_TICKET_META)
        if ticket is None or 200 <= response.status < 300:
            return response
        validators = {
            "etag": clean_header(response.headers.get(b"ETag")),
            "last_modified": clean_header(response.headers.get(b"Last-Modified")),
        }
        if response.status == 304 and ticket.conditional:
            recorded = await self.node.record(request, ticket, "304", **validators)
            self.stats.inc_value("recrawl/not_modified")
            interval = f"{recorded.interval:.0f}s" if recorded else "unchanged"
            raise IgnoreRequest(f"not modified (304); next visit in {interval}")
        await self.node.record(request, ticket, "error", **validators)
        return response
