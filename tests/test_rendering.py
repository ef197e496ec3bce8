"""Rendering without a crawl: settings, which requests are rendered, PageMethod through the codec,
frames in the news spider's items, and frame extraction against a real Chromium."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.http.request import NO_CALLBACK
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler
from scrapy_playwright.page import PageMethod

from demo.spiders.news import NewsSpider
from distributed_crawler.frontier.codec import PayloadError, RequestCodec, UnserializableRequestError, read_payload
from distributed_crawler.rendering.config import DEFAULT_CHROMIUM, RenderConfig
from distributed_crawler.rendering.frames import frames_text, static_iframe_urls
from distributed_crawler.rendering.middleware import RenderingMiddleware


@pytest.fixture
def needs_chromium() -> None:
    if not os.path.exists(DEFAULT_CHROMIUM):
        pytest.fail(f"{DEFAULT_CHROMIUM} is missing: run `make test`, which installs Debian's chromium")


def config(**settings: object) -> RenderConfig:
    return RenderConfig.from_settings(Settings(settings))


# -- settings -------------------------------------------------------------------------------
def test_patterns_from_a_list_or_a_comma_separated_string() -> None:
    assert [p.pattern for p in config(PLAYWRIGHT_URL_PATTERNS=[r"/app/", r"\.js\?x=1,2"]).url_patterns] == [
        "/app/",
        r"\.js\?x=1,2",
    ]
    assert [p.pattern for p in config(PLAYWRIGHT_URL_PATTERNS="/app/, /spa/").url_patterns] == ["/app/", "/spa/"]
    assert config().url_patterns == ()


def test_bad_settings_fail_at_start_naming_the_setting() -> None:
    with pytest.raises(ValueError, match=r"PLAYWRIGHT_URL_PATTERNS: '\(unclosed' is not a valid regular"):
        config(PLAYWRIGHT_URL_PATTERNS=["/ok/", "(unclosed"])
    with pytest.raises(ValueError, match=r"PLAYWRIGHT_RENDER_TIMEOUT \(0.0\) must be > 0"):
        config(PLAYWRIGHT_RENDER_TIMEOUT=0)
    with pytest.raises(ValueError, match=r"PLAYWRIGHT_ABORT_RESOURCE_TYPES \(pictures\)"):
        config(PLAYWRIGHT_ABORT_RESOURCE_TYPES="image,pictures")
    with pytest.raises(ValueError, match="must not contain 'document'"):
        config(PLAYWRIGHT_ABORT_RESOURCE_TYPES=["document"])
    with pytest.raises(ValueError, match=r"PLAYWRIGHT_MAX_PAGES \(0\) must be >= 1"):
        config(PLAYWRIGHT_MAX_PAGES=0)
    with pytest.raises(ValueError, match=r"PLAYWRIGHT_RESTART_AFTER_PAGES \(-1\)"):
        config(PLAYWRIGHT_RESTART_AFTER_PAGES=-1)
    with pytest.raises(ValueError, match="PLAYWRIGHT_WAIT_FOR is empty"):
        config(PLAYWRIGHT_WAIT_FOR=" ")


def test_defaults() -> None:
    cfg = config()
    assert cfg.wait_for == "load" and cfg.render_timeout == 30.0
    assert cfg.abort_resource_types == {"image", "media", "font"}
    assert cfg.max_pages == 8 and cfg.restart_after_pages == 1000


@pytest.mark.usefixtures("needs_chromium")
def test_debian_chromium_is_the_default_browser_with_closed_network_flags() -> None:
    cfg = config()
    assert cfg.executable_path == DEFAULT_CHROMIUM and cfg.unavailable_reason is None
    options = config(PLAYWRIGHT_LAUNCH_OPTIONS={"args": ["--lang=de"], "slow_mo": 5}).launch_options()
    assert options["executable_path"] == DEFAULT_CHROMIUM and options["slow_mo"] == 5
    for flag in (
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
        "--lang=de",
    ):
        assert flag in options["args"]
    assert ("--no-sandbox" in options["args"]) == (os.geteuid() == 0)


def test_no_sandbox_only_as_root_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from distributed_crawler.rendering import config as config_module

    monkeypatch.setattr(config_module, "_warned_no_sandbox", False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "--no-sandbox" not in config().launch_options()["args"]
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with caplog.at_level("WARNING", logger="distributed_crawler.rendering.config"):
        assert "--no-sandbox" in config().launch_options()["args"]
        assert not caplog.records  # the options alone: no browser started, nothing to warn about
        config_module.warn_no_sandbox()  # what the handler calls when it launches the browser
        config_module.warn_no_sandbox()
    warnings = [r.getMessage() for r in caplog.records if "--no-sandbox" in r.getMessage()]
    assert len(warnings) == 1 and "non-root user" in warnings[0]


def test_missing_browser_is_a_reason_naming_the_setting_and_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(PLAYWRIGHT_EXECUTABLE_PATH="/nonexistent/chromium")
    assert "PLAYWRIGHT_EXECUTABLE_PATH (/nonexistent/chromium)" in cfg.unavailable_reason
    assert "apt-get install chromium" in cfg.unavailable_reason
    monkeypatch.setenv("PLAYWRIGHT_EXECUTABLE_PATH", "/from/env")  # the env var overrides
    assert config(PLAYWRIGHT_EXECUTABLE_PATH="/bin/sh").executable_path == "/from/env"
    monkeypatch.delenv("PLAYWRIGHT_EXECUTABLE_PATH")
    assert config(PLAYWRIGHT_EXECUTABLE_PATH="/bin/sh").unavailable_reason is None
    # A remote browser (PLAYWRIGHT_CDP_URL) needs nothing installed here.
    assert config(PLAYWRIGHT_EXECUTABLE_PATH="/nope", PLAYWRIGHT_CDP_URL="http://b:9222").unavailable_reason is None


# -- what gets rendered ---------------------------------------------------------------------
def test_what_gets_rendered() -> None:
    cfg = config(PLAYWRIGHT_URL_PATTERNS=[r"/app/"])
    assert cfg.should_render(Request("http://e.com/app/1"))
    assert not cfg.should_render(Request("http://e.com/news/1"))
    assert cfg.should_render(Request("http://e.com/news/1", meta={"render": True}))
    assert cfg.should_render(Request("http://e.com/news/1", meta={"playwright": True}))  # scrapy-playwright's flag
    assert not cfg.should_render(Request("http://e.com/app/1", meta={"dont_render": True}))
    assert not cfg.should_render(Request("http://e.com/app/1", meta={"render": True, "dont_render": True}))
    # robots.txt and other internal downloads are never rendered by a pattern
    assert not cfg.should_render(Request("http://e.com/app/robots.txt", callback=NO_CALLBACK))


def test_middleware_marks_requests_for_the_handler() -> None:
    crawler = get_crawler(settings_dict={"PLAYWRIGHT_URL_PATTERNS": "/app/"})
    mw = RenderingMiddleware.from_crawler(crawler)
    rendered, plain = (
        Request("http://e.com/app/"),
        Request("http://e.com/", meta={"playwright": True, "dont_render": True}),
    )
    for request in (rendered, plain):
        assert mw.process_request(request) is None
    assert rendered.meta["playwright"] is True and plain.meta["playwright"] is False
    assert crawler.stats.get_value("render/requests") == 1


# -- PageMethod through Redis ---------------------------------------------------------------
class _Spider(Spider):
    name = "s"

    def parse(self, response):
        pass


def test_page_methods_survive_the_json_codec() -> None:
    codec = RequestCodec(_Spider())
    request = Request(
        "http://e.com/app",
        meta={
            "render": True,
            "playwright_page_methods": [
                PageMethod("wait_for_selector", "#main", state="attached", timeout=5000),
                PageMethod("evaluate", "window.scrollBy(0, 500)"),
            ],
            "named": {"scroll": PageMethod("wait_for_timeout", 100)},
        },
    )
    payload = codec.encode(request)
    assert "pickle" not in payload and '"__dc_type__":"PageMethod"' in payload
    decoded = codec.decode(payload).meta
    first, second = decoded["playwright_page_methods"]
    assert isinstance(first, PageMethod) and first.method == "wait_for_selector"
    assert first.args == ("#main",) and first.kwargs == {"state": "attached", "timeout": 5000}
    assert second.method == "evaluate" and second.args == ("window.scrollBy(0, 500)",)
    assert decoded["named"]["scroll"].method == "wait_for_timeout" and decoded["render"] is True


def test_page_methods_that_cannot_travel_are_refused_by_name() -> None:
    codec = RequestCodec(_Spider())
    with pytest.raises(
        UnserializableRequestError, match=r"meta\['playwright_page_methods'\]\[0\] is a PageMethod with a callable"
    ):
        codec.encode(Request("http://e.com/", meta={"playwright_page_methods": [PageMethod(lambda page: None)]}))
    with pytest.raises(UnserializableRequestError, match="'set_input_files' is not in tagged.PAGE_METHOD_ALLOWLIST"):
        codec.encode(
            Request(
                "http://e.com/", meta={"playwright_page_methods": [PageMethod("set_input_files", "x", "/etc/passwd")]}
            )
        )
    with pytest.raises(UnserializableRequestError, match="must not get a file path"):
        codec.encode(Request("http://e.com/", meta={"pm": [PageMethod("screenshot", path="/tmp/x.png")]}))
    with pytest.raises(UnserializableRequestError, match="reserved key"):
        codec.encode(Request("http://e.com/", meta={"x": {"__dc_type__": "PageMethod"}}))


def test_foreign_tagged_payloads_are_rejected_not_built() -> None:
    codec = RequestCodec(_Spider())
    good = {"v": 1, **read_payload(codec.encode(Request("http://e.com/", meta={"pm": [PageMethod("click", "#a")]})))}
    for tagged in (
        {"__dc_type__": "os.system", "cmd": "touch /tmp/pwned"},
        {"__dc_type__": "PageMethod", "method": "_private", "args": [], "kwargs": {}},
        {"__dc_type__": "PageMethod", "method": "set_input_files", "args": ["#f", "/etc/passwd"], "kwargs": {}},
        {"__dc_type__": "PageMethod", "method": "pdf", "args": [], "kwargs": {"path": "/etc/cron.d/x"}},
        {"__dc_type__": "PageMethod", "method": "click", "args": "#a", "kwargs": {}},
    ):
        bad = {**good, "meta": {"pm": [tagged]}}
        with pytest.raises(PayloadError):
            codec.decode(json.dumps(bad))


def test_frames_are_not_shipped_to_other_nodes() -> None:
    codec = RequestCodec(_Spider())
    request = Request("http://e.com/", meta={"frames": [{"url": "u", "html": "<p>big</p>"}], "keep": 1})
    assert codec.decode(codec.encode(request)).meta == {"keep": 1}


# -- the news spider --------------------------------------------------------------------------
def _news_spider(**settings: object) -> NewsSpider:
    base = {
        "REQUEST_FINGERPRINTER_CLASS": "distributed_crawler.dedup.fingerprint.CanonicalFingerprinter",
        "STORE_PAGE_TYPES": "article,list,other",  # the frame tests read the item of any page
    }
    crawler = get_crawler(NewsSpider, settings_dict={**base, **settings})
    spider = NewsSpider.from_crawler(crawler)
    crawler.spider = spider
    return spider


def _parse(spider: NewsSpider, response: HtmlResponse) -> list:
    """The news spider's (async) callback output."""

    async def collect() -> list:
        return [out async for out in spider.parse(response)]

    return asyncio.run(collect())


def _response(url: str, body: str, meta: dict | None = None) -> HtmlResponse:
    request = Request(url, meta=meta or {})
    return HtmlResponse(url, body=body.encode(), encoding="utf-8", request=request)


def test_news_item_text_includes_the_text_of_every_frame() -> None:
    spider = _news_spider()
    frames = [
        {"url": "http://e.com/f1", "name": "a", "parent_url": "http://e.com/", "html": "", "text": "first frame"},
        {"url": "http://x.org/f2", "name": "", "parent_url": "http://e.com/f1", "html": "", "text": "nested frame"},
    ]
    response = _response(
        "http://e.com/",
        "<html><body><p>main text</p><iframe src='/f1'></iframe></body></html>",
        {"playwright": True, "frames": frames},
    )
    out = _parse(spider, response)
    assert out[0]["text"] == "main text first frame nested frame"
    assert len(out) == 1, "a rendered page does not fetch its iframes again"
    assert frames_text(frames) == "first frame nested frame" and frames_text(None) == ""


def test_iframe_follow_static_fetches_same_site_iframes_as_plain_requests() -> None:
    body = (
        "<html><body><iframe src='/widget?a=1'></iframe><iframe src='/widget?a=1'></iframe>"
        "<iframe src='http://other.org/ad'></iframe><iframe src='about:blank'></iframe></body></html>"
    )
    off = _parse(_news_spider(), _response("http://e.com/p", body))
    assert [r for r in off if isinstance(r, Request)] == []
    on = [
        r
        for r in _parse(_news_spider(IFRAME_FOLLOW_STATIC="True"), _response("http://e.com/p", body))
        if isinstance(r, Request)
    ]
    assert [r.url for r in on] == ["http://e.com/widget?a=1"]
    assert on[0].meta["dont_render"] is True
    assert static_iframe_urls(_response("http://e.com/p", body), same_host_only=False) == [
        "http://e.com/widget?a=1",
        "http://other.org/ad",
    ]


# -- frames from a real Chromium ----------------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.usefixtures("needs_chromium")
@pytest.mark.timeout(60)
def test_collect_frames_nested_and_cross_site() -> None:
    from playwright.async_api import async_playwright

    from distributed_crawler.rendering.frames import collect_frames
    from tests.site.render_site import READY, RenderSite

    async def frames_of(site: RenderSite, *paths: tuple[str, int]) -> list[list[dict]]:
        async with async_playwright() as p:
            browser = await p.chromium.launch(**config().launch_options())
            try:
                page = await browser.new_page()
                found = []
                for path, max_bytes in paths:
                    await page.goto(site.url + path)
                    await page.wait_for_selector(READY, state="attached", timeout=10_000)
                    found.append(await collect_frames(page, max_bytes))
                return found
            finally:
                await browser.close()

    with RenderSite() as site:
        nested, cross, capped = asyncio.run(frames_of(site, ("/r/nested", 0), ("/r/cross", 0), ("/r/nested", 10)))
    assert [(f["url"], f["name"], f["parent_url"], f["text"]) for f in nested] == [
        (f"{site.url}/f/level1", "l1", f"{site.url}/r/nested", "level1-token-42"),
        (f"{site.url}/f/level2", "l2", f"{site.url}/f/level1", "level2-token-42"),
    ]
    assert "<iframe" in nested[0]["html"] and "level2-token-42" in nested[1]["html"]
    assert [(f["url"], f["parent_url"], f["text"]) for f in cross] == [
        (f"{site.other_url}/f/cross", f"{site.url}/r/cross", "cross-token-42"),
    ]
    # a byte budget (DOWNLOAD_MAXSIZE): frames are read, each cut to it, until it is spent
    assert [(f["url"], len(f["html"]) <= 10) for f in capped] == [(f"{site.url}/f/level1", True)]
