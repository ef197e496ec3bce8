"""A site that points a crawler at an internal service, by every path a crawl follows.

`Internal` stands in for an internal service or the cloud metadata address: a server on a second
loopback address (127.0.0.2 by default) that records every request it gets. `SsrfSite` (on
127.0.0.1) names it through:

* links on the home page (`/`) and an article,
* a sitemap-index entry (`/sitemap_index.xml`), a sitemap entry (`/sitemap.xml`),
* a robots.txt `Sitemap:` line,
* a feed `<link rel=alternate>` on the home page and an item `<link>` in its own feed (`/feed.xml`),
* a 302 (`/go`) and a meta refresh (`/refresh`),
* `/go-named` (not linked): a 302 to `named_host` (a *name*, `localhost`) on the internal port,
  for a run where the internal service listens on the address that name resolves to: only the
  connect-time check sees that address,
* `/r/app`, for the browser: an iframe, a `fetch()` and a WebSocket to it, and an iframe of `/go`
  (a redirect inside the browser, which page routes do not see),
* `/r/go` and `/r/go-tls`, rendered documents that redirect inside the browser to the internal
  service, over plain http and over https (a CONNECT the browser's proxy refuses).

Every server counts the connections it accepts (`connections`) and the paths it was asked for
(`hits`, a list on the internal service, a Counter on the site).

Its own pages are `/a/1` .. `/a/N` (articles, listed in the sitemap and the feed). Standard library
only; every server binds port 0 and is stopped by `close()`.
"""

from __future__ import annotations

import html
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SENTENCES = (
    "The harbour board met on Tuesday to discuss the new ferry timetable for the winter season.",
    "Residents asked for more evening crossings, and the board promised a decision within a month.",
    "A trial of the later sailings will begin in November if the operator agrees to the costs.",
    "Local businesses on both shores said the change would help them stay open through the winter.",
)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: Any

    def verify_request(self, request: Any, client_address: Any) -> bool:
        with self.owner.lock:
            self.owner.connections += 1
        return True


class _Quiet(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _send(self, status: int, body: bytes, ctype: str = "text/html; charset=utf-8", **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()


class _Serving:
    def __init__(self, host: str, handler: type[BaseHTTPRequestHandler]) -> None:
        self.lock = threading.Lock()
        self.connections = 0
        self.server = _Server((host, 0), handler)
        self.server.owner = self
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


class _InternalHandler(_Quiet):
    def do_GET(self) -> None:
        owner: Internal = self.server.owner
        with owner.lock:
            owner.hits.append(self.path)
        self._send(200, b"<html><body><p>internal secret: root password hunter2</p></body></html>")


class Internal(_Serving):
    """Records every request (`hits`): the test asserts it stays empty."""

    def __init__(self, host: str = "127.0.0.2") -> None:
        self.hits: list[str] = []
        super().__init__(host, _InternalHandler)


def _article(i: int) -> bytes:
    text = "".join(f"<p>{html.escape(s)} (Story {i}.)</p>" for s in SENTENCES)
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Ferry story {i}</title>"
        f"<meta property='og:type' content='article'>"
        f"<meta property='article:published_time' content='2026-12-0{1 + i % 3}T08:00:00+00:00'></head>"
        f"<body><article><h1>Ferry story {i}</h1>{text}</article></body></html>"
    ).encode()


class _SiteHandler(_Quiet):
    def do_GET(self) -> None:
        site: SsrfSite = self.server.owner
        inner, own = site.internal.url, site.url
        path = self.path.split("?", 1)[0]
        with site.lock:
            site.hits[path] += 1
        if path == "/":
            links = "".join(f"<li><a href='/a/{i}'>Ferry story {i}</a></li>" for i in range(1, site.articles + 1))
            body = (
                "<!DOCTYPE html><html><head><title>Harbour news</title>"
                "<link rel='alternate' type='application/rss+xml' href='/feed.xml'>"
                f"<link rel='alternate' type='application/rss+xml' href='{inner}/feed-link.xml'></head><body>"
                f"<ul>{links}</ul><a href='{inner}/home-link'>staff</a><a href='/go'>go</a>"
                "<a href='/refresh'>refresh</a><a href='/r/app'>app</a>"
                "<a href='/r/go'>in-browser redirect</a><a href='/r/go-tls'>in-browser https redirect</a></body></html>"
            )
            self._send(200, body.encode())
        elif path.startswith("/a/") and path[3:].isdigit() and 1 <= int(path[3:]) <= site.articles:
            self._send(200, _article(int(path[3:])))
        elif path == "/robots.txt":
            robots = f"User-agent: *\nAllow: /\nSitemap: {own}/sitemap_index.xml\nSitemap: {inner}/robots-sitemap.xml\n"
            self._send(200, robots.encode(), "text/plain")
        elif path == "/sitemap_index.xml":
            body = (
                "<?xml version='1.0'?><sitemapindex xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'>"
                f"<sitemap><loc>{own}/sitemap.xml</loc></sitemap>"
                f"<sitemap><loc>{inner}/index-entry.xml</loc></sitemap></sitemapindex>"
            )
            self._send(200, body.encode(), "application/xml")
        elif path == "/sitemap.xml":
            urls = "".join(f"<url><loc>{own}/a/{i}</loc></url>" for i in range(1, site.articles + 1))
            body = (
                "<?xml version='1.0'?><urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'>"
                f"{urls}<url><loc>{inner}/sitemap-entry</loc></url></urlset>"
            )
            self._send(200, body.encode(), "application/xml")
        elif path == "/feed.xml":
            items = "".join(
                f"<item><title>Ferry story {i}</title><link>{own}/a/{i}</link></item>"
                for i in range(1, site.articles + 1)
            )
            body = (
                "<?xml version='1.0'?><rss version='2.0'><channel><title>Harbour</title>"
                f"<link>{own}/</link>{items}<item><title>x</title><link>{inner}/feed-item</link></item>"
                "</channel></rss>"
            )
            self._send(200, body.encode(), "application/rss+xml")
        elif path == "/go":
            self._send(302, b"", Location=f"{inner}/redirect")
        elif path == "/r/go":
            self._send(302, b"", Location=f"{inner}/r-redirect")
        elif path == "/r/go-tls":
            self._send(302, b"", Location=f"{inner.replace('http:', 'https:')}/r-redirect-tls")
        elif path == "/go-named":
            self._send(302, b"", Location=f"http://{site.named_host}:{site.named_port}/named")
        elif path == "/refresh":
            body = (
                f"<html><head><meta http-equiv='refresh' content='0; url={inner}/refresh'></head><body></body></html>"
            )
            self._send(200, body.encode())
        elif path == "/r/app":
            body = (
                "<!DOCTYPE html><html><head><title>App</title></head><body><h1>App page</h1>"
                f"<iframe src='{inner}/iframe'></iframe><iframe src='/go'></iframe>"
                "<script>const ws = new Promise(done => { try { const w = new WebSocket("
                f"'{inner.replace('http:', 'ws:')}/ws'); w.onerror = w.onclose = done; }} catch (e) {{ done(); }} }});"
                f"Promise.allSettled([fetch('{inner}/fetch'), ws]).then(() => "
                "document.documentElement.setAttribute('data-ready', '1'));</script></body></html>"
            )
            self._send(200, body.encode())
        else:
            self._send(404, b"<html><body>not here</body></html>")


class SsrfSite(_Serving):
    """The hostile site on `host`, pointing at `internal`; `/go-named` redirects to
    `named_host:named_port` (a name the connect-time check must judge)."""

    def __init__(
        self, internal: Internal, host: str = "127.0.0.1", articles: int = 3, named_host: str = "localhost"
    ) -> None:
        self.internal = internal
        self.articles = articles
        self.named_host = named_host
        self.named_port = internal.port
        self.hits: Counter[str] = Counter()
        super().__init__(host, _SiteHandler)

    def article_urls(self) -> set[str]:
        return {f"{self.url}/a/{i}" for i in range(1, self.articles + 1)}
