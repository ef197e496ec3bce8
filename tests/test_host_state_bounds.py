"""What a worker keeps per host is bounded (docs/settings.md, "Per-host state in a worker").

A wide crawl meets hundreds of thousands of hosts; each structure below must hold at most its
bound however many hosts went through it. Fast: no crawl, no Redis.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from scrapy import Request
from scrapy.core.downloader import Downloader, Slot
from scrapy.utils.test import get_crawler
from twisted.internet import reactor
from twisted.web.client import HTTPConnectionPool

from distributed_crawler import internals
from distributed_crawler.bounded import BoundedDict
from distributed_crawler.core import guard, traps
from distributed_crawler.downloadermiddlewares import adaptive_delay, proxy, retry, robotstxt


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the building block -------------------------------------------------------------------------
def test_bounded_dict_forgets_the_least_recently_used_first() -> None:
    table: BoundedDict[str, int] = BoundedDict(3)
    for i in range(3):
        table[f"h{i}"] = i
    assert table.get("h0") == 0  # read: now the most recent
    table["h3"] = 3
    assert len(table) == 3 and "h1" not in table
    assert sorted(table) == ["h0", "h2", "h3"]
    assert table.evicted == 1


def test_bounded_dict_forgets_idle_keys() -> None:
    clock = Clock()
    table: BoundedDict[str, int] = BoundedDict(100, ttl=60.0, clock=clock)
    table["old"] = 1
    clock.now += 30
    table["young"] = 2
    clock.now += 31  # old idle 61 s, young 31 s
    assert table.get("old") is None and table.get("young") == 2
    clock.now += 50  # young read 50 s ago: still there
    table["new"] = 3  # a write drops what went idle from the old end
    assert sorted(table) == ["new", "young"]
    clock.now += 61
    table["newer"] = 4
    assert sorted(table) == ["newer"]


def test_bounded_dict_rejects_a_zero_bound() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        BoundedDict(0)


# -- each per-host structure ----------------------------------------------------------------------
def test_robots_parsers_are_bounded() -> None:
    mw = robotstxt.RobotsTxtMiddleware.from_crawler(get_crawler(settings_dict={"ROBOTSTXT_OBEY": True}))
    entry = {"status": 200, "body": "User-agent: *\nDisallow: /private/\n", "fetched_at": time.time()}
    for i in range(robotstxt.PARSERS_MAX + 50):
        mw._remember(f"h{i}.test", entry)
    assert len(mw._cached) == robotstxt.PARSERS_MAX
    assert mw._local("h0.test") is None  # forgotten: read again from the cluster's cache
    assert mw._local(f"h{robotstxt.PARSERS_MAX + 49}.test") is not None


def test_adaptive_delay_averages_are_bounded() -> None:
    times = adaptive_delay.ResponseTimes(adaptive_delay.AdaptiveDelayConfig(factor=2.0))
    for i in range(adaptive_delay.HOSTS_MAX + 10):
        times.record(f"h{i}.test", 0.5)
    assert len(times.average) == adaptive_delay.HOSTS_MAX
    assert times.delay("h0.test") == 0.0  # forgotten: measured again
    assert times.delay(f"h{adaptive_delay.HOSTS_MAX + 9}.test") == 1.0


def test_host_blocks_this_node_heard_of_are_bounded() -> None:
    mw = retry.DistributedRetryMiddleware.from_crawler(get_crawler())
    for i in range(retry.BLOCKED_HOSTS_MAX + 10):
        mw._blocked[f"h{i}.test"] = time.monotonic() + 60
        mw._reset_at[f"h{i}.test"] = time.monotonic()
    assert len(mw._blocked) == retry.BLOCKED_HOSTS_MAX
    assert len(mw._reset_at) == retry.BLOCKED_HOSTS_MAX


def test_sticky_proxies_are_bounded_and_forgotten_with_their_proxy(redis_url: str) -> None:
    mw = proxy.ProxyPoolMiddleware.from_crawler(
        get_crawler(
            settings_dict={"REDIS_URL": redis_url, "PROXY_LIST": ["http://p1:8080"], "PROXY_STICKY_DOMAINS": True}
        )
    )
    for i in range(proxy.STICKY_DOMAINS_MAX + 10):
        mw._sticky[f"h{i}.test"] = "http://p1:8080" if i % 2 else "http://p2:8080"
    assert len(mw._sticky) == proxy.STICKY_DOMAINS_MAX
    mw._forget_if_gone("http://p1:8080", proxy.Outcome("evicted", None))
    assert set(mw._sticky.values()) == {"http://p2:8080"}


def test_domain_cap_answers_are_bounded() -> None:
    hosts = traps.DomainHosts(lambda domain: f"d:{domain}", 5)
    for i in range(traps.KNOWN_HOSTS_MAX + 10):
        hosts._remember(f"h{i}.example.com", True)
    assert len(hosts._known) == traps.KNOWN_HOSTS_MAX
    assert hosts.unknown(["h0.example.com"]) == ["h0.example.com"]  # forgotten: asked again


def test_connection_pool_keeps_no_key_per_host_ever_fetched() -> None:
    pool = HTTPConnectionPool(reactor, persistent=True)
    idle = object()
    pool._connections = {(b"http", b"gone.test", 80): [], (b"http", b"idle.test", 80): [idle]}
    internals.bound_connection_pool(pool, 30.0)
    assert pool.cachedConnectionTimeout == 30.0
    assert list(pool._connections) == [(b"http", b"idle.test", 80)]
    pool._connections[(b"http", b"later.test", 80)] = []
    internals.bound_connection_pool(pool, 30.0)  # at most every POOL_PRUNE_SECONDS
    assert len(pool._connections) == 2
    pool._dc_pruned_at -= internals.POOL_PRUNE_SECONDS + 1  # the last prune, that long ago
    internals.bound_connection_pool(pool, 30.0)
    assert list(pool._connections) == [(b"http", b"idle.test", 80)]


def test_every_download_agent_keeps_scrapys_pool_bounded() -> None:
    pool = HTTPConnectionPool(reactor, persistent=True)
    pool._connections[(b"http", b"gone.test", 80)] = []
    crawler = get_crawler(settings_dict={"ALLOWED_PRIVATE_NETWORKS": []})
    guard.guarded_agent(crawler, Request("http://example.com/"), 10.0, None, None, pool)
    assert pool.cachedConnectionTimeout == guard.POOL_IDLE_SECONDS  # Twisted's own: 240 s
    assert pool._connections == {}


def _downloader_with_slots(slots: dict[str, tuple[float, float, float]]) -> tuple[object, Downloader]:
    """A crawler whose engine has a real Downloader holding `slots`: key -> (delay, jitter, idle for)."""
    crawler = get_crawler(settings_dict={"ALLOWED_PRIVATE_NETWORKS": []})
    downloader = Downloader(crawler)
    now = time.monotonic()
    for key, (delay, jitter, idle_for) in slots.items():
        slot = Slot(2, delay, jitter)
        slot.lastseen = now - idle_for
        downloader.slots[key] = slot
    crawler.engine = SimpleNamespace(downloader=downloader)  # type: ignore[assignment]
    return crawler, downloader


def test_downloader_keeps_no_slot_per_host_ever_fetched() -> None:
    hosts = {f"h{i}.test": (0.0, 0.5, 30.0) for i in range(5000)}
    crawler, downloader = _downloader_with_slots({**hosts, "fresh.test": (0.0, 0.5, 1.0)})
    assert internals.bound_downloader_slots(crawler, 10.0) == 5000
    assert list(downloader.slots) == ["fresh.test"]  # fetched 1 s ago: kept
    downloader.slots["later.test"] = Slot(2, 0.0, 0.0)
    assert internals.bound_downloader_slots(crawler, 0.0) == 0  # at most every SLOT_PRUNE_SECONDS
    downloader._dc_slots_pruned_at -= internals.SLOT_PRUNE_SECONDS + 1  # type: ignore[attr-defined]
    assert internals.bound_downloader_slots(crawler, 0.0) == 2


def test_a_dropped_slot_never_shortens_its_hosts_delay() -> None:
    """A slot's `lastseen` is its host's delay: kept until its longest delay (delay x (1 + jitter))
    and the idle time have passed, and kept while it has requests or a delayed queue run."""
    crawler, downloader = _downloader_with_slots(
        {
            "slow.test": (20.0, 0.5, 39.0),  # 20 s x 1.5 + 10 s idle = 40 s: not yet
            "done.test": (20.0, 0.5, 41.0),
            "busy.test": (0.0, 0.0, 600.0),
            "waiting.test": (0.0, 0.0, 600.0),
        }
    )
    downloader.slots["busy.test"].active.add(Request("http://busy.test/"))
    downloader.slots["waiting.test"].latercall = SimpleNamespace(cancel=lambda: None)  # type: ignore[assignment]
    assert internals.bound_downloader_slots(crawler, 10.0) == 1
    assert sorted(downloader.slots) == ["busy.test", "slow.test", "waiting.test"]


def test_every_download_agent_keeps_the_downloader_slots_bounded() -> None:
    crawler, downloader = _downloader_with_slots({f"h{i}.test": (0.0, 0.5, 600.0) for i in range(100)})
    guard.guarded_agent(crawler, Request("http://example.com/"), 10.0, None, None, None)
    assert downloader.slots == {}
    assert guard.SLOT_IDLE_SECONDS < 60  # Scrapy's own slot GC: 60 s idle, checked every 60 s
