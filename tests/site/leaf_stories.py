"""A local site whose stories live at URLs that look like list pages, for the page-type
end-to-end test.

One threaded HTTP host on 127.0.0.1 (port 0). Stories, linked from the list pages:
* `/news/<n>`: a story in `<article>` (about 330 words), `article:published_time`, an author meta;
* `/archive/story-<n>.html`: `og:type=article`, no date anywhere;
* `/blog/<two-word-slug>`: a post dated by a `<time datetime>` in its header;
and one of each kind the blind samples lost (docs/benchmarks.md "Page types on real pages"):
* `/1927`: a post numbered like a year, `og:type=article` with a date;
* `/news/items/<slug>.html`: a news item of one paragraph among a CMS's menus, nothing else;
* `/site/articlepath.aspx?articleid=opposition`: wire copy of one-sentence paragraphs, `og:type=website`;
* `/oss_info/article.html?oid=8976`: a Japanese story among a CMS's menus, nothing else;
* `/p/<long-slug>?s=r`: a post linked as people share it (a search-like parameter), dated `og:type=article`.
List pages: the home page, the hubs `/news/`, `/blog/`, `/archive/`, a tag and a category page, and
`/archive/older.html`, a page of teaser `<article>`s at a leaf URL (the page decides, not the URL).
No JSON-LD anywhere. `hits(path)` counts requests per path.
"""

from __future__ import annotations

import html
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from tests.site.local import LoopbackServer

_PLACES = ("harbour", "library", "railway", "museum", "orchestra", "market", "stadium", "bridge", "river", "park")
_SLUGS = ("harbour-bridge", "library-budget", "coastal-railway", "river-gallery")
_MENU = (
    "<ul>"
    + "".join(f"<li><a href='/service/{i}'>Service number {i} for residents</a></li>" for i in range(60))
    + "</ul>"
)
YEAR_POST, SHORT_ITEM = "/1927", "/news/items/a-short-item-of-the-day.html"
WIRE_STORY, JAPANESE_STORY = "/site/articlepath.aspx?articleid=opposition", "/oss_info/article.html?oid=8976"
SHARE_LINK = "/p/the-two-minute-video-that-changed-the-debate?s=r"


def _paragraphs(n: int) -> str:
    place = _PLACES[n % len(_PLACES)]
    sentences = [
        f"The {place} project in the old town moved forward on Tuesday, council officials said in a statement.",
        f"Residents who live near the {place} had asked for clearer plans and for work to start before winter.",
        "According to the city engineer, the first phase will take about eleven weeks and cost less than expected.",
        "Shop owners along the main street said they welcomed the decision but worried about deliveries.",
        f"A public meeting about the {place} will be held in the town hall next month, with questions taken from everyone.",
        "The mayor said the money came from a regional fund and that no local taxes would rise because of it.",
        f"Story number {n} was written by our city desk, which has followed the {place} debate since spring.",
        "Several families told reporters that they hoped the changes would make the neighbourhood safer for children.",
        "Critics argued that the consultation had been too short and that older residents had not been heard.",
        "The council will publish the full report online, together with a map of the streets that will close.",
    ]
    return "".join(f"<p>{s} {s}</p>" for s in sentences)


class LeafStories:
    """The site (module docstring); a context manager that serves it on 127.0.0.1."""

    STORIES_PER_SHAPE = 4

    def __init__(self) -> None:
        self.url = ""
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()
        self._hits: Counter[str] = Counter()

    @property
    def story_paths(self) -> list[str]:
        n = self.STORIES_PER_SHAPE
        return [
            *(f"/news/{i}" for i in range(1, n + 1)),
            *(f"/archive/story-{i}.html" for i in range(1, n + 1)),
            *(f"/blog/{slug}" for slug in _SLUGS[:n]),
            YEAR_POST,
            SHORT_ITEM,
            WIRE_STORY,
            JAPANESE_STORY,
            SHARE_LINK,
        ]

    @property
    def list_paths(self) -> list[str]:
        return ["/", "/news/", "/blog/", "/archive/", "/tag/harbour", "/category/city/", "/archive/older.html"]

    def hits(self, path: str) -> int:
        with self._lock:
            return self._hits[path]

    def _page(self, title: str, head: str, body: str) -> bytes:
        nav = " ".join(f'<a href="{p}">{p.strip("/") or "Home"}</a>' for p in self.list_paths)
        return (
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>{head}'
            f"</head><body><header><nav>{nav}</nav></header><main>{body}</main>"
            "<footer>© 2026 Leaf Gazette. All rights reserved.</footer></body></html>"
        ).encode()

    def _teasers(self, paths: list[str]) -> str:
        return "".join(
            f'<article class="teaser"><h2><a href="{p}">A story at {p}</a></h2><p>The first lines of it…</p></article>'
            for p in paths
        )

    def _story(self, path: str, n: int) -> bytes:
        text = _paragraphs(n)
        if path in (YEAR_POST, SHORT_ITEM, WIRE_STORY, JAPANESE_STORY, SHARE_LINK):
            return self._lost_kind(path, n)
        if path.startswith("/news/"):
            head = (
                '<meta property="article:published_time" content="2026-11-30T08:00:00+01:00">'
                '<meta name="author" content="Jane Reporter">'
            )
            return self._page(f"Story {n}", head, f"<article><h1>Story {n}</h1>{text}</article>")
        if path.startswith("/archive/"):
            return self._page(f"Story {n}", '<meta property="og:type" content="article">', f"<h1>Story {n}</h1>{text}")
        header = f'<header><h1>Post {n}</h1><time datetime="2026-11-29">29 November</time></header>'
        return self._page(f"Post {n}", "", f"<article>{header}{text}</article>")

    def _lost_kind(self, path: str, n: int) -> bytes:
        """A story of a kind the blind samples lost (module docstring)."""
        if path in (YEAR_POST, SHARE_LINK):
            head = '<meta property="og:type" content="article"><meta property="article:published_time" content="2026-11-28">'
            return self._page(f"Post {n}", head, f"<h1>Post {n}</h1>{_paragraphs(n)}")
        if path == SHORT_ITEM:
            item = (
                "<p>The home care team reported this morning that two of its five cars had been broken into"
                " overnight, and the police are looking for anyone who saw people near the car park.</p>"
            )
            return self._page("Burglary", "", f"{_MENU}<h1>Burglary at the home care team</h1>{item}{_MENU}")
        if path == WIRE_STORY:
            wire = "".join(
                f"<p>Paragraph {i} of the wire story says that opposition to the proposal to remove personal data"
                f" from court records is mounting in the capital, for reasons that differ from group to group.</p>"
                for i in range(14)
            )
            return self._page("Opposition", '<meta property="og:type" content="website">', f"<h1>Opposition</h1>{wire}")
        japanese = "".join(
            f"<p>第{i}段落。このライブラリはデータの木構造を画面に分かりやすく表示するために作られたもので、"
            "開発者の間で評判になっています。</p>"
            for i in range(8)
        )
        return self._page("ツリー表示", "", f"{_MENU}<h1>ツリー表示のライブラリ</h1><div>{japanese}</div>{_MENU}")

    def render(self, path: str) -> tuple[int, bytes]:
        if path == "/robots.txt":
            return 200, b"User-agent: *\nDisallow:\n"
        stories = self.story_paths
        if path in self.list_paths:
            head = '<meta property="og:type" content="website">'
            return 200, self._page(f"List {path}", head, self._teasers(stories))
        if path in stories:
            return 200, self._story(path, stories.index(path) + 1)
        return 404, b"<html><body>Not found</body></html>"

    def __enter__(self) -> LeafStories:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                path = parts.path + ("?" + parts.query if parts.query else "")
                with site._lock:
                    site._hits[path] += 1
                status, body = site.render(path)
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if path == "/robots.txt" else "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = LoopbackServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
