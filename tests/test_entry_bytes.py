"""Redis bytes per pending request of the per-host frontier, on the shapes a news crawl has:
seeded URLs (start requests) and followed links with a Referer, http and https, hosts with 10 to
2,000 requests each (past zset-max-listpack-entries, 128). `MEMORY USAGE` of every frontier key
(host lists, queues and hashes, ready zset, sequence, pending counter) / the pending requests,
against the bound docs/benchmarks.md states for bench/memory.py (150 bytes) on a real
redis-server with its default encodings. Deterministic: sizes, not timings."""

from __future__ import annotations

import random

import pytest
import redis
from scrapy import Request, Spider
from scrapy.settings import Settings

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.dedup.dupefilter import SetDedup
from distributed_crawler.frontier.codec import RequestCodec
from distributed_crawler.frontier.enqueue import Enqueuer
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.seeds import parse_seed

KEYS = SpiderKeys.from_settings(Settings(), "eb")
BOUND = 150  # bytes per pending request, all frontier keys included
SECTIONS = ("world", "politics", "business", "sport", "culture", "science")


class _Spider(Spider):
    name = "eb"


def requests(codec: RequestCodec, kind: str, scheme: str, hosts: int, per_host: int) -> list[tuple[str, str]]:
    """(host, member) of `per_host` seeds or links (with the Referer of their section page) per host."""
    rnd = random.Random(7)
    out = []
    for h in range(hosts):
        host = f"www.example-news{h}.com"
        for _ in range(per_host):
            section = rnd.choice(SECTIONS)
            url = (
                f"{scheme}://{host}/{rnd.randrange(2000, 2027)}/{rnd.randrange(1, 13):02d}/"
                f"{rnd.randrange(1, 29):02d}/{section}/article-headline-{rnd.getrandbits(40):x}.html"
            )
            if kind == "seeds":  # a `dcrawl seed` line as a node makes it, with Scrapy's start meta
                request = parse_seed(url, 1 << 20).to_request(None)
                request.meta.setdefault("is_start_request", True)
            else:
                request = Request(
                    url,
                    callback=codec.spider.parse,  # type: ignore[union-attr]
                    headers={"Referer": f"{scheme}://{host}/{section}/"},
                    meta={"depth": rnd.randrange(1, 8)},
                )
            out.append((host, make_member(codec.encode(request, slot=host), request.priority)))
    return out


def frontier_bytes(client: redis.Redis) -> int:
    """MEMORY USAGE of every key of the frontier (the dedup filter is not the frontier)."""
    total = 0
    for key in client.scan_iter(match="{eb}:*", count=1000):
        if key.decode() != KEYS.dupefilter:
            total += int(client.memory_usage(key, samples=0) or 0)
    return total


@pytest.mark.parametrize(
    ("kind", "scheme", "hosts", "per_host"),
    [
        ("seeds", "https", 20, 100),
        ("seeds", "http", 100, 10),
        ("seeds", "https", 1, 2000),
        ("links", "https", 20, 100),
        ("links", "http", 100, 10),
        ("links", "https", 1, 2000),
    ],
)
def test_a_pending_request_costs_at_most_150_bytes(
    redis_client: redis.Redis, kind: str, scheme: str, hosts: int, per_host: int
) -> None:
    frontier = frontier_for_mode(redis_client, KEYS, "host")
    codec = RequestCodec(_Spider())
    # as the scheduler pushes with the default politeness (DOMAIN_RATE_LIMIT 1, DOMAIN_MAX_IN_FLIGHT 2)
    entries = [("", True, m, 0.0, host, 1.0, -1, 2) for host, m in requests(codec, kind, scheme, hosts, per_host)]
    enqueuer = Enqueuer(frontier, SetDedup(KEYS.dupefilter))
    for start in range(0, len(entries), 500):
        run_sync(enqueuer.run("push", entries[start : start + 500]))
    assert redis_client.get(KEYS.pending) == str(hosts * per_host).encode()
    per_request = frontier_bytes(redis_client) / (hosts * per_host)
    assert per_request <= BOUND, f"{kind} {scheme} {hosts}x{per_host}: {per_request:.1f} bytes per pending request"
