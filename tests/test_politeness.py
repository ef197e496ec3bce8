"""Per-domain politeness across nodes: settings, the slot reservation in Lua, and a 3-node crawl."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.connection.lua import lua_source
from distributed_crawler.downloadermiddlewares.politeness import PolitenessConfig
from tests.conftest import Workers, crawl_preflight, one_error_line
from tests.site.server import NewsSite


# -- settings -------------------------------------------------------------------------------
def test_overrides_match_the_domain_and_its_subdomains() -> None:
    config = PolitenessConfig.from_settings(
        Settings(
            {
                "DOMAIN_RATE_LIMIT": 5,
                "DOMAIN_RATE_LIMITS": '{"example.com": 0.5, "free.org": 0}',
            }
        )
    )
    assert config.enabled
    assert config.limit_for("example.com") == ("example.com", 0.5)
    assert config.limit_for("WWW.Example.com.") == ("example.com", 0.5)  # one budget for the domain
    assert config.limit_for("notexample.com") == ("notexample.com", 5.0)
    assert config.limit_for("a.free.org") == ("free.org", 0.0)  # 0 = exempt
    assert config.key("example.com", None) == "dc:rate:example.com"


def test_per_proxy_budgets_never_put_credentials_in_keys() -> None:
    config = PolitenessConfig.from_settings(Settings({"DOMAIN_RATE_LIMIT": 1, "DOMAIN_RATE_LIMIT_PER_PROXY": True}))
    a = config.key("e.com", "http://user:s3cret@10.0.0.1:3128")
    b = config.key("e.com", "http://other:s3cret@10.0.0.1:3128")
    assert a.startswith("dc:rate:e.com@10.0.0.1:3128#") and a != b and "s3cret" not in a + b
    assert config.key("e.com", None) == "dc:rate:e.com"  # direct requests share the domain budget


def test_polite_by_default_and_off_when_every_limit_is_zero() -> None:
    config = PolitenessConfig.from_settings(Settings())
    assert config.enabled and config.rate == 1.0 and config.in_flight_for("E.com") == ("e.com", 2)
    off = {"DOMAIN_RATE_LIMIT": 0, "DOMAIN_MAX_IN_FLIGHT": 0}
    assert not PolitenessConfig.from_settings(Settings(off)).enabled
    assert not PolitenessConfig.from_settings(Settings({**off, "DOMAIN_RATE_LIMITS": {"e.com": 0}})).enabled
    capped = PolitenessConfig.from_settings(Settings({**off, "DOMAIN_MAX_IN_FLIGHT": '{"e.com": 3}'}))
    assert capped.in_flight_for("a.e.com") == ("e.com", 3) and capped.in_flight_for("x.org") == ("x.org", 0)
    assert capped.in_flight_key("e.com") == "dc:inflight:e.com"


def test_in_flight_tokens_cap_a_domain_for_every_node(redis_client: redis.Redis) -> None:
    script = redis_client.register_script(lua_source("in_flight"))
    take = [int(script(keys=["dc:inflight:e.com"], args=["take", f"n{i}", 2, 60])) for i in range(3)]
    assert take == [1, 1, 0]
    assert int(script(keys=["dc:inflight:e.com"], args=["give", "n0"])) == 1
    assert int(script(keys=["dc:inflight:e.com"], args=["take", "n3", 2, 60])) == 1
    redis_client.zadd("dc:inflight:e.com", {"n1": 1, "n3": 1})  # a dead node's tokens: expired
    assert int(script(keys=["dc:inflight:e.com"], args=["take", "n4", 2, 60])) == 1
    assert redis_client.zcard("dc:inflight:e.com") == 1 and redis_client.pttl("dc:inflight:e.com") > 0


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"DOMAIN_RATE_LIMIT": -1}, "DOMAIN_RATE_LIMIT (-1.0) must be >= 0 requests per second (0 = no limit)"),
        (
            {"DOMAIN_RATE_LIMIT": "fast"},
            "DOMAIN_RATE_LIMIT ('fast') must be a number of requests per second (0 = no limit)",
        ),
        ({"DOMAIN_RATE_LIMITS": "{bad json"}, "DOMAIN_RATE_LIMITS ('{bad json') must be a dict of domain"),
        ({"DOMAIN_RATE_LIMITS": {"e.com": "x"}}, "DOMAIN_RATE_LIMITS['e.com'] ('x') must be a number"),
        ({"DOMAIN_RATE_KEY": "dc:rate"}, "DOMAIN_RATE_KEY (dc:rate) must contain %(domain)s"),
    ],
)
def test_bad_settings_are_rejected_with_the_value(settings: dict, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        PolitenessConfig.from_settings(Settings(settings))
    assert str(exc.value).startswith(message)


# -- rate.lua -------------------------------------------------------------------------------
def test_each_call_reserves_the_next_slot_one_interval_apart(redis_client: redis.Redis) -> None:
    reserve = redis_client.register_script(lua_source("rate"))
    # a 10 s interval: the calls themselves take far less, so slot i is i intervals after slot 0
    waits = [float(reserve(keys=["dc:rate:e.com"], args=["10"])) for _ in range(4)]
    assert waits[0] == 0.0
    for i, wait in enumerate(waits[1:], start=1):
        assert i * 10 - 5 < wait <= i * 10
    ttl = redis_client.pttl("dc:rate:e.com")
    assert 30_000 < ttl <= 42_000  # the key expires once its slots are in the past
    assert float(reserve(keys=["dc:rate:other.com"], args=["10"])) == 0.0  # one key per domain


def test_concurrent_nodes_never_get_the_same_slot(redis_url: str) -> None:
    waits: list[float] = []
    lock = threading.Lock()

    def node() -> None:
        client = redis.Redis.from_url(redis_url)
        reserve = client.register_script(lua_source("rate"))
        for _ in range(10):
            wait = float(reserve(keys=["dc:rate:e.com"], args=["10"]))
            with lock:
                waits.append(wait)
        client.close()

    threads = [threading.Thread(target=node) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    slots = sorted(round(w / 10) for w in waits)
    assert slots == list(range(40))  # 40 reservations, 40 distinct slots


# -- three nodes, one site ------------------------------------------------------------------
def max_in_any_window(times: list[float], window: float = 1.0) -> int:
    times = sorted(times)
    best, j = 0, 0
    for i, start in enumerate(times):
        while j < len(times) and times[j] < start + window:
            j += 1
        best = max(best, j - i)
    return best


def test_max_in_any_window() -> None:
    assert max_in_any_window([0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2]) == 5
    assert max_in_any_window([0, 0.1, 0.15, 3]) == 3


def granted_slots(monitor_log: str) -> list[float]:
    """Slots rate.lua handed out (Redis server time), from MONITOR's view of its SETs.

    rate.lua stores `slot + interval` ("following") in the domain's key; MONITOR shows the
    commands a script runs, e.g. `... [0 lua] "SET" "dc:rate:127.0.0.1" "1764745200.400000" "PX" ...`.
    Returns the `following` values, sorted.
    """
    out = []
    for line in monitor_log.splitlines():
        if '"SET" "dc:rate:' in line:
            out.append(float(line.split('"')[5]))
    return sorted(out)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_three_nodes_share_one_rate_per_domain(
    workers: Workers, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """Three nodes at DOMAIN_RATE_LIMIT=5 stay within one shared rate: checked where it is decided.

    The limiter's guarantee is about slots on Redis's clock: rate.lua hands them out one interval
    (0.2 s) apart, whichever node asks, so any window of w seconds holds at most floor(w*5)+1
    slots; and a request starts no earlier than its slot. Counting 1 s windows on the site's
    arrival times instead (as this test once did, "<= 6") also measures what comes after the
    slot: event-loop lag, the downloader, the connection, the site's threads. Those delays only
    ever make a request *later*, yet a request held back lands next to the following ones, so
    under load the site saw 7 in one second while the limiter had done its job.

    So the test checks the guarantee itself, without loosening it and without tolerances that
    depend on load: (1) the granted slots, read from Redis MONITOR, are at least one interval
    apart; (2) no request reaches the site ahead of its slot: the k-th arrival comes no earlier
    than the k-th slot (each arrival used a slot of its own that began before it; delays cannot
    break this, only a request that skipped the limiter can). Redis and the site share this
    machine's clock (the site logs time.monotonic(), converted to wall time here).
    """
    interval = 1 / 5
    monitor_path = tmp_path / "monitor.log"
    with monitor_path.open("w") as out:
        monitor = subprocess.Popen(["redis-cli", "-u", redis_url, "monitor"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while "OK" not in monitor_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "OK" in monitor_path.read_text(), "redis-cli monitor did not start"
        with NewsSite(articles=30, per_page=10) as site:
            for node in ("node-a", "node-b", "node-c"):
                # the middleware's limiter (single-queue modes); host mode: tests/test_frontier.py
                workers.start(
                    node,
                    "DOMAIN_RATE_LIMIT=5",
                    "RETRY_BACKOFF_BASE=0.2",
                    "RETRY_BACKOFF_MAX=2",
                    "SCHEDULER_QUEUE_CLASS=priority",
                )
            workers.wait_ready("node-a", "node-b", "node-c")
            redis_client.lpush("news:start_urls", site.url + "/")
            codes = workers.wait_all(timeout=150)
            log = site.request_log()
            wall_minus_monotonic = time.time() - time.monotonic()
    finally:
        monitor.terminate()
        monitor.wait(10)
    assert codes == {"node-a": 0, "node-b": 0, "node-c": 0}
    with sqlite3.connect(tmp_path / "items.db") as conn:
        urls = {url for (url,) in conn.execute("SELECT url FROM items")}
    assert urls == site.expected_urls()  # the crawl completes
    assert len(log) >= 40

    slots = [following - interval for following in granted_slots(monitor_path.read_text())]
    gaps = [b - a for a, b in zip(slots, slots[1:])]
    assert min(gaps) >= interval - 2e-6, f"two slots {min(gaps):.6f}s apart at DOMAIN_RATE_LIMIT=5"
    assert max_in_any_window(slots) <= 5 + 1  # hence the limiter's own bound: floor(1 s * 5) + 1
    # Every rate-limited arrival (robots.txt too; any subset works) had a slot of its own at or before it.
    arrivals = sorted(t + wall_minus_monotonic for t, _ in log)
    assert len(slots) >= len(arrivals)
    early = [(k, a - s) for k, (a, s) in enumerate(zip(arrivals, slots)) if a < s - 0.005]
    assert not early, f"requests reached the site ahead of their slots (index, seconds): {early[:5]}"
    nodes_waited = sum("'politeness/delayed'" in workers.log(n) for n in ("node-a", "node-b", "node-c"))
    assert nodes_waited >= 2, "the limit was shared: several nodes had to wait for slots"


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("DOMAIN_RATE_LIMITS={bad", "ERROR: DOMAIN_RATE_LIMITS ('{bad') is not valid JSON; e.g. -s"),
        ("RETRY_BACKOFF_MAX=0.5", "ERROR: RETRY_BACKOFF_MAX (0.5) must be >= RETRY_BACKOFF_BASE (1.0)"),
    ],
)
def test_a_bad_setting_stops_the_node_at_start_with_one_line(redis_url: str, setting: str, expected: str) -> None:
    proc = crawl_preflight({"REDIS_URL": redis_url}, "-s", setting)
    assert one_error_line(proc).startswith(expected), proc.stderr


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_graceful_stop_hands_waiting_requests_back_instead_of_waiting_for_their_slots(
    workers: Workers, redis_client: redis.Redis
) -> None:
    with NewsSite(articles=30, per_page=10) as site:
        # a slot every 5 s; the middleware waits in the single-queue modes (host mode waits in Redis)
        proc = workers.start(
            "node-a", "DOMAIN_RATE_LIMIT=0.2", "CONCURRENT_REQUESTS=8", "SCHEDULER_QUEUE_CLASS=priority"
        )
        workers.wait_ready("node-a")
        redis_client.lpush("news:start_urls", site.url + "/")
        deadline = time.monotonic() + 60
        while redis_client.zcard("{news}:processing") < 5 and time.monotonic() < deadline:
            time.sleep(0.1)  # the front page's links are leased, each waiting for its slot
        assert redis_client.zcard("{news}:processing") >= 5, workers.log("node-a")[-3000:]
        os.kill(proc.pid, signal.SIGTERM)
        began = time.monotonic()
        proc.wait(60)
        stopped_in = time.monotonic() - began
    # waiting out the slots would take >= 25 s; handing back takes a check interval and a round trip
    assert stopped_in < 20, f"graceful stop took {stopped_in:.1f}s"
    assert redis_client.zcard("{news}:processing") == 0
    assert redis_client.zcard("{news}:requests") >= 4  # handed back, for any node to take
    assert "'politeness/handed_back'" in workers.log("node-a")
