"""Size caps of a download: over a cap, a request is dead-lettered once with reason `too_large`.

Scrapy 2.19 already enforces `DOWNLOAD_MAXSIZE` in its HTTP handler (a `Content-Length` over it is
refused before the body; a body growing past it is cut off while it streams) and in its
HttpCompressionMiddleware (gzip, deflate, br and zstd are decompressed in 64 KiB steps against the
same cap). This middleware takes HttpCompressionMiddleware's place (same order, 590) and adds
what Scrapy lacks:
- the outcome: a request over a cap is refused `too_large` through the scheduler's refusals
  (core/refusals.py: one dead letter with the size and the cap, written before its lease is acked,
  stat `dc/refused/too_large`, `dcrawl hosts`), never retried (IgnoreRequest), instead of a log
  line and nothing;
- caps on the response headers (`RESPONSE_MAX_HEADERS` lines, `RESPONSE_MAX_HEADER_BYTES`), applied
  while Twisted parses them (internals.cap_response_headers), so endless headers cost no memory;
- a body no handler capped (a rendered page's HTML) is checked against the cap here;
- meta `download_stop_at` (robots.txt): the download stops after that many bytes and the response
  keeps what came, as RFC 9309 asks (parse the first 500 KiB), instead of being refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.downloadermiddlewares.httpcompression import HttpCompressionMiddleware
from scrapy.exceptions import (
    DownloadCancelledError,
    DownloadFailedError,
    IgnoreRequest,
    StopDownload,
)
from scrapy.utils._compression import _DecompressionMaxSizeExceeded

from distributed_crawler.core.admission import Refusal
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.internals import HeadersTooLarge, cap_response_headers, scheduler_of
from distributed_crawler.meta import DOWNLOAD_MAXSIZE_META, DOWNLOAD_STOP_AT_META, LEASE_META

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

TOO_LARGE = "too_large"
_RECEIVED = "_dc_bytes_received"  # meta: bytes of the download received so far


class TooLarge(IgnoreRequest):
    """A response over a size cap: dead-lettered `too_large`, not retried."""


@dataclass(frozen=True)
class SizeCapConfig:
    max_size: int = 8 * 1024 * 1024
    max_headers: int = 200
    max_header_bytes: int = 64 * 1024

    @classmethod
    def from_settings(cls, settings: Any) -> SizeCapConfig:
        read = SettingsReader(settings)
        return cls(
            max_size=read.int("DOWNLOAD_MAXSIZE", min=0, hint="bytes (0 = no limit)"),
            max_headers=read.int("RESPONSE_MAX_HEADERS", min=10, hint="header lines"),
            max_header_bytes=read.int("RESPONSE_MAX_HEADER_BYTES", min=4096, hint="bytes"),
        )


def over_cap_reason(exception: BaseException) -> str | None:
    """Why a download error is a size refusal ("headers ...", "body ..."), None if it is not one."""
    if isinstance(exception, DownloadCancelledError) and "larger than download max size" in str(exception):
        return f"body: {exception}"
    if isinstance(exception, DownloadFailedError | HeadersTooLarge):
        # Twisted's ResponseFailed (the __cause__) carries the parser's error among its `reasons`
        stack: list[Any] = [exception]
        for _ in range(20):  # bounded: a chain is a few links long
            if not stack:
                break
            current = stack.pop()
            current = getattr(current, "value", current)  # a twisted Failure -> its exception
            if isinstance(current, HeadersTooLarge):
                return f"headers: {current}"
            stack.extend(getattr(current, "reasons", None) or [])
            if current.__cause__ is not None:
                stack.append(current.__cause__)
    return None


class SizeCapMiddleware(HttpCompressionMiddleware):
    """HttpCompressionMiddleware whose size refusals are dead letters (see the module docstring)."""

    def __init__(self, crawler: Crawler, config: SizeCapConfig) -> None:
        super().__init__(crawler=crawler)
        self.crawler = crawler
        self.config = config
        self.decompress = crawler.settings.getbool("COMPRESSION_ENABLED")  # off: the caps still apply
        cap_response_headers(config.max_headers, config.max_header_bytes)
        crawler.signals.connect(self._bytes_received, signal=signals.bytes_received)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SizeCapMiddleware:
        return cls(crawler, SizeCapConfig.from_settings(crawler.settings))

    # -- bytes received: counted; a `download_stop_at` request (robots.txt) stops there ----------
    def _bytes_received(self, data: bytes, request: Request, spider: Spider | None = None) -> None:
        """Count every download's bytes (a streamed body cut at the cap fails with an empty
        CancelledError: the count says why); stop a `download_stop_at` request at its count."""
        received = request.meta.get(_RECEIVED, 0) + len(data)
        request.meta[_RECEIVED] = received
        stop_at = request.meta.get(DOWNLOAD_STOP_AT_META)
        if isinstance(stop_at, int) and not isinstance(stop_at, bool) and 0 < stop_at <= received:
            self.crawler.stats.inc_value("sizecap/stopped")
            raise StopDownload(fail=False)

    # -- Scrapy hooks -----------------------------------------------------------------------
    def process_request(self, request: Request, spider: Spider | None = None) -> Request | Response | None:
        request.meta.pop(_RECEIVED, None)  # a retry or redirect copies meta: each attempt counts afresh
        return super().process_request(request) if self.decompress else None

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Request | Response:
        limit = self._limit(request)
        if limit and len(response.body) > limit and "download_stopped" not in response.flags:
            self._refuse(request, f"body: {len(response.body)} bytes, over {limit}")
        if not self.decompress:
            return response
        try:
            return super().process_response(request, response)
        except IgnoreRequest as exc:
            if isinstance(exc.__cause__, _DecompressionMaxSizeExceeded):
                cause = exc.__cause__
                self._refuse(
                    request, f"decompressed: more than {cause.max_size} bytes from {len(response.body)} compressed"
                )
            raise

    def process_exception(self, request: Request, exception: Exception, spider: Spider | None = None) -> None:
        reason = over_cap_reason(exception)
        limit = self._limit(request)
        received = request.meta.get(_RECEIVED, 0)
        if reason is None and isinstance(exception, DownloadCancelledError) and limit and received > limit:
            reason = f"body: {received} bytes received, over {limit}"
        if reason is not None:
            self._refuse(request, reason)

    def _limit(self, request: Request) -> int:
        value = request.meta.get(DOWNLOAD_MAXSIZE_META, self.config.max_size)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    def _refuse(self, request: Request, detail: str) -> None:
        """Refuse `too_large` through the scheduler's refusals (one dead letter, stat, rate-limited
        WARNING, `dcrawl hosts` count), then IgnoreRequest: no retry, the lease acked as usual.
        A request that was never queued (robots.txt) has nothing to requeue: only counted and logged."""
        scheduler = scheduler_of(self.crawler)
        refusal = Refusal(TOO_LARGE, detail[:300])
        if LEASE_META in request.meta and hasattr(scheduler, "refuse"):
            scheduler.refuse(request, refusal, source="download")
        else:
            self.crawler.stats.inc_value(f"dc/refused/{TOO_LARGE}")
            logger.warning("Refused %s (%s): %s", request.url[:300], TOO_LARGE, refusal.detail)
        raise TooLarge(f"{TOO_LARGE}: {detail}")
