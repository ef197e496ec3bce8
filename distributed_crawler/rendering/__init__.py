"""Browser rendering (scrapy-playwright on Debian's Chromium).

config.py (RenderConfig, errors), middleware.py (RenderingMiddleware: which requests render),
auto_render.py (AutoRenderMiddleware: PLAYWRIGHT_AUTO, with auto.py and verdicts.py), pages.py
(PagePool), settle.py (a quiet page), proxied.py (a browser context per proxy), handler.py
(RenderingDownloadHandler). The components are importable from here; Playwright is imported only
when one of them is (frames.py stays light).
"""

from __future__ import annotations

__all__ = ["AutoRenderMiddleware", "RenderingDownloadHandler", "RenderingMiddleware"]


def __getattr__(name: str) -> type:
    if name == "RenderingDownloadHandler":
        from distributed_crawler.rendering.handler import RenderingDownloadHandler

        return RenderingDownloadHandler
    if name == "AutoRenderMiddleware":
        from distributed_crawler.rendering.auto_render import AutoRenderMiddleware

        return AutoRenderMiddleware
    if name == "RenderingMiddleware":
        from distributed_crawler.rendering.middleware import RenderingMiddleware

        return RenderingMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
