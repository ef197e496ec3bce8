"""What robots.txt costs in Redis round trips, counted on the wire (one socket write of redis-py =
one round trip, as bench/probe.py counts them): a new host costs the fetching node two (claim,
store) and every other node one (the cached copy); a link robots.txt disallows costs none of its
own, and is counted as a refusal of its host and source (reason robots_txt), never as an error."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
import redis.asyncio.connection as async_connection
from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest
from scrapy.http import TextResponse
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from distributed_crawler.core.scheduler import RedisScheduler
from distributed_crawler.downloadermiddlewares.robotstxt import ROBOTS_PENDING, RobotsTxtMiddleware
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.factory import frontier_from_settings
from distributed_crawler.meta import HOLD_META, HOST_SLOT_META, LEASE_META
from tests.redis_topologies import RedisClusterNodes
from tests.round_trips import push_and_lease

pytestmark = pytest.mark.timeout(120)
ROBOTS = b"User-agent: *\nDisallow: /private/\n"
INTERVAL = 0.2  # DOMAIN_RATE_LIMIT 5: one request every 0.2 s per host (lifted from 1 to keep the test short)


class _Spider(Spider):
    name = "rt"

    def parse(self, response: Any) -> None:
        return None


class RoundTrips:
    """Socket writes of redis-py's asyncio connections in this process (the nodes' client), by kind."""

    def __init__(self) -> None:
        self.count = 0
        self.kinds: list[str] = []

    def take(self) -> list[str]:
        kinds, self.kinds, self.count = self.kinds, [], 0
        return kinds


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[RoundTrips]:
    trips = RoundTrips()
    original = async_connection.AbstractConnection.send_packed_command

    @functools.wraps(original)
    async def counted(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        raw = command if isinstance(command, bytes | bytearray) else b"".join(bytes(c) for c in command)
        trips.count += 1
        trips.kinds.append(bytes(raw).split(b"\r\n")[2].decode("ascii", "replace").lower())
        return await original(self, command, *args, **kwargs)

    monkeypatch.setattr(async_connection.AbstractConnection, "send_packed_command", counted)
    yield trips


def _node(settings: dict[str, Any], downloads: list[str]) -> tuple[Any, RobotsTxtMiddleware]:
    crawler = get_crawler(
        _Spider,
        settings_dict={
            "NODE_ID": "n1",
            "ROBOTSTXT_OBEY": True,
            "SCHEDULER": "distributed_crawler.scheduler.RedisScheduler",
            **settings,
        },
    )
    crawler.spider = _Spider.from_crawler(crawler)
    crawler.stats.open_spider()

    async def download_async(request: Request) -> TextResponse:
        downloads.append(request.url)
        return TextResponse(request.url, body=ROBOTS, encoding="utf-8", request=request)

    crawler.engine = SimpleNamespace(download_async=download_async)
    return crawler, RobotsTxtMiddleware.from_crawler(crawler)


def _leased(frontier: Frontier, url: str) -> Request:
    """Push `url` and lease it (sync client): a request as the scheduler hands it to the engine."""
    lease = push_and_lease(frontier, url, pause=0.1)
    return Request(url, meta={LEASE_META: lease.lease, HOST_SLOT_META: lease.slot})


def _now(client: Any) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def _other(url: str) -> Request:
    """A request of the same host leased by another node (its host due again later)."""
    return Request(url, meta={LEASE_META: url.encode(), HOST_SLOT_META: url.split("/")[2]})


async def _first_request(mw: RobotsTxtMiddleware, request: Request) -> Request:
    """The node's first request of a new host: held back while robots.txt is fetched here, then sent."""
    held = await mw.process_request(request)
    assert isinstance(held, Request) and HOLD_META in held.meta, held
    await held.meta.pop(HOLD_META)  # the scheduler holds it until this is done (core/held.py)
    assert await mw.process_request(held) is None  # allowed: sent by this node, no trip through Redis
    return held


def _new_host_costs(settings: dict[str, Any], client: Any, round_trips: RoundTrips) -> None:
    settings = {"DOMAIN_RATE_LIMIT": 1 / INTERVAL, "DOMAIN_MAX_IN_FLIGHT": 0, **settings}
    frontier = frontier_from_settings(Settings(settings), "rt", client)
    downloads: list[str] = []
    (c1, node1), (c2, node2) = _node(settings, downloads), _node(settings, downloads)

    async def scenario() -> dict[str, Any]:
        node1.spider_opened(c1.spider)
        node2.spider_opened(c2.spider)
        try:
            # warm-up on another host: scripts loaded, connections open (a node does this once)
            await _first_request(node1, _leased(frontier, "http://warm.test/a"))
            assert await node2.process_request(_other("http://warm.test/b")) is None
            request = _leased(frontier, "http://new.test/a")
            round_trips.take()
            before = _now(frontier.client)
            first = await _first_request(node1, request)
            fetching = round_trips.take()
            host = frontier.host_control()
            assert host is not None
            ready, state, _ = host.host_keys("new.test")
            seen = {
                "fetching": fetching,
                "due": frontier.client.zscore(ready, "new.test"),
                "state": frontier.client.hgetall(state),
                "lock": frontier.client.exists(f"{node1.cache_key('new.test')}:lock"),
                "first": first,
                "before": before,
            }
            # another node, a request of that host: the cluster's copy, one round trip
            with pytest.raises(IgnoreRequest):
                await node2.process_request(_other("http://new.test/private/x"))
            seen["other"] = round_trips.take()
            return seen
        finally:
            await node1.spider_closed(c1.spider)
            await node2.spider_closed(c2.spider)

    seen = asyncio.run(scenario())
    assert seen["fetching"] == ["evalsha", "evalsha"], seen["fetching"]  # robots_claim.lua, robots_store.lua
    assert seen["other"] == ["evalsha"], seen["other"]  # robots_claim.lua: a hit
    assert downloads == ["http://warm.test/robots.txt", "http://new.test/robots.txt"]  # once per host
    state = {k.decode(): v.decode() for k, v in seen["state"].items()}
    assert state["why"] == ROBOTS_PENDING and float(state["until"]) == 0  # blocked while fetched, then lifted
    assert not seen["lock"]
    # the held request goes one interval after robots.txt, the host's next one interval after that
    assert seen["due"] >= seen["before"] + 2 * INTERVAL


def test_a_new_host_costs_two_round_trips_on_one_redis(redis_url: str, round_trips: RoundTrips) -> None:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    try:
        _new_host_costs({"REDIS_URL": redis_url}, client, round_trips)
    finally:
        client.close()


@pytest.mark.slow
def test_a_new_host_costs_two_round_trips_on_a_six_shard_cluster(tmp_path: Path, round_trips: RoundTrips) -> None:
    nodes = RedisClusterNodes(tmp_path / "cluster").start()
    client = nodes.client()
    try:
        settings = {"REDIS_URL": nodes.url, "REDIS_CLUSTER": True, "FRONTIER_SHARDS": 6}
        _new_host_costs(settings, client, round_trips)
    finally:
        client.close()
        nodes.stop()


def test_a_disallowed_link_costs_no_round_trip_and_counts_as_a_refusal(
    redis_url: str, redis_client: redis.Redis, round_trips: RoundTrips
) -> None:
    redis_client.flushdb()
    settings = {"REDIS_URL": redis_url, "ADDONS": {"distributed_crawler.Addon": 0}}
    downloads: list[str] = []
    crawler, mw = _node(settings, downloads)
    scheduler = RedisScheduler.from_crawler(crawler)
    crawler.engine._slot = SimpleNamespace(scheduler=scheduler)  # how middlewares reach it (internals.py)
    refused = scheduler.frontier.keys.refused

    async def scenario() -> list[str]:
        await scheduler.open_parts(crawler.spider)
        mw.spider_opened(crawler.spider)
        try:
            await mw.process_request(Request("http://s.test/"))  # robots.txt fetched and cached
            with pytest.raises(IgnoreRequest):  # warm-up: the counting scripts loaded (a node does this once)
                await mw.process_request(Request("http://warm.test/private/"))
            await scheduler.parts.outbox.push_refusal_counts()
            round_trips.take()
            for i in range(50):
                with pytest.raises(IgnoreRequest):
                    await mw.process_request(Request(f"http://s.test/private/{i}", meta={LEASE_META: b"x"}))
            assert round_trips.take() == []  # none of their own
            await scheduler.parts.outbox.push_refusal_counts()  # the lease task's, at most once a second
            return round_trips.take()
        finally:
            await mw.spider_closed(crawler.spider)
            await scheduler.context.release()

    flush = asyncio.run(scenario())
    assert len(flush) == 1, flush  # host and source counts: one pipeline
    assert redis_client.hget(refused, "robots_txt s.test") == b"50"
    source = {k.decode(): v.decode() for k, v in redis_client.hgetall("{rt}:source:s.test").items()}
    assert source == {"x:robots_txt": "50"}  # a refusal by reason, no error (e:<day>)
    assert redis_client.zscore("{rt}:sources", "s.test")
    assert crawler.stats.get_value("dc/refused/robots_txt") == 51  # the warm-up's too


def test_claims_of_one_turn_share_a_round_trip(redis_url: str, round_trips: RoundTrips) -> None:
    """A leased batch of requests of hosts this node has no parser for: their claims (the cluster's
    copies here) cost one round trip together, not one each."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    settings = {"REDIS_URL": redis_url, "DOMAIN_RATE_LIMIT": 1 / INTERVAL, "DOMAIN_MAX_IN_FLIGHT": 0}
    frontier = frontier_from_settings(Settings(settings), "rt", client)
    downloads: list[str] = []
    (c1, node1), (c2, node2) = _node(settings, downloads), _node(settings, downloads)
    hosts = [f"h{i}.test" for i in range(8)]

    async def scenario() -> list[str]:
        node1.spider_opened(c1.spider)
        node2.spider_opened(c2.spider)
        try:
            for host in hosts:  # node 1 fetches and shares them
                await _first_request(node1, _leased(frontier, f"http://{host}/a"))
            await node2.process_request(_other("http://warm.test/b"))  # warm-up: node 2's connection and scripts
            round_trips.take()
            verdicts = await asyncio.gather(*(node2.process_request(_other(f"http://{h}/b")) for h in hosts))
            assert verdicts == [None] * len(hosts)  # allowed: the cluster's copies
            return round_trips.take()
        finally:
            await node1.spider_closed(c1.spider)
            await node2.spider_closed(c2.spider)

    try:
        sent = asyncio.run(scenario())
    finally:
        client.close()
    assert sent == ["evalsha"], sent  # one pipeline of eight robots_claim.lua calls
    assert len(downloads) == len(hosts) + 1  # fetched once each (node 1), warm.test by node 2
