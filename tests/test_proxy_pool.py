"""The proxy pool's pieces on a real redis-server: URL parsing and masking, settings, scoring,
eviction, revival, weighted pick, and `dcrawl proxies`."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import redis
from redis.crc import key_slot
from scrapy.settings import Settings

from distributed_crawler.cli.main import main
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.downloadermiddlewares.proxy import failure_reason
from distributed_crawler.meta import BROWSER_PROXY_META, FAILED_PROXIES_META, PLAYWRIGHT_META
from distributed_crawler.proxies.pool import (
    FAILURE_PENALTY,
    INITIAL_SCORE,
    MAX_SCORE,
    ProxyConfig,
    ProxyPool,
    ProxyURLError,
    parse_proxy,
    proxy_digest,
)
from distributed_crawler.redact import mask_url

A, B, C = "http://127.0.0.1:3001", "http://u:pw@127.0.0.1:3002", "https://10.0.0.3:443"


@pytest.fixture
def pool(redis_client: redis.Redis) -> ProxyPool:
    return ProxyPool(redis_client, "dc:proxies", "dc:proxies:dead", min_score=0)


# -- URLs and settings ---------------------------------------------------------------------------
def test_parse_normalizes_and_masks() -> None:
    assert parse_proxy(" HTTP://User:S3cret@Proxy.Example.com:3128/ ") == "http://User:S3cret@proxy.example.com:3128"
    assert parse_proxy("http://proxy.example.com") == "http://proxy.example.com:80"
    assert parse_proxy("https://[::1]:8443") == "https://[::1]:8443"
    assert mask_url("http://user:s3cret@host:3128") == "http://user:***@host:3128"
    assert mask_url("http://host:3128") == "http://host:3128"
    assert "s3cret" not in mask_url("http://user:s3cret@host:notaport")


@pytest.mark.parametrize(
    "bad",
    [
        "127.0.0.1:3128",
        "socks5://127.0.0.1:1080",
        "http://user:s3cret@host:99999",
        "http://host:3128/path",
        "http://user@host:3128",
        "http://:3128",
        "http://user:s3cret@host:notaport",
        "http://ho st:1",
    ],
)
def test_malformed_proxies_are_rejected_without_the_password(bad: str) -> None:
    with pytest.raises(ProxyURLError) as exc:
        parse_proxy(bad)
    assert "s3cret" not in str(exc.value) and "http://[user:password@]host:port" in str(exc.value)


def test_config_reads_list_file_and_checks_values(tmp_path) -> None:
    listing = tmp_path / "proxies.txt"
    listing.write_text(f"# our proxies\n{A}\n\n  {B}  \n{A}\n")
    config = ProxyConfig.from_settings(Settings({"PROXY_LIST": f"{C},{A}", "PROXY_FILE": str(listing)}))
    assert config.proxies == (C, A, B)
    assert config.ban_statuses == {403, 429} and config.empty_policy == "wait" and config.enabled is None
    bad = {
        "PROXY_LIST": ["http://ok:1", "ftp://x:1"],
        "PROXY_FILE": str(tmp_path / "missing.txt"),
        "PROXY_BAN_STATUSES": "403,abc",
        "PROXY_BAN_BODY_REGEX": "(",
        "PROXY_MIN_SCORE": INITIAL_SCORE,
        "PROXY_REVIVE_SECONDS": -1,
        "PROXY_EMPTY_POLICY": "sometimes",
        "PROXY_ENABLED": "maybe",
    }
    for name, value in bad.items():
        with pytest.raises(ValueError, match=name):
            ProxyConfig.from_settings(Settings({name: value}))
    with pytest.raises(ValueError, match="different Redis Cluster hash slots"):
        ProxyConfig.from_settings(Settings({"REDIS_CLUSTER": True, "PROXY_DEAD_KEY": "dc:proxies:dead"}))
    # defaults on a cluster: the dead key follows the pool key's slot; "0" from -s/env is off
    default = ProxyConfig.from_settings(Settings({"REDIS_CLUSTER": "1"}))
    assert (default.pool_key, default.dead_key) == ("dc:proxies", "{dc:proxies}:dead")
    assert key_slot(b"dc:proxies") == key_slot(default.dead_key.encode())
    assert ProxyConfig.from_settings(Settings({"REDIS_CLUSTER": "0"})).dead_key == "dc:proxies:dead"
    cluster = ProxyConfig.from_settings(
        Settings({"REDIS_CLUSTER": True, "PROXY_POOL_KEY": "{dc}:proxies", "PROXY_DEAD_KEY": "{dc}:proxies:dead"})
    )
    assert cluster.dead_key == "{dc}:proxies:dead"


def test_failure_reasons_name_the_kind() -> None:
    from scrapy.core.downloader.handlers.http11 import TunnelError
    from scrapy.exceptions import DownloadConnectionRefusedError, DownloadTimeoutError

    assert failure_reason(DownloadConnectionRefusedError("refused")).startswith("connection refused")
    assert failure_reason(DownloadTimeoutError("took longer")).startswith("timeout")
    assert failure_reason(TunnelError("Could not open CONNECT tunnel")).startswith("tunnel error")


# -- scoring, eviction, revival -------------------------------------------------------------------
def test_scores_rise_to_the_cap_and_failures_evict_with_the_last_error(
    pool: ProxyPool, redis_client: redis.Redis
) -> None:
    assert run_sync(pool.load([A, B])) == 2
    for _ in range(30):
        run_sync(pool.success(A))
    assert redis_client.zscore("dc:proxies", A) == MAX_SCORE
    states = [run_sync(pool.failure(B, f"status 403 #{i}")).state for i in range(4)]
    # 10 -> 7 -> 4 -> 1 -> -2 (< PROXY_MIN_SCORE 0): evicted at the fourth failure, exactly once.
    assert states == ["failed", "failed", "failed", "evicted"]
    assert run_sync(pool.failure(B, "late")).state == "gone"
    assert redis_client.zrange("dc:proxies", 0, -1) == [A.encode()]
    dead = json.loads(redis_client.hget("dc:proxies:dead", B))
    assert dead["error"] == "status 403 #3" and dead["score"] == INITIAL_SCORE - 4 * FAILURE_PENALTY
    assert run_sync(pool.counts()) == (1, 1)


def test_load_keeps_dead_proxies_dead_add_brings_them_back(pool: ProxyPool, redis_client: redis.Redis) -> None:
    run_sync(pool.load([A]))
    for _ in range(4):
        run_sync(pool.failure(A, "connection refused"))
    assert run_sync(pool.load([A, B])) == 1  # a restarting node does not resurrect A
    assert redis_client.hexists("dc:proxies:dead", A)
    assert run_sync(pool.add([A])) == 1
    assert redis_client.zscore("dc:proxies", A) == INITIAL_SCORE and not redis_client.hexists("dc:proxies:dead", A)


def test_revive_uses_server_time_and_gives_one_more_chance(pool: ProxyPool, redis_client: redis.Redis) -> None:
    run_sync(pool.load([A, B]))
    for proxy in (A, B):
        for _ in range(4):
            run_sync(pool.failure(proxy, "timeout"))
    now = redis_client.time()[0]
    entry = json.loads(redis_client.hget("dc:proxies:dead", A))
    assert abs(entry["since"] - now) < 5  # written on the server clock
    entry["since"] = now - 120  # dead for two minutes (an old score, not a sleep)
    redis_client.hset("dc:proxies:dead", A, json.dumps(entry))
    assert run_sync(pool.revive(60)) == [(A, "timeout")]
    assert redis_client.zscore("dc:proxies", A) == pool.revival_score == 1
    assert redis_client.hexists("dc:proxies:dead", B)  # dead for less than 60 s
    assert run_sync(pool.failure(A, "timeout again")).state == "evicted"  # one failure is enough now


def test_pick_is_weighted_by_health(pool: ProxyPool, redis_client: redis.Redis) -> None:
    assert run_sync(pool.pick(0.5)) is None
    redis_client.zadd("dc:proxies", {A: 20, B: 0})  # weights 21 and 1 with PROXY_MIN_SCORE 0
    picks = Counter(run_sync(pool.pick(i / 220)) for i in range(220))
    assert picks == {A: 210, B: 10}  # members sorted by score: B takes the first 1/22 of [0, 1)


def test_pick_passes_over_the_proxies_that_failed_the_request(pool: ProxyPool, redis_client: redis.Redis) -> None:
    redis_client.zadd("dc:proxies", {A: 20, B: 0, C: 10})
    # the node's digest is the one Lua computes from the pool member
    assert redis_client.eval("return string.sub(redis.sha1hex(ARGV[1]), 1, 12)", 0, B).decode() == proxy_digest(B)
    picks = Counter(run_sync(pool.pick(i / 100, (proxy_digest(A),))) for i in range(100))
    assert set(picks) == {B, C} and picks[C] > picks[B]  # still weighted among the others
    only = Counter(run_sync(pool.pick(i / 50, (proxy_digest(A), proxy_digest(C)))) for i in range(50))
    assert only == {B: 50}
    # every proxy failed the request already: any of them, as without the list
    everyone = tuple(proxy_digest(p) for p in (A, B, C))
    assert [run_sync(pool.pick(i / 220, everyone)) for i in range(220)] == [
        run_sync(pool.pick(i / 220)) for i in range(220)
    ]
    assert run_sync(pool.pick(0.99, ("0" * 12, "not hex at all"))) == run_sync(pool.pick(0.99))


# -- dcrawl proxies -----------------------------------------------------------------------------
def test_cli_add_list_remove_reset(
    redis_url: str, redis_client: redis.Redis, tmp_path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich folds long cells at 80

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["proxies", *args, "--redis-url", redis_url])
        out, err = capsys.readouterr()
        return code, out, err

    listing = tmp_path / "p.txt"
    listing.write_text(f"# comment\n{C}\n")
    assert run("add", A, B, "--file", str(listing))[0] == 0
    assert run("add", A)[1].startswith("added 0 of 1")
    assert redis_client.zcard("dc:proxies") == 3
    pool = ProxyPool(redis_client)
    for _ in range(4):
        run_sync(pool.failure(B, "status 407 (proxy authentication required)"))
    code, out, _ = run("list", "--json")
    listed = json.loads(out)
    assert code == 0 and (listed["healthy"], listed["dead"]) == (2, 1)
    dead = [p for p in listed["proxies"] if p["state"] == "dead"]
    assert dead[0]["url"] == "http://u:***@127.0.0.1:3002" and dead[0]["error"].startswith("status 407")
    code, out, _ = run("list")
    assert code == 0 and "u:***@127.0.0.1:3002" in out and "pw@" not in out
    assert run("reset", "127.0.0.1:3002")[0] == 0  # host:port names it
    assert redis_client.zscore("dc:proxies", B) == INITIAL_SCORE and redis_client.hlen("dc:proxies:dead") == 0
    assert run("remove", "http://u:***@127.0.0.1:3002", A)[0] == 0  # the masked URL names it too
    assert redis_client.zrange("dc:proxies", 0, -1) == [C.encode()]
    code, _, err = run("remove", "http://127.0.0.1:9")
    assert code == 1 and "not in the pool" in err
    code, _, err = run("add", "http://user:s3cret@host:bad")
    assert code == 1 and "s3cret" not in err and "proxies add" in err
    redis_client.zadd("dc:proxies", {C: 2})
    assert run("reset")[0] == 0 and redis_client.zscore("dc:proxies", C) == INITIAL_SCORE


def test_status_shows_proxy_health(redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture) -> None:
    pool = ProxyPool(redis_client)
    run_sync(pool.load([A, B, C]))
    for _ in range(4):
        run_sync(pool.failure(C, "connection refused"))
    redis_client.lpush("news:start_urls", "https://example.com/")  # a crawl (no crawl of news: exit 1)
    assert main(["status", "news", "--redis-url", redis_url, "--json"]) == 0
    proxies = json.loads(capsys.readouterr().out)["proxies"]
    assert proxies == {"total": 2, "healthy": 2, "dead": 1}
    assert main(["status", "news", "--redis-url", redis_url]) == 0
    assert "2/2 healthy, 1 dead" in capsys.readouterr().out


# -- the middleware (real Redis, no network) ------------------------------------------------------
def middleware_run(redis_url: str, scenario, **settings):
    """Build ProxyPoolMiddleware from settings and run `scenario(mw)` inside spider_opened/closed."""
    import asyncio

    from scrapy.utils.test import get_crawler

    from distributed_crawler.downloadermiddlewares.proxy import ProxyPoolMiddleware

    crawler = get_crawler(settings_dict={"REDIS_URL": redis_url, **settings})
    mw = ProxyPoolMiddleware.from_crawler(crawler)

    async def run():
        await mw.spider_opened(None)
        try:
            return await scenario(mw)
        finally:
            await mw.spider_closed(None)

    return asyncio.run(run()), crawler.stats.get_stats()


def test_middleware_records_outcomes_and_marks_bans(redis_url: str, redis_client: redis.Redis) -> None:
    from scrapy import Request
    from scrapy.exceptions import DownloadCancelledError, DownloadConnectionRefusedError, DownloadFailedError
    from scrapy.http import HtmlResponse

    async def scenario(mw):
        seen = {}
        for status, body in (
            (200, b"ok"),
            (404, b"no such page"),
            (503, b"down"),
            (200, b"<p>Access denied</p>"),
            (429, b""),
        ):
            request = Request(f"http://example.com/{status}")
            assert await mw.process_request(request) is None
            assert request.meta["proxy"] == B and request.meta["_dc_proxy"] == mask_url(B)
            response = HtmlResponse(request.url, status=status, body=body, request=request)
            assert await mw.process_response(request, response) is response
            seen[(status, body[:6])] = request.meta.get("_dc_proxy_ban")
        request = Request("http://example.com/refused")
        await mw.process_request(request)
        assert await mw.process_exception(request, DownloadConnectionRefusedError("refused")) is None
        # The spider's own proxy (or None = none) is left alone.
        own = Request("http://example.com/own", meta={"proxy": "http://10.9.9.9:1"})
        none = Request("http://example.com/none", meta={"proxy": None})
        for request in (own, none):
            await mw.process_request(request)
            assert "_dc_proxy" not in request.meta
        assert own.meta["proxy"] == "http://10.9.9.9:1" and none.meta["proxy"] is None
        # Pages for the browser (marked by RenderingMiddleware, 650, before this one) get their pool
        # proxy for the browser context, not as meta["proxy"]; a page's own failure is not the
        # proxy's, a network error of the browser is. A cancelled download is not the proxy's fault.
        rendered = Request("http://example.com/app/1", meta={PLAYWRIGHT_META: True})
        await mw.process_request(rendered)
        assert "proxy" not in rendered.meta and rendered.meta[BROWSER_PROXY_META] == B
        assert rendered.meta["_dc_proxy"] == mask_url(B)
        page_failed = DownloadFailedError("render of http://example.com/app/1 failed: '#x' never appeared")
        assert await mw.process_exception(rendered, page_failed) is None
        proxy_failed = DownloadFailedError("render failed: Page.goto: net::ERR_PROXY_CONNECTION_FAILED at http://x/")
        assert await mw.process_exception(rendered, proxy_failed) is None
        own_rendered = Request("http://example.com/app/2", meta={PLAYWRIGHT_META: True, "proxy": "http://10.9.9.9:1"})
        await mw.process_request(own_rendered)
        assert own_rendered.meta[BROWSER_PROXY_META] == "http://10.9.9.9:1" and "_dc_proxy" not in own_rendered.meta
        request = Request("http://example.com/huge")
        await mw.process_request(request)
        await mw.process_exception(request, DownloadCancelledError("larger than DOWNLOAD_MAXSIZE"))
        return seen

    seen, stats = middleware_run(
        redis_url,
        scenario,
        PROXY_LIST=[B],
        PROXY_BAN_BODY_REGEX="Access denied",
    )
    assert seen == {
        (200, b"ok"): None,
        (404, b"no suc"): None,
        (503, b"down"): None,
        (200, b"<p>Acc"): "body matches PROXY_BAN_BODY_REGEX",
        (429, b""): "status 429",
    }
    # 10 + 1 (200) + 1 (404) + 0 (503) - 3 (regex) - 3 (429) - 3 (refused) - 3 (browser net::ERR_) = 0
    assert redis_client.zscore("dc:proxies", B) == 0
    assert (stats["proxy/used"], stats["proxy/failed"]) == (8, 4) and "proxy/evicted" not in stats


def test_middleware_sticky_domains_keep_one_proxy_until_it_is_evicted(
    redis_url: str, redis_client: redis.Redis
) -> None:
    from scrapy import Request
    from scrapy.http import HtmlResponse

    async def scenario(mw):
        async def pick(url: str) -> str:
            request = Request(url)
            await mw.process_request(request)
            return request.meta["proxy"], request

        first, _ = await pick("http://a.example/1")
        assert {(await pick(f"http://a.example/{i}"))[0] for i in range(20)} == {first}
        for _ in range(4):  # the sticky proxy is banned until it is evicted
            _, request = await pick("http://a.example/x")
            await mw.process_response(request, HtmlResponse(request.url, status=403, body=b"", request=request))
        return first, {(await pick(f"http://a.example/{i}"))[0] for i in range(20)}

    (first, after), stats = middleware_run(redis_url, scenario, PROXY_LIST=[A, C], PROXY_STICKY_DOMAINS="true")
    assert stats["proxy/evicted"] == 1 and redis_client.hexists("dc:proxies:dead", first)
    assert after == {A, C} - {first}


@pytest.mark.parametrize("sticky", [False, True], ids=["rotating", "sticky"])
def test_middleware_sends_a_retry_through_another_proxy(redis_url: str, sticky: bool) -> None:
    from scrapy import Request
    from scrapy.exceptions import DownloadConnectionRefusedError
    from scrapy.http import HtmlResponse

    async def scenario(mw):
        outcomes = []
        for i in range(20):
            request = Request(f"http://a.example/{i}")
            await mw.process_request(request)
            first = request.meta["proxy"]
            if i % 2:
                await mw.process_exception(request, DownloadConnectionRefusedError("refused"))
            else:
                await mw.process_response(request, HtmlResponse(request.url, status=403, body=b"", request=request))
            retry = request.copy()  # as Scrapy's get_retry_request makes it (meta copied)
            await mw.process_request(retry)
            outcomes.append((first, request.meta[FAILED_PROXIES_META], retry.meta["proxy"]))
        return outcomes

    outcomes, _ = middleware_run(
        redis_url, scenario, PROXY_LIST=[A, C], PROXY_MIN_SCORE=-1000, PROXY_STICKY_DOMAINS=sticky
    )
    for first, failed, retried in outcomes:
        assert failed == [proxy_digest(first)] and retried == ({A, C} - {first}).pop()


def test_middleware_reads_failed_proxies_as_untrusted_and_keeps_the_last_four(redis_url: str) -> None:
    from scrapy import Request
    from scrapy.exceptions import DownloadConnectionRefusedError

    async def scenario(mw):
        picked = []
        for garbage in ("abc", 7, [1, None, {"x": 1}], ["g" * 12, "0" * 13], {"a": 1}):
            request = Request("http://a.example/", meta={FAILED_PROXIES_META: garbage})
            await mw.process_request(request)
            picked.append(request.meta["proxy"])
        request = Request("http://a.example/", meta={FAILED_PROXIES_META: ["a" * 12, "b" * 12, "c" * 12, "d" * 12]})
        await mw.process_request(request)
        await mw.process_exception(request, DownloadConnectionRefusedError("refused"))
        return picked, request.meta[FAILED_PROXIES_META]

    (picked, failed), _ = middleware_run(redis_url, scenario, PROXY_LIST=[A])
    assert picked == [A] * 5
    assert failed == ["b" * 12, "c" * 12, "d" * 12, proxy_digest(A)]


def test_middleware_is_off_without_proxies_and_when_disabled(redis_url: str) -> None:
    from scrapy import Request
    from scrapy.exceptions import NotConfigured

    async def scenario(mw):
        request = Request("http://example.com/")
        await mw.process_request(request)
        return mw.active, "proxy" in request.meta

    assert middleware_run(redis_url, scenario)[0] == (False, False)
    with pytest.raises(NotConfigured):
        middleware_run(redis_url, scenario, PROXY_ENABLED=False, PROXY_LIST=[A])


def test_middleware_revives_dead_proxies_on_server_time(redis_url: str, redis_client: redis.Redis) -> None:
    from scrapy import Request

    redis_client.hset(
        "dc:proxies:dead", A, json.dumps({"error": "timeout", "since": redis_client.time()[0] - 61, "score": -2})
    )
    redis_client.hset(
        "dc:proxies:dead", C, json.dumps({"error": "timeout", "since": redis_client.time()[0], "score": -2})
    )

    async def scenario(mw):
        request = Request("http://example.com/")
        await mw.process_request(request)  # the pool is empty but for A, revived on the way
        return request.meta["proxy"]

    proxy, stats = middleware_run(redis_url, scenario, PROXY_REVIVE_SECONDS=60)
    assert proxy == A and stats["proxy/revived"] == 1
    assert redis_client.zscore("dc:proxies", A) == 1 and redis_client.hexists("dc:proxies:dead", C)
