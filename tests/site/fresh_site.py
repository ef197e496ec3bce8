"""A local multi-source news site for the change feed and source health.

Source i is served on its own loopback address 127.0.0.(10 + i) (so each is its own source: an IP
address is its own registered domain), on one port per source. `/` lists the source's stories,
newest first; `/story/<n>` is a NewsArticle (JSON-LD with `datePublished` to the second).
`publish(i)` adds a story to source i, `edit(i, n)` changes a story's text, `remove(i, n)` makes
it answer 410. `run_publisher(every)` publishes on every active source each `every` seconds;
`silence(i)` stops source i from publishing (its pages still answer); `restyle(i)` changes source
i's template: stories it publishes from then on carry no publication date (extraction drift).

Standard library only; bench/freshness.py uses it too.
"""

from __future__ import annotations

import html
import json
import re
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from tests.site.local import LoopbackServer

_STORY = re.compile(r"^/story/([1-9][0-9]{0,6})$")


class _Story:
    def __init__(self, n: int, published: float) -> None:
        self.n = n
        self.published = published
        self.edits = 0
        self.gone = False


class FreshSite:
    def __init__(self, sources: int = 2, stories: int = 3) -> None:
        self._lock = threading.Lock()
        self._stories: list[list[_Story]] = [[] for _ in range(sources)]
        self.silent: set[int] = set()
        self.restyled: dict[int, int] = {}  # source -> its first story in the new template
        self.published_log: list[tuple[str, float]] = []  # (url, published at)
        self._servers: list[ThreadingHTTPServer] = []
        self.urls: list[str] = []
        self._stop = threading.Event()
        self._publisher: threading.Thread | None = None
        self._initial = stories

    # -- content -----------------------------------------------------------------------------
    def publish(self, source: int) -> str:
        with self._lock:
            stories = self._stories[source]
            story = _Story(len(stories) + 1, time.time())
            stories.append(story)
            url = f"{self.urls[source]}/story/{story.n}" if self.urls else f"/story/{story.n}"
            self.published_log.append((url, story.published))
            return url

    def edit(self, source: int, n: int) -> None:
        with self._lock:
            self._stories[source][n - 1].edits += 1

    def remove(self, source: int, n: int) -> None:
        with self._lock:
            self._stories[source][n - 1].gone = True

    def silence(self, source: int) -> None:
        with self._lock:
            self.silent.add(source)

    def restyle(self, source: int) -> None:
        with self._lock:
            self.restyled[source] = len(self._stories[source]) + 1

    def story_urls(self, source: int | None = None) -> list[str]:
        with self._lock:
            picks = range(len(self._stories)) if source is None else [source]
            return [f"{self.urls[i]}/story/{s.n}" for i in picks for s in self._stories[i]]

    def run_publisher(self, every: float) -> None:
        def loop() -> None:
            while not self._stop.wait(every):
                for source in range(len(self._stories)):
                    if source not in self.silent:
                        self.publish(source)

        self._publisher = threading.Thread(target=loop, daemon=True)
        self._publisher.start()

    def _page(self, source: int, path: str) -> tuple[int, bytes]:
        with self._lock:
            stories = list(self._stories[source])
        if path == "/":
            links = "".join(f'<li><a href="/story/{s.n}">Story {s.n}</a></li>' for s in reversed(stories))
            return 200, _html(f"Source {source}", f"<ul>{links}</ul>")
        match = _STORY.match(path)
        if match and int(match.group(1)) <= len(stories):
            story = stories[int(match.group(1)) - 1]
            if story.gone:
                return 410, b"gone"
            when = datetime.fromtimestamp(story.published, tz=UTC).isoformat(timespec="seconds")
            title = f"Source {source} story {story.n}"
            data = {"@context": "https://schema.org", "@type": "NewsArticle", "headline": title, "datePublished": when}
            if story.n >= self.restyled.get(source, story.n + 1):
                del data["datePublished"]  # the new template no longer says when
            words = " ".join(f"word{(story.n * 7 + i) % 97}" for i in range(120))
            body = (
                f'<script type="application/ld+json">{json.dumps(data)}</script>'
                f"<article><h1>{html.escape(title)}</h1><p>Edition {story.edits}. {words}</p></article>"
            )
            return 200, _html(title, body)
        return 404, b"not found"

    # -- servers -----------------------------------------------------------------------------
    def start(self) -> list[str]:
        site = self
        for source in range(len(self._stories)):

            class Handler(BaseHTTPRequestHandler):
                protocol_version = "HTTP/1.1"
                index = source

                def do_GET(self) -> None:
                    path = self.path.split("?", 1)[0].split("#", 1)[0]
                    if path == "/robots.txt":
                        status, body = 200, b"User-agent: *\nAllow: /\n"
                    else:
                        status, body = site._page(self.index, path)
                    self.send_response(status)
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    try:
                        self.wfile.write(body)
                    except (BrokenPipeError, ConnectionResetError):
                        self.close_connection = True

                def log_message(self, format: str, *args: object) -> None:
                    pass

            server = LoopbackServer((f"127.0.0.{10 + source}", 0), Handler)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self._servers.append(server)
            self.urls.append(f"http://127.0.0.{10 + source}:{server.server_address[1]}")
        for source in range(len(self._stories)):
            for _ in range(self._initial):
                self.publish(source)
        return self.urls

    def stop(self) -> None:
        self._stop.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> FreshSite:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def _html(title: str, body: str) -> bytes:
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
        f"<body>{body}</body></html>"
    ).encode()
