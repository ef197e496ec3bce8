"""What request meta read from Redis may ask of a node (docs/security.md): data for its request, never
a lever on the node itself.

Anyone who can write Redis can write a queue entry or a seed, so decoded meta is checked here
(frontier/codec.py on every leased entry, frontier/seeds.py on seeds) and a request that asks for more is
dead-lettered, never run:

- browser context options (`playwright_context_kwargs`) only from `CONTEXT_KWARGS`: nothing that
  writes or reads files (HAR, video, traces, storage state, a profile dir, downloads), changes the
  browser's security (ignore_https_errors, bypass_csp, permissions, service workers, client
  certificates) or its network path (proxy);
- `playwright_page_goto_kwargs` only `GOTO_KWARGS`;
- page event handlers (`playwright_page_event_handlers`) only as names of public methods of the
  spider (scrapy-playwright resolves a name with getattr on the spider);
- no `playwright_page_init_callback` (scrapy-playwright imports any dotted path it names);
- a `proxy` only as an http(s) URL whose host is not a refused literal IP (ALLOWED_PRIVATE_NETWORKS);
  an operator's own proxies come from settings, not from Redis.

Page methods are checked by frontier/tagged.py (PAGE_METHOD_ALLOWLIST, no file arguments).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from distributed_crawler.addresses import AddressRule, literal_ip
from distributed_crawler.frontier.callbacks import callback_allowed
from distributed_crawler.meta import (
    PLAYWRIGHT_CONTEXT_KWARGS_META,
    PLAYWRIGHT_PAGE_EVENT_HANDLERS_META,
    PLAYWRIGHT_PAGE_GOTO_KWARGS_META,
    PLAYWRIGHT_PAGE_INIT_CALLBACK_META,
    PROXY_META,
)

# Playwright's browser.new_context options that only shape what the page sees.
CONTEXT_KWARGS = frozenset(
    {
        "viewport",
        "screen",
        "no_viewport",
        "user_agent",
        "locale",
        "timezone_id",
        "extra_http_headers",
        "java_script_enabled",
        "is_mobile",
        "has_touch",
        "device_scale_factor",
        "color_scheme",
        "reduced_motion",
        "forced_colors",
        "contrast",
        "offline",
        "http_credentials",
        "base_url",
        "strict_selectors",
    }
)
GOTO_KWARGS = frozenset({"timeout", "wait_until", "referer"})


def check_meta(meta: dict[str, Any], spider: Any = None, addresses: AddressRule | None = None) -> None:
    """Raise ValueError (one line) if `meta`, read from Redis, asks for more than its request.

    `spider` None (a seed checked by the CLI): handler names are not checked (the node checks them
    when it leases the request)."""
    context = meta.get(PLAYWRIGHT_CONTEXT_KWARGS_META)
    if context is not None:
        if not isinstance(context, dict):
            raise ValueError(f"meta {PLAYWRIGHT_CONTEXT_KWARGS_META} must be an object")
        refused = sorted(str(k) for k in context if k not in CONTEXT_KWARGS)
        if refused:
            raise ValueError(
                f"meta {PLAYWRIGHT_CONTEXT_KWARGS_META} may not set {', '.join(refused)[:200]} from Redis "
                "(files, browser security, network path: set them in PLAYWRIGHT_CONTEXTS)"
            )
    goto = meta.get(PLAYWRIGHT_PAGE_GOTO_KWARGS_META)
    if goto is not None:
        if not isinstance(goto, dict) or set(goto) - GOTO_KWARGS:
            raise ValueError(f"meta {PLAYWRIGHT_PAGE_GOTO_KWARGS_META} may only set {', '.join(sorted(GOTO_KWARGS))}")
    if meta.get(PLAYWRIGHT_PAGE_INIT_CALLBACK_META) is not None:
        raise ValueError(f"meta {PLAYWRIGHT_PAGE_INIT_CALLBACK_META} cannot come from Redis (it names code to import)")
    handlers = meta.get(PLAYWRIGHT_PAGE_EVENT_HANDLERS_META)
    if handlers is not None:
        if not isinstance(handlers, dict) or not all(isinstance(v, str) for v in handlers.values()):
            raise ValueError(f"meta {PLAYWRIGHT_PAGE_EVENT_HANDLERS_META} must map events to spider method names")
        for name in handlers.values():
            if spider is not None and not (callback_allowed(spider, name) and callable(getattr(spider, name, None))):
                raise ValueError(f"page event handler {name[:100]!r} is not a public method of the spider")
    proxy = meta.get(PROXY_META)
    if proxy is not None:
        _check_proxy(proxy, addresses)


def _check_proxy(proxy: Any, addresses: AddressRule | None) -> None:
    try:
        parts = urlsplit(proxy) if isinstance(proxy, str) else None
        host = parts.hostname if parts else None
    except ValueError:
        parts, host = None, None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        raise ValueError(f"meta {PROXY_META} must be an http(s) proxy URL")
    ip = literal_ip(host)
    why = (addresses or AddressRule()).refusal(ip) if ip is not None else None
    if why:
        raise ValueError(f"meta {PROXY_META}: {why}")
