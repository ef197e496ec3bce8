"""`dcrawl extract URL|FILE`: what the crawler would store for one page, through a node's own path.

File tests run the command in this process; URL tests run it as an operator does (a subprocess:
a one-off Scrapy crawl) against local servers and the session's Redis.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from distributed_crawler.cli.main import main
from distributed_crawler.news.config import NewsConfig
from distributed_crawler.news.nearduplicate import NearDuplicateIndex, fingerprint, without_title
from tests.conftest import dcrawl, free_port
from tests.proxies.server import TestProxy
from tests.site.newsroom import STORIES, Newsroom
from tests.site.server import FRAME_TOKEN, NewsSite

LOOPBACK = ("-s", "ALLOWED_PRIVATE_NETWORKS=127.0.0.0/8,::1/128")
EVERY_TYPE = ("-s", "STORE_PAGE_TYPES=article,list,other")

ARTICLE = """<!DOCTYPE html><html lang="en"><head><title>Council votes on flood defences | Courier</title>
<meta property="og:type" content="article">
<meta property="article:published_time" content="2026-11-30T10:00:00+01:00">
<meta property="og:image" content="/img/flood.jpg"><meta property="og:site_name" content="Courier">
<meta property="article:section" content="City"><meta property="article:tag" content="floods">
<meta property="article:tag" content="council">
<link rel="canonical" href="http://news.example/story/1?utm_source=feed">
<script type="application/ld+json">{"@context": "https://schema.org", "@type": "NewsArticle",
 "headline": "Council votes on flood defences", "datePublished": "2026-11-30T10:00:00+01:00",
 "author": {"@type": "Person", "name": "Jane Doe"}}</script></head>
<body><nav><a href="/">Home</a></nav><article><h1>Council votes on flood defences</h1>
<p>The city council voted on Tuesday evening to spend twelve million pounds on new flood defences along the
eastern bank of the river, after two winters in which the water reached the doors of the old market hall.</p>
<p>Engineers told councillors that the existing walls were built in the nineteen sixties and were never meant
to hold back the volume of water the river now carries after a week of heavy rain.</p></article></body></html>
"""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """In this process; the near-duplicate check off unless a test names its Redis (never the machine's)."""
    if "--redis-url" not in args:
        args = (*args, "-s", "NEAR_DUPLICATES=False")
    code = main(["extract", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def article(tmp_path: Path) -> Path:
    path = tmp_path / "story.html"
    path.write_text(ARTICLE, encoding="utf-8")
    return path


def test_a_file_shows_every_field_its_signal_and_that_it_would_be_stored(
    article: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, str(article), "--url", "http://news.example/story/1", "--json", *EVERY_TYPE)
    assert (code, err) == (0, "")
    result = json.loads(out)
    assert result["url"] == "http://news.example/story/1"  # its canonical link, tracking params removed
    assert (result["source"], result["status"], result["stored"], result["not_stored_because"]) == (
        "file",
        None,
        True,
        None,
    )
    fields = result["fields"]
    assert fields["title"] == "Council votes on flood defences" and fields["authors"] == ["Jane Doe"]
    assert fields["published_at"] == "2026-11-30T10:00:00+01:00" and fields["lang"] == "en"
    assert "twelve million pounds" in fields["text"] and "Home" not in fields["text"]
    assert set(fields) == {
        "url",
        "title",
        "text",
        "authors",
        "published_at",
        "modified_at",
        "lang",
        "description",
        "page_type",
        "paywalled",
        "image",
        "section",
        "tags",
        "site_name",
        "duplicate_of",
    }
    assert (fields["image"], fields["section"], fields["tags"], fields["site_name"]) == (
        "http://news.example/img/flood.jpg",
        "City",
        ["floods", "council"],
        "Courier",
    )
    assert {result["signals"][f] for f in ("image", "section", "tags", "site_name")} == {"meta"}
    assert set(result["signals"]) <= set(fields) and result["main_text"] is True
    # the table says the same
    code, out, _ = run(capsys, str(article), "--url", "http://news.example/story/1", *EVERY_TYPE)
    assert code == 0 and "http://news.example/story/1 (from a file): stored" in out and "Jane Doe" in out


def test_the_near_duplicate_verdict_is_the_crawls_and_reads_the_index_without_writing(
    article: Path, redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    redis_client.flushall()
    crawled = run(capsys, str(article), "--url", "http://news.example/story/1", "--json", "--redis-url", redis_url)
    assert json.loads(crawled[1])["near_duplicate"] is None and redis_client.keys("*") == []  # read only
    # the crawl stored the same story under another URL of the site first
    news = NewsConfig()
    text = json.loads(crawled[1])["fields"]["text"]
    value = fingerprint(without_title(text, "Council votes on flood defences"), news.near_duplicate_min_words)
    assert value is not None

    async def stored_first() -> Any:
        client = aioredis.Redis.from_url(redis_url)
        index = NearDuplicateIndex(client, news.key("news"), news.near_duplicate_distance, news.near_duplicate_window)
        try:
            return await index.check_add(value, "http://news.example/first")
        finally:
            await client.aclose()

    assert asyncio.run(stored_first()) is None
    before = {k: redis_client.dump(k) for k in redis_client.keys("*")}
    code, out, _ = run(capsys, str(article), "--url", "http://news.example/story/1", "--json", "--redis-url", redis_url)
    result = json.loads(out)
    assert code == 0 and result["near_duplicate"] == {"original": "http://news.example/first", "distance": 0}
    assert (result["fields"]["duplicate_of"], result["fields"]["text"]) == ("http://news.example/first", "")
    assert {k: redis_client.dump(k) for k in redis_client.keys("*")} == before  # nothing written
    code, _, err = run(capsys, str(article), "--redis-url", f"redis://127.0.0.1:{free_port()}/0")
    assert code == 1 and err.count("\n") == 1 and "NEAR_DUPLICATES=False" in err


def test_a_noindex_page_is_not_stored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "noindex.html"
    page.write_text(ARTICLE.replace("<head>", '<head><meta name="robots" content="noindex, nofollow">'))
    result = json.loads(run(capsys, str(page), "--url", "http://news.example/story/1", "--json", *EVERY_TYPE)[1])
    assert result["stored"] is False and result["nofollow"] is True
    assert result["not_stored_because"] == "the page asks robots not to index it (noindex, meta); ROBOTS_META_OBEY"


def test_a_file_in_another_language_or_of_another_type_is_not_stored_and_says_why(
    article: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, str(article), "--json", *EVERY_TYPE, "-s", "LANGUAGES=de,fr")
    result = json.loads(out)
    assert code == 0 and result["stored"] is False
    assert result["not_stored_because"] == "language en (English) is not in LANGUAGES (de,fr)"
    assert result["url"] == article.as_uri()  # no --url: the file's address (its canonical link is another site)
    about = tmp_path / "about.html"
    about.write_text("<html><head><title>About us</title></head><body><p>Write to us.</p></body></html>")
    code, out, _ = run(capsys, str(about), "--json", "-s", "STORE_PAGE_TYPES=article")
    result = json.loads(out)
    assert code == 0 and result["stored"] is False and result["fields"]["page_type"] == "other"
    assert result["not_stored_because"] == "page type other is not in STORE_PAGE_TYPES (article)"


def test_listed_reads_the_page_as_a_news_sitemap_or_feed_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "ferry.html"
    page.write_text(
        "<html><head><title>Harbour news</title></head><body><div><p>The harbour master said on Monday that the "
        "ferry to the island would run again from next week, after repairs to the landing stage.</p></div></body></html>"
    )
    seen = [
        json.loads(run(capsys, str(page), "--url", "http://news.example/harbour-ferry", "--json", *flag)[1])
        for flag in ((), ("--listed",))
    ]
    assert seen[1]["signals"]["page_type"] == "listed" and seen[1]["fields"]["page_type"] == "article"
    assert seen[0]["signals"]["page_type"] != "listed"


def test_a_missing_file_or_a_bad_setting_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(tmp_path / "missing.html"))
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith("dcrawl: cannot read ") and "No such file or directory" in err
    code, _, err = run(capsys, str(tmp_path / "missing.html"), "-s", "LANGUAGES=english")
    assert code == 1 and err.count("\n") == 1 and "LANGUAGES (english) must be ISO 639-1 codes" in err


# -- fetched as a node fetches it ---------------------------------------------------------------
e2e = pytest.mark.e2e


def _json(done: object) -> dict:
    assert done.returncode == 0, done.stderr  # type: ignore[attr-defined]
    return json.loads(done.stdout)  # type: ignore[attr-defined]


@pytest.mark.slow  # over 5 s
@e2e
@pytest.mark.timeout(120)
def test_a_url_is_fetched_through_the_proxy_pool_without_touching_the_crawl(
    redis_url: str, redis_client: redis.Redis
) -> None:
    story = STORIES[0]
    with Newsroom() as site, TestProxy("forward") as proxy:
        assert dcrawl(redis_url, "proxies", "add", proxy.url).returncode == 0
        result = _json(dcrawl(redis_url, "extract", site.story_url(story), "--json", *LOOPBACK, *EVERY_TYPE))
        assert proxy.forwarded >= 1  # the pool's proxy carried it, as on a node
        assert (result["source"], result["status"], result["stored"]) == ("fetched", 200, True)
        assert result["url"] == site.story_url(story)
        assert story.paragraphs[1] in result["fields"]["text"]
        assert result["fields"]["title"] == story.title
        # Nothing of the crawl was touched: no queue, lease, dead letter, seen-filter, node or count.
        crawl_keys = [k for k in redis_client.keys("{news}:*") if not k.startswith(b"{news}:robots.txt:")]
        assert crawl_keys == []
        german = _json(
            dcrawl(redis_url, "extract", site.story_url(story), "--json", *LOOPBACK, *EVERY_TYPE, "-s", "LANGUAGES=de")
        )
        assert german["not_stored_because"] == "language en (English) is not in LANGUAGES (de)"


@pytest.mark.slow  # over 5 s
@e2e
@pytest.mark.timeout(120)
def test_an_unreachable_or_failing_url_is_one_line_exit_2(redis_url: str) -> None:
    with Newsroom() as site:
        missing = dcrawl(redis_url, "extract", site.url + "/no/such/page", *LOOPBACK)
    assert missing.returncode == 2 and missing.stdout == "" and missing.stderr.count("\n") == 1
    assert missing.stderr == f"dcrawl: {site.url}/no/such/page answered HTTP 404; a node would not store it either\n"
    closed = f"http://127.0.0.1:{free_port()}/story"
    down = dcrawl(redis_url, "extract", closed, *LOOPBACK, "-s", "ROBOTSTXT_OBEY=False", "-s", "RETRY_TIMES=0")
    assert down.returncode == 2 and down.stderr.count("\n") == 1 and "Traceback" not in down.stderr
    assert down.stderr.startswith(f"dcrawl: cannot fetch {closed}: ") and "refused" in down.stderr.lower()
    no_redis = dcrawl(f"redis://127.0.0.1:{free_port()}/0", "extract", closed)
    assert no_redis.returncode == 1 and no_redis.stderr.startswith("dcrawl: Cannot reach Redis at ")


@e2e
@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs /usr/bin/chromium")
def test_a_page_the_project_renders_is_rendered_with_its_frames(redis_url: str) -> None:
    with NewsSite(articles=3, per_page=3) as site:
        plain = _json(dcrawl(redis_url, "extract", site.url + "/dynamic", "--json", *LOOPBACK, *EVERY_TYPE))
        rendered = _json(
            dcrawl(
                redis_url,
                "extract",
                site.url + "/dynamic",
                "--json",
                *LOOPBACK,
                *EVERY_TYPE,
                "-s",
                "PLAYWRIGHT_URL_PATTERNS=/dynamic",
            )
        )
    assert FRAME_TOKEN not in plain["fields"]["text"]
    assert FRAME_TOKEN in rendered["fields"]["text"], rendered["fields"]["text"]


def test_the_command_is_registered_and_imports_no_extraction_until_it_runs() -> None:
    import subprocess

    code = (
        "import sys; from distributed_crawler.cli.main import build_parser; build_parser(); "
        "print('trafilatura' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def _outside(tmp_path: Path, redis_url: str, *args: str) -> Any:
    """`dcrawl extract` run outside any Scrapy project (no scrapy.cfg, no SCRAPY_SETTINGS_MODULE)."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPY_")}
    return subprocess.run(
        [sys.executable, "-m", "distributed_crawler", "extract", *args, "--redis-url", redis_url],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        errors="replace",
    )


@e2e
@pytest.mark.timeout(120)
def test_outside_a_project_the_nodes_admission_and_address_guard_apply(redis_url: str, tmp_path: Path) -> None:
    story = STORIES[0]
    with Newsroom() as site:
        url = site.story_url(story)
        refused = _outside(tmp_path, redis_url, url)  # 127.0.0.1 without ALLOWED_PRIVATE_NETWORKS
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
        assert refused.stderr.startswith(f"dcrawl: {url} is refused (private_address)")
        by_name = _outside(tmp_path, redis_url, url.replace("127.0.0.1", "localhost"), "-s", "RETRY_TIMES=0")
        assert by_name.returncode == 2 and by_name.stderr.count("\n") == 1 and "Traceback" not in by_name.stderr
        assert "AddressRefused" in by_name.stderr or "private" in by_name.stderr.lower()  # refused at connect
        fetched = _outside(tmp_path, redis_url, url, "--json", *LOOPBACK, *EVERY_TYPE)
        assert fetched.returncode == 0, fetched.stderr
        result = json.loads(fetched.stdout)
        assert (result["stored"], result["url"], result["fields"]["title"]) == (True, url, story.title)
