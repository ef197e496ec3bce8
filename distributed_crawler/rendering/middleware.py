"""Downloader middleware that decides which requests the browser downloads.

It sits at 650, before the proxy middleware (700). On the way down it sets `meta["playwright"]`
(meta.py PLAYWRIGHT_META) to True for requests marked for rendering (meta `render`,
PLAYWRIGHT_URL_PATTERNS; `dont_render` wins): every later component reads that key instead of
deciding again.

With PLAYWRIGHT_AUTO, the requests nothing marked are fetched with plain HTTP first; on the way up,
a page that looks script-built (auto.py) is fetched again in the browser, through the same proxy,
within the same download (same lease, no trip through the queue), unless the verdict of its host
and URL shape (verdicts.py, shared by every node) says rendering adds nothing there. The rendered
page replaces the plain one; how much text it added becomes one more sample of the verdict. A
render that fails leaves the plain page in place.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.http import TextResponse

from distributed_crawler.core.context import RedisContext
from distributed_crawler.internals import node_stopping
from distributed_crawler.meta import (
    AUTO_RENDER_META,
    BROWSER_PROXY_META,
    FRAMES_META,
    PLAYWRIGHT_META,
    PROXY_META,
)
from distributed_crawler.rendering.auto import adds_content, host_of, looks_script_built, url_shape, visible_text
from distributed_crawler.rendering.config import SHARED_HANDLER_ATTR, RenderConfig, RenderInterruptedError
from distributed_crawler.rendering.frames import frames_text
from distributed_crawler.rendering.verdicts import PLAIN, VerdictStore

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

MAX_HOST_STATS = 100  # hosts with their own render/auto/hosts/<host>/... stats; the rest under "other"


class RenderingMiddleware:
    """Downloader middleware: marks the requests the browser downloads (`meta["playwright"]`) and,
    with PLAYWRIGHT_AUTO, renders the plain pages that need it."""

    def __init__(self, config: RenderConfig, stats: Any, crawler: Crawler) -> None:
        self.config = config
        self.stats = stats
        self.crawler = crawler
        self.verdicts: VerdictStore | None = None
        self.auto = config.auto
        self._host_stats: set[str] = set()
        self._failed_logged = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RenderingMiddleware:
        config = RenderConfig.from_settings(crawler.settings)
        mw = cls(config, crawler.stats, crawler)
        if config.auto and config.unavailable_reason:
            logger.warning("PLAYWRIGHT_AUTO is off on this node: %s", config.unavailable_reason)
            mw.auto = False
        if mw.auto:
            crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
            crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    async def spider_opened(self, spider: Spider) -> None:
        context = RedisContext.of(self.crawler).acquire()
        key = self.config.auto_key % {"spider": spider.name}
        self.verdicts = VerdictStore(context.client, key, self.stats, context.config.masked_url)
        logger.info(
            "Auto rendering on: plain pages that look script-built are rendered until %d samples of "
            "their host and URL shape show rendering adds nothing (verdicts in %s)",
            self.config.auto_samples,
            key,
        )

    async def spider_closed(self, spider: Spider) -> None:
        if self.verdicts is not None:
            self.verdicts = None
            await RedisContext.of(self.crawler).release()

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

    # -- PLAYWRIGHT_AUTO -------------------------------------------------------------------------
    async def process_response(self, request: Request, response: Response, spider: Spider | None = None) -> Response:
        if not self.auto or self.verdicts is None or self.config.explicit_decision(request) is not None:
            return response
        if response.status != 200 or not isinstance(response, TextResponse) or not _is_html(response):
            return response
        reason = looks_script_built(response)
        if reason is None:
            return response
        field = url_shape(request.url)
        host = host_of(field)
        verdict = await self.verdicts.get(field)
        if verdict.state(self.config.auto_samples) == PLAIN:
            self.stats.inc_value("render/auto/skipped")
            self._host_stat(host, "skipped")
            return response
        if node_stopping(self.crawler):
            return response
        rendered = await self._render(request, reason)
        if rendered is None:
            return response
        frames = rendered.request.meta.get(FRAMES_META, []) if rendered.request is not None else []
        rendered_text = " ".join(filter(None, (visible_text(rendered), frames_text(frames))))
        added = adds_content(visible_text(response), rendered_text)
        await self.verdicts.record(field, added)
        self.stats.inc_value("render/auto/rendered")
        self.stats.inc_value("render/auto/added" if added else "render/auto/added_nothing")
        self._host_stat(host, "added" if added else "added_nothing")
        request.meta[FRAMES_META] = frames
        request.meta[AUTO_RENDER_META] = reason
        return rendered.replace(request=request)

    async def _render(self, request: Request, reason: str) -> TextResponse | None:
        """The page again, in the browser, through the proxy of the plain fetch; None on failure."""
        handler = getattr(self.crawler, SHARED_HANDLER_ATTR, None)
        if handler is None:
            logger.warning(
                "PLAYWRIGHT_AUTO needs distributed_crawler.rendering.RenderingDownloadHandler in "
                "DOWNLOAD_HANDLERS (http and https); auto rendering is off on this node"
            )
            self.auto = False
            return None
        meta = {k: v for k, v in request.meta.items() if k != FRAMES_META}
        meta[PLAYWRIGHT_META] = True
        if request.meta.get(PROXY_META):  # the pool's (or the spider's) proxy of the plain fetch
            meta[BROWSER_PROXY_META] = request.meta[PROXY_META]
        copy = request.replace(meta=meta, dont_filter=True)
        try:
            rendered = await handler.download_request(copy)
        except Exception as exc:  # noqa: BLE001 - the plain page stays: nothing is lost
            self.stats.inc_value("render/auto/failed")
            level = logging.DEBUG if self._failed_logged else logging.WARNING
            self._failed_logged = True
            logger.log(
                level,
                "Auto rendering of %s (%s) failed, the plain page is kept: %s "
                "(further failures: stat render/auto/failed, log level DEBUG)",
                request.url,
                reason,
                exc,
            )
            return None
        if not isinstance(rendered, TextResponse) or rendered.status != 200:
            self.stats.inc_value("render/auto/failed")
            return None
        return rendered

    def _host_stat(self, host: str, what: str) -> None:
        if host not in self._host_stats and len(self._host_stats) >= MAX_HOST_STATS:
            host = "other"
        else:
            self._host_stats.add(host)
        self.stats.inc_value(f"render/auto/hosts/{host}/{what}")


def _is_html(response: TextResponse) -> bool:
    ctype = response.headers.get(b"Content-Type", b"") or b""
    return b"html" in ctype.lower() or not ctype
