"""PLAYWRIGHT_AUTO: render the plain pages that need it, and learn where rendering adds nothing.

The requests nothing marks for rendering (RenderingMiddleware, 650) are fetched with plain HTTP.
On the way up, this middleware (570: after HttpCompression 590 decoded the body and Redirect 600
followed redirects, before Retry 550) looks at the page: if it looks script-built (auto.py), it is
fetched again in the browser, through the proxy of the plain fetch, within the same download (same
lease, no trip through the queue), unless the verdict of its host and URL shape (verdicts.py,
shared by every node) says rendering adds nothing there. The rendered page replaces the plain one;
whether it added text becomes one more sample of the verdict. A render that fails leaves the plain
page in place.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.http import TextResponse

from distributed_crawler.core.context import RedisContext
from distributed_crawler.internals import node_stopping
from distributed_crawler.keyspace import fill
from distributed_crawler.meta import AUTO_RENDER_META, BROWSER_PROXY_META, FRAMES_META, PLAYWRIGHT_META, PROXY_META
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


class AutoRenderMiddleware:
    """Downloader middleware (570): plain pages that look script-built are rendered in the browser."""

    def __init__(self, config: RenderConfig, crawler: Crawler) -> None:
        self.config = config
        self.crawler = crawler
        self.stats = crawler.stats
        self.verdicts: VerdictStore | None = None
        self.active = True
        self._host_stats: set[str] = set()
        self._failed_logged = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> AutoRenderMiddleware:
        config = RenderConfig.from_settings(crawler.settings)
        if not config.auto:
            raise NotConfigured
        if config.unavailable_reason:
            logger.warning("PLAYWRIGHT_AUTO is off on this node: %s", config.unavailable_reason)
            raise NotConfigured
        mw = cls(config, crawler)
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    async def spider_opened(self, spider: Spider) -> None:
        context = RedisContext.of(self.crawler).acquire()
        key = fill(self.config.auto_key, spider.name)
        self.verdicts = VerdictStore(context.client, key, self.stats, context.policy)
        logger.info(
            "Auto rendering on: plain pages that look script-built are rendered until %d samples of "
            "their host and URL shape show rendering adds nothing (PLAYWRIGHT_AUTO_SAMPLES; verdicts in %s)",
            self.config.auto_samples,
            key,
        )

    async def spider_closed(self, spider: Spider) -> None:
        if self.verdicts is not None:
            self.verdicts = None
            await RedisContext.of(self.crawler).release()

    async def process_response(self, request: Request, response: Response, spider: Spider | None = None) -> Response:
        if not self.active or self.verdicts is None or self.config.explicit_decision(request) is not None:
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
        handler: Any = getattr(self.crawler, SHARED_HANDLER_ATTR, None)
        if handler is None:
            logger.warning(
                "PLAYWRIGHT_AUTO needs distributed_crawler.rendering.RenderingDownloadHandler in "
                "DOWNLOAD_HANDLERS (http and https); auto rendering is off on this node"
            )
            self.active = False
            return None
        meta = {k: v for k, v in request.meta.items() if k != FRAMES_META}
        meta[PLAYWRIGHT_META] = True
        if request.meta.get(PROXY_META):  # the pool's (or the spider's) proxy of the plain fetch
            meta[BROWSER_PROXY_META] = request.meta[PROXY_META]
        copy = request.replace(meta=meta, dont_filter=True)
        try:
            rendered = await handler.download_request(copy)
        except RenderInterruptedError:  # the node is stopping: the plain page will do
            return None
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
