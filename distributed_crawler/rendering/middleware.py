"""Downloader middleware that decides, once per request, whether the browser downloads it.

It sits at 650, before the proxy middleware (700), and sets `meta["playwright"]` (meta.py
PLAYWRIGHT_META) to True for requests marked for rendering (meta `render`, PLAYWRIGHT_URL_PATTERNS;
`dont_render` wins): every later component reads that key instead of deciding again. The requests
nothing marks may still be rendered after their plain download by PLAYWRIGHT_AUTO (auto_render.py).
An operator's `dcrawl host SPIDER HOST set --render on|off|auto` wins over the settings: on marks
every request of the host (unless it says `dont_render`), off marks none and keeps PLAYWRIGHT_AUTO
away (`dont_render`), auto leaves it to the settings (core/overrides.py: read every 1.5 s).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.http.request import NO_CALLBACK
from scrapy.utils.httpobj import urlparse_cached

from distributed_crawler.core.overrides import OverrideCache
from distributed_crawler.meta import DONT_RENDER_META, PLAYWRIGHT_META, RENDER_META
from distributed_crawler.rendering.config import RenderConfig, RenderInterruptedError

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class RenderingMiddleware:
    """Downloader middleware: marks the requests the browser downloads (`meta["playwright"]`)."""

    def __init__(self, config: RenderConfig, stats: Any, overrides: OverrideCache | None = None) -> None:
        self.config = config
        self.stats = stats
        self.overrides = overrides

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RenderingMiddleware:
        return cls(RenderConfig.from_settings(crawler.settings), crawler.stats, OverrideCache.of(crawler))

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        self._operator_says(request)
        if self.config.should_render(request):
            request.meta[PLAYWRIGHT_META] = True
            self.stats.inc_value("render/requests")
        elif request.meta.get(PLAYWRIGHT_META):
            request.meta[PLAYWRIGHT_META] = False  # dont_render
        return None

    def _operator_says(self, request: Request) -> None:
        """Apply the host's `--render` override (on / off; auto = the settings decide)."""
        if self.overrides is None or request.callback is NO_CALLBACK:  # robots.txt is never rendered
            return
        url = urlparse_cached(request)
        override = self.overrides.get(url.netloc.rsplit("@", 1)[-1] or "")
        render = override.get("render") if override else None
        if render == "off":
            request.meta[DONT_RENDER_META] = True
            self.stats.inc_value("render/override/off")
        elif render == "on" and not request.meta.get(DONT_RENDER_META):
            request.meta[RENDER_META] = True
            self.stats.inc_value("render/override/on")

    def process_exception(self, request: Request, exception: Exception, spider: Spider | None = None) -> Request | None:
        if not isinstance(exception, RenderInterruptedError):
            return None
        self.stats.inc_value("render/interrupted")
        logger.info("Requeued %s: %s", request, exception)
        again = request.copy()  # keeps the lease: the scheduler hands it over, as for a retry
        again.dont_filter = True
        return again
