"""A local news publisher and a syndication site, for the news spider's tests and benchmark.

`NewsPortal` serves two hosts on two loopback addresses (any 127.x.y.z reaches a server bound to
it): the publisher (`publisher_url`, 127.0.0.1) and a wire service (`wire_url`, 127.0.0.2 by
default) that republishes one story. Every article page is boilerplate-heavy (navigation, cookie
banner, "most read" sidebar, footer: `BOILERPLATE` markers that must not reach the item's text)
around known body sentences (`Story.sentences`).

The publisher, as a crawler discovers it:
* `/` links to story 1 under two aliases (`/story?id=1`, its AMP copy `/amp/story-1`) whose
  `<link rel="canonical">` is `/2026/12/story-1` (linked from nowhere), and announces an RSS feed
  (story 3), an Atom feed (story 4) and a broken feed (garbage);
* `/robots.txt` names two sitemaps: a gzipped sitemap index (`/sitemap_index.xml.gz`: a recent
  sitemap with story 5, an old one with story 7, a malformed one and a zip bomb) and a Google
  News sitemap (`/news-sitemap.xml`: story 2 new, story 6 old);
* old stories (6, 7) are reachable only through their old sitemap entries.
The wire host's `/` links to `/wire/story-2`, story 2's body under another template, with a
canonical link to the publisher (another site: to be ignored). Its robots.txt names no sitemap.
"""

from __future__ import annotations

import gzip
import html
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import parse_qsl, urlsplit

from tests.site.local import LoopbackServer

BOILERPLATE = (
    "Navigation-menu-marker",
    "Cookie-banner-marker",
    "Most-read-sidebar-marker",
    "Footer-copyright-marker",
    "Newsletter-signup-marker",
)
OLD_DATE = datetime(2020, 1, 15, 9, 0, tzinfo=UTC)
BOMB_BYTES = 4 * 1024 * 1024  # the zip bomb's size once gunzipped (a test caps SITEMAP_MAX_BYTES below it)

_TOPICS = (
    ("Harbour bridge reopens after repairs", "the harbour bridge", "engineers"),
    ("Council approves the new library budget", "the library budget", "councillors"),
    ("Railway line to the coast reopens", "the coastal railway", "rail workers"),
    ("Museum opens a gallery of river paintings", "the river gallery", "curators"),
    ("Orchestra season opens with a free concert", "the concert season", "musicians"),
    ("Market square trees planted in 1950 replaced", "the old market trees", "gardeners"),
    ("Stadium roof plans from 2019 shelved", "the stadium roof", "planners"),
)


@dataclass(frozen=True)
class Story:
    id: int
    title: str
    sentences: tuple[str, ...]
    author: str
    published: datetime
    description: str

    @property
    def path(self) -> str:
        return f"/{self.published:%Y/%m}/story-{self.id}"


def _story(i: int, now: datetime) -> Story:
    title, subject, people = _TOPICS[i - 1]
    sentences = (
        f"Story {i} opens: {subject} was the talk of the town on Monday, residents said.",
        f"According to {people} who spoke at the public meeting, the work on {subject} took eighteen months.",
        f"The total cost of {subject} was paid by the regional fund and a local appeal that raised the rest.",
        f"Several shop owners near {subject} told reporters that trade had dropped while the work went on.",
        f"The mayor thanked {people} and promised a full report on {subject} before the end of the year.",
        f"Story {i} closes: a celebration for {subject} is planned for the first weekend of next month.",
    )
    published = OLD_DATE if i in (6, 7) else now - timedelta(hours=i)
    return Story(i, title, sentences, ("Jane Doe", "John Roe")[i % 2], published, f"Summary of story {i}.")


def _article_page(story: Story, canonical: str, amp: bool = False) -> bytes:
    nav = " ".join(f'<li><a href="/section/{s}">{s.title()}</a></li>' for s in ("politics", "sport", "culture"))
    most_read = "".join(f'<li><a href="/section/culture">{t[0]} Most-read-sidebar-marker</a></li>' for t in _TOPICS[:4])
    paragraphs = "\n".join(f"<p>{html.escape(s)}</p>" for s in story.sentences)
    body = f"""
<header><nav class="menu"><ul>{nav}</ul><p>Navigation-menu-marker: Home Politics Sport Culture Weather</p></nav></header>
<div class="cookie">Cookie-banner-marker: we use cookies to improve this site. <button>Accept all cookies</button></div>
<main><article>
<h1>{html.escape(story.title)}</h1>
<p class="byline">By {story.author}, {story.published:%d %B %Y}</p>
{paragraphs}
</article></main>
<aside><h3>Most read</h3><ul>{most_read}</ul>
<form>Newsletter-signup-marker: get the headlines every morning <input name="email"></form></aside>
<footer><p>Footer-copyright-marker 2026 Harbour Herald Ltd. All rights reserved.</p>
<a href="/section/about">About us</a> <a href="/section/contact">Contact</a></footer>"""
    head = f"""<meta charset="utf-8">
<title>{html.escape(story.title)} | Harbour Herald</title>
<meta name="author" content="{story.author}">
<meta name="description" content="{html.escape(story.description)}">
<meta property="article:published_time" content="{story.published.isoformat()}">
<link rel="canonical" href="{canonical}">"""
    if amp:
        head += "\n<style amp-boilerplate>body{visibility:hidden}</style>"
    tag = '<html amp lang="en-GB">' if amp else '<html lang="en-GB">'
    return f"<!DOCTYPE html>\n{tag}\n<head>\n{head}\n</head>\n<body>{body}\n</body>\n</html>\n".encode()


def _wire_page(story: Story, canonical: str) -> bytes:
    paragraphs = "\n".join(f"<p>{html.escape(s)}</p>" for s in story.sentences)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(story.title)} - Wire Service</title>
<link rel="canonical" href="{canonical}"></head>
<body><div id="top">Wire-service-menu: Latest | World | Business | Login</div>
<div class="content"><h2>{html.escape(story.title)}</h2>
<div class="story">{paragraphs}</div>
<p class="credit">Distributed by the wire service; first published by the Harbour Herald.</p></div>
<div id="bottom">Wire-service-footer: (c) 2026 Wire Service, terms, privacy, contact</div>
</body></html>
""".encode()


def _home(links: list[tuple[str, str]], feeds: list[tuple[str, str]]) -> bytes:
    alternates = "\n".join(f'<link rel="alternate" type="{t}" href="{h}" title="Feed">' for h, t in feeds)
    items = "\n".join(f'<li><a href="{html.escape(h)}">{html.escape(t)}</a></li>' for h, t in links)
    return f"""<!DOCTYPE html>
<html lang="en-GB"><head><meta charset="utf-8"><title>Harbour Herald</title>
{alternates}</head>
<body><nav>Navigation-menu-marker</nav><h1>Latest news</h1><ul>{items}</ul>
<footer>Footer-copyright-marker</footer></body></html>
""".encode()


def _urlset(entries: list[str], news: bool = False) -> bytes:
    ns = ' xmlns:news="http://www.google.com/schemas/sitemap-news/0.9"' if news else ""
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"{ns}>\n'
        + "\n".join(entries)
        + "\n</urlset>\n"
    ).encode()


class NewsPortal:
    """Two threaded HTTP hosts (module docstring); `hits(path)` counts requests per host and path."""

    def __init__(self, wire_host: str = "127.0.0.2") -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)
        self.stories = {i: _story(i, self.now) for i in range(1, len(_TOPICS) + 1)}
        self.wire_host = wire_host
        self.publisher_url = ""
        self.wire_url = ""
        self._servers: list[ThreadingHTTPServer] = []
        self._lock = threading.Lock()
        self._hits: Counter[tuple[str, str]] = Counter()

    # -- what a correct crawler stores --------------------------------------------------------
    def url(self, story: int) -> str:
        return self.publisher_url + self.stories[story].path

    @property
    def wire_story_url(self) -> str:
        return f"{self.wire_url}/wire/story-2"

    def hits(self, host_url: str, path: str) -> int:
        with self._lock:
            return self._hits[(host_url, path)]

    # -- pages ---------------------------------------------------------------------------------
    def render_publisher(self, raw: str) -> tuple[int, str, bytes]:
        parts = urlsplit(raw)
        path, query = parts.path, dict(parse_qsl(parts.query))
        page = "text/html; charset=utf-8"
        base = self.publisher_url
        stories = self.stories
        if path == "/":
            links = [("/story?id=1", stories[1].title), ("/amp/story-1", stories[1].title + " (AMP)")]
            feeds = [
                ("/feed.rss", "application/rss+xml"),
                ("/feed.atom", "application/atom+xml"),
                ("/broken-feed.xml", "application/rss+xml"),
                ("/gone-feed.xml", "application/rss+xml"),  # a 404: dead-lettered too
            ]
            return 200, page, _home(links, feeds)
        if path == "/robots.txt":
            robots = "User-agent: *\nDisallow: /private/\nSitemap: /sitemap_index.xml.gz\n"
            robots += f"Sitemap: {base}/news-sitemap.xml\n"
            return 200, "text/plain", robots.encode()
        if path == "/story" and query.get("id") == "1":
            return 200, page, _article_page(stories[1], stories[1].path)
        if path == "/amp/story-1":
            return 200, page, _article_page(stories[1], f"{base}{stories[1].path}", amp=True)
        for story in stories.values():
            if path == story.path:
                return 200, page, _article_page(story, story.path)
        if path == "/sitemap_index.xml.gz":
            recent, old = self.now - timedelta(hours=1), OLD_DATE
            sitemaps = [
                ("/sitemaps/recent.xml", recent),
                ("/sitemaps/archive.xml", old),
                ("/sitemaps/garbage.xml", recent),
                ("/sitemaps/bomb.xml.gz", recent),
            ]
            index = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
                + "\n".join(
                    f"<sitemap><loc>{base}{p}</loc><lastmod>{d.isoformat()}</lastmod></sitemap>" for p, d in sitemaps
                )
                + "\n</sitemapindex>\n"
            )
            return 200, "application/x-gzip", gzip.compress(index.encode())
        if path == "/sitemaps/recent.xml":
            entry = f"<url><loc>{self.url(5)}</loc><lastmod>{stories[5].published.isoformat()}</lastmod></url>"
            return 200, "application/xml", _urlset([entry])
        if path == "/sitemaps/archive.xml":
            entry = f"<url><loc>{self.url(7)}</loc><lastmod>{OLD_DATE.isoformat()}</lastmod></url>"
            return 200, "application/xml", _urlset([entry])
        if path == "/sitemaps/garbage.xml":
            return 200, "application/xml", b'<?xml version="1.0"?>\n<urlset><url><loc>' + base.encode() + b"/x</loc>"
        if path == "/sitemaps/bomb.xml.gz":
            return 200, "application/x-gzip", gzip.compress(b"<urlset>" + b" " * BOMB_BYTES + b"</urlset>")
        if path == "/news-sitemap.xml":
            entries = [
                f"<url><loc>{self.url(i)}</loc><news:news><news:publication><news:name>Harbour Herald</news:name>"
                "<news:language>en</news:language></news:publication>"
                f"<news:publication_date>{stories[i].published.isoformat()}</news:publication_date><news:title>{html.escape(stories[i].title)}</news:title></news:news></url>"
                for i in (2, 6)
            ]
            return 200, "application/xml", _urlset(entries, news=True)
        if path == "/feed.rss":
            s = stories[3]
            rss = f"""<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0"><channel><title>Harbour Herald</title><link>{base}/</link><description>News</description>
<item><title>{html.escape(s.title)}</title><link>{self.url(3)}</link>
<pubDate>{s.published:%a, %d %b %Y %H:%M:%S} GMT</pubDate></item>
</channel></rss>
"""
            return 200, "application/rss+xml", rss.encode()
        if path == "/feed.atom":
            s = stories[4]
            atom = f"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>Harbour Herald</title><id>{base}/</id>
<updated>{s.published.isoformat()}</updated>
<entry><title>{html.escape(s.title)}</title><id>{self.url(4)}</id><link href="{s.path}"/>
<updated>{s.published.isoformat()}</updated></entry>
</feed>
"""
            return 200, "application/atom+xml", atom.encode()
        if path == "/broken-feed.xml":
            return 200, "application/rss+xml", b"\x00\x01 this is not a feed \xff\xfe <<<"
        return 404, page, b"<html><body>Not found</body></html>"

    def render_wire(self, raw: str) -> tuple[int, str, bytes]:
        path = urlsplit(raw).path
        if path == "/":
            return 200, "text/html", _home([("/wire/story-2", self.stories[2].title)], [])
        if path == "/robots.txt":
            return 200, "text/plain", b"User-agent: *\nDisallow:\n"
        if path == "/wire/story-2":
            return 200, "text/html; charset=utf-8", _wire_page(self.stories[2], self.url(2))
        return 404, "text/html", b"<html><body>Not found</body></html>"

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> NewsPortal:
        for host, render in (("127.0.0.1", self.render_publisher), (self.wire_host, self.render_wire)):
            server = LoopbackServer((host, 0), _handler(self, render))
            server.daemon_threads = True
            url = f"http://{host}:{server.server_address[1]}"
            if host == "127.0.0.1":
                self.publisher_url = url
            else:
                self.wire_url = url
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
            self._servers.append(server)
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def __enter__(self) -> NewsPortal:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def _handler(portal: NewsPortal, render: object) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30

        def do_GET(self) -> None:
            host_url = f"http://{self.server.server_address[0]}:{self.server.server_address[1]}"
            with portal._lock:
                portal._hits[(host_url, urlsplit(self.path).path)] += 1
            status, ctype, body = render(self.path)  # type: ignore[operator]
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    return Handler


if __name__ == "__main__":  # python -m tests.site.news_portal: serve until Ctrl-C
    with NewsPortal() as portal:
        print(f"READY {portal.publisher_url} {portal.wire_url}", flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
