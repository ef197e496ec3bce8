"""A news source whose sitemap lists stories and, optionally, pages that will not be stored.

Served on a loopback address of its own (another address is another source). `/robots.txt` names
`/sitemap.xml` and disallows `/private/`; the sitemap (a plain urlset, every entry dated now)
lists `/story/1..stories` and, per `broken`, `gone`, `galleries`, `private`: pages answering 500,
404, a gallery page (JSON-LD CollectionPage: not an article) and a robots-disallowed page. The
home page links the stories only. Standard library only.
"""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler

from tests.site.local import LocalSite


class CoverageSite(LocalSite):
    def __init__(
        self, host: str, stories: int, broken: int = 0, gone: int = 0, galleries: int = 0, private: int = 0
    ) -> None:
        self.host = host
        self.counts = {"story": stories, "broken": broken, "gone": gone, "gallery": galleries, "private": private}
        self.url = ""

    def paths(self, kind: str) -> list[str]:
        return [f"/{kind}/{n}" for n in range(1, self.counts[kind] + 1)]

    def urls(self, kind: str) -> list[str]:
        return [self.url + p for p in self.paths(kind)]

    def page(self, path: str) -> tuple[int, str, bytes]:
        kind, _, number = path.strip("/").partition("/")
        listed = {p for k in self.counts for p in self.paths(k)}
        if path == "/robots.txt":
            body = f"User-agent: *\nDisallow: /private/\nSitemap: {self.url}/sitemap.xml\n"
            return 200, "text/plain", body.encode()
        if path == "/sitemap.xml":
            now = datetime.now(UTC).isoformat(timespec="seconds")
            entries = "".join(
                f"<url><loc>{self.url}{p}</loc><lastmod>{now}</lastmod></url>"
                for k in self.counts
                for p in self.paths(k)
            )
            body = (
                f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'
            )
            return 200, "application/xml", body.encode()
        if path == "/":
            links = "".join(f'<li><a href="{p}">Story {p}</a></li>' for p in self.paths("story"))
            return 200, "text/html", _html("Home", f"<ul>{links}</ul>")
        if path not in listed:
            return 404, "text/plain", b"not found"
        if kind == "broken":
            return 500, "text/plain", b"server error"
        if kind == "gone":
            return 404, "text/plain", b"not found"
        if kind == "gallery":
            data = {"@context": "https://schema.org", "@type": "CollectionPage", "name": f"Gallery {number}"}
            links = "".join(f'<li><a href="/photo/{number}-{i}">Photo {i}</a></li>' for i in range(30))
            body = f'<script type="application/ld+json">{json.dumps(data)}</script><ul>{links}</ul>'
            return 200, "text/html", _html(f"Gallery {number}", body)
        title = f"{self.host} {kind} {number}"
        when = datetime.now(UTC).isoformat(timespec="seconds")
        data = {"@context": "https://schema.org", "@type": "NewsArticle", "headline": title, "datePublished": when}
        words = " ".join(f"{kind}{number}w{(int(number) * 13 + i) % 211}" for i in range(150))
        body = (
            f'<script type="application/ld+json">{json.dumps(data)}</script>'
            f"<article><h1>{html.escape(title)}</h1><p>{words}</p></article>"
        )
        return 200, "text/html", _html(title, body)

    def start(self) -> str:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                status, kind, body = site.page(self.path.split("?", 1)[0])
                self.send_response(status)
                self.send_header("Content-Type", f"{kind}; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.url = self.serve(Handler, host=self.host)
        return self.url


def _html(title: str, body: str) -> bytes:
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
        f"<body>{body}</body></html>"
    ).encode()
