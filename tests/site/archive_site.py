"""A local news site with three months of archives (backfill a window of a site's past).

robots.txt names `/sitemap_index.xml`: one date-partitioned sitemap a month (`/sitemap-2026-08.xml`,
`-09`, `-10`, each with its `lastmod`) and `/sitemap-pages.xml` (no period, undated entries). Each
month has three stories `/2026/<mm>/story-<n>` with a `news:publication_date`; September's sitemap
also lists a story published on 31 August. `/feed.xml` (RSS, `pubDate`) lists an October story and
a September story no sitemap lists. The home page links to the newest stories. Every request is
logged, so a test tells exactly what a backfill fetched.

Standard library only.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler

from tests.site.local import LocalSite, send

MONTHS = ("08", "09", "10")


def story(month: str, n: int) -> str:
    return f"/2026/{month}/story-{n}"


LATE_AUGUST = "/2026/08/story-late"  # published 2026-08-31, listed in September's sitemap
FEED_ONLY = "/2026/09/story-feed"  # published 2026-09-20, only in the feed


class ArchiveSite(LocalSite):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._log: list[str] = []
        self.url = ""

    def fetched(self) -> list[str]:
        with self._lock:
            return list(self._log)

    def stories(self, month: str) -> list[str]:
        return [story(month, n) for n in (1, 2, 3)]

    def _sitemap(self, entries: list[tuple[str, str | None]]) -> str:
        rows = []
        for path, day in entries:
            news = (
                "<news:news><news:publication><news:name>Archive</news:name><news:language>en</news:language>"
                f"</news:publication><news:publication_date>{day}</news:publication_date>"
                "<news:title>Story</news:title></news:news>"
                if day
                else ""
            )
            rows.append(f"<url><loc>{self.url}{path}</loc>{news}</url>")
        return (
            '<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
            'xmlns:news="http://www.google.com/schemas/sitemap-news/0.9">' + "".join(rows) + "</urlset>"
        )

    def page(self, path: str) -> tuple[str, str] | None:
        """(content type, body) of a path, None = 404."""
        base = self.url
        if path == "/robots.txt":
            return "text/plain", f"User-agent: *\nAllow: /\nSitemap: {base}/sitemap_index.xml\n"
        if path == "/sitemap_index.xml":
            parts = [(f"/sitemap-2026-{m}.xml", f"2026-{m}-28") for m in MONTHS] + [
                ("/sitemap-pages.xml", "2026-10-30")
            ]
            rows = "".join(f"<sitemap><loc>{base}{p}</loc><lastmod>{d}</lastmod></sitemap>" for p, d in parts)
            return "application/xml", (
                '<?xml version="1.0" encoding="UTF-8"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                + rows
                + "</sitemapindex>"
            )
        for month in MONTHS:
            if path == f"/sitemap-2026-{month}.xml":
                entries: list[tuple[str, str | None]] = [
                    (p, f"2026-{month}-1{n}T09:00:00Z") for n, p in enumerate(self.stories(month), 1)
                ]
                if month == "09":
                    entries.append((LATE_AUGUST, "2026-08-31T22:00:00Z"))
                return "application/xml", self._sitemap(entries)
        if path == "/sitemap-pages.xml":
            return "application/xml", self._sitemap([("/about", None)])
        if path == "/feed.xml":
            items = [
                (story("10", 3), "Sat, 10 Oct 2026 09:00:00 GMT"),
                (FEED_ONLY, "Sun, 20 Sep 2026 09:00:00 GMT"),
            ]
            rows = "".join(
                f"<item><title>Story</title><link>{base}{p}</link><pubDate>{d}</pubDate></item>" for p, d in items
            )
            return (
                "application/rss+xml",
                f'<?xml version="1.0"?><rss version="2.0"><channel><title>Archive</title>{rows}</channel></rss>',
            )
        if path == "/":
            links = "".join(f'<li><a href="{p}">Story</a></li>' for p in self.stories("10"))
            return "text/html", (
                '<!doctype html><html><head><title>Archive</title><link rel="alternate" type="application/rss+xml" '
                f'href="/feed.xml"></head><body><ul>{links}</ul></body></html>'
            )
        if path.startswith("/2026/") or path == "/about":
            words = " ".join(f"{path.strip('/').replace('/', ' ')} word{i}" for i in range(60))
            return "text/html", (
                f"<!doctype html><html lang='en'><head><title>{path}</title></head><body><article><h1>{path}</h1>"
                f"<p>{words}</p><a href='{story('08', 1)}'>older</a></article></body></html>"
            )
        return None

    def start(self) -> str:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                with site._lock:
                    site._log.append(path)
                found = site.page(path)
                status, (kind, body) = (200, found) if found else (404, ("text/plain", "not found"))
                send(self, status, body.encode(), [("Content-Type", kind + "; charset=utf-8")])

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.url = self.serve(Handler)
        return self.url
