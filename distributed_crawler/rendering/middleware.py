"""Downloader middleware that decides, once per request, whether the browser downloads it.

It sits at 650, before the proxy middleware (700), and sets `meta["playwright"]` (meta.py
PLAYWRIGHT_META) to True for requests marked for rendering (meta `render`, PLAYWRIGHT_URL_PATTERNS;
`dont_render` wins): every later component reads that key instead of deciding again. The requests
nothing marks may still be rendered after their plain download by PLAYWRIGHT_AUTO (auto_render.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from distributed_crawler.meta import PLAYWRIGHT_META
from distributed_crawler.rendering.config import RenderConfig, RenderInterruptedError

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class RenderingMiddleware:
    """Downloader middleware: marks the requests the browser downloads (`meta["playwright"]`)."""

    def __init__(self, config: RenderConfig, stats: Any) -> None:
        self.config = config
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RenderingMiddleware:
        return cls(RenderConfig.from_settings(crawler.settings), crawler.stats)

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        if self.config.should_render(request):
            request.meta[PLAYWRIGHT_META] = True
            self.stats.inc_value("render/requests")
        elif request.meta.get(PLAYWRIGHT_META):
            request.meta[PLAYWRIGHT_META] = False  # dont_render
        return None

    def process_exception(self, request: Request, exception: Exception, spider: Spider | None = None) -> Request | None:
        if not isinstance(exception, RenderInterruptedError):
            return None
        self.stats.inc_value("render/interrupted")
        logger.info("Requeued %s: %s", request, exception)
        again = request.copy()  # keeps the lease: the scheduler hands it over, as for a retry
        again.dont_filter = True
        return again
