"""End to end: a site points two workers at an internal service by every path a crawl follows
(links, sitemap index, sitemap, robots.txt, feeds, a 302, a meta refresh, a rendered page's iframe
and fetch(), rendered documents redirected inside the browser over http and https); the internal
service is never hit, the articles are stored, the workers idle-exit on
their own, and every refusal that reached the scheduler is dead-lettered as `private_address`
(tests/hostile/ssrf.py). A second run reaches the internal service through a *name*, which only
the connect-time check can judge."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
import redis

from tests.conftest import Workers, dcrawl
from tests.hostile.ssrf import Internal, SsrfSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

READY = "html[data-ready]"


def stored(db: Path) -> set[str]:
    if not db.exists():
        return set()
    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT url FROM items")}


def letters(client: redis.Redis) -> list[dict]:
    return [json.loads(x) for x in client.lrange("{news}:failed", 0, -1)]


@pytest.mark.timeout(120)
def test_no_path_of_a_hostile_site_reaches_the_internal_service(
    workers: Workers, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    internal = Internal("127.0.0.2")
    site = SsrfSite(internal)
    try:
        seeded = dcrawl(redis_url, "seed", "news", "--site", site.url)
        assert seeded.returncode == 0, seeded.stderr
        settings = (
            "ALLOWED_PRIVATE_NETWORKS=127.0.0.1/32",  # the site's own address only: 127.0.0.2 is internal
            "PLAYWRIGHT_URL_PATTERNS=/r/",
            f"PLAYWRIGHT_WAIT_FOR={READY}",
            "PLAYWRIGHT_RENDER_TIMEOUT=10",
            "RETRY_TIMES=1",
        )
        workers.start("node-a", *settings)
        workers.start("node-b", *settings)
        assert workers.wait_all(timeout=90) == {"node-a": 0, "node-b": 0}  # idle-exit, nothing hung
    finally:
        site.close()
        internal.close()
    assert internal.hits == [] and internal.connections == 0, internal.hits
    rows = stored(tmp_path / "items.db")
    assert site.article_urls() <= rows and not [u for u in rows if "127.0.0.2" in u], rows
    assert site.url + "/r/app" in rows  # the rendered page itself is stored; its iframe and fetch were not loaded
    dead = letters(redis_client)
    internal_letters = [x for x in dead if x["url"].startswith(internal.url)]
    assert {x["reason"] for x in internal_letters} == {"private_address"}, dead
    paths = sorted(x["url"][len(internal.url) :] for x in internal_letters)
    assert paths == ["/redirect", "/refresh"], dead  # the others never reach the scheduler (off-site)
    assert all("127.0.0.2 is loopback" in x["detail"] for x in internal_letters)
    # a rendered document redirected inside the browser (the browser's proxy refused the hop): one
    # dead letter of the request itself, at its first try, never retried (RETRY_TIMES=1)
    for path, target in (("/r/go", internal.url), ("/r/go-tls", internal.url.replace("http:", "https:"))):
        (letter,) = [x for x in dead if x["url"] == site.url + path]
        assert letter["reason"] == "private_address" and letter["source"] == "render", letter
        assert letter["attempts"] == 1 and site.hits[path] == 1, (letter, site.hits)
        assert (
            f"refused the redirect to {target}/r-redirect" in letter["detail"]
            and "127.0.0.2 is loopback" in letter["detail"]
        )
        assert site.url + path not in rows
    refused = {k.decode(): int(v) for k, v in redis_client.hgetall("{news}:refused").items()}
    # the 302 and the meta refresh, plus the rendered page's iframe, fetch(), WebSocket and the
    # redirect inside the browser (counted, not dead-lettered), plus the two refused documents
    assert refused.get("private_address 127.0.0.2", 0) >= 8, refused
    assert "private_address 127.0.0.1" not in refused, "counted once, under the host refused"
    warned = sum(len(re.findall(r"Refused https?://127\.0\.0\.2", workers.log(n))) for n in ("node-a", "node-b"))
    assert 1 <= warned <= 2, "one WARNING per host per minute per node"


@pytest.mark.timeout(90)
def test_a_name_resolving_to_an_internal_address_is_refused_when_connecting(
    workers: Workers, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """`localhost` passes the enqueue check (a name); the connection to 127.0.0.1 is refused."""
    internal = Internal("127.0.0.1")
    site = SsrfSite(internal, host="127.0.0.2")
    try:
        redis_client.lpush("news:start_urls", site.url + "/go-named", site.url + "/a/1")
        workers.start("node-a", "ALLOWED_PRIVATE_NETWORKS=127.0.0.2/32", "RETRY_TIMES=2")
        assert workers.wait_all(timeout=60) == {"node-a": 0}
    finally:
        site.close()
        internal.close()
    assert internal.hits == []
    assert site.url + "/a/1" in stored(tmp_path / "items.db")
    (letter,) = [x for x in letters(redis_client) if "localhost" in x["url"]]
    assert letter["reason"] == "private_address" and letter["source"] == "connect"
    assert "127.0.0.1 is loopback" in letter["detail"]
    assert redis_client.zcard("{news}:processing") == 0, "the refused request's lease was acked"
