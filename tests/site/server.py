"""A small, deterministic local news site for `make demo` and end-to-end tests.

Why it exists: the crawler must be tested against something real (HTTP, robots.txt,
retries, URL canonicalisation, JavaScript-only content) without internet access.
Every page is generated from its id, so the exact set of pages a correct crawler
stores is known in advance (see `NewsSite.expected_urls`).

Traps built in on purpose:

* list/article links carry tracking params (utm_*, gclid, fbclid), `#fragments`
  and reordered query strings, so the crawler's canonicalisation must collapse them;
* `/private/*` (e.g. `/private/admin`) is disallowed by robots.txt but linked from the front page;
  `NewsSite(crawl_delay=N)` adds `Crawl-delay: N` to robots.txt;
* an off-site link (`http://other.example/`) that must not be followed;
* `/flaky` answers 503 twice before it answers 200 (retry handling);
* `/down` always answers 503, and `/busy?after=N` always answers 503 (or `status=429`) with
  `Retry-After: N` (`date=1`: as an HTTP date); neither is linked from any page;
* `/dynamic` embeds `/frame` only via `<iframe src>`, and `/frame` writes its text
  with JavaScript, so the token never appears in static HTML.

Standard library only; runnable as a script (`python tests/site/server.py`).
"""

from __future__ import annotations

import argparse
import html
import json
import logging
import math
import random
import re
import signal
import socket
import sys
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from urllib.parse import parse_qsl, urlsplit

logger = logging.getLogger(__name__)

#: Text that /frame writes with JavaScript at load time (never present in static HTML).
FRAME_TOKEN = "iframe-token-42"
#: Static text of /dynamic (what a non-rendering crawler stores).
DYNAMIC_STATIC_TEXT = "dynamic-static-text"
#: Marker on the /flaky page once it stops failing.
FLAKY_OK_TEXT = "flaky-ok"
#: How many times /flaky answers 503 before answering 200 (per server instance).
FLAKY_FAILURES = 2

ROBOTS_TXT = "User-agent: *\nDisallow: /private/\n"
OFFSITE_URL = "http://other.example/"

_ARTICLE_RE = re.compile(r"/article/([1-9][0-9]*)")
_PAGE_RE = re.compile(r"[1-9][0-9]*")
_WORDS = (
    "council budget river harbour election festival library railway market "
    "weather school bridge museum orchestra stadium garden café naïve résumé"
).split()


def _page(title: str, body: str) -> bytes:
    """Wrap a body in a minimal UTF-8 HTML document (every page needs a <title>)."""
    doc = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )
    return doc.encode("utf-8")


def _a(href: str, text: str) -> str:
    """An <a> with a properly escaped href (so `&` arrives as `&amp;`, like real sites)."""
    return f'<a href="{html.escape(href, quote=True)}">{html.escape(text)}</a>'


class NewsSite:
    """Threaded local news site with request accounting.

    Use as ``with NewsSite(articles=50) as site: ... site.url ...``. Hit counting is
    thread-safe because the crawler hits the server from many connections at once.
    """

    def __init__(
        self,
        articles: int = 300,
        per_page: int = 20,
        delay: float = 0.0,
        crawl_delay: float | None = None,
        news_articles: bool = False,
    ) -> None:
        if articles < 0:
            raise ValueError("articles must be >= 0")
        if per_page < 1:
            raise ValueError("per_page must be >= 1")
        self.articles = articles
        self.per_page = per_page
        self.delay = delay
        self.crawl_delay = crawl_delay  # robots.txt gets `Crawl-delay: N` when set
        # articles a news spider recognises as such (NewsArticle JSON-LD, a body of 80 words unique
        # to this site), so STORE_PAGE_TYPES' default stores them (tests/product.py)
        self.news_articles = news_articles
        self.url: str = ""
        self._lock = threading.Lock()
        self._paths: list[str] = []
        self._times: list[float] = []  # time.monotonic() of each request, parallel to _paths
        self._walls: list[float] = []  # time.time() of each request (to compare with Redis TIME)
        self._flaky_count = 0
        self._active = 0  # requests being answered now (robots.txt aside)
        self.max_active = 0  # the most answered at once: what DOMAIN_MAX_IN_FLIGHT caps
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> str:
        """Bind 127.0.0.1 on a free port, serve in a daemon thread, return the base URL."""
        if self._server is not None:
            raise RuntimeError("NewsSite already started")
        host = getattr(self, "bind_host", "127.0.0.1")  # any 127.0.0.x: a host of its own (tests/test_frontier.py)
        server = _Server((host, 0), _Handler)
        server.site = self
        self._server = server
        port = server.server_address[1]
        self.url = f"http://{host}:{port}"
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"NewsSite-{port}",
            daemon=True,
        )
        self._thread.start()
        logger.debug("news site serving at %s", self.url)
        return self.url

    def stop(self) -> None:
        """Stop serving, close the listening socket and drop open keep-alive connections.

        Dropping live connections matters: otherwise a client holding a keep-alive
        connection could keep talking to a "stopped" site.
        """
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> NewsSite:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---------------------------------------------------------------- accounting
    def _record(self, path: str) -> None:
        with self._lock:
            self._paths.append(path)
            self._times.append(time.monotonic())
            self._walls.append(time.time())

    def _answering(self, delta: int) -> None:
        with self._lock:
            self._active += delta
            self.max_active = max(self.max_active, self._active)

    def request_log(self) -> list[tuple[float, str]]:
        """(arrival time on this server's monotonic clock, raw path) of every request so far."""
        with self._lock:
            return list(zip(self._times, self._paths))

    def wall_log(self) -> list[tuple[float, str]]:
        """(arrival time.time(), raw path) of every request: comparable with Redis TIME on this host."""
        with self._lock:
            return list(zip(self._walls, self._paths))

    def hits(self, path_prefix: str = "") -> int:
        """Number of requests whose raw path+query starts with ``path_prefix``."""
        with self._lock:
            return sum(1 for p in self._paths if p.startswith(path_prefix))

    def requested_paths(self) -> list[str]:
        """Every raw path+query requested so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._paths)

    def _next_flaky(self) -> int:
        """Increment and return the /flaky request count (1-based)."""
        with self._lock:
            self._flaky_count += 1
            return self._flaky_count

    # ------------------------------------------------------------------ structure
    @property
    def num_pages(self) -> int:
        """Number of /list pages (at least one, even with zero articles)."""
        return max(1, math.ceil(self.articles / self.per_page))

    def list_page_of(self, article_id: int) -> int:
        """Which /list page links to ``article_id``."""
        return (article_id - 1) // self.per_page + 1

    def expected_urls(self) -> set[str]:
        """Exact canonical URLs a correct, robots-obeying crawler stores (200 pages only).

        Canonical form: fragment dropped, utm_*/gclid/fbclid dropped, query sorted,
        lower-case scheme/host, no default port. List links always carry
        ``sort=new``, so list pages canonicalise to ``/list?page=N&sort=new``.
        /robots.txt, /private/*, /frame (iframe only) and 404s are excluded.
        """
        if not self.url:
            raise RuntimeError("start() the site first: URLs include its port")
        base = self.url
        urls = {f"{base}/", f"{base}/about", f"{base}/flaky", f"{base}/dynamic"}
        urls.update(f"{base}/list?page={n}&sort=new" for n in range(1, self.num_pages + 1))
        urls.update(f"{base}/article/{i}" for i in range(1, self.articles + 1))
        return urls

    # ---------------------------------------------------------------------- pages
    def render(self, raw_path: str) -> tuple[int, str, bytes]:
        """Route a raw request path to (status, content type, body); see `headers_for`.

        Kept separate from the handler so the routing is plain, testable Python.
        """
        parts = urlsplit(raw_path)
        path = parts.path
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        html_type = "text/html; charset=utf-8"

        if path == "/":
            return 200, html_type, self._front_page()
        if path == "/robots.txt":
            robots = ROBOTS_TXT + (f"Crawl-delay: {self.crawl_delay}\n" if self.crawl_delay else "")
            return 200, "text/plain; charset=utf-8", robots.encode("utf-8")
        if path == "/list":
            page = query.get("page", "1")
            if _PAGE_RE.fullmatch(page) and int(page) <= self.num_pages:
                return 200, html_type, self._list_page(int(page))
            return 404, html_type, self._not_found()
        match = _ARTICLE_RE.fullmatch(path)
        if match and int(match.group(1)) <= self.articles:
            if self.delay > 0:
                time.sleep(self.delay)
            return 200, html_type, self._article_page(int(match.group(1)))
        if path == "/about":
            return 200, html_type, self._about_page()
        if path.startswith("/private/"):
            return 200, html_type, _page("Private", "<p>private-content: robots.txt forbids this.</p>")
        if path == "/flaky":
            if self._next_flaky() <= FLAKY_FAILURES:
                return 503, html_type, _page("Unavailable", "<p>Temporarily unavailable.</p>")
            return (
                200,
                html_type,
                _page("Flaky", f"<p>{FLAKY_OK_TEXT}: third time lucky.</p>\n<p>{_a('/', 'Home')}</p>"),
            )
        if path == "/down":
            return 503, html_type, _page("Unavailable", "<p>Down for good.</p>")
        if path == "/busy":
            status = 429 if query.get("status") == "429" else 503
            return status, html_type, _page("Busy", "<p>Come back later.</p>")
        if path == "/dynamic":
            return 200, html_type, self._dynamic_page()
        if path == "/frame":
            return 200, html_type, self._frame_page()
        return 404, html_type, self._not_found()

    @staticmethod
    def headers_for(raw_path: str) -> list[tuple[str, str]]:
        """Extra response headers: `Retry-After` on /busy (seconds, or an HTTP date with date=1)."""
        parts = urlsplit(raw_path)
        if parts.path != "/busy":
            return []
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        after = int(query.get("after", "30"))
        # (the Date header, which an HTTP date is measured against, comes from send_response)
        value = formatdate(time.time() + after, usegmt=True) if query.get("date") == "1" else str(after)
        return [("Retry-After", value)]

    def _front_page(self) -> bytes:
        links = [
            _a("/list?page=1&sort=new", "All news"),
            _a("/article/1", "Top story"),
            _a("/article/2#comments", "Second story (comments)"),
            _a("/article/3?utm_source=feed&utm_medium=rss", "Third story"),
            _a("/flaky", "Sometimes down"),
            _a("/dynamic", "Interactive"),
            _a(f"{self.url}/about?fbclid=front", "About us"),
            _a("/private/secret-1", "Staff only 1"),
            _a("/private/secret-2", "Staff only 2"),
            _a(OFFSITE_URL, "Partner site"),
        ]
        items = "\n".join(f"<li>{link}</li>" for link in links)
        return _page("Local News", f"<h1>Local News</h1>\n<ul>\n{items}\n</ul>")

    def _list_href(self, page: int, variant: int) -> str:
        """A link to list page ``page``; ``variant`` picks query order/tracking noise.

        All variants share the canonical form ``/list?page=N&sort=new``.
        """
        forms = (
            f"/list?page={page}&sort=new",
            f"/list?sort=new&page={page}",
            f"/list?page={page}&sort=new#comments",
            f"/list?utm_source=feed&sort=new&utm_medium=rss&page={page}",
            f"/list?sort=new&page={page}&gclid=abc",
            f"/list?fbclid=xyz&page={page}&sort=new",
        )
        return forms[variant % len(forms)]

    def _article_href(self, article_id: int) -> str:
        """Link to an article with id-dependent tracking noise (same canonical URL)."""
        if article_id % 7 == 0:
            return f"/article/{article_id}?gclid=abc"
        if article_id % 5 == 0:
            return f"/article/{article_id}?utm_source=feed&utm_medium=rss"
        if article_id % 3 == 1:
            return f"/article/{article_id}#comments"
        return f"/article/{article_id}"

    def _list_page(self, page: int) -> bytes:
        first = (page - 1) * self.per_page + 1
        last = min(page * self.per_page, self.articles)
        items = "\n".join(f"<li>{_a(self._article_href(i), f'Article {i}')}</li>" for i in range(first, last + 1))
        nav = [_a("/?utm_source=nav", "Home")]
        if page > 1:
            nav.append(_a(self._list_href(1, page + 3), "First"))
            nav.append(_a(self._list_href(page - 1, page + 1), "Previous"))
        if page < self.num_pages:
            # Alternate query order page by page, plus a noisy duplicate of "next".
            nav.append(_a(self._list_href(page + 1, page % 2), "Next"))
            nav.append(_a(self._list_href(page + 1, page + 2), "Next (again)"))
            nav.append(_a(self._list_href(self.num_pages, page + 4), "Last"))
        body = (
            f"<h1>News, page {page} of {self.num_pages}</h1>\n<ul>\n{items}\n</ul>\n"
            f'<p class="nav">{" | ".join(nav)}</p>'
        )
        return _page(f"News - page {page}", body)

    def _article_page(self, article_id: int) -> bytes:
        paragraphs = []
        for n in range(3):
            words = [_WORDS[(article_id * 7 + n * 13 + k * 5) % len(_WORDS)] for k in range(12)]
            paragraphs.append(f"<p>{' '.join(words).capitalize()}.</p>")
        paragraphs.insert(1, f"<p>article-{article_id}-body</p>")
        head, opening, closing = "", "", ""
        if self.news_articles:
            pick = random.Random(f"{self.url}/article/{article_id}")
            words = " ".join(f"{pick.choice(_WORDS)}{pick.randrange(1000)}" for _ in range(80))
            opening, closing = "<article>", "</article>"
            paragraphs.append(f"<p>{words.capitalize()}. Reported from {html.escape(self.url)}.</p>")
            data = {"@context": "https://schema.org", "@type": "NewsArticle", "headline": f"Article {article_id}"}
            data["datePublished"] = f"2026-11-{1 + article_id % 28:02d}T08:00:00+00:00"
            head = f'<script type="application/ld+json">{json.dumps(data)}</script>\n'
        nav = [_a("/", "Home"), _a("../about", "About")]
        if article_id < self.articles:
            nav.append(_a(f"/article/{article_id + 1}#top", "Next article"))
        if article_id > 1:
            nav.append(_a(f"/article/{article_id - 1}?utm_campaign=x", "Previous article"))
        page = self.list_page_of(article_id)
        nav.append(_a(self._list_href(page, article_id), "Back to list"))
        body = (
            f'{head}{opening}<h1 id="top">Article {article_id}</h1>\n'
            + "\n".join(paragraphs)
            + f'{closing}\n<p class="nav">{" | ".join(nav)}</p>'
        )
        return _page(f"Article {article_id}", body)

    def _about_page(self) -> bytes:
        return _page(
            "About",
            f"<h1>About</h1>\n<p>A made-up local newspaper for crawler tests.</p>\n<p>{_a('/', 'Home')}</p>",
        )

    def _dynamic_page(self) -> bytes:
        body = (
            f"<h1>Interactive</h1>\n<p>{DYNAMIC_STATIC_TEXT}</p>\n"
            '<iframe src="/frame" title="widget" width="400" height="100"></iframe>\n'
            f"<p>{_a('/', 'Home')}</p>"
        )
        return _page("Dynamic", body)

    def _frame_page(self) -> bytes:
        # Token assembled from parts so it never appears in the static HTML.
        script = (
            "<script>\nwindow.addEventListener('load', function () {\n"
            "  document.body.innerText = 'iframe-' + 'token-' + (6 * 7);\n});\n</script>"
        )
        return _page("Frame", f"<noscript>needs javascript</noscript>\n{script}")

    def _not_found(self) -> bytes:
        return _page("Not found", "<h1>404</h1>\n<p>No such page.</p>")


class _Server(ThreadingHTTPServer):
    """Threaded server sized for ~64 concurrent crawler connections."""

    daemon_threads = True
    request_queue_size = 128
    allow_reuse_address = True
    site: NewsSite

    def __init__(self, *args: object, **kwargs: object) -> None:
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def track(self, conn: socket.socket, alive: bool) -> None:
        with self._conns_lock:
            if alive:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def close_connections(self) -> None:
        """Shut down every open client connection (used by NewsSite.stop)."""
        with self._conns_lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: object, client_address: object) -> None:
        """Clients hanging up mid-response is normal for crawlers: log quietly."""
        logger.debug("error serving %s", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    """Routes to NewsSite.render; HTTP/1.1 keep-alive like a real site."""

    protocol_version = "HTTP/1.1"
    server_version = "NewsSite/1.0"
    timeout = 30  # idle keep-alive connections must not pin threads forever
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def _respond(self, send_body: bool) -> None:
        site = self.server.site
        site._record(self.path)
        counted = not self.path.startswith("/robots.txt")
        if counted:
            site._answering(+1)
        try:
            status, ctype, body = site.render(self.path)
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for name, value in site.headers_for(self.path):
                self.send_header(name, value)
            self.end_headers()
            if send_body:
                self.wfile.write(body)
        finally:
            if counted:
                site._answering(-1)

    def do_GET(self) -> None:
        self._respond(send_body=True)

    def do_HEAD(self) -> None:
        self._respond(send_body=False)

    def log_message(self, format: str, *args: object) -> None:
        """Silence per-request logging (stderr noise drowns test output)."""


def main(argv: list[str] | None = None) -> int:
    """Run the site until SIGTERM/SIGINT; print `READY <url>` once it accepts requests."""
    parser = argparse.ArgumentParser(description="Local demo/test news site.")
    parser.add_argument("--articles", type=int, default=300)
    parser.add_argument("--per-page", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds slept per article page")
    args = parser.parse_args(argv)

    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    site = NewsSite(articles=args.articles, per_page=args.per_page, delay=args.delay)
    url = site.start()
    try:
        print(f"READY {url}", flush=True)
        while not stop.wait(0.2):
            pass
    finally:
        site.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
