"""Tests of the local news site itself.

Why: the end-to-end crawler tests trust `NewsSite.expected_urls()` and the hit
counters; if the site were wrong, crawler tests would pass or fail for the wrong
reasons. A tiny reference BFS crawler here proves the expected set is exact.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import urllib.robotparser
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # plain `pytest` (not `python -m pytest`) lacks the repo root
    sys.path.insert(0, str(ROOT))

from tests.site.server import FRAME_TOKEN, NewsSite  # noqa: E402

SERVER_SCRIPT = ROOT / "tests" / "site" / "server.py"
TIMEOUT = 5.0
TRACKING = {"gclid", "fbclid"}


def fetch(url: str) -> tuple[int, str, str]:
    """GET url -> (status, content-type, text); HTTP errors are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode("utf-8")
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.headers["Content-Type"], err.read().decode("utf-8")


def canonicalize(url: str) -> str:
    """Reference canonicalisation (same rules the crawler must implement)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    default = {"http": 80, "https": 443}.get(scheme)
    netloc = host if port is None or port == default else f"{host}:{port}"
    query = sorted(
        (k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not (k.startswith("utm_") or k in TRACKING)
    )
    return urlunsplit((scheme, netloc, parts.path or "/", urlencode(query), ""))


class LinkParser(HTMLParser):
    """Collects <a href> (followed) and <iframe src> (not followed) values."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.iframes: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "a" and values.get("href"):
            self.hrefs.append(values["href"] or "")
        elif tag == "iframe" and values.get("src"):
            self.iframes.append(values["src"] or "")


def links(html_text: str) -> LinkParser:
    parser = LinkParser()
    parser.feed(html_text)
    return parser


def bfs_crawl(base: str) -> set[str]:
    """Minimal polite crawler: robots.txt, same-site <a href> only, 503 retried 3x."""
    robots = urllib.robotparser.RobotFileParser(f"{base}/robots.txt")
    robots.read()
    start = canonicalize(base + "/")
    site_netloc = urlsplit(start).netloc
    seen = {start}
    stored: set[str] = set()
    queue = deque([start])
    while queue:
        url = queue.popleft()
        for _attempt in range(3):
            status, ctype, text = fetch(url)
            if status != 503:
                break
        if status != 200 or not ctype.startswith("text/html"):
            continue
        stored.add(url)
        for href in links(text).hrefs:
            target = canonicalize(urljoin(url, href))
            if urlsplit(target).scheme not in {"http", "https"}:
                continue
            if urlsplit(target).netloc != site_netloc or target in seen:
                continue
            seen.add(target)
            if robots.can_fetch("*", target):
                queue.append(target)
    return stored


@pytest.fixture
def site() -> Iterator[NewsSite]:
    with NewsSite(articles=45, per_page=10) as s:
        yield s


def test_start_returns_local_base_url() -> None:
    s = NewsSite(articles=3)
    try:
        url = s.start()
        assert url == s.url
        assert url.startswith("http://127.0.0.1:") and not url.endswith("/")
    finally:
        s.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/", timeout=1)
    s.stop()  # idempotent


def test_front_page_links(site: NewsSite) -> None:
    status, ctype, text = fetch(site.url + "/")
    assert status == 200
    assert ctype == "text/html; charset=utf-8"
    assert "<title>" in text
    hrefs = {canonicalize(urljoin(site.url + "/", h)) for h in links(text).hrefs}
    base = site.url
    for path in (
        "/list?page=1&sort=new",
        "/article/1",
        "/article/2",
        "/article/3",
        "/flaky",
        "/dynamic",
        "/about",
        "/private/secret-1",
        "/private/secret-2",
    ):
        assert base + path in hrefs, path
    assert "http://other.example/" in hrefs


def test_robots_txt(site: NewsSite) -> None:
    status, ctype, text = fetch(site.url + "/robots.txt")
    assert status == 200
    assert ctype.startswith("text/plain")
    assert text == "User-agent: *\nDisallow: /private/\n"


def test_flaky_fails_twice_then_succeeds(site: NewsSite) -> None:
    results = [fetch(site.url + "/flaky") for _ in range(4)]
    assert [r[0] for r in results] == [503, 503, 200, 200]
    assert "flaky-ok" in results[2][2]
    assert site.hits("/flaky") == 4


def test_private_is_served_and_counted(site: NewsSite) -> None:
    assert site.hits("/private") == 0
    assert fetch(site.url + "/private/secret-1")[0] == 200
    assert site.hits("/private") == 1


def test_hit_counting_and_paths(site: NewsSite) -> None:
    fetch(site.url + "/about")
    fetch(site.url + "/article/2?utm_source=x")
    fetch(site.url + "/nope")
    assert site.requested_paths() == ["/about", "/article/2?utm_source=x", "/nope"]
    assert site.hits() == 3
    assert site.hits("/article/") == 1
    assert site.hits("/about") == 1


def test_concurrent_clients(site: NewsSite) -> None:
    urls = [f"{site.url}/article/{1 + i % 45}" for i in range(128)]
    with ThreadPoolExecutor(max_workers=64) as pool:
        statuses = list(pool.map(lambda u: fetch(u)[0], urls))
    assert statuses == [200] * 128
    assert site.hits("/article/") == 128


def test_article_page(site: NewsSite) -> None:
    status, _, text = fetch(site.url + "/article/12")
    assert status == 200
    assert "<title>Article 12</title>" in text
    assert "article-12-body" in text
    hrefs = links(text).hrefs
    assert "/article/13#top" in hrefs
    assert "/article/11?utm_campaign=x" in hrefs
    listed = {canonicalize(urljoin(site.url + "/article/12", h)) for h in hrefs}
    assert f"{site.url}/list?page=2&sort=new" in listed


def test_ignorable_params_serve_same_content(site: NewsSite) -> None:
    plain = fetch(site.url + "/list?page=2")[2]
    for variant in (
        "/list?sort=new&page=2",
        "/list?page=2&sort=new&utm_source=feed&utm_medium=rss",
        "/list?gclid=abc&page=2&fbclid=z",
    ):
        assert fetch(site.url + variant)[2] == plain
    assert fetch(site.url + "/article/5?gclid=abc")[2] == fetch(site.url + "/article/5")[2]


def test_unknown_and_out_of_range_are_404(site: NewsSite) -> None:
    for path in ("/nope", "/article/0", "/article/46", "/article/01", "/list?page=6", "/list?page=x"):
        assert fetch(site.url + path)[0] == 404, path


def test_dynamic_and_frame(site: NewsSite) -> None:
    _, _, text = fetch(site.url + "/dynamic")
    assert "dynamic-static-text" in text
    parsed = links(text)
    assert parsed.iframes == ["/frame"]
    assert "/frame" not in parsed.hrefs
    _, _, frame = fetch(site.url + "/frame")
    assert "<script>" in frame
    assert FRAME_TOKEN not in frame and "iframe-token" not in frame


def test_expected_urls_size() -> None:
    with NewsSite(articles=45, per_page=10) as s:
        expected = s.expected_urls()
        assert len(expected) == 1 + 5 + 45 + 3  # front + lists + articles + about/flaky/dynamic
        assert f"{s.url}/list?page=2&sort=new" in expected
        assert f"{s.url}/" in expected
    with NewsSite() as s:  # defaults: 300 articles, 20 per page
        assert len(s.expected_urls()) == 1 + 15 + 300 + 3


@pytest.mark.parametrize(("articles", "per_page"), [(300, 20), (45, 10), (7, 7), (1, 5)])
def test_bfs_reaches_exactly_expected_urls(articles: int, per_page: int) -> None:
    with NewsSite(articles=articles, per_page=per_page) as s:
        assert bfs_crawl(s.url) == s.expected_urls()
        assert s.hits("/private") == 0
        assert s.hits("/frame") == 0
        assert s.hits("/flaky") == 3


def test_delay_applies_to_articles() -> None:
    with NewsSite(articles=3, delay=1.0) as s:
        t0 = time.monotonic()
        fetch(s.url + "/about")
        fast = time.monotonic() - t0
        t0 = time.monotonic()
        fetch(s.url + "/article/1")
        slow = time.monotonic() - t0
    assert slow >= 1.0
    assert fast < 1.0


@pytest.mark.e2e
def test_cli_ready_line_and_clean_sigterm() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), "--articles", "5", "--per-page", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",  # prove it runs as a plain script, without the package on sys.path
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY http://127.0.0.1:"), line
        base = line.split()[1]
        assert fetch(base + "/article/5")[0] == 200
        assert fetch(base + "/list?page=3&sort=new")[0] == 200
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
    assert proc.returncode == 0
    assert out == ""
    assert err == ""


@pytest.mark.e2e
def test_cli_sigint_exits_zero() -> None:
    proc = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), "--articles", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("READY ")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
    assert proc.returncode == 0
    assert "Traceback" not in err
