"""A local site whose content only a browser sees: rendering tests and bench/render.py.

Two servers on free ports: the site itself (`url`, 127.0.0.1) and a second origin (`other_url`,
`localhost` on another port: another *site* for Chromium, so its frame runs out of process).
Every token is assembled by JavaScript, so it never appears in the static HTML (`TOKENS`).

* `/`            plain index linking every `/r/` page (not rendered by the tests)
* `/r/main`      main text written by JavaScript after a short delay
* `/r/iframe`    an iframe whose text is written by JavaScript
* `/r/nested`    iframe -> iframe: two levels, each with its own JavaScript token
* `/r/cross`     an iframe from the second origin
* `/r/img`       an <img> the browser must not download (PLAYWRIGHT_ABORT_RESOURCE_TYPES)
* `/r/throws`    JavaScript throws before the page is ready
* `/r/hang`      sends half a page and never finishes loading
* `/r/slow?s=N`  ready after N seconds
* `/static`      plain page with a static `<iframe src="/f/static">` (IFRAME_FOLLOW_STATIC)
* `...?gz=1`     any page, gzip-encoded (Content-Encoding: gzip)
* `/many?n=N`    plain index of `/r/page/1..N`, each with token `page-<i>-token`
                 (`&kind=app`: of `/a/app/1..N`; `&kind=static`: of `/a/static/1..N`)

Pages for settling (PLAYWRIGHT_SETTLE_MS), ready at `load` but complete only later:
* `/s/timer`     an iframe whose text a timer writes 300 ms after the iframe's `load`
* `/s/xhr`       text from an XHR to `/api/late`, which answers after 400 ms
* `...?ms=N`     (`/s/timer`, `/s/xhr`) the late content comes N ms late instead
* `/s/forever`   token written at once, then a clock that changes the page every 50 ms forever

Pages for PLAYWRIGHT_AUTO:
* `/a/static`    a static article: text, no script, no iframe (auto must never render it); also
                 at `/a/static/N`
* `/a/app/N`     an empty `<div id=root>` filled by a script (token `app-N-token`, a paragraph)
* `other_url/n/N` (second host) looks script-built (a `<noscript>` asking for JavaScript, scripts)
                 but its scripts add no text: rendering adds nothing there

Rendered pages that behave set `<html data-ready>` once everything (frames included) is in
place, so `PLAYWRIGHT_WAIT_FOR = "html[data-ready]"` waits for them and times out on the broken
ones. Standard library only; `python tests/site/render_site.py` serves it for a manual look.
"""

from __future__ import annotations

import gzip
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import parse_qsl, urlsplit

from tests.site.local import LoopbackServer

READY = "html[data-ready]"
TOKENS = {
    "/r/main": ["main-token-42"],
    "/r/iframe": ["inner-token-42"],
    "/r/nested": ["level1-token-42", "level2-token-42"],
    "/r/cross": ["cross-token-42"],
    "/r/img": ["img-page-token-42"],
}
SETTLE_TOKENS = {
    "/s/timer": ["timer-token-42"],
    "/s/xhr": ["xhr-token-42"],
    "/s/forever": ["forever-token-42"],
}
ARTICLE = (
    "The harbour council met on Tuesday to discuss the new ferry timetable. Residents asked for an "
    "earlier first crossing and for a later last one on Fridays, when the market closes at nine. "
) * 6
MANY_KINDS = {"js": "/r/page/", "app": "/a/app/", "static": "/a/static/"}  # /many?kind=
GOOD_PAGES = sorted(TOKENS)
BROKEN_PAGES = ["/r/throws", "/r/hang"]
PAGE_RE = re.compile(r"/r/page/([1-9][0-9]*)")


def _js_token(name: str) -> str:
    """JavaScript that evaluates to '<name>-token-42' without the token in the source."""
    return f"'{name}-' + 'tok' + 'en-' + (6 * 7)"


def _doc(title: str, body: str, script: str = "") -> bytes:
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title></head>\n'
        f"<body>\n{body}\n<script>\n{script}\n</script>\n</body></html>\n"
    ).encode()


def _ready_on_load(extra: str = "") -> str:
    return (
        "window.addEventListener('load', function () {\n"
        f"  {extra}\n"
        "  document.documentElement.setAttribute('data-ready', '1');\n});"
    )


def _writes(element_id: str, name: str) -> str:
    return f"document.getElementById('{element_id}').textContent = {_js_token(name)};"


class RenderSite:
    def __init__(self) -> None:
        self.url = ""
        self.other_url = ""
        self._hits: Counter[str] = Counter()
        self._times: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._servers: list[ThreadingHTTPServer] = []
        self._threads: list[threading.Thread] = []

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> RenderSite:
        for role in ("main", "other"):
            server = _Server(("127.0.0.1", 0), _Handler)
            server.site = self  # type: ignore[attr-defined]
            server.role = role  # type: ignore[attr-defined]
            self._servers.append(server)
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
            thread.start()
            self._threads.append(thread)
        self.url = f"http://127.0.0.1:{self._servers[0].server_address[1]}"
        self.other_url = f"http://localhost:{self._servers[1].server_address[1]}"
        return self

    def stop(self) -> None:
        self._stop.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()

    def __enter__(self) -> RenderSite:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- accounting -------------------------------------------------------------------------
    def record(self, path: str) -> None:
        with self._lock:
            self._hits[path] += 1
            self._times.append((time.monotonic(), path))

    def hits(self, path: str) -> int:
        with self._lock:
            return self._hits[path]

    def total_hits(self) -> int:
        """Requests both servers received (every path)."""
        with self._lock:
            return sum(self._hits.values())

    def hit_times(self, prefix: str) -> list[float]:
        with self._lock:
            return [t for t, p in self._times if p.startswith(prefix)]

    def hit_paths(self, prefix: str) -> list[tuple[float, str]]:
        """(time, path) of every request under `prefix`, in order (a page rendered after a plain
        fetch shows up twice)."""
        with self._lock:
            return [(t, p) for t, p in self._times if p.startswith(prefix)]

    # -- pages --------------------------------------------------------------------------------
    def page(self, role: str, raw_path: str) -> tuple[int, str, bytes]:
        parts = urlsplit(raw_path)
        path, query = parts.path, dict(parse_qsl(parts.query))
        html_type = "text/html; charset=utf-8"
        if role == "other":
            if path == "/f/cross":
                return 200, html_type, _doc("cross", "<p id=t>cross frame</p>", _writes("t", "cross"))
            if path.startswith("/n/"):
                body = (
                    "<noscript>Please enable JavaScript to use this site.</noscript>"
                    f"<h1>Notice {path[3:]}</h1><p>{ARTICLE}</p>"
                )
                tracker = "window.dataLayer = window.dataLayer || []; dataLayer.push({page: location.pathname});"
                return 200, html_type, _doc("notice", body, tracker)
            return 404, html_type, _doc("404", "no such page")
        if path == "/robots.txt":
            return 200, "text/plain", b"User-agent: *\nAllow: /\n"
        if path == "/":
            links = "\n".join(f'<a href="{p}">{p}</a>' for p in GOOD_PAGES + BROKEN_PAGES)
            return 200, html_type, _doc("index", f"<p>render index</p>\n{links}")
        if path == "/static":
            return 200, html_type, _doc("static", '<p>static page</p><iframe src="/f/static"></iframe>')
        if path == "/f/static":
            return 200, html_type, _doc("static frame", "<p>static-frame-text</p>")
        if path == "/many":
            n = int(query.get("n", "10"))
            prefix = MANY_KINDS.get(query.get("kind", "js"), "/r/page/")
            links = "\n".join(f'<a href="{prefix}{i}">{i}</a>' for i in range(1, n + 1))
            return 200, html_type, _doc("many", links)
        if path == "/r/main":
            script = "setTimeout(function () {\n" + _writes("main", "main") + "\n"
            script += "document.documentElement.setAttribute('data-ready', '1');\n}, 50);"
            return 200, html_type, _doc("main", "<h1>JS page</h1><div id=main>loading</div>", script)
        if path == "/r/iframe":
            return (
                200,
                html_type,
                _doc("iframe", '<p>outer</p><iframe name="inner" src="/f/inner"></iframe>', _ready_on_load()),
            )
        if path == "/f/inner":
            return 200, html_type, _doc("inner", "<p id=t></p>", _writes("t", "inner"))
        if path == "/r/nested":
            return (
                200,
                html_type,
                _doc("nested", '<p>outer</p><iframe name="l1" src="/f/level1"></iframe>', _ready_on_load()),
            )
        if path == "/f/level1":
            body = '<p id=t></p><iframe name="l2" src="/f/level2"></iframe>'
            return 200, html_type, _doc("level1", body, _writes("t", "level1"))
        if path == "/f/level2":
            return 200, html_type, _doc("level2", "<p id=t></p>", _writes("t", "level2"))
        if path == "/r/cross":
            body = f'<p>outer</p><iframe name="cross" src="{self.other_url}/f/cross"></iframe>'
            return 200, html_type, _doc("cross", body, _ready_on_load())
        if path == "/r/img":
            body = '<p id=t></p><img src="/img.png" width=10 height=10>'
            return 200, html_type, _doc("img", body, _writes("t", "img-page") + "\n" + _ready_on_load())
        if path == "/img.png":
            return 200, "image/png", b"\x89PNG\r\n\x1a\n"
        if path == "/r/throws":
            script = "throw new Error('render-boom');\ndocument.documentElement.setAttribute('data-ready', '1');"
            return 200, html_type, _doc("throws", "<p>this page's script fails</p>", script)
        if path == "/r/slow":
            ms = int(float(query.get("s", "5")) * 1000)
            script = f"setTimeout(function () {{\n{_writes('t', 'slow')}\n"
            script += f"document.documentElement.setAttribute('data-ready', '1');\n}}, {ms});"
            return 200, html_type, _doc("slow", "<p id=t></p>", script)
        late_ms = int(query.get("ms", "0")) or None  # ?ms=N: the late content comes N ms late instead
        if path == "/s/timer":
            src = f"/f/timer?ms={late_ms}" if late_ms else "/f/timer"
            body = f'<p>outer</p><iframe name="timer" src="{src}"></iframe>'
            return 200, html_type, _doc("timer", body)
        if path == "/f/timer":
            script = "window.addEventListener('load', function () {\n  setTimeout(function () {\n"
            script += "    " + _writes("t", "timer") + f"\n  }}, {late_ms or 300});\n}});"
            return 200, html_type, _doc("timer frame", "<p id=t>waiting</p>", script)
        if path == "/s/xhr":
            script = (
                f"var x = new XMLHttpRequest(); x.open('GET', '/api/late?ms={late_ms or 400}');\n"
                "x.onload = function () { var d = JSON.parse(x.responseText);\n"
                "  document.getElementById('t').textContent = d.a + d.b; };\nx.send();"
            )
            return 200, html_type, _doc("xhr", "<p id=t>loading</p>", script)
        if path == "/api/late":
            time.sleep((late_ms or 400) / 1000)
            return 200, "application/json", b'{"a": "xhr-tok", "b": "en-42"}'
        if path == "/s/forever":
            script = _writes("t", "forever") + "\nvar n = 0;\n"
            script += "setInterval(function () { document.getElementById('c').textContent = 'tick ' + (n++); }, 50);"
            return 200, html_type, _doc("forever", "<p id=t></p><p id=c>tick</p>", script)
        if path == "/a/static" or path.startswith("/a/static/"):
            return 200, html_type, _doc("article", f"<h1>Ferry timetable</h1><p>{ARTICLE}</p>")
        if path.startswith("/a/app/"):
            n = path.rsplit("/", 1)[1]
            script = (
                "var root = document.getElementById('root'); var h = document.createElement('h1');\n"
                f"h.textContent = 'app-{n}-' + 'tok' + 'en'; root.appendChild(h);\n"
                "var p = document.createElement('p'); p.textContent = 'Built by script: ' + "
                "'the scores of the evening, the table after the match and the comments of readers.';\n"
                "root.appendChild(p);"
            )
            return 200, html_type, _doc(f"app {n}", "<div id=root></div>", script)
        match = PAGE_RE.fullmatch(path)
        if match:
            i = match.group(1)
            script = f"document.getElementById('t').textContent = 'page-{i}-' + 'tok' + 'en';\n" + _ready_on_load()
            return 200, html_type, _doc(f"page {i}", "<p id=t></p><p>" + "filler text " * 50 + "</p>", script)
        return 404, html_type, _doc("404", "no such page")


class _Server(LoopbackServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a browser closing a page mid-response is normal here


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        site: RenderSite = self.server.site  # type: ignore[attr-defined]
        role: str = self.server.role  # type: ignore[attr-defined]
        path = urlsplit(self.path).path
        site.record(path if role == "main" else f"other:{path}")
        if role == "main" and path == "/r/hang":
            self._hang(site)
            return
        status, ctype, body = site.page(role, self.path)
        self.send_response(status)
        if "gz=1" in urlsplit(self.path).query:  # the same page, gzip-encoded
            body = gzip.compress(body)
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _hang(self, site: RenderSite) -> None:
        """Half a page, then nothing until the site stops (or two minutes): load never fires."""
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        self.wfile.write(b"<!DOCTYPE html><html><head><title>hang</title></head><body><p>half a page")
        self.wfile.flush()
        site._stop.wait(120)
        self.close_connection = True


if __name__ == "__main__":
    with RenderSite() as s:
        print(f"render site at {s.url}/ (second origin {s.other_url})")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
