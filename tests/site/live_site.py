"""A local news site that changes while it is crawled (revisits, 304s, recrawls).

`/` links to the sections `/section/<s>`; a section lists the articles published in it so far
(`/article/<n>`), newest first. `publish(k)` adds k articles, spread over the sections. Every page
sends an `ETag` (a digest of its content) and a `Last-Modified`; a request whose `If-None-Match`
matches, or whose `If-Modified-Since` is not older, gets `304 Not Modified` and no body. The
server logs every request with its status, so a test can count fetches and 304s per path.

Standard library only; runnable for a demo (docs/recrawl.md):
`python -m tests.site.live_site --port 8001 --publish-every 30`.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import re
import threading
import time
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler

from tests.site.local import LocalSite, send

_ARTICLE = re.compile(r"^/article/([1-9][0-9]{0,6})$")
_SECTION = re.compile(r"^/section/([a-z]{1,20})$")


class LiveNewsSite(LocalSite):
    def __init__(
        self, sections: tuple[str, ...] = ("world", "city"), articles: int = 4, section_delay: float = 0.0
    ) -> None:
        """`section_delay`: seconds a section page takes to answer (keeps revisits in flight)."""
        self.sections = sections
        self.section_delay = section_delay
        self.sections_in_flight = 0  # section requests being answered (slowly) right now
        self._lock = threading.Lock()
        self._published: list[tuple[int, str, float]] = []  # (id, section, published at, epoch s)
        self._changed: dict[str, float] = {"/": time.time()}  # path -> last change (epoch s)
        self._log: list[tuple[str, int]] = []
        self.port = 0  # 0 = any free port (tests); set before start() to pick one
        self.url = ""
        self.publish(articles)

    # -- content ---------------------------------------------------------------------------
    def publish(self, count: int) -> list[str]:
        """Publish `count` articles (round-robin over the sections); returns their paths."""
        now = time.time()
        paths = []
        with self._lock:
            for _ in range(count):
                n = len(self._published) + 1
                section = self.sections[(n - 1) % len(self.sections)]
                self._published.append((n, section, now))
                self._changed[f"/section/{section}"] = now
                paths.append(f"/article/{n}")
        return paths

    def article_paths(self) -> list[str]:
        with self._lock:
            return [f"/article/{n}" for n, _, _ in self._published]

    def section_of(self, article_path: str) -> str:
        n = int(article_path.rsplit("/", 1)[1])
        return self.sections[(n - 1) % len(self.sections)]

    def section_paths(self) -> list[str]:
        return [f"/section/{s}" for s in self.sections]

    def _page(self, path: str) -> tuple[bytes, float] | None:
        """(HTML, last change) of a path, None = 404."""
        with self._lock:
            published = list(self._published)
            changed = dict(self._changed)
        if path == "/":
            links = "".join(f'<li><a href="/section/{s}">{s}</a></li>' for s in self.sections)
            return _html("Front page", f"<ul>{links}</ul>"), changed["/"]
        section = _SECTION.match(path)
        if section and section.group(1) in self.sections:
            name = section.group(1)
            items = [n for n, s, _ in reversed(published) if s == name]
            links = "".join(f'<li><a href="/article/{n}">Story {n}</a></li>' for n in items)
            return _html(f"Section {name}", f"<ul>{links}</ul>"), changed.get(path, changed["/"])
        article = _ARTICLE.match(path)
        if article:
            n = int(article.group(1))
            for m, s, at in published:
                if m == n:
                    return _html(f"Story {n}", f"<p>Story {n} of section {s}: words that never change.</p>"), at
        return None

    # -- log ---------------------------------------------------------------------------------
    def log(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self._log)

    def hits(self, path: str, status: int | None = None) -> int:
        """Requests for exactly `path` (answered with `status`, when given)."""
        return sum(1 for p, s in self.log() if p == path and (status is None or s == status))

    # -- server ------------------------------------------------------------------------------
    def start(self) -> str:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0].split("#", 1)[0]
                if path.startswith("/section/") and site.section_delay:
                    with site._lock:
                        site.sections_in_flight += 1
                    time.sleep(site.section_delay)
                    with site._lock:
                        site.sections_in_flight -= 1
                status, body, headers = site.respond(
                    path, self.headers.get("If-None-Match"), self.headers.get("If-Modified-Since")
                )
                with site._lock:
                    site._log.append((path, status))
                send(self, status, body, headers)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.url = self.serve(Handler, self.port)
        return self.url

    def respond(self, path: str, if_none_match: str | None, if_modified_since: str | None) -> tuple[int, bytes, list]:
        if path == "/robots.txt":
            return 200, b"User-agent: *\nAllow: /\n", [("Content-Type", "text/plain")]
        page = self._page(path)
        if page is None:
            return 404, _html("Not found", "<p>no such page</p>"), [("Content-Type", "text/html; charset=utf-8")]
        body, changed = page
        etag = '"' + hashlib.sha1(body).hexdigest()[:16] + '"'
        headers = [
            ("Content-Type", "text/html; charset=utf-8"),
            ("ETag", etag),
            ("Last-Modified", formatdate(int(changed), usegmt=True)),
        ]
        if if_none_match is not None:
            if etag in [t.strip() for t in if_none_match.split(",")]:
                return 304, b"", headers[1:]
        elif if_modified_since is not None:
            try:
                since = parsedate_to_datetime(if_modified_since).timestamp()
            except (TypeError, ValueError):
                since = None
            if since is not None and int(changed) <= since:
                return 304, b"", headers[1:]
        return 200, body, headers


def _html(title: str, body: str) -> bytes:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    ).encode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a local news site that publishes articles while it runs")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--publish-every", type=float, default=30.0, help="seconds between two new articles")
    args = parser.parse_args(argv)
    site = LiveNewsSite()
    site.port = args.port
    print(f"serving {site.start()}/ ; a new article every {args.publish_every:g}s (Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(args.publish_every)
            print("published", *site.publish(1), flush=True)
    except KeyboardInterrupt:
        site.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
