"""Rendering without a browser: the settle settings, the auto-rendering heuristics (script-built?
URL shape, text gain), the verdicts in Redis (untrusted values, bounded hash) and the per-proxy
browser context."""

from __future__ import annotations

import asyncio

import pytest
import redis
from scrapy import Request
from scrapy.exceptions import NotConfigured
from scrapy.http import HtmlResponse
from scrapy.http.request import NO_CALLBACK
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from distributed_crawler.connection.policy import RedisPolicy
from distributed_crawler.meta import BROWSER_PROXY_META, PLAYWRIGHT_CONTEXT_KWARGS_META, PLAYWRIGHT_CONTEXT_META
from distributed_crawler.rendering.auto import adds_content, looks_script_built, text_gain, url_shape, visible_text
from distributed_crawler.rendering.config import RenderConfig
from distributed_crawler.rendering.proxied import context_name, playwright_proxy, through_proxy
from distributed_crawler.rendering.verdicts import LEARNING, PLAIN, RENDER, Verdict, VerdictStore, parse_verdict

ARTICLE = "<p>" + "The council met on Tuesday to discuss the ferry timetable. " * 10 + "</p>"


def config(**settings: object) -> RenderConfig:
    return RenderConfig.from_settings(Settings(settings))


def page(body: str, url: str = "http://e.com/a/1") -> HtmlResponse:
    html = f"<html><head><title>t</title><script>var head = 1;</script></head><body>{body}</body></html>"
    return HtmlResponse(url, body=html.encode(), encoding="utf-8")


# -- settings ---------------------------------------------------------------------------------
def test_settle_and_auto_settings() -> None:
    cfg = config()
    assert (cfg.settle_ms, cfg.settle_max_ms, cfg.auto, cfg.auto_samples) == (500, 5000, False, 3)
    assert cfg.settle_of(Request("http://e.com/")) == (0.5, 5.0)
    assert cfg.settle_of(Request("http://e.com/", meta={"render_settle_ms": 0}))[0] == 0
    assert cfg.settle_of(Request("http://e.com/", meta={"render_settle_ms": "junk"}))[0] == 0.5
    assert cfg.settle_of(Request("http://e.com/", meta={"render_settle_ms": 4000})) == (4.0, 8.0)
    assert config(PLAYWRIGHT_AUTO="True", PLAYWRIGHT_SETTLE_MS="0").auto is True
    with pytest.raises(ValueError, match=r"PLAYWRIGHT_SETTLE_MAX_MS \(100\) must be at least PLAYWRIGHT_SETTLE_MS"):
        config(PLAYWRIGHT_SETTLE_MAX_MS=100)
    with pytest.raises(ValueError, match="PLAYWRIGHT_SETTLE_MS"):
        config(PLAYWRIGHT_SETTLE_MS=-1)
    with pytest.raises(ValueError, match="PLAYWRIGHT_AUTO_SAMPLES"):
        config(PLAYWRIGHT_AUTO_SAMPLES=0)


def test_explicit_decisions_win_over_auto() -> None:
    cfg = config(PLAYWRIGHT_URL_PATTERNS=[r"/app/"], PLAYWRIGHT_AUTO=True)
    assert cfg.explicit_decision(Request("http://e.com/app/1")) is True
    assert cfg.explicit_decision(Request("http://e.com/news/1")) is None  # auto may decide
    assert cfg.explicit_decision(Request("http://e.com/news/1", meta={"render": False})) is False
    assert cfg.explicit_decision(Request("http://e.com/app/1", meta={"dont_render": True})) is False
    assert cfg.explicit_decision(Request("http://e.com/robots.txt", callback=NO_CALLBACK)) is False


# -- heuristics -------------------------------------------------------------------------------
def test_what_looks_script_built() -> None:
    assert looks_script_built(page(ARTICLE)) is None  # text, one small script
    assert looks_script_built(page(ARTICLE.replace("<script>", ""))) is None
    assert looks_script_built(page(ARTICLE + '<iframe src="/embed"></iframe>')) == "iframe"
    noscript = "<noscript>You need to enable JavaScript to run this app.</noscript>"
    assert looks_script_built(page(noscript + ARTICLE)) == "noscript asks for JavaScript"
    assert looks_script_built(page("<noscript><img src=/pixel.gif></noscript>" + ARTICLE)) is None
    assert looks_script_built(page('<div id="root"></div><script src="/app.js"></script>')) == "scripts and little text"
    bundle = "<script>" + "window.__STATE__ = {};" * 200 + "</script>"
    assert looks_script_built(page(ARTICLE + bundle)) == "scripts outweigh text"
    plain = HtmlResponse("http://e.com/", body=b"<html><body><p>short</p></body></html>")
    assert looks_script_built(plain) is None  # little text but no script: nothing to run


def test_visible_text_skips_scripts_styles_and_noscript() -> None:
    response = page("<style>p{}</style><noscript>enable js</noscript><p>Hello <b>world</b></p><script>x=1</script>")
    assert visible_text(response) == "Hello world"


def test_text_gain_counts_new_words_only() -> None:
    assert text_gain("Hello world", "world  HELLO") == 0
    assert text_gain("price:", "price: 12.99 EUR") == len("12 ") + len("99 ") + len("eur ")
    assert adds_content("loading", "loading the scores of the evening")
    assert not adds_content("the scores", "the scores 1")


def test_url_shapes() -> None:
    assert url_shape("https://News.example/2024/05/the-ferry-timetable-changes?page=2&id=9") == (
        "news.example|/#/#/*?id&page"
    )
    assert url_shape("http://e.com/r/page/12") == url_shape("http://e.com/r/page/13") == "e.com|/r/page/#"
    assert url_shape("http://e.com/about") != url_shape("http://e.com/contact")
    assert url_shape("http://e.com/" + "/".join("abcdefgh")) == "e.com|/a/b/c/d/e/f/..."
    assert len(url_shape("http://e.com/" + "x" * 500 + "?" + "&".join(f"p{i}=1" for i in range(200)))) <= 200


# -- verdicts ---------------------------------------------------------------------------------
def test_verdict_states() -> None:
    assert Verdict(2, 0).state(3) == LEARNING
    assert Verdict(3, 0).state(3) == PLAIN
    assert Verdict(3, 1).state(3) == RENDER
    assert Verdict(20, 1).state(3) == PLAIN  # fewer than 1 in 10
    assert parse_verdict(b"5:2") == Verdict(5, 2) and parse_verdict("0:0") == Verdict(0, 0)
    for garbage in (None, b"", b"2:5", b"-1:0", b"1:0:0", b"9" * 11 + b":0", b"x", 7):
        assert parse_verdict(garbage) is None


class _Stats:
    def __init__(self) -> None:
        self.values: dict[str, int] = {}

    def inc_value(self, key: str, count: int = 1) -> None:
        self.values[key] = self.values.get(key, 0) + count


def test_verdicts_are_shared_bounded_and_untrusted(redis_url: str, redis_client: redis.Redis, monkeypatch) -> None:
    from distributed_crawler.connection.clients import RedisConfig
    from distributed_crawler.rendering import verdicts

    key = "{t}:render:verdicts"
    redis_client.delete(key)
    stats = _Stats()

    async def run() -> list[object]:
        client = RedisConfig.from_settings(Settings({"REDIS_URL": redis_url})).async_client(max_connections=2)
        try:
            store = VerdictStore(client, key, stats, RedisPolicy("redis://test", stats))
            other = VerdictStore(client, key, stats, RedisPolicy("redis://test", stats))  # another node
            out: list[object] = [await store.get("e.com|/n/#")]
            for added in (False, False, True):
                out.append(await store.record("e.com|/n/#", added))
            out.append(await other.get("e.com|/n/#"))
            redis_client.hset(key, "e.com|/bad", "lots:of")
            out.append(await other.get("e.com|/bad"))
            out.append(await store.record("e.com|/bad", True))  # garbage restarts at 0:0
            monkeypatch.setattr(verdicts, "MAX_VERDICTS", 3)
            for i in range(5):
                await store.record(f"e.com|/x{i}", False)
            return out
        finally:
            await client.aclose()

    out = asyncio.run(run())
    assert out == [Verdict(), Verdict(1, 0), Verdict(2, 0), Verdict(3, 1), Verdict(3, 1), Verdict(), Verdict(1, 1)]
    assert stats.values == {"render/auto/bad_verdict": 1}
    assert redis_client.hlen(key) == 3  # bounded: new fields evicted others


def test_verdicts_survive_a_key_of_the_wrong_type(redis_url: str, redis_client: redis.Redis) -> None:
    from distributed_crawler.connection.clients import RedisConfig

    key = "{t}:render:wrongtype"
    redis_client.delete(key)
    redis_client.set(key, "not a hash")
    stats = _Stats()

    async def run() -> tuple[Verdict, Verdict | None]:
        client = RedisConfig.from_settings(Settings({"REDIS_URL": redis_url})).async_client(max_connections=1)
        try:
            store = VerdictStore(client, key, stats, RedisPolicy("redis://test", stats))
            return await store.get("e.com|/"), await store.record("e.com|/", True)
        finally:
            await client.aclose()

    assert asyncio.run(run()) == (Verdict(), None)
    assert stats.values == {"render/auto/redis_refused": 2}


def test_auto_is_off_without_a_browser(caplog: pytest.LogCaptureFixture) -> None:
    from distributed_crawler.rendering.auto_render import AutoRenderMiddleware

    crawler = get_crawler(
        settings_dict={"PLAYWRIGHT_AUTO": True, "PLAYWRIGHT_EXECUTABLE_PATH": "/nonexistent/chromium"}
    )
    with pytest.raises(NotConfigured):
        AutoRenderMiddleware.from_crawler(crawler)
    with pytest.raises(NotConfigured):  # PLAYWRIGHT_AUTO off (the default)
        AutoRenderMiddleware.from_crawler(get_crawler())
    assert "PLAYWRIGHT_AUTO is off on this node: PLAYWRIGHT_EXECUTABLE_PATH (/nonexistent/chromium)" in caplog.text


# -- a browser context per proxy ----------------------------------------------------------------
def test_playwright_proxy_from_a_pool_url() -> None:
    assert playwright_proxy("http://u%40x:p%3Aw@10.0.0.1:3128") == {
        "server": "http://10.0.0.1:3128",
        "username": "u@x",
        "password": "p:w",
    }
    assert playwright_proxy("http://10.0.0.1:3128") == {"server": "http://10.0.0.1:3128"}


def test_a_rendered_request_uses_its_proxys_context_for_the_render_only() -> None:
    proxy = "http://user:secret@10.0.0.1:3128"
    meta = {BROWSER_PROXY_META: proxy, PLAYWRIGHT_CONTEXT_META: "mobile"}
    startup = {"mobile": {"viewport": {"width": 400, "height": 800}}}
    with through_proxy(meta, startup) as proxied:
        assert proxied
        assert meta[PLAYWRIGHT_CONTEXT_META] == context_name("mobile", proxy) and "secret" not in context_name(
            "mobile", proxy
        )
        assert meta[PLAYWRIGHT_CONTEXT_KWARGS_META] == {
            "viewport": {"width": 400, "height": 800},
            "proxy": {"server": "http://10.0.0.1:3128", "username": "user", "password": "secret"},
        }
    assert meta == {BROWSER_PROXY_META: proxy, PLAYWRIGHT_CONTEXT_META: "mobile"}  # nothing left behind
    plain: dict[str, object] = {}
    with through_proxy(plain, {}) as proxied:
        assert not proxied and plain == {}


# -- the middleware's decision, with a stand-in for the browser -------------------------------------
class _Browser:
    """Stands in for RenderingDownloadHandler: answers with `html`, or raises `error`."""

    def __init__(self, html: str = "", error: Exception | None = None) -> None:
        self.html = html
        self.error = error
        self.requests: list[Request] = []

    async def download_request(self, request: Request) -> HtmlResponse:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        request.meta["frames"] = [{"url": "http://e.com/f", "text": "framed words here"}]
        return HtmlResponse(request.url, body=self.html.encode(), encoding="utf-8", request=request)


def test_auto_renders_what_looks_script_built_and_learns(redis_url: str, redis_client: redis.Redis) -> None:
    from distributed_crawler.rendering.auto_render import AutoRenderMiddleware
    from distributed_crawler.rendering.config import SHARED_HANDLER_ATTR

    redis_client.delete("{s}:render:verdicts")
    crawler = get_crawler(settings_dict={"PLAYWRIGHT_AUTO": True, "REDIS_URL": redis_url, "PLAYWRIGHT_AUTO_SAMPLES": 2})
    browser = _Browser("<html><body><h1>Built by script: the evening scores</h1></body></html>")
    setattr(crawler, SHARED_HANDLER_ATTR, browser)
    crawler.crawling = True  # not stopping
    app = '<div id="root"></div><script src="/app.js"></script>'

    def plain(url: str, body: str, **meta: object) -> tuple[Request, HtmlResponse]:
        request = Request(url, meta=dict(meta))
        return request, page(body, url).replace(request=request)

    async def run() -> list[object]:
        mw = AutoRenderMiddleware.from_crawler(crawler)

        class _Spider:
            name = "s"

        await mw.spider_opened(_Spider())  # type: ignore[arg-type]
        out: list[object] = []
        try:
            request, response = plain("http://e.com/art/1", ARTICLE)
            out.append(await mw.process_response(request, response) is response)  # static: kept
            request, response = plain("http://e.com/app/1", app, proxy="http://u:p@10.0.0.1:3128", _dc_proxy="m")
            rendered = await mw.process_response(request, response)
            out.append((rendered.request is request, "evening scores" in rendered.text, request.meta.get("frames")))
            out.append(browser.requests[-1].meta[BROWSER_PROXY_META])  # the plain fetch's proxy
            request, response = plain("http://e.com/app/2", app, dont_render=True)
            out.append(await mw.process_response(request, response) is response)  # explicit: never
            browser.error = RuntimeError("browser gone")
            request, response = plain("http://e.com/app/3", app)
            out.append(await mw.process_response(request, response) is response)  # failed: plain kept
        finally:
            await mw.spider_closed(_Spider())  # type: ignore[arg-type]
        return out

    out = asyncio.run(run())
    assert out == [
        True,
        (True, True, [{"url": "http://e.com/f", "text": "framed words here"}]),
        "http://u:p@10.0.0.1:3128",
        True,
        True,
    ]
    assert redis_client.hget("{s}:render:verdicts", "e.com|/app/#") == b"1:1"
    stats = crawler.stats.get_stats()
    assert stats["render/auto/rendered"] == 1 and stats["render/auto/added"] == 1
    assert stats["render/auto/failed"] == 1 and stats["render/auto/hosts/e.com/added"] == 1


def test_auto_skips_a_shape_where_rendering_added_nothing(redis_url: str, redis_client: redis.Redis) -> None:
    from distributed_crawler.rendering.auto_render import AutoRenderMiddleware
    from distributed_crawler.rendering.config import SHARED_HANDLER_ATTR

    redis_client.delete("{s}:render:verdicts")
    redis_client.hset("{s}:render:verdicts", "e.com|/n/#", "3:0")  # learnt by other nodes
    crawler = get_crawler(settings_dict={"PLAYWRIGHT_AUTO": True, "REDIS_URL": redis_url})
    browser = _Browser("<html><body>never asked</body></html>")
    setattr(crawler, SHARED_HANDLER_ATTR, browser)
    crawler.crawling = True  # not stopping

    async def run() -> bool:
        mw = AutoRenderMiddleware.from_crawler(crawler)

        class _Spider:
            name = "s"

        await mw.spider_opened(_Spider())  # type: ignore[arg-type]
        try:
            request = Request("http://e.com/n/7")
            response = page("<noscript>Please enable JavaScript</noscript>" + ARTICLE, request.url)
            return await mw.process_response(request, response.replace(request=request)) is not None
        finally:
            await mw.spider_closed(_Spider())  # type: ignore[arg-type]

    assert asyncio.run(run())
    assert browser.requests == []
    stats = crawler.stats.get_stats()
    assert stats["render/auto/skipped"] == 1 and "render/auto/rendered" not in stats
