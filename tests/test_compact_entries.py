"""Compact queue entries (docs/frontier.md "Entry format") against a real redis-server: a new link is
its URL and the fields off their default, without an envelope; a host queue stores an https URL of
its own host as its path and every lease gives it back whole; entries and host hashes written by
the previous release (envelope + full JSON) keep working in every script."""

from __future__ import annotations

import json
import re

import pytest
import redis
from scrapy import Request, Spider

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.dedup.dupefilter import SetDedup
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.codec import RequestCodec, payload_url
from distributed_crawler.frontier.enqueue import Enqueuer
from distributed_crawler.frontier.envelope import make_member, split_member
from distributed_crawler.frontier.factory import frontier_for_mode, frontier_from_settings
from distributed_crawler.frontier.keys import SpiderKeys

KEYS = SpiderKeys(
    "c",
    "c:start_urls",
    "{c}:requests",
    "{c}:processing",
    "{c}:delayed",
    "{c}:dupefilter",
    "{c}:failed",
    "{c}:seq",
    "{c}:stats",
    "{c}:nodes",
    "{c}:node:%(node)s",
    "{c}:doorbell",
)
HOST = "www.news.example"
ARTICLE = f"https://{HOST}/2026/05/04/world/article-headline-a1b2c3d4e5.html"


class _Spider(Spider):
    name = "c"


@pytest.fixture
def codec() -> RequestCodec:
    return RequestCodec(_Spider())


@pytest.fixture
def scripts(redis_client: redis.Redis) -> Frontier:
    return frontier_for_mode(redis_client, KEYS, "host")


def push(scripts: Frontier, members: list[tuple[str, str]], delay: float = 0.0) -> None:
    """(slot, member) pairs, as the scheduler's outbox pushes them (interval 0, no budget, no cap)."""
    entries = [("", True, m, delay, slot, 0.0, -1, None) for slot, m in members]
    run_sync(Enqueuer(scripts, SetDedup(KEYS.dupefilter)).run("push", entries))


def queued(client: redis.Redis, host: str) -> list[bytes]:
    """A host's members in its order: its queue zset's priorities >= 0, its list, the zset's rest
    (lua/lib/host.lua host_peek)."""
    zset = client.zrange(KEYS.host_queue(host), 0, -1)
    envelope = [re.match(rb"\d+:(-?\d+):", m) for m in zset]
    ahead = [m for m, e in zip(zset, envelope) if not e or int(e.group(1)) >= 0]
    behind = [m for m in zset if m not in ahead]
    return ahead + client.lrange(KEYS.host_list(host), 0, -1) + behind


def link(codec: RequestCodec, url: str, **kwargs: object) -> str:
    request = Request(url, callback=codec.spider.parse, meta={"depth": 2}, **kwargs)  # type: ignore[union-attr]
    return make_member(codec.encode(request, slot=HOST), request.priority)


def old_member(url: str, slot: str, deliveries: int = 0, priority: int = 0, again: bool = False) -> str:
    """A member exactly as the previous release wrote it: envelope always, full JSON with id and slot."""
    payload = {
        "v": 1,
        "id": "2ada6204c66b5adc",
        "class": "scrapy.http.request.Request",
        "url": url,
        "method": "GET",
        "callback": "parse",
        "errback": None,
        "headers": {},
        "body": "",
        "cookies": {},
        "meta": {"depth": 1},
        "encoding": "utf-8",
        "priority": priority,
        "dont_filter": False,
        "flags": [],
        "cb_kwargs": {},
        "slot": slot,
    }
    if again:
        payload["again"] = 1
    return f"{deliveries}:{priority}:{json.dumps(payload, separators=(',', ':'))}"


def test_a_host_queue_stores_the_path_and_the_lease_holds_the_whole_url(
    scripts: Frontier, redis_client: redis.Redis, codec: RequestCodec
) -> None:
    member = link(codec, ARTICLE)
    assert member == f'{ARTICLE} {{"d":2}}'  # no envelope: 0 deliveries, priority 0, no expiry
    push(scripts, [(HOST, member)])
    (stored,) = redis_client.lrange(KEYS.host_list(HOST), 0, -1)  # priority 0, in arrival order: the list
    assert stored == b'/2026/05/04/world/article-headline-a1b2c3d4e5.html {"d":2}'
    assert not redis_client.exists(KEYS.host_queue(HOST))  # no zset for it
    popped = run_sync(scripts.lease(5, 60))
    (lease,) = [h.lease for h in popped.leases]
    assert lease == f"1:0:{member}".encode()
    assert codec.decode(split_member(lease).payload).url == ARTICLE
    assert redis_client.hget(KEYS.host(HOST), "pages") == b"1"  # a first delivery: a new page


def test_urls_the_queue_key_does_not_name_stay_whole(
    scripts: Frontier, redis_client: redis.Redis, codec: RequestCodec
) -> None:
    """Another host of the slot (DOMAIN_RATE_LIMITS domain), user info: stored as given; http of the
    host: "~" and its path; a non-default port is part of the host queue's name: stored as the path."""
    members = [
        ("www.news.example", link(codec, "http://www.news.example/a")),
        ("news.example", make_member(codec.encode(Request("https://www.news.example/b"), slot="news.example"), 0)),
        (
            "news.example:8443",
            make_member(codec.encode(Request("https://news.example:8443/c"), slot="news.example:8443"), 0),
        ),
        ("www.news.example", link(codec, "https://user@www.news.example/d")),
    ]
    push(scripts, members)
    stored = {m for slot, _ in members for m in queued(redis_client, slot)}
    assert stored == {b'/c {"callback":null}', b'~/a {"d":2}'} | {m.encode() for _, m in members[1::2]}
    leases = run_sync(scripts.lease(10, 60)).leases
    assert sorted(split_member(h.lease).payload for h in leases) == sorted(m for _, m in members)


def test_reclaim_and_release_put_the_compact_entry_back(
    scripts: Frontier, redis_client: redis.Redis, codec: RequestCodec
) -> None:
    member = link(codec, ARTICLE)
    push(scripts, [(HOST, member)])
    (lease,) = [h.lease for h in run_sync(scripts.lease(1, 60)).leases]
    assert run_sync(scripts.release([lease])) == 1  # no delivery counted: back without an envelope, page given back
    assert queued(redis_client, HOST) == [member.removeprefix(f"https://{HOST}").encode()]  # front: the zset
    assert redis_client.hget(KEYS.host(HOST), "pages") == b"0"
    (lease,) = [h.lease for h in run_sync(scripts.lease(1, 60)).leases]
    redis_client.zadd(KEYS.processing, {lease: 1})  # expired
    assert run_sync(scripts.reclaim(5, limit=10, failed_cap=10, node_id="t")) == (1, 0)
    (stored,) = queued(redis_client, HOST)
    assert stored == b"1:0:" + member.removeprefix(f"https://{HOST}").encode()  # one delivery counted
    (lease,) = [h.lease for h in run_sync(scripts.lease(1, 60)).leases]
    assert lease == f"2:0:{member}".encode()
    redis_client.zadd(KEYS.processing, {lease: 1})
    assert run_sync(scripts.reclaim(2, limit=10, failed_cap=10, node_id="t")) == (0, 1)  # delivered twice: dead letter
    (letter,) = [json.loads(x) for x in redis_client.lrange(KEYS.failed, 0, -1)]
    assert letter["url"] == ARTICLE and letter["payload"] == member  # whole: `dcrawl failed --requeue` reads it


def test_retries_wait_whole_and_keep_their_expiry(
    scripts: Frontier, redis_client: redis.Redis, codec: RequestCodec
) -> None:
    retry = Request(ARTICLE, callback=codec.spider.parse, dont_filter=True, priority=-1)  # type: ignore[union-attr]
    member = make_member(codec.encode(retry, slot=HOST, again=True), retry.priority, expires_at=4_000_000_000)
    push(scripts, [(HOST, member)], delay=0.001)
    (waiting,) = redis_client.zrange(KEYS.delayed, 0, -1)
    assert waiting == member.encode() and payload_url(split_member(waiting).payload) == ARTICLE
    redis_client.zadd(KEYS.delayed, {waiting: 0})  # due now
    (lease,) = [h.lease for h in run_sync(scripts.lease(1, 60)).leases]
    assert lease == b"1" + member.encode()[1:]
    envelope = split_member(lease)
    assert envelope.expires_at == 4_000_000_000 and envelope.priority == -1
    assert codec.decode(envelope.payload).dont_filter
    assert redis_client.hget(KEYS.host(HOST), "pages") is None  # "again": not a new page


def test_a_frontier_written_by_the_previous_release_keeps_working(
    scripts: Frontier, redis_client: redis.Redis, codec: RequestCodec
) -> None:
    """Host queues, delayed, processing and host hashes exactly as the previous release left them."""
    old = [old_member(f"https://{HOST}/old/{i}", HOST) for i in range(3)]
    redis_client.zadd(KEYS.host_queue(HOST), {m: i for i, m in enumerate(old)})
    redis_client.hset(KEYS.host(HOST), mapping={"iv": "0", "max": "-1", "cap": "0", "pages": "4"})
    redis_client.zadd(KEYS.ready, {HOST: 0})
    redis_client.zadd(KEYS.delayed, {old_member(f"https://{HOST}/retry", HOST, 1, again=True): 0})
    redis_client.zadd(KEYS.processing, {old_member(f"https://{HOST}/leased", HOST, 1): 1})  # expired lease
    push(scripts, [(HOST, link(codec, ARTICLE))])  # a new-format entry beside them
    assert run_sync(scripts.reclaim(5, limit=10, failed_cap=10, node_id="t")) == (1, 0)
    leases = [h.lease for h in run_sync(scripts.lease(10, 60)).leases]
    requests = [codec.decode(split_member(lease).payload) for lease in leases]
    assert sorted(r.url for r in requests) == sorted(
        [f"https://{HOST}/old/{i}" for i in range(3)] + [f"https://{HOST}/retry", f"https://{HOST}/leased", ARTICLE]
    )
    assert all(r.callback == codec.spider.parse for r in requests)  # type: ignore[union-attr]
    assert [split_member(x).deliveries for x in leases].count(2) == 2  # the reclaimed and the retry
    assert redis_client.hget(KEYS.host(HOST), "pages") == b"8"  # 4 + three old new pages + the new link
    assert queued(redis_client, HOST) == [] and redis_client.zcard(KEYS.processing) == 6


def test_a_revisit_waiting_in_its_host_queue_is_not_queued_twice(
    scripts: Frontier, redis_client: redis.Redis, codec: RequestCodec
) -> None:
    """recrawl_move.lua finds the revisit's member in the host queue although it is stored as a path."""
    from distributed_crawler.recrawl.schedule import RevisitSchedule

    schedule = RevisitSchedule(redis_client, scripts)
    recrawl_keys = schedule.keys_for(ARTICLE)
    member = make_member(codec.encode(Request(ARTICLE), slot=HOST, again=True), 0)
    run_sync(schedule.record("fp", (1, 1), 2.0, "body", digest="x", member=member))
    for _ in range(2):
        redis_client.zadd(recrawl_keys.schedule, {"fp": 0})
        assert run_sync(schedule.move_due(10, 60)).moved == 1
    assert len(queued(redis_client, HOST)) == 1


def test_an_envelope_less_member_that_is_not_ours_is_leased_for_the_dead_letters(
    scripts: Frontier, redis_client: redis.Redis, codec: RequestCodec
) -> None:
    redis_client.zadd(KEYS.host_queue(HOST), {"not a request": 0, "/no/such {oops": 1})
    redis_client.zadd(KEYS.ready, {HOST: 0})
    leases = sorted(h.lease for h in run_sync(scripts.lease(10, 60)).leases)
    assert leases == [f"1:0:https://{HOST}/no/such {{oops".encode(), b"1:0:not a request"]
    for lease in leases:  # what the node's _accept dead-letters, with the reason
        with pytest.raises(ValueError, match="not JSON"):
            codec.decode(split_member(lease).payload)


def test_a_sharded_frontier_routes_a_compact_lease_to_its_hosts_shard(redis_client: redis.Redis) -> None:
    """A lease this node did not take (reclaimed elsewhere, released by another process) is routed
    by its payload: the slot it names, else its URL's placement, as the push placed it."""
    from scrapy.settings import Settings

    from distributed_crawler.frontier.codec import RequestCodec as Codec

    sharded = frontier_from_settings(Settings({"FRONTIER_SHARDS": 4}), "c", redis_client)
    codec = Codec(None)
    for i in range(20):
        url = f"https://h{i}.example/a"
        member = f"1:0:{codec.encode(Request(url), slot=f'h{i}.example')}"
        assert sharded.shard_of_member(member) == sharded.shard_of_url(url)  # type: ignore[attr-defined]
    named = f"1:0:{codec.encode(Request('https://www.h1.example/a'), slot='h1.example')}"
    assert '"slot":"h1.example"' in named
    assert sharded.shard_of_member(named) == sharded.shard_of_url("https://h1.example/")  # type: ignore[attr-defined]
    assert sharded.shard_of_member("garbage") == 0  # type: ignore[attr-defined]


def start_request(url: str, **kwargs: object) -> Request:
    """A start request as a node makes it of a `dcrawl seed` line, with Scrapy's start meta."""
    return Request(url, dont_filter=True, meta={"is_start_request": True}, **kwargs)  # type: ignore[arg-type]


def test_a_start_requests_defaults_cost_one_mark(codec: RequestCodec) -> None:
    """Scrapy's defaults of a start request (no callback, dont_filter, meta is_start_request) are
    the mark "S"; a field off those defaults is still written, and every form reads back."""
    plain = codec.encode(start_request(ARTICLE), slot=HOST)
    assert plain == f"{ARTICLE} S"
    back = codec.decode(plain)
    assert (back.callback, back.dont_filter, back.meta) == (None, True, {"is_start_request": True})
    odd = start_request(ARTICLE, callback=codec.spider.parse, priority=3)  # type: ignore[union-attr]
    odd.meta["k"] = 1
    odd.dont_filter = False
    payload = codec.encode(odd, slot=HOST)
    assert payload == f'{ARTICLE} S{{"callback":"parse","priority":3,"dont_filter":false,"meta":{{"k":1}}}}'
    back = codec.decode(payload)
    assert (back.callback, back.dont_filter, back.priority) == (codec.spider.parse, False, 3)  # type: ignore[union-attr]
    assert back.meta == {"is_start_request": True, "k": 1}
    # another priority goes to a zset, where an id keeps two equal requests apart; so does a retry
    assert '"id":' in codec.encode(start_request(ARTICLE, priority=3), slot=HOST)
    assert codec.encode(start_request(ARTICLE), slot=HOST, again=True).startswith(f'{ARTICLE} S{{"id":')
    assert '"id":' in codec.encode(start_request(ARTICLE))  # the single queue (no slot): a zset


def test_equal_start_requests_stay_two_requests_with_two_leases(
    scripts: Frontier, redis_client: redis.Redis, codec: RequestCodec
) -> None:
    """Seeding a URL twice means fetching it twice: both wait in the host's list, and their leases
    differ (host_pop.lua lease_apart), so each is acked, released or reclaimed on its own."""
    member = make_member(codec.encode(start_request(ARTICLE), slot=HOST), 0)
    push(scripts, [(HOST, member), (HOST, member)])
    assert (
        redis_client.lrange(KEYS.host_list(HOST), 0, -1) == [f"{member.removeprefix('https://' + HOST)}".encode()] * 2
    )
    leases = [h.lease for h in run_sync(scripts.lease(5, 60)).leases]
    assert leases == [f"1:0:{ARTICLE} S".encode(), f'1:0:{ARTICLE} S{{"id":"1"}}'.encode()]
    assert redis_client.zcard(KEYS.processing) == 2
    assert [codec.decode(split_member(lease).payload).meta for lease in leases] == [{"is_start_request": True}] * 2
    redis_client.zrem(KEYS.processing, leases[0])  # one acked: the other lease still stands
    assert redis_client.zrange(KEYS.processing, 0, -1) == [leases[1]]


def test_a_hosts_order_across_its_queue_and_its_list(
    scripts: Frontier, redis_client: redis.Redis, codec: RequestCodec
) -> None:
    """Priority first, FIFO among equals, whichever key holds them: the zset's priorities >= 0
    (the previous release's entries of priority 0 included), the list, the lower priorities."""
    redis_client.zadd(KEYS.host_queue(HOST), {old_member(f"https://{HOST}/old", HOST): 1})  # previous release
    redis_client.zadd(KEYS.ready, {HOST: 0})
    members = [
        (HOST, link(codec, f"https://{HOST}/a")),
        (HOST, link(codec, f"https://{HOST}/low", priority=-1)),
        (HOST, link(codec, f"https://{HOST}/b")),
        (HOST, link(codec, f"https://{HOST}/high", priority=5)),
    ]
    push(scripts, members)
    leases = [h.lease for h in run_sync(scripts.lease(2, 60)).leases]
    assert [payload_url(split_member(x).payload) for x in leases] == [f"https://{HOST}/high", f"https://{HOST}/old"]
    assert run_sync(scripts.release(leases[1:])) == 1  # back to the front of priority 0: before the list
    got = [h.lease for h in run_sync(scripts.lease(10, 60)).leases]
    assert [payload_url(split_member(x).payload) for x in got] == [
        f"https://{HOST}/{p}" for p in ("old", "a", "b", "low")
    ]
    assert not redis_client.exists(KEYS.host_queue(HOST), KEYS.host_list(HOST))


def test_http_urls_of_the_host_are_stored_as_a_marked_path(
    scripts: Frontier, redis_client: redis.Redis, codec: RequestCodec
) -> None:
    url = f"http://{HOST}/2026/05/04/a.html"
    request = Request(url, callback=codec.spider.parse, headers={"Referer": f"http://{HOST}/world/"}, meta={"depth": 1})  # type: ignore[union-attr]
    member = make_member(codec.encode(request, slot=HOST), 0)
    push(scripts, [(HOST, member)])
    assert redis_client.lrange(KEYS.host_list(HOST), 0, -1) == [b'~/2026/05/04/a.html {"r":"/world/","d":1}']
    (lease,) = [h.lease for h in run_sync(scripts.lease(1, 60)).leases]
    assert lease == f"1:0:{member}".encode()
    back = codec.decode(split_member(lease).payload)
    assert (back.url, back.headers.get("Referer")) == (url, f"http://{HOST}/world/".encode())


def test_a_seed_the_previous_release_queued_is_leased_and_decoded(
    scripts: Frontier, redis_client: redis.Redis, codec: RequestCodec
) -> None:
    """A compact seed with Scrapy's defaults written out and an id, as the previous release left it
    in a host's zset, beside a new one in the list: both leased, in order, as start requests."""
    old = '/old {"callback":null,"meta":{"is_start_request":true},"dont_filter":true,"id":"3f9c2a1b"}'
    redis_client.zadd(KEYS.host_queue(HOST), {old: 7})
    redis_client.zadd(KEYS.ready, {HOST: 0})
    push(scripts, [(HOST, make_member(codec.encode(start_request(f"https://{HOST}/new"), slot=HOST), 0))])
    leases = [h.lease for h in run_sync(scripts.lease(5, 60)).leases]
    requests = [codec.decode(split_member(lease).payload) for lease in leases]
    assert [r.url for r in requests] == [f"https://{HOST}/old", f"https://{HOST}/new"]
    assert all((r.callback, r.dont_filter, r.meta) == (None, True, {"is_start_request": True}) for r in requests)
