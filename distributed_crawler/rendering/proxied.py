"""A browser context per proxy: how a rendered request goes through the proxy pool.

Playwright sets a proxy per browser context (server and credentials). The proxy middleware puts the
proxy of a rendered request in `meta["_dc_browser_proxy"]`; for the length of the render the
handler names the request's context after its proxy (`<context>@proxy-<hash>`: no credentials in
names, logs or stats) and gives it that proxy. Contexts are bounded like all others
(PLAYWRIGHT_MAX_PAGES; an idle one is closed to make room). Playwright already sends loopback
addresses through a context's proxy (Chromium alone would bypass them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

from scrapy_playwright.handler import DEFAULT_CONTEXT_NAME

from distributed_crawler.meta import BROWSER_PROXY_META, PLAYWRIGHT_CONTEXT_KWARGS_META, PLAYWRIGHT_CONTEXT_META


def playwright_proxy(url: str) -> dict[str, str]:
    """`http://user:pw@host:port` -> Playwright's `{"server", "username", "password"}`."""
    parts = urlsplit(url)
    host = f"[{parts.hostname}]" if parts.hostname and ":" in parts.hostname else parts.hostname
    proxy = {"server": f"{parts.scheme}://{host}:{parts.port}" if parts.port else f"{parts.scheme}://{host}"}
    if parts.username is not None:
        proxy["username"] = unquote(parts.username)
        proxy["password"] = unquote(parts.password or "")
    return proxy


def context_name(base: str, proxy_url: str) -> str:
    return f"{base}@proxy-{hashlib.sha256(proxy_url.encode()).hexdigest()[:12]}"


@contextmanager
def through_proxy(meta: dict[str, Any], startup_contexts: Mapping[str, Any]) -> Iterator[bool]:
    """While rendering: the request's context is its proxy's (True), or unchanged (False). The meta
    is restored afterwards: a retry may pick another proxy, and the proxy never reaches Redis."""
    proxy = meta.get(BROWSER_PROXY_META)
    if not proxy or not isinstance(proxy, str):
        yield False
        return
    saved = {key: meta[key] for key in (PLAYWRIGHT_CONTEXT_META, PLAYWRIGHT_CONTEXT_KWARGS_META) if key in meta}
    base = str(meta.get(PLAYWRIGHT_CONTEXT_META) or DEFAULT_CONTEXT_NAME)
    kwargs = {**dict(startup_contexts.get(base) or {}), **dict(meta.get(PLAYWRIGHT_CONTEXT_KWARGS_META) or {})}
    kwargs["proxy"] = playwright_proxy(proxy)
    meta[PLAYWRIGHT_CONTEXT_META] = context_name(base, proxy)
    meta[PLAYWRIGHT_CONTEXT_KWARGS_META] = kwargs
    try:
        yield True
    finally:
        for key in (PLAYWRIGHT_CONTEXT_META, PLAYWRIGHT_CONTEXT_KWARGS_META):
            meta.pop(key, None)
        meta.update(saved)
