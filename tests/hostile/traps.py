"""A news site beside the traps that exhaust or trap crawlers, on 127.0.0.1 (tests/test_hostile_traps_e2e.py,
bench/hostile.py).

Normal: `/` links to `ARTICLES` articles (`/news/<n>`, a few hundred words each) and to every trap;
`/robots.txt` names `/sitemap.xml` (the articles) and `/sitemap-bomb.xml.gz`.
Traps (each counted in `hits` by its first path segment):
- `/calendar/<day>`: an infinite calendar, each day linking to the day before and after;
- `/deep/1/2/3/...`: an ever-deeper path, one new segment per link;
- `/again/a/`: a relative link `a/` on every page, so the path repeats itself;
- `/bomb`: a gzip decompression bomb (`BOMB_BYTES` of zeros in a few hundred KiB);
- `/huge`: a page far over the cap announced by its Content-Length (`HUGE_BYTES`);
- `/stream`: a page far over the cap with no Content-Length (sent until the client stops reading);
- `/slow`: a slow-loris (one byte every 0.2 s for up to `SLOW_SECONDS`);
- `/loop/a` <-> `/loop/b`: a redirect loop, and `/chain/<n>` -> `/chain/<n + 1>` for ever;
- `/headers`: `HEADER_LINES` response headers;
- `/sitemap-bomb.xml.gz`: a gzipped sitemap that inflates to `SITEMAP_BOMB_BYTES`.
Standard library only; every handler is bounded in time so the server always stops.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler
from types import TracebackType

from tests.site.local import LoopbackServer

ARTICLES = 12
BOMB_BYTES = 64 * 1024 * 1024
HUGE_BYTES = 200 * 1024 * 1024
STREAM_LIMIT = 64 * 1024 * 1024  # the server stops sending /stream after this (the client stops far before)
SLOW_SECONDS = 20.0
HEADER_LINES = 2000
SITEMAP_BOMB_BYTES = 80 * 1024 * 1024
WORDS = "harbour council budget river election festival library railway market weather school bridge".split()


def article_text(n: int) -> str:
    return " ".join(f"{WORDS[(n * 7 + i) % len(WORDS)]}{n}x{i % 37}" for i in range(300))


def _html(title: str, body: str) -> bytes:
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>'
        f"<body>{body}</body></html>"
    ).encode()


def _zeros_gzip(size: int) -> bytes:
    buffer = gzip.compress(b"\0" * (1024 * 1024), compresslevel=9)
    # gzip members concatenate: one MiB of zeros, size // 1 MiB times
    return buffer * (size // (1024 * 1024))


class TrapSite:
    """`with TrapSite() as site: site.url ...`; `site.hits` counts requests per first path segment."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._bomb = _zeros_gzip(BOMB_BYTES)
        urls = "".join(f"<url><loc>{{base}}/sitemap-filler/{i}</loc></url>" for i in range(10))
        bomb = '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        filler = b"<!--" + b" " * (1024 * 1024 - 7) + b"-->"
        self._sitemap_bomb = gzip.compress(
            bomb.encode() + urls.encode() + filler * (SITEMAP_BOMB_BYTES // len(filler)) + b"</urlset>",
            compresslevel=9,
        )
        self.server = LoopbackServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> TrapSite:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def article_urls(self) -> list[str]:
        return [f"{self.url}/news/{n}" for n in range(1, ARTICLES + 1)]

    def count(self, path: str) -> None:
        with self._lock:
            self.hits[path.split("/")[1] if path.count("/") else path] += 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                site.count(path)
                try:
                    self._route(path)
                except (BrokenPipeError, ConnectionResetError, TimeoutError):
                    pass  # the crawler stopped reading: what a cap does

            def _send(self, status: int, body: bytes, ctype: str = "text/html; charset=utf-8", **headers: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name.replace("_", "-"), value)
                self.end_headers()
                self.wfile.write(body)

            def _route(self, path: str) -> None:
                base = site.url
                if path == "/":
                    links = "".join(f'<a href="/news/{n}">Story {n}</a> ' for n in range(1, ARTICLES + 1))
                    traps = ["/calendar/0", "/deep/1", "/again/a/", "/bomb", "/huge", "/stream", "/slow"]
                    traps += ["/loop/a", "/chain/1", "/headers"]
                    links += "".join(f'<a href="{t}">{t}</a> ' for t in traps)
                    self._send(200, _html("Hostile Herald", links))
                elif path == "/robots.txt":
                    body = (
                        f"User-agent: *\nAllow: /\nSitemap: {base}/sitemap.xml\nSitemap: {base}/sitemap-bomb.xml.gz\n"
                    )
                    self._send(200, body.encode(), "text/plain")
                elif path == "/sitemap.xml":
                    entries = "".join(f"<url><loc>{u}</loc></url>" for u in site.article_urls())
                    xml = f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'
                    self._send(200, xml.encode(), "application/xml")
                elif path == "/sitemap-bomb.xml.gz":
                    self._send(200, site._sitemap_bomb, "application/x-gzip")
                elif path.startswith("/news/"):
                    n = path.rsplit("/", 1)[1]
                    body = f'<article><h1>Story {n}</h1><p>{article_text(int(n) if n.isdigit() else 0)}</p></article><a href="/">Home</a> <a href="/calendar/0">Calendar</a>'
                    self._send(200, _html(f"Story {n}", body))
                elif path.startswith("/calendar/"):
                    day = int(path.rsplit("/", 1)[1] or 0)
                    links = f'<a href="/calendar/{day - 1}">previous</a> <a href="/calendar/{day + 1}">next</a>'
                    self._send(200, _html(f"Day {day}", f"<p>Events of day {day}</p>{links}"))
                elif path.startswith("/deep/"):
                    depth = path.rstrip("/").count("/")
                    self._send(200, _html("Deeper", f'<a href="{path.rstrip("/")}/{depth}">deeper</a>'))
                elif path.startswith("/again/"):
                    self._send(200, _html("Again", '<a href="a/">again</a>'))
                elif path == "/bomb":
                    self._send(200, site._bomb, Content_Encoding="gzip")
                elif path == "/huge":
                    self._stream(HUGE_BYTES, announce=True)
                elif path == "/stream":
                    self._stream(STREAM_LIMIT, announce=False)
                elif path == "/slow":
                    self._slow()
                elif path in ("/loop/a", "/loop/b"):
                    target = "/loop/b" if path.endswith("a") else "/loop/a"
                    self._send(302, b"", Location=base + target)
                elif path.startswith("/chain/"):
                    n = int(path.rsplit("/", 1)[1] or 0)
                    self._send(302, b"", Location=f"{base}/chain/{n + 1}")
                elif path == "/headers":
                    self.send_response(200)
                    for i in range(HEADER_LINES):
                        self.send_header(f"X-Filler-{i}", "v" * 40)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                else:
                    self._send(404, _html("Not found", "<p>nothing here</p>"))

            def _stream(self, size: int, announce: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                if announce:
                    self.send_header("Content-Length", str(size))
                else:
                    self.send_header("Connection", "close")
                self.end_headers()
                chunk = b"<p>" + b"x" * (64 * 1024 - 7) + b"</p>\n"
                sent = 0
                while sent < size and not site._stopping.is_set():
                    self.wfile.write(chunk)
                    sent += len(chunk)
                self.close_connection = True

            def _slow(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(10**6))
                self.end_headers()
                deadline = time.monotonic() + SLOW_SECONDS
                while time.monotonic() < deadline and not site._stopping.is_set():
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.2)
                self.close_connection = True

        return Handler
