"""End to end: settling after load, automatic rendering, rendered pages through the proxy
pool. Real worker processes, real Chromium, real redis-server, the local render site."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import redis

from distributed_crawler.proxies.pool import INITIAL_SCORE, SUCCESS_BONUS
from distributed_crawler.rendering.config import DEFAULT_CHROMIUM
from tests.conftest import Workers, free_port
from tests.proxies.server import TestProxy
from tests.site.render_site import SETTLE_TOKENS, RenderSite
from tests.test_rendering_e2e import assert_no_page_left, rows

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _chromium() -> None:
    if not os.path.exists(DEFAULT_CHROMIUM):
        pytest.fail(f"{DEFAULT_CHROMIUM} is missing: run `make test`, which installs Debian's chromium")


# These pages share their filler text and are judged by every visible token: store the visible text
# (not the main text) and no near-duplicate marks (docs/news.md), as the rendering tests expect.
VISIBLE_TEXT = ("EXTRACT_MAIN_TEXT=False", "NEAR_DUPLICATES=False")


def stat(log: str, name: str) -> int:
    found = re.search(rf"'{re.escape(name)}': (\d+)", log)
    return int(found.group(1)) if found else 0


@pytest.mark.timeout(120)
def test_settling_reads_content_that_arrives_after_load_and_caps_a_page_that_never_stops(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with RenderSite() as site:
        redis_client.lpush("news:start_urls", *(site.url + p for p in SETTLE_TOKENS))
        # The default PLAYWRIGHT_WAIT_FOR=load: the timer and the XHR fill their text after it.
        workers.start("settle", "PLAYWRIGHT_URL_PATTERNS=/s/", "PLAYWRIGHT_SETTLE_MAX_MS=3000")
        assert workers.wait_all(timeout=90) == {"settle": 0}
    stored = rows(tmp_path / "items.db")
    for path, tokens in SETTLE_TOKENS.items():
        text = stored[site.url + path][0]
        assert all(t in text for t in tokens), f"{path}: {tokens} not in {text!r}"
    log = workers.log("settle")
    assert stat(log, "render/settle/settled") == 2 and stat(log, "render/settle/capped") == 1, log[-3000:]
    assert_no_page_left(log, rendered=3)


@pytest.mark.timeout(120)
def test_without_settling_the_late_content_is_missing(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # The failure the issue reports, kept as the reference: PLAYWRIGHT_SETTLE_MS=0 is the old behaviour.
    # The content comes 3 s late here (not 300-400 ms): on a loaded machine reading the frames after
    # `load` can take longer than 300 ms, and this test must not depend on the machine being quick.
    timer, xhr = "/s/timer?ms=3000", "/s/xhr?ms=3000"
    with RenderSite() as site:
        redis_client.lpush("news:start_urls", site.url + timer, site.url + xhr)
        workers.start("nosettle", "PLAYWRIGHT_URL_PATTERNS=/s/", "PLAYWRIGHT_SETTLE_MS=0")
        assert workers.wait_all(timeout=90) == {"nosettle": 0}
    stored = rows(tmp_path / "items.db")
    assert "outer" in stored[site.url + timer][0] and "loading" in stored[site.url + xhr][0]  # read early
    assert "timer-token-42" not in stored[site.url + timer][0]
    assert "xhr-token-42" not in stored[site.url + xhr][0]
    assert "render/settle" not in workers.log("nosettle")


@pytest.mark.timeout(120)
def test_rendered_pages_and_their_frames_go_through_the_proxy_pool(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    paths = ["/r/iframe", "/r/nested", "/r/cross", "/s/timer", "/static"]
    with (
        RenderSite() as site,
        TestProxy("forward", credentials=("render", "s3cret")) as authed,
        TestProxy("forward") as open_proxy,
    ):
        redis_client.lpush("news:start_urls", *(site.url + p for p in paths))
        workers.start("px", "PLAYWRIGHT_URL_PATTERNS=/r/,/s/", f"PROXY_LIST={authed.url},{open_proxy.url}")
        assert workers.wait_all(timeout=90) == {"px": 0}
        forwarded = authed.forwarded + open_proxy.forwarded
        site_hits = site.total_hits()
    stored = rows(tmp_path / "items.db")
    assert set(stored) == {site.url + p for p in paths}
    assert "cross-token-42" in stored[site.url + "/r/cross"][0] and "timer-token-42" in stored[site.url + "/s/timer"][0]
    # Pages, iframes (both origins), robots.txt and the plain page: every hit came through a proxy.
    assert site_hits >= 10 and forwarded == site_hits, (forwarded, site_hits)
    log = workers.log("px")
    assert stat(log, "render/proxied") == 4 and stat(log, "render/pages") == 4, log[-3000:]
    assert "s3cret" not in log
    scores = dict(redis_client.zrange("dc:proxies", 0, -1, withscores=True))
    # One success a response: robots.txt and /static (plain) plus the 4 rendered pages.
    assert sum(scores.values()) == 2 * INITIAL_SCORE + 6 * SUCCESS_BONUS, f"rendered pages not recorded: {scores}"
    assert_no_page_left(log, rendered=4)


@pytest.mark.timeout(120)
def test_a_dead_proxy_fails_rendered_pages_and_is_scored_down_like_for_plain_ones(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    with RenderSite() as site, TestProxy("forward") as good:
        paths = [f"/r/page/{i}" for i in range(1, 7)]
        redis_client.lpush("news:start_urls", *(site.url + p for p in paths))
        workers.start("dead", "PLAYWRIGHT_URL_PATTERNS=/r/", f"PROXY_LIST={dead},{good.url}", "ROBOTSTXT_OBEY=False")
        assert workers.wait_all(timeout=90) == {"dead": 0}
        assert good.forwarded == site.total_hits()
    stored = rows(tmp_path / "items.db")
    assert set(stored) == {site.url + p for p in paths}  # retried through the good proxy
    scores = dict(redis_client.zrange("dc:proxies", 0, -1, withscores=True))
    log = workers.log("dead")
    failed = stat(log, "proxy/failed")
    # Every failed render was the dead proxy's (net::ERR_PROXY_CONNECTION_FAILED) and counted against it.
    assert failed >= 1 and failed == stat(log, "render/failed"), log[-3000:]
    assert scores.get(dead.encode(), 0) < INITIAL_SCORE or redis_client.hexists("dc:proxies:dead", dead), scores


@pytest.mark.timeout(120)
def test_auto_renders_script_built_pages_and_never_a_static_one(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    paths = ["/a/static", "/a/app/1", "/a/app/2", "/r/iframe"]
    with RenderSite() as site:
        urls = [site.url + p for p in paths]
        urls[2] += "?gz=1"  # a gzip-encoded script-built page: judged once decoded
        redis_client.lpush("news:start_urls", *urls)
        workers.start("auto", "PLAYWRIGHT_AUTO=True", *VISIBLE_TEXT)  # no PLAYWRIGHT_URL_PATTERNS
        assert workers.wait_all(timeout=90) == {"auto": 0}
        hits = {p: site.hits(p) for p in paths}
    stored = rows(tmp_path / "items.db")
    assert set(stored) == set(urls)
    assert "Ferry timetable" in stored[site.url + "/a/static"][0]
    assert "app-1-token" in stored[urls[1]][0] and "app-2-token" in stored[urls[2]][0]
    assert "inner-token-42" in stored[site.url + "/r/iframe"][0]
    # Plain fetch, then the browser for the script-built ones; the static page only once.
    assert hits == {"/a/static": 1, "/a/app/1": 2, "/a/app/2": 2, "/r/iframe": 2}
    log = workers.log("auto")
    assert stat(log, "render/auto/rendered") == 3 and stat(log, "render/auto/added") == 3, log[-3000:]
    assert "render/auto/skipped" not in log and "render/requests" not in log
    assert_no_page_left(log, rendered=3)


@pytest.mark.timeout(150)
def test_auto_stops_rendering_a_host_where_rendering_adds_nothing_and_other_nodes_know(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with RenderSite() as site:
        # Every /n/ page has a <noscript> asking for JavaScript, but its scripts add no text.
        redis_client.rpush("news:start_urls", *(f"{site.other_url}/n/{i}" for i in range(1, 9)))
        workers.start("learn", "PLAYWRIGHT_AUTO=True", *VISIBLE_TEXT, "CONCURRENT_REQUESTS=1")
        assert workers.wait_all(timeout=90) == {"learn": 0}
        first = [site.hits(f"other:/n/{i}") for i in range(1, 9)]
        verdict = redis_client.hget("{news}:render:verdicts", "localhost|/n/#")
        # Another node starts with what the cluster learnt: it renders none of them.
        redis_client.rpush("news:start_urls", *(f"{site.other_url}/n/{i}" for i in range(9, 13)))
        workers.start("later", "PLAYWRIGHT_AUTO=True", *VISIBLE_TEXT)
        assert workers.wait_all(timeout=90)["later"] == 0
        later = [site.hits(f"other:/n/{i}") for i in range(9, 13)]
    assert verdict == b"3:0"  # PLAYWRIGHT_AUTO_SAMPLES=3 samples, none added content
    assert sorted(first) == [1] * 5 + [2] * 3, first  # 3 pages fetched twice (plain + browser), 5 once
    assert later == [1, 1, 1, 1]
    stored = rows(tmp_path / "items.db")
    assert len(stored) == 12 and all("harbour council" in text for text, _ in stored.values())
    log = workers.log("learn")
    assert stat(log, "render/auto/rendered") == 3 and stat(log, "render/auto/added_nothing") == 3, log[-3000:]
    assert stat(log, "render/auto/skipped") == 5 and stat(log, "render/auto/hosts/localhost/skipped") == 5
    later_log = workers.log("later")
    assert stat(later_log, "render/auto/skipped") == 4 and "render/auto/rendered" not in later_log
    assert "Launching browser" not in later_log
