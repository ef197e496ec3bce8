"""The private-address rule for everything a rendered page loads (docs/security.md).

Chromium resolves and connects by itself, so the rule is applied where Playwright lets us stop a
request before it leaves: the page's route (scrapy-playwright's abort predicate: the document,
iframes, subresources, fetch/XHR) and the context's WebSocket route. The host is resolved here
and refused when a literal IP or any of its addresses is refused (Chromium may pick any of
them). Through an operator's proxy only literal IPs are judged: the proxy resolves names.
Service workers are blocked in every context (their requests bypass page routes).

Playwright calls the route for the first URL of a redirect chain only, and Chromium's DNS answer
may differ from ours: the browser's own proxy (egress.py) judges every connection it opens.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from distributed_crawler.addresses import AddressRule, literal_ip

CACHE_SECONDS = 10.0  # a host's addresses are reused this long (one page loads many resources)
CACHE_MAX = 10_000
NETWORK_SCHEMES = ("http", "https", "ws", "wss")


class BrowserGuard:
    """Whether a URL a rendered page asks for may load."""

    def __init__(self, rule: AddressRule, clock: Callable[[], float] = time.monotonic) -> None:
        self.rule = rule
        self.clock = clock
        self._cache: dict[str, tuple[float, list[str]]] = {}

    async def refusal(self, url: str, proxied: bool = False) -> str | None:
        """Why `url` must not load (one line naming the setting), None if it may."""
        try:
            parts = urlsplit(url)
            host = parts.hostname or ""
        except ValueError:
            return None  # the browser cannot load it either
        if parts.scheme.lower() not in NETWORK_SCHEMES or not host:
            return None  # data:, blob:, about:: no connection
        ip = literal_ip(host)
        if ip is not None:
            return self.rule.refusal(ip)
        if proxied:
            return None
        for address in await self._addresses(host):
            why = self.rule.refusal(address)
            if why is not None:
                return f"{host} resolves to {why.removeprefix('address ')}"
        return None

    async def _addresses(self, host: str) -> list[str]:
        now = self.clock()
        cached = self._cache.get(host)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            return []  # unresolvable: Chromium fails the request itself
        addresses = sorted({str(info[4][0]) for info in infos})
        if len(self._cache) >= CACHE_MAX:
            self._cache.clear()
        self._cache[host] = (now + CACHE_SECONDS, addresses)
        return addresses
