"""Which budget a failed attempt spends: the proxy middleware and the retry middleware together, on a
real redis-server, without network. A proxy's failure (ban, 407, refused, reset, timeout, tunnel)
spends PROXY_RETRY_TIMES and leaves RETRY_TIMES alone; the site's (5xx, 408, 429, a direct timeout)
spends RETRY_TIMES as before."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
from scrapy import Request, Spider
from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.exceptions import DownloadConnectionRefusedError, DownloadTimeoutError
from scrapy.http import HtmlResponse
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler
from twisted.internet.error import ConnectionLost
from twisted.web.client import ResponseNeverReceived

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.downloadermiddlewares.proxy import ProxyPoolMiddleware
from distributed_crawler.downloadermiddlewares.retry import DistributedRetryMiddleware
from distributed_crawler.frontier.codec import read_payload
from distributed_crawler.meta import (
    FAILED_PROXIES_META,
    LEASE_META,
    MAX_PROXY_FAILURES,
    PROXY_FAILURES_META,
    PROXY_RETRY_TIMES_META,
    RETRY_DELAY_META,
    RETRY_TIMES_META,
)
from distributed_crawler.proxies.pool import ProxyConfig, ProxyPool, proxy_digest
from distributed_crawler.proxies.retries import (
    PROXY_FAILED,
    mark_failure,
    parse_retry_times,
    proxy_failures,
    proxy_retry_times,
    retry_limit,
)

SECRET = "s3cret-pw"
GOOD, AUTHED = "http://127.0.0.1:3001", f"http://crawler:{SECRET}@127.0.0.1:3002"
LEASE = b"1:0:{}"
FAILED_KEY = "{news}:failed"


# -- the setting and the counts in meta (untrusted: they come back through Redis) ------------------
def test_proxy_retry_times_is_auto_or_a_count() -> None:
    assert parse_retry_times("auto") is None and parse_retry_times(" AUTO ") is None
    assert parse_retry_times(0) == 0 and parse_retry_times("7") == 7 and parse_retry_times(4.0) == 4
    for bad in (-1, "-2", "many", 2.5, True, None):
        with pytest.raises(ValueError, match=r"PROXY_RETRY_TIMES \(.*\) must be 'auto' or an integer >= 0"):
            parse_retry_times(bad)
    assert ProxyConfig.from_settings(Settings()).retry_times is None  # the default: auto
    assert ProxyConfig.from_settings(Settings({"PROXY_RETRY_TIMES": "5"})).retry_times == 5
    # auto: every proxy the cluster knows (pooled and dead), at least 3
    assert [retry_limit(None, n) for n in (0, 1, 3, 5, 40)] == [3, 3, 3, 5, 40]
    assert retry_limit(0, 40) == 0 and retry_limit(2, 40) == 2


@pytest.mark.parametrize("garbage", ["3", -1, True, 2.0, None, [1]])
def test_a_proxy_retry_count_that_is_not_a_count_is_zero(garbage: Any) -> None:
    assert proxy_retry_times({PROXY_RETRY_TIMES_META: garbage}) == 0
    assert proxy_retry_times({PROXY_RETRY_TIMES_META: 4}) == 4


def test_the_proxies_tried_are_read_as_untrusted_and_capped() -> None:
    meta: dict[str, Any] = {PROXY_FAILURES_META: ["a", ["p", 1], ["p", "r", "x"], {"p": "r"}, ["p1", "r1"]]}
    assert proxy_failures(meta) == [("p1", "r1")]
    assert proxy_failures({PROXY_FAILURES_META: "p1 r1"}) == []
    meta = {}
    for i in range(MAX_PROXY_FAILURES + 3):
        mark_failure(meta, f"http://127.0.0.1:{i}", "x" * 1000, 5)
    pairs = proxy_failures(meta)
    assert len(pairs) == MAX_PROXY_FAILURES and pairs[-1][0] == f"http://127.0.0.1:{MAX_PROXY_FAILURES + 2}"
    assert max(len(reason) for _, reason in pairs) == 300
    json.dumps(meta)  # it travels in the request payload


# -- one attempt through both middlewares --------------------------------------------------------
class _Spider(Spider):
    name = "news"

    def parse(self, response: Any) -> None:
        return None


Outcome = Callable[[Request], "HtmlResponse | Exception"]


class Node:
    """The proxy middleware (700) and the retry middleware (550) of one node, run as Scrapy does:
    process_request down, then process_response / process_exception up, the proxy's first."""

    def __init__(self, crawler: Any, proxy: ProxyPoolMiddleware, retry: DistributedRetryMiddleware) -> None:
        self.crawler = crawler
        self.proxy = proxy
        self.retry = retry

    async def attempt(self, request: Request, outcome: Outcome) -> Request | HtmlResponse | None:
        """One download of `request` ending in `outcome(request)`: what the retry middleware returns."""
        await self.proxy.process_request(request)
        result = outcome(request)
        if isinstance(result, Exception):
            await self.proxy.process_exception(request, result)
            return await self.retry.process_exception(request, result)
        response = await self.proxy.process_response(request, result)
        return await self.retry.process_response(request, response)

    @property
    def stats(self) -> dict[str, Any]:
        return self.crawler.stats.get_stats()


def run_node(redis_url: str, scenario: Callable[[Node], Awaitable[Any]], **settings: Any) -> Any:
    crawler = get_crawler(
        _Spider,
        settings_dict={"REDIS_URL": redis_url, "NODE_ID": "n1", "RETRY_BACKOFF_BASE": 0.01, **settings},
    )
    crawler.spider = _Spider.from_crawler(crawler)
    node = Node(crawler, ProxyPoolMiddleware.from_crawler(crawler), DistributedRetryMiddleware.from_crawler(crawler))

    async def run() -> Any:
        await node.proxy.spider_opened(crawler.spider)
        node.retry.spider_opened(crawler.spider)
        try:
            return await scenario(node)
        finally:
            await node.retry.spider_closed(crawler.spider)
            await node.proxy.spider_closed(crawler.spider)

    return asyncio.run(run())


def answer(status: int, body: bytes = b"<p>page</p>") -> Outcome:
    return lambda request: HtmlResponse(request.url, status=status, body=body, request=request)


def error(exc: Exception) -> Outcome:
    return lambda request: exc


def leased(url: str = "http://site.example/page", **meta: Any) -> Request:
    return Request(url, meta={LEASE_META: LEASE, **meta})


PROXY_FAILURES = {
    "ban status 403": (answer(403), "proxy ban: status 403"),
    "407": (answer(407), "proxy ban: status 407 (proxy authentication required)"),
    "ban body": (answer(200, b"<p>Access denied</p>"), "proxy ban: body matches PROXY_BAN_BODY_REGEX"),
    "connection refused": (error(DownloadConnectionRefusedError("refused")), "connection refused"),
    "connection reset": (error(ConnectionLost("Connection lost")), "connection lost"),
    "no answer": (error(ResponseNeverReceived([ConnectionLost()])), "connection lost"),
    "proxy timeout": (error(DownloadTimeoutError("took longer than 20 s")), "timeout"),
    "tunnel": (error(TunnelError("Could not open CONNECT tunnel")), "tunnel error"),
}


@pytest.mark.parametrize("kind", sorted(PROXY_FAILURES))
def test_a_proxy_failure_is_retried_on_another_proxy_without_spending_retry_times(
    redis_url: str, redis_client: redis.Redis, kind: str
) -> None:
    outcome, reason = PROXY_FAILURES[kind]

    async def scenario(node: Node) -> tuple[Request, Request, Any]:
        first = leased(**{RETRY_TIMES_META: 2})
        retry = await node.attempt(first, outcome)
        assert isinstance(retry, Request), retry
        proxies = [retry.meta.get("proxy")]
        # the next attempt goes through the other proxy and succeeds
        done = await node.attempt(retry, answer(200))
        proxies.append(retry.meta["proxy"])
        return first, retry, (done, proxies)

    first, retry, (done, proxies) = run_node(
        redis_url,
        scenario,
        PROXY_LIST=[GOOD, AUTHED],
        PROXY_BAN_BODY_REGEX="Access denied",
        PROXY_MIN_SCORE=-100,  # no eviction: only the retry is under test
        RETRY_TIMES=2,
    )
    # RETRY_TIMES (2) was spent already by the site; a proxy failure still gets a retry
    assert retry.meta[RETRY_TIMES_META] == 2 and retry.meta[PROXY_RETRY_TIMES_META] == 1
    assert retry.meta[RETRY_DELAY_META] == 0.0  # at once: nothing to wait for at the site
    assert retry.priority == first.priority  # not the page's failure: no RETRY_PRIORITY_ADJUST
    assert retry.meta[LEASE_META] == LEASE  # the scheduler hands the lease over to the copy
    ((failed_proxy, why),) = proxy_failures(retry.meta)
    assert why.startswith(reason) and SECRET not in why and SECRET not in failed_proxy
    assert retry.meta[FAILED_PROXIES_META] == [proxy_digest(GOOD if failed_proxy == GOOD else AUTHED)]
    assert isinstance(done, HtmlResponse) and done.status == 200
    assert proxies[0] is None and proxies[1] != (GOOD if failed_proxy == GOOD else AUTHED)
    assert redis_client.llen(FAILED_KEY) == 0


def _stats_of(redis_url: str, outcome: Outcome, **settings: Any) -> tuple[Any, dict[str, Any]]:
    async def scenario(node: Node) -> tuple[Any, dict[str, Any]]:
        result = await node.attempt(leased(), outcome)
        return result, node.stats

    return run_node(redis_url, scenario, **settings)


@pytest.mark.parametrize("kind", sorted(PROXY_FAILURES))
def test_each_proxy_failure_counts_in_proxy_stats_only(redis_url: str, kind: str) -> None:
    outcome, _ = PROXY_FAILURES[kind]
    retry, stats = _stats_of(redis_url, outcome, PROXY_LIST=[GOOD], PROXY_BAN_BODY_REGEX="Access denied")
    assert isinstance(retry, Request) and RETRY_TIMES_META not in retry.meta
    assert stats["proxy/retry_count"] == 1 and stats["proxy/failed"] == 1
    assert "retry/count" not in stats and not any(k.startswith("retry/reason_count") for k in stats)


SITE_FAILURES = {
    "503 through a proxy": (answer(503), True, "503 Service Unavailable"),
    "500 through a proxy": (answer(500), True, "500 Internal Server Error"),
    "408 through a proxy": (answer(408), True, "408 Request Timeout"),
    "429 direct": (answer(429), False, "429 Unknown Status"),
    "timeout direct": (error(DownloadTimeoutError("took longer")), False, "DownloadTimeoutError"),
    "refused direct": (error(DownloadConnectionRefusedError("refused")), False, "DownloadConnectionRefusedError"),
}


@pytest.mark.parametrize("kind", sorted(SITE_FAILURES))
def test_a_site_failure_spends_retry_times_as_before(redis_url: str, kind: str) -> None:
    outcome, through_proxy, reason = SITE_FAILURES[kind]
    settings: dict[str, Any] = {"PROXY_LIST": [GOOD]} if through_proxy else {}
    retry, stats = _stats_of(redis_url, outcome, **settings)
    assert isinstance(retry, Request)
    assert retry.meta[RETRY_TIMES_META] == 1 and PROXY_RETRY_TIMES_META not in retry.meta
    assert retry.meta[RETRY_DELAY_META] > 0  # the backoff
    assert stats["retry/count"] == 1 and "proxy/retry_count" not in stats
    assert any(k.startswith("retry/reason_count/") and reason.split()[0] in k for k in stats), stats
    if through_proxy:
        assert "proxy/failed" not in stats  # the site's answer: not the proxy's fault


# -- the bound -------------------------------------------------------------------------------------
def test_every_proxy_failing_ends_in_one_proxy_failed_dead_letter_naming_them(
    redis_url: str, redis_client: redis.Redis
) -> None:
    refused = error(DownloadConnectionRefusedError(f"Connection was refused by other side: {AUTHED}"))

    def by_proxy(request: Request) -> HtmlResponse | Exception:
        return answer(407)(request) if request.meta["proxy"] == GOOD else refused(request)

    async def scenario(node: Node) -> list[Any]:
        results: list[Any] = []
        request: Any = leased(**{RETRY_TIMES_META: 1})
        for _ in range(10):  # bounded: the dead letter comes after PROXY_RETRY_TIMES + 1 failures
            result = await node.attempt(request, by_proxy)
            results.append(result)
            if not isinstance(result, Request):
                break
            request = result
        return [results, node.stats]

    results, stats = run_node(redis_url, scenario, PROXY_LIST=[GOOD, AUTHED], PROXY_MIN_SCORE=-100, RETRY_TIMES=2)
    # auto: 2 proxies known -> at least 3 retries: 4 attempts, every one failed by its proxy
    assert [isinstance(r, Request) for r in results] == [True, True, True, False]
    assert stats["proxy/retry_count"] == 3 and stats["proxy/retry_max_reached"] == 1
    assert stats["retry/failed"] == 1 and "retry/count" not in stats and "retry/max_reached" not in stats
    (raw,) = redis_client.lrange(FAILED_KEY, 0, -1)
    assert SECRET not in raw.decode()
    entry = json.loads(raw)
    assert entry["reason"] == PROXY_FAILED and entry["source"] == "retry"
    assert entry["attempts"] == 5 and entry["proxy_failures"] == 4  # one site failure before them
    named = {p["proxy"] for p in entry["proxies"]}
    assert named == {GOOD, "http://crawler:***@127.0.0.1:3002"} and len(entry["proxies"]) == 4
    assert entry["proxy"] == entry["proxies"][-1]["proxy"] and entry["status"] in (407, None)
    assert {p["error"].split(" (")[0] for p in entry["proxies"]} == {"proxy ban: status 407", "connection refused"}
    assert "PROXY_RETRY_TIMES 3" in entry["detail"] and "dcrawl proxies list" in entry["detail"]
    # the payload starts afresh on `dcrawl failed --requeue`: no counts (the digests stay, to avoid them)
    meta = read_payload(entry["payload"]).get("meta", {})
    assert not {RETRY_TIMES_META, PROXY_RETRY_TIMES_META, PROXY_FAILURES_META} & set(meta)
    assert len(meta[FAILED_PROXIES_META]) == 2


def test_auto_counts_dead_proxies_and_an_explicit_bound_wins(redis_url: str, redis_client: redis.Redis) -> None:
    pool = ProxyPool(redis_client)
    others = [f"http://127.0.0.1:{4000 + i}" for i in range(5)]
    run_sync(pool.load([GOOD, *others]))
    for proxy in others:  # dead: they failed requests that may still be under way
        for _ in range(4):
            run_sync(pool.failure(proxy, "connection refused"))
    assert run_sync(pool.counts()) == (1, 5)

    async def failures_until_dead_letter(node: Node) -> int:
        request: Any = leased()
        for attempt in range(1, 20):
            request = await node.attempt(request, answer(403))
            if not isinstance(request, Request):
                return attempt
        raise AssertionError("never dead-lettered")

    assert run_node(redis_url, failures_until_dead_letter, PROXY_MIN_SCORE=-100) == 7  # 6 known: 6 retries
    assert json.loads(redis_client.lpop(FAILED_KEY))["detail"].startswith("7 attempts failed")
    assert run_node(redis_url, failures_until_dead_letter, PROXY_MIN_SCORE=-100, PROXY_RETRY_TIMES=1) == 2
    assert run_node(redis_url, failures_until_dead_letter, PROXY_MIN_SCORE=-100, PROXY_RETRY_TIMES=0) == 1


def test_site_and_proxy_failures_mix_each_in_its_budget(redis_url: str, redis_client: redis.Redis) -> None:
    """The issue's page: 503 RETRY_TIMES times, with proxy failures in between, then 200."""

    async def scenario(node: Node) -> Any:
        steps = [answer(403), answer(503), error(DownloadConnectionRefusedError("refused")), answer(503)]
        steps += [answer(407), answer(200)]
        request: Any = leased()
        for step in steps:
            request = await node.attempt(request, step)
        return request, node.stats

    done, stats = run_node(redis_url, scenario, PROXY_LIST=[GOOD, AUTHED], PROXY_MIN_SCORE=-100, RETRY_TIMES=2)
    assert isinstance(done, HtmlResponse) and done.status == 200
    assert stats["retry/count"] == 2 and stats["proxy/retry_count"] == 3
    assert redis_client.llen(FAILED_KEY) == 0

    async def one_more_503(node: Node) -> Any:
        request: Any = leased()
        for step in (answer(503), answer(403), answer(503), answer(503)):
            request = await node.attempt(request, step)
        return request

    gave_up = run_node(redis_url, one_more_503, PROXY_LIST=[GOOD], PROXY_MIN_SCORE=-100, RETRY_TIMES=2)
    assert isinstance(gave_up, HtmlResponse) and gave_up.status == 503
    entry = json.loads(redis_client.lpop(FAILED_KEY))
    assert entry["reason"] == "503 Service Unavailable" and entry["status"] == 503
    assert entry["attempts"] == 4 and entry["proxy_failures"] == 1 and "proxies" not in entry


def test_dont_retry_retries_neither_budget(redis_url: str) -> None:
    async def scenario(node: Node) -> list[Any]:
        return [
            await node.attempt(leased(dont_retry=True), answer(403)),
            await node.attempt(leased(dont_retry=True), error(DownloadConnectionRefusedError("refused"))),
        ]

    ban, refused = run_node(redis_url, scenario, PROXY_LIST=[GOOD])
    assert isinstance(ban, HtmlResponse) and ban.status == 403 and refused is None


def test_a_requeued_dead_letter_starts_both_retry_budgets_afresh() -> None:
    """`dcrawl failed --requeue` resets the site's and the proxy's counts (and the proxies tried)."""
    from distributed_crawler.frontier.deadletters import fresh_payload

    payload = json.dumps(
        {
            "url": "http://s.test/a",
            "meta": {"retry_times": 2, "proxy_retry_times": 3, "proxy_failures": [["p", "x"]], "depth": 1},
        }
    )
    assert json.loads(fresh_payload(payload))["meta"] == {"depth": 1}
    untouched = json.dumps({"url": "http://s.test/b", "meta": {"depth": 1}})
    assert fresh_payload(untouched) == untouched
