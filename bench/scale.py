"""Capacity simulation: many simulated nodes drive the real Lua scripts on one Redis.

    .venv/bin/python bench/scale.py --json              # 100 nodes x 10 pages/s, 40 s measured
    .venv/bin/python bench/scale.py --model-only        # the model of docs/scaling.md, no Redis
    .venv/bin/python bench/scale.py --hosts 1000,10000,100000,1000000   # the per-host frontier

One private redis-server (the directives of deploy/redis.conf: AOF everysec, noeviction) is
started on a free port and stopped at the end. A Bloom filter sized for `--capacity` URLs is
created through the real code (dupefilter.choose_dedup + bloom_grow.lua) and the queue is filled
with `--prefill` requests through enqueue.lua. Then `--procs` processes run `--nodes` asyncio
nodes. Each node behaves like the scheduler and the Heartbeat extension at `--rate` pages/s:
- feeder: pop.lua when the local buffer falls to prefetch/4, for prefetch + prefetch/4 minus
  buffered minus in flight (scheduler._wanted);
- a page takes `--download` s; its `--links` links (`--new-links` of them new on average) go to
  the node's outbox, which one task drains with one enqueue.lua call at a time (Bloom check+add,
  push, doorbell PUBLISH), as scheduler._run_outbox; once pushed, the page's lease is acked by a
  ZREM batch every 100 ms (scheduler._run_leases); renew.lua every lease/3 (at most 10 s) and
  reclaim.lua every 5 s;
- heartbeat every `--heartbeat` s with the extension's calls (heartbeat.lua, crawl_counts,
  read_nodes, read_totals, forget_old_nodes); a seed poll (LPOP) every second;
- a doorbell subscriber per node (raw socket: counts messages without parsing them in Python).
Requests are real codec payloads of the news spider. The report puts the model's figures next
to the measured ones (ratio = measured / model) for round trips, script calls, doorbell messages,
network bytes and bytes per queued request, plus Redis CPU, script latency (server side from
INFO latencystats, client side including this process's event-loop queueing) and memory.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import multiprocessing as mp
import os
import random
import re
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis
import redis.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import Children, log
from bench.harness import start_redis as harness_start_redis
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.core.feeder import DUE_BATCH
from distributed_crawler.dedup.bloom import SDS_OVERHEAD, layer_plan, size_class
from distributed_crawler.dedup.dupefilter import BloomConfig, choose_dedup
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.counts import crawl_counts
from distributed_crawler.frontier.enqueue import Enqueuer
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.monitoring.nodes import (
    NodeKeys,
    beat,
    forget_old_nodes,
    heartbeat_script,
    read_nodes,
    read_totals,
)
from tests.frontiers import pop

ROOT = Path(__file__).resolve().parent.parent
SPIDER = "sim"
ACK_INTERVAL = 0.1  # scheduler.ACK_INTERVAL
RECLAIM_EVERY = 5.0  # scheduler: min(5, renew interval)
SEED_POLL = 1.0  # redis_spider.POLL_MAX: an empty seed list is polled once a second
HEARTBEAT_CALLS = 7  # beat, 2 x counts, zrevrangebyscore + pipeline, hgetall, zrangebyscore
KEY_BYTES_PER_PIECE = 100  # a Redis key's own overhead (dict entry, robj, key sds), measured ~
LOCAL_DIRECTIVES = {"bind", "port", "dir", "logfile"}


@dataclass(frozen=True)
class Workload:
    nodes: int = 100
    rate: float = 10.0  # pages/s per node
    links: int = 20  # same-site links per page (all sent to enqueue.lua)
    new_links: float = 1.0  # of which new (a steady frontier: about one per page)
    prefetch: int = 32  # SCHEDULER_PREFETCH = CONCURRENT_REQUESTS
    download: float = 1.0  # s per page (download + parse + store)
    lease: float = 60.0
    heartbeat: float = 10.0
    capacity: int = 1_000_000_000  # BLOOM_CAPACITY
    error_rate: float = 0.001
    urls: int = 1_000_000_000  # crawl size, for the memory model
    pending: int = 100_000_000  # peak pending requests, for the memory model

    @property
    def renew_every(self) -> float:
        return max(0.5, min(10.0, self.lease / 3))


# -- the model ---------------------------------------------------------------------------------
def resp_len(*args: Any) -> int:
    """Bytes of one RESP command (array of bulk strings), as redis-py sends it."""
    total = len(f"*{len(args)}\r\n")
    for a in args:
        n = len(a) if isinstance(a, (bytes, str)) else len(str(a))
        total += len(f"${n}\r\n") + n + 2
    return total


def bloom_bytes(capacity: int, error_rate: float, urls: int) -> tuple[int, int, int]:
    """(bytes, layers, pieces) of the bitmap filter once it holds `urls` (bloom.py's plan)."""
    total, held, layers, pieces = 0, 0, 0, 0
    while held < urls:
        layer = layer_plan(capacity, error_rate, layers)
        total += layer.bits // 8 + layer.pieces * (SDS_OVERHEAD + KEY_BYTES_PER_PIECE)
        held += layer.capacity
        pieces += layer.pieces
        layers += 1
    return total, layers, pieces


def queued_bytes_model(member: int, queued: int) -> float:
    """Redis 7.0 memory of one member of a large zset (skiplist + dict encoding).

    member sds (header 3 or 5 bytes + NUL) + skiplist node (ele, score, backward + 16 bytes per
    level, 1.33 levels on average: 52 bytes after rounding) + dict entry (24 -> 32) + its share of
    the dict's bucket array (8 bytes x the next power of two over `queued`).
    """
    header = 3 if member < 256 else 5
    buckets = 8 * (1 << max(0, (queued - 1).bit_length())) / queued
    return size_class(member + header + 1) + 52 + 32 + buckets


def model(w: Workload, member: int, queued_bytes: float) -> dict[str, float]:
    """Per-second figures of the whole cluster (see docs/scaling.md for the reasoning)."""
    pages = w.nodes * w.rate
    pop_batch = max(1.0, w.prefetch - w.rate * w.download)  # refilled at prefetch/4, in flight excluded
    acks = w.nodes / ACK_INTERVAL * (1 - math.exp(-w.rate * ACK_INTERVAL))  # ticks with >= 1 finished page
    per_node_periodic = 1 / w.renew_every + 1 / RECLAIM_EVERY + HEARTBEAT_CALLS / w.heartbeat + 1 / SEED_POLL
    pops = pages / pop_batch
    trips = pages + pops + acks + w.nodes * per_node_periodic
    scripts = pages + pops + w.nodes * (1 / w.renew_every + 1 / RECLAIM_EVERY + 3 / w.heartbeat)
    _, _, pieces = bloom_bytes(w.capacity, w.error_rate, 1)  # pieces of the first layer: KEYS of every enqueue
    fp = "f" * 40
    enqueue_in = resp_len(
        "EVALSHA",
        "s" * 40,
        4 + pieces,
        "{sim}:requests",
        "{sim}:seq",
        "{sim}:processing",
        "{sim}:dupefilter",
        *(["{sim}:dupefilter:0:000"] * pieces),
        "priority",
        w.links,
        "{sim}:doorbell",
        "bitmap",
        1,
        "push",
        *([fp, "0", "m" * member] * w.links),
    )
    ack_in = resp_len("ZREM", "{sim}:processing", *(["m" * member] * max(1, round(pages / acks)))) / max(
        1, round(pages / acks)
    )
    doorbell = pages * w.nodes  # one PUBLISH per enqueue call with a new link, to every node
    message = resp_len("message", "{sim}:doorbell", "1")
    # Every heartbeat reads every node's hash and last snapshot (read_nodes): nodes^2 per interval.
    fields = {
        "id": "sim-00",
        "interval": w.heartbeat,
        "state": "running",
        "pages": 10**6,
        "items": 10**6,
        "errors": 0,
        "in_flight": 10,
        "leases": 30,
        "rss": 150_000_000,
        "browser_pages": 0,
        "host": "sim-host",
        "pid": 12345,
        "version": "0.1.0",
        "spider": SPIDER,
        "started": 1.7e9,
        "rate": 600.0,
        "last_seen": "1764700000.123",
    }
    node_read = resp_len(*[x for kv in fields.items() for x in kv]) + resp_len(json.dumps(fields))
    heartbeat_out = w.nodes * w.nodes * node_read / w.heartbeat
    return {
        "pages_s": pages,
        "round_trips_s": trips,
        "round_trips_per_page": trips / pages,
        "script_calls_s": scripts,
        "doorbell_messages_s": doorbell,
        "net_in_bytes_s": pages * (enqueue_in + ack_in) + pops * 80,
        "net_out_bytes_s": pages * (member + 8 + 4 * w.links) + doorbell * message + heartbeat_out,
        "enqueue_call_bytes": enqueue_in,
        "bytes_per_queued_request": queued_bytes,
    }


def memory_model(w: Workload, queued_bytes: float) -> dict[str, float]:
    bloom, layers, pieces = bloom_bytes(w.capacity, w.error_rate, w.urls)
    leases = w.nodes * (w.prefetch + w.prefetch // 4) * queued_bytes
    return {
        "bloom_bytes": bloom,
        "bloom_layers": layers,
        "bloom_pieces": pieces,
        "bloom_bytes_per_url": bloom / w.urls,
        "queue_bytes": w.pending * queued_bytes,
        "lease_bytes": leases,
        "total_bytes": bloom + w.pending * queued_bytes + leases,
    }


# -- requests ----------------------------------------------------------------------------------
def news_member(url: str, depth: int, slot: str | None = None) -> str:
    """The queue member the scheduler writes for a news-spider link to `url` (its codec)."""
    from scrapy import Request

    spider, codec = _news_codec()
    return make_member(codec.encode(Request(url, callback=spider.parse, meta={"depth": depth}), slot=slot), 0)


@functools.cache
def _news_codec() -> tuple[Any, Any]:
    from demo.spiders.news import NewsSpider
    from distributed_crawler.frontier.codec import RequestCodec

    spider = NewsSpider()
    return spider, RequestCodec(spider, ())


def sample_payloads(n: int, seed: int) -> list[str]:
    """Queue members exactly as the scheduler writes them for the news spider's links."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        url = (
            f"https://www.example-news{rnd.randrange(100)}.com/{rnd.randrange(2000, 2027)}/"
            f"{rnd.randrange(1, 13):02d}/{rnd.randrange(1, 29):02d}/world/"
            f"article-headline-{rnd.getrandbits(40):x}.html"
        )
        out.append(news_member(url, rnd.randrange(1, 8)))
    return out


_HEADLINE = re.compile(r"article-headline-[0-9a-f]+")


def unique(member: str, rnd: random.Random) -> str:
    """The member with a fresh URL: equal members would collapse into one zset entry."""
    return _HEADLINE.sub(f"article-headline-{rnd.getrandbits(40):010x}", member, count=1)


# -- one simulated node ------------------------------------------------------------------------
class Tally:
    def __init__(self) -> None:
        self.trips: Counter[str] = Counter()
        self.latency: dict[str, list[float]] = {"enqueue": [], "pop": []}
        self.pages = 0
        self.starved = 0
        self.doorbell = 0
        self.measuring = False

    def trip(self, kind: str, n: int = 1) -> None:
        if self.measuring:
            self.trips[kind] += n


class SimNode:
    def __init__(self, index: int, url: str, w: Workload, members: list[str], tally: Tally) -> None:
        self.id = f"sim-{index}"
        self.w = w
        self.client = redis.asyncio.Redis.from_url(url, socket_timeout=30, decode_responses=False)
        self.keys = SpiderKeys.from_settings(_settings(), SPIDER)
        self.node_keys = NodeKeys.from_settings(_settings(), SPIDER, self.keys)
        self.scripts = frontier_for_mode(self.client, self.keys, "priority")
        self.beat_script = heartbeat_script(self.client)
        self.members = members
        self.rnd = random.Random(index)
        self.tally = tally
        self.buffer: deque[bytes] = deque()
        self.active: set[bytes] = set()
        self.acks: list[bytes] = []
        self.outbox: list[tuple[str, bool, str]] = []
        self.done: list[bytes] = []  # pages whose links wait in the outbox
        self.outbox_ready = asyncio.Event()
        self.stopped = False  # loops end on it: redis-py may swallow a cancel
        self.want_more = asyncio.Event()
        self.enqueuer: Enqueuer | None = None
        self.seen: deque[str] = deque(maxlen=2000)  # fingerprints already in the filter: duplicate links

    async def timed(self, kind: str, call: Any) -> Any:
        began = time.perf_counter()
        result = await call
        if self.tally.measuring:
            self.tally.trips[kind] += 1
            if kind in self.tally.latency:
                self.tally.latency[kind].append(time.perf_counter() - began)
        return result

    async def run(self, until: float) -> None:
        dedup = await choose_dedup(
            self.client, self.keys.dupefilter, BloomConfig("bitmap", self.w.capacity, self.w.error_rate)
        )
        await dedup.prepare(self.client)
        self.enqueuer = Enqueuer(self.scripts, dedup)
        tasks = [
            asyncio.create_task(c)
            for c in (
                self.feeder(),
                self.engine(),
                self.run_outbox(),
                self.leases(),
                self.heartbeat(),
                self.seeds(),
                self.doorbell(),
            )
        ]
        await asyncio.sleep(max(0.0, until - time.time()))
        failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception()]
        self.stopped = True
        for t in tasks:
            t.cancel()
        if failed:
            raise failed[0].exception()
        await asyncio.wait(tasks, timeout=5)

    async def feeder(self) -> None:
        q = self.w.prefetch // 4
        while not self.stopped:
            if len(self.buffer) > q:
                self.want_more.clear()
                await self.want_more.wait()
                continue
            want = self.w.prefetch + q - len(self.buffer) - len(self.active)
            if want <= 0:
                await asyncio.sleep(0.05)
                continue
            got = await self.timed("pop", pop(self.scripts, want, self.w.lease, DUE_BATCH))
            self.buffer.extend(got)
            if not got:
                await asyncio.sleep(0.05)

    async def engine(self) -> None:
        """Poisson arrivals at `rate`, on an absolute schedule (a late wake-up catches up)."""
        due = time.monotonic()
        while not self.stopped:
            due += self.rnd.expovariate(self.w.rate)
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            if not self.buffer:
                if self.tally.measuring:
                    self.tally.starved += 1
                continue
            lease = self.buffer.popleft()
            if len(self.buffer) <= self.w.prefetch // 4:
                self.want_more.set()
            self.active.add(lease)
            asyncio.create_task(self.page(lease))

    async def page(self, lease: bytes) -> None:
        await asyncio.sleep(self.w.download)
        new = int(self.w.new_links) + (self.rnd.random() < self.w.new_links % 1)
        for i in range(self.w.links):
            member = unique(self.members[self.rnd.randrange(len(self.members))], self.rnd)
            if i < new or not self.seen:
                fp = f"{self.rnd.getrandbits(160):040x}"
                self.seen.append(fp)
            else:
                fp = self.seen[self.rnd.randrange(len(self.seen))]
            self.outbox.append((fp, False, member))
        self.done.append(lease)
        self.active.discard(lease)
        self.outbox_ready.set()

    async def run_outbox(self) -> None:
        """scheduler._run_outbox: one enqueue.lua call for everything queued (at most 500), then
        the pages whose links it pushed become ackable."""
        while not self.stopped:
            if not self.outbox:
                self.outbox_ready.clear()
                await self.outbox_ready.wait()
                continue
            batch, self.outbox = self.outbox[:500], self.outbox[500:]
            done, self.done = self.done, []
            await self.timed("enqueue", self.enqueuer.run("push", batch))
            self.acks += done
            if self.tally.measuring:
                self.tally.pages += len(done)

    async def leases(self) -> None:
        next_renew = time.monotonic() + self.rnd.uniform(0, self.w.renew_every)
        next_reclaim = time.monotonic() + self.rnd.uniform(0, RECLAIM_EVERY)
        while not self.stopped:
            if self.acks:
                acks, self.acks = self.acks, []
                await self.timed("ack", self.client.zrem(self.keys.processing, *acks))
            now = time.monotonic()
            if now >= next_renew:
                next_renew = now + self.w.renew_every
                held = [*self.buffer, *self.active]
                if held:
                    await self.timed("renew", self.scripts.renew(held, self.w.lease))
            if now >= next_reclaim:
                next_reclaim = now + RECLAIM_EVERY
                await self.timed(
                    "reclaim",
                    self.scripts.reclaim(max_deliveries=5, limit=500, failed_cap=100_000, node_id=self.id),
                )
            await asyncio.sleep(ACK_INTERVAL)

    async def heartbeat(self) -> None:
        await asyncio.sleep(self.rnd.uniform(0, self.w.heartbeat))
        started, pages = time.time(), 0
        while not self.stopped:
            began = time.monotonic()
            pages += int(self.w.rate * self.w.heartbeat)
            fields = {
                "state": "running",
                "pages": pages,
                "items": pages,
                "errors": 0,
                "in_flight": len(self.active),
                "leases": len(self.buffer) + len(self.active),
                "rss": 150_000_000,
                "browser_pages": 0,
                "host": "sim-host",
                "pid": os.getpid(),
                "version": "0.1.0",
                "spider": SPIDER,
                "started": round(started, 3),
                "rate": self.w.rate * 60,
            }
            now = await self.timed(
                "heartbeat",
                beat(
                    self.beat_script,
                    self.node_keys,
                    self.id,
                    self.w.heartbeat,
                    fields,
                    (int(self.w.rate * self.w.heartbeat),) * 2 + (0,),
                ),
            )
            await crawl_counts(self.client, self.keys)
            await read_nodes(self.client, self.node_keys, now)
            await read_totals(self.client, self.node_keys)
            await forget_old_nodes(self.client, self.node_keys, now)
            self.tally.trip("heartbeat", HEARTBEAT_CALLS - 1)
            await asyncio.sleep(max(0.05, self.w.heartbeat - (time.monotonic() - began)))

    async def seeds(self) -> None:
        await asyncio.sleep(self.rnd.uniform(0, SEED_POLL))
        while not self.stopped:
            await self.timed("seeds", self.client.lpop(self.keys.start_urls, self.w.prefetch))
            await asyncio.sleep(SEED_POLL)

    async def doorbell(self) -> None:
        """SUBSCRIBE on a raw socket; count `message` frames without parsing them in Python."""
        host, port = (
            self.client.connection_pool.connection_kwargs["host"],
            self.client.connection_pool.connection_kwargs["port"],
        )
        reader, writer = await asyncio.open_connection(host, port)
        channel = self.keys.doorbell.encode()
        writer.write(b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(channel), channel))
        marker, tail = b"$7\r\nmessage\r\n", b""
        try:
            while not self.stopped:
                chunk = await reader.read(1 << 16)
                if not chunk:
                    return
                data = tail + chunk
                if self.tally.measuring:
                    self.tally.doorbell += data.count(marker)
                tail = data[-(len(marker) - 1) :]
        finally:
            writer.close()


def _settings() -> Any:
    from scrapy.settings import Settings

    return Settings()


def child(
    url: str,
    w: Workload,
    members: list[str],
    first: int,
    count: int,
    start_at: float,
    measure: tuple[float, float],
    out: Any,
) -> None:
    async def main() -> dict:
        tally = Tally()
        nodes = [SimNode(first + i, url, w, members, tally) for i in range(count)]
        until = measure[1] + 0.5

        async def window() -> None:
            await asyncio.sleep(max(0.0, measure[0] - time.time()))
            tally.measuring = True
            await asyncio.sleep(max(0.0, measure[1] - time.time()))
            tally.measuring = False

        lags: list[float] = []

        async def lag() -> None:
            """This process's event-loop lag: how late a 50 ms sleep wakes up (client-side queueing)."""
            while time.time() < until:
                began = time.monotonic()
                await asyncio.sleep(0.05)
                if tally.measuring:
                    lags.append(time.monotonic() - began - 0.05)

        await asyncio.sleep(max(0.0, start_at - time.time()))
        await asyncio.gather(window(), lag(), *(n.run(until) for n in nodes))
        tally.latency["loop_lag"] = lags
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "trips": dict(tally.trips),
            "latency": tally.latency,
            "pages": tally.pages,
            "starved": tally.starved,
            "doorbell": tally.doorbell,
            "cpu": usage.ru_utime + usage.ru_stime,
        }

    try:
        result = asyncio.new_event_loop().run_until_complete(main())
    except BaseException:  # noqa: BLE001 - the parent reports it instead of waiting for nothing
        import traceback

        result = {"error": traceback.format_exc()}
    out.put(result)
    out.close()
    out.join_thread()
    os._exit(0)  # no loop clean-up: a straggling redis-py call must not hold the process


# -- the run -----------------------------------------------------------------------------------
def redis_conf_args() -> list[str]:
    args: list[str] = []
    for line in (ROOT / "deploy" / "redis.conf").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and line.split()[0] not in LOCAL_DIRECTIVES:
            name, *values = line.split()
            args += [f"--{name}", *(v.strip('"') for v in values)]
    return args


def start_redis(children: Children, workdir: Path) -> str:
    """A redis-server with deploy/redis.conf's settings and no memory cap (the benchmark fills it)."""
    _, url = harness_start_redis(children, workdir, [*redis_conf_args(), "--maxmemory", "0"])
    return url


def prepare(client: redis.Redis, w: Workload, members: list[str], prefill: int) -> dict[str, Any]:
    keys = SpiderKeys.from_settings(_settings(), SPIDER)
    dedup = run_sync(choose_dedup(client, keys.dupefilter, BloomConfig("bitmap", w.capacity, w.error_rate)))
    run_sync(dedup.prepare(client))
    enqueuer = Enqueuer(frontier_for_mode(client, keys, "priority"), dedup, doorbell="")
    rnd = random.Random(2)
    before = client.info("memory")["used_memory"]
    for start in range(0, prefill, 500):
        batch = [unique(members[(start + i) % len(members)], rnd) for i in range(min(500, prefill - start))]
        run_sync(enqueuer.run("push", [(f"{random.getrandbits(160):040x}", False, m) for m in batch]))
    used = client.info("memory")["used_memory"] - before
    queue = client.memory_usage(keys.requests, samples=0)
    n = client.zcard(keys.requests)
    filter_bytes = sum(client.memory_usage(k, samples=0) or 0 for k in [keys.dupefilter, *dedup.script_keys()[0][1:]])
    return {
        "queued": n,
        "queue_memory_usage": queue,
        "bytes_per_queued_request": round(queue / n, 1),
        "used_memory_per_queued_request": round(used / n, 1),
        "bloom_bytes_created": filter_bytes,
        "bloom_pieces": len(dedup.script_keys()[0]) - 1,
    }


def info_snapshot(client: redis.Redis) -> dict[str, float]:
    cpu = client.info("cpu")
    stats = client.info("stats")
    return {
        "cpu": cpu["used_cpu_sys_main_thread"] + cpu["used_cpu_user_main_thread"],
        "cpu_all": cpu["used_cpu_sys"] + cpu["used_cpu_user"],
        "net_in": stats["total_net_input_bytes"],
        "net_out": stats["total_net_output_bytes"],
        "commands": stats["total_commands_processed"],
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def simulate(w: Workload, procs: int, seconds: float, warmup: float, prefill: int) -> dict[str, Any]:
    children = Children()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            url = start_redis(children, Path(tmp))
            client = redis.Redis.from_url(url, socket_timeout=120, decode_responses=True)
            members = sample_payloads(2000, seed=1)
            member_len = round(statistics.mean(len(m.encode()) for m in members), 1)
            log(f"filter for {w.capacity:,} URLs, {prefill:,} queued requests")
            prep = prepare(client, w, members, prefill)
            start_at = time.time() + 3
            window = (start_at + warmup, start_at + warmup + seconds)
            out: Any = mp.get_context("fork").Queue()
            share = [w.nodes // procs + (i < w.nodes % procs) for i in range(procs)]
            workers = []
            first = 0
            for count in share:
                p = mp.get_context("fork").Process(
                    target=child, args=(url, w, members, first, count, start_at, window, out)
                )
                p.start()
                workers.append(p)
                first += count
            log(f"{w.nodes} nodes in {procs} processes: {warmup:.0f} s warm-up, {seconds:.0f} s measured")
            time.sleep(max(0.0, window[0] - time.time()))
            client.config_resetstat()
            load_before = os.getloadavg()[0]
            a = info_snapshot(client)
            time.sleep(max(0.0, window[1] - time.time()))
            b = info_snapshot(client)
            latency = client.info("latencystats")
            commandstats = client.info("commandstats")
            results = [out.get(timeout=60 + seconds) for _ in workers]
            errors = [r["error"] for r in results if "error" in r]
            if errors:
                raise SystemExit(f"a simulator process failed:\n{errors[0]}")
            for p in workers:
                p.join(30)
            memory = client.info("memory")["used_memory"]
            queued_end = client.zcard(SpiderKeys.from_settings(_settings(), SPIDER).requests)
        finally:
            for p in locals().get("workers", []):
                if p.is_alive():
                    p.kill()
            children.kill_all()
    elapsed = window[1] - window[0]
    trips = Counter()
    for r in results:
        trips.update(r["trips"])
    lat = {k: [x for r in results for x in r["latency"][k]] for k in ("enqueue", "pop", "loop_lag")}
    pages = sum(r["pages"] for r in results)
    evalsha = latency.get("latency_percentiles_usec_evalsha", {})
    scripts = commandstats.get("cmdstat_evalsha", {}).get("calls", 0) + commandstats.get("cmdstat_eval", {}).get(
        "calls", 0
    )
    measured = {
        "pages_s": pages / elapsed,
        "round_trips_s": sum(trips.values()) / elapsed,
        "round_trips_per_page": sum(trips.values()) / max(1, pages),
        "script_calls_s": scripts / elapsed,
        "doorbell_messages_s": sum(r["doorbell"] for r in results) / elapsed,
        "net_in_bytes_s": (b["net_in"] - a["net_in"]) / elapsed,
        "net_out_bytes_s": (b["net_out"] - a["net_out"]) / elapsed,
        "bytes_per_queued_request": prep["bytes_per_queued_request"],
    }
    queued_model = queued_bytes_model(round(member_len), prep["queued"])
    target = model(w, round(member_len), queued_model)
    # The rate-dependent figures are checked at the rate the simulator reached (it may fall short
    # of the target when this machine runs out of CPU: see sim_loop_lag_ms).
    achieved = Workload(**{**asdict(w), "rate": measured["pages_s"] / w.nodes})
    expected = model(achieved, round(member_len), queued_model)
    return {
        "workload": asdict(w),
        "procs": procs,
        "seconds": elapsed,
        "member_bytes": member_len,
        **prep,
        "load_avg_1min": [load_before, os.getloadavg()[0]],
        "cpus": os.cpu_count(),
        "measured": {k: round(v, 2) for k, v in measured.items()},
        "model_at_target_rate": {k: round(v, 2) for k, v in target.items()},
        "model_at_achieved_rate": {k: round(v, 2) for k, v in expected.items() if k in measured},
        "ratio_measured_to_model": {k: round(measured[k] / expected[k], 2) for k in measured if expected.get(k)},
        "trips_s_by_kind": {k: round(v / elapsed, 1) for k, v in sorted(trips.items())},
        "redis_commands_s": round((b["commands"] - a["commands"]) / elapsed),
        "redis_main_thread_cpu": round((b["cpu"] - a["cpu"]) / elapsed, 3),
        "redis_cpu_us_per_page": round((b["cpu"] - a["cpu"]) / max(1, pages) * 1e6, 1),
        "evalsha_server_usec": {q: evalsha.get(q) for q in ("p50", "p99", "p99.9")},
        "evalsha_server_usec_avg": commandstats.get("cmdstat_evalsha", {}).get("usec_per_call"),
        "enqueue_client_ms": {
            "p50": round(percentile(lat["enqueue"], 0.5) * 1e3, 2),
            "p99": round(percentile(lat["enqueue"], 0.99) * 1e3, 2),
        },
        "pop_client_ms": {
            "p50": round(percentile(lat["pop"], 0.5) * 1e3, 2),
            "p99": round(percentile(lat["pop"], 0.99) * 1e3, 2),
        },
        "commands_per_page": {
            k[8:]: round(v["calls"] / max(1, pages), 2)
            for k, v in sorted(commandstats.items(), key=lambda kv: -kv[1]["calls"])[:8]
        },
        "sim_loop_lag_ms": {
            "p50": round(percentile(lat["loop_lag"], 0.5) * 1e3, 2),
            "p99": round(percentile(lat["loop_lag"], 0.99) * 1e3, 2),
        },
        "starved_slots": sum(r["starved"] for r in results),
        "sim_cpu_s": round(sum(r["cpu"] for r in results), 1),
        "used_memory_end": memory,
        "queued_end": queued_end,
        "pages_s_per_redis_core": round(pages / elapsed / max(1e-9, (b["cpu"] - a["cpu"]) / elapsed)),
    }


# -- frontier scale: memory per host and per request, pop cost vs hosts (docs/scaling.md) -------
def host_members(host: str, n: int, rnd: random.Random) -> list[str]:
    """`n` queue members of the news spider on `host` (with its slot, as the scheduler writes them)."""
    return [
        news_member(f"https://{host}/2026/05/04/world/article-headline-{rnd.getrandbits(40):010x}.html", 2, host)
        for _ in range(n)
    ]


def fill_hosts(client: redis.Redis, enqueuer: Enqueuer, hosts: range, per_host: int, iv: float) -> float:
    """Push `per_host` requests on each host h<i>.example through enqueue.lua; returns seconds."""
    rnd = random.Random(hosts.start * 7 + per_host)
    batch: list[Any] = []
    started = time.perf_counter()
    for i in hosts:
        host = f"h{i}.example"
        for member in host_members(host, per_host, rnd):
            batch.append(("", True, member, 0.0, host, iv, None))  # no dedup: fingerprint ""
        if len(batch) >= 500:
            run_sync(enqueuer.run("push", batch))
            batch = []
    if batch:
        run_sync(enqueuer.run("push", batch))
    return time.perf_counter() - started


def pop_cost(client: redis.Redis, scripts: Frontier, pops: int, want: int) -> dict[str, Any]:
    """`pops` host-mode pops of `want` from a frontier whose every host is due: latency, commands."""
    latencies = []
    before = client.info("commandstats")
    leased = 0
    for _ in range(pops):
        t0 = time.perf_counter()
        result = run_sync(scripts.lease(want, 600))
        latencies.append(time.perf_counter() - t0)
        leased += len(result.leases)
    after = client.info("commandstats")
    calls = {
        k.removeprefix("cmdstat_"): int(v["calls"]) - int(before.get(k, {"calls": 0})["calls"])
        for k, v in after.items()
        if k != "cmdstat_info"
    }
    evalsha = after.get("cmdstat_evalsha", {})
    usec = int(evalsha.get("usec", 0)) - int(before.get("cmdstat_evalsha", {"usec": 0})["usec"])
    return {
        "pops": pops,
        "want": want,
        "leased_per_pop": round(leased / pops, 1),
        "latency_ms_median": round(1000 * statistics.median(latencies), 3),
        "latency_ms_p99": round(1000 * percentile(latencies, 0.99), 3),
        "server_us_per_pop": round(usec / pops, 1),  # commandstats usec of EVALSHA: the script's own time
        "redis_commands_per_pop": round((sum(calls.values()) - calls.get("evalsha", 0)) / pops, 1),
        "commands": {k: v for k, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v},
    }


def frontier_scale(
    sizes: list[int], per_host: int, iv: float, pops: int, want: int, listpack_value: int = 0
) -> dict[str, Any]:
    """For each host count N: fill N hosts x 1 request, then N x (per_host - 1) more, through the real
    host-mode enqueue.lua; used_memory deltas give bytes per host and per queued request; then
    `pops` pops of `want` (host_pop.lua) give the pop's latency and commands as N grows."""
    from distributed_crawler.dedup.dupefilter import SetDedup

    if per_host < 2:
        raise SystemExit("--per-host must be >= 2 (bytes per request come from the 2nd to the last)")
    template = host_members("h0.example", 1, random.Random(1))[0]
    children = Children()
    workdir = Path(tempfile.mkdtemp(prefix="bench-frontier-scale-"))
    out: dict[str, Any] = {"per_host": per_host, "interval": iv, "member_bytes": len(template), "sizes": []}
    try:
        client = redis.Redis.from_url(start_redis(children, workdir), socket_timeout=600)
        client.config_set("appendonly", "no")  # memory and pop cost, not disk: no AOF rewrite midway
        if listpack_value:  # small host queues as listpacks: members up to this many bytes
            client.config_set("zset-max-listpack-value", listpack_value)
        out["zset_max_listpack_value"] = int(client.config_get("zset-max-listpack-value")["zset-max-listpack-value"])
        keys = SpiderKeys.from_settings(_settings(), SPIDER)
        scripts = frontier_for_mode(client, keys, "host")
        enqueuer = Enqueuer(scripts, SetDedup(keys.dupefilter))
        for n in sizes:
            client.flushall()
            time.sleep(0.2)
            base = client.info("memory")["used_memory"]
            first_s = fill_hosts(client, enqueuer, range(n), 1, iv)
            one = client.info("memory")["used_memory"]
            more_s = fill_hosts(client, enqueuer, range(n), per_host - 1, iv)
            full = client.info("memory")["used_memory"]
            per_request = (full - one) / (n * (per_host - 1))
            sample = [f"h{i}.example" for i in range(0, n, max(1, n // 200))]
            queue_bytes = statistics.mean(  # a host's queue zset and its list (priority 0, arrival order)
                sum(client.memory_usage(k, samples=0) or 0 for k in (keys.host_queue(h), keys.host_list(h)))
                for h in sample
            )
            hash_bytes = statistics.mean(client.memory_usage(keys.host(h), samples=0) or 0 for h in sample)
            row = {
                "hosts": n,
                "requests": client.zcard(keys.ready) and n * per_host,
                "ready_hosts": client.zcard(keys.ready),
                "used_memory_mb": round((full - base) / 2**20, 1),
                "bytes_per_host": round((one - base) / n - per_request, 1),  # the first request's cost minus a request
                "bytes_per_queued_request": round(per_request, 1),
                "memory_usage_host_queue_bytes": round(queue_bytes),  # MEMORY USAGE, key with its members
                "memory_usage_host_hash_bytes": round(hash_bytes),
                "memory_usage_ready_zset_bytes_per_host": round(
                    (client.memory_usage(keys.ready, samples=0) or 0) / n, 1
                ),
                "enqueue_requests_per_s": round(n * per_host / (first_s + more_s)),
                # at most N / want pops: with an interval each host gives one request, then waits
                "pop": pop_cost(client, scripts, max(1, min(pops, n // want)), want),
            }
            log(
                f"{n} hosts: {row['bytes_per_host']} B/host, {row['bytes_per_queued_request']} B/request, "
                f"pop {row['pop']['latency_ms_median']} ms median, {row['pop']['redis_commands_per_pop']} cmds/pop"
            )
            out["sizes"].append(row)
        client.flushall()
    finally:
        children.kill_all()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = Workload()
    for name, value in asdict(d).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--procs", type=int, default=2, help="simulator processes the nodes are spread over")
    parser.add_argument("--seconds", type=float, default=40.0, help="measured window")
    parser.add_argument("--warmup", type=float, default=12.0)
    parser.add_argument("--prefill", type=int, default=50_000, help="requests queued before the run")
    parser.add_argument("--model-only", action="store_true", help="print the model (no Redis)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--hosts",
        help="frontier scale mode: comma-separated host counts, e.g. 1000,10000,100000,1000000 "
        "(memory per host and per request, pop cost vs hosts; see docs/scaling.md)",
    )
    parser.add_argument("--per-host", type=int, default=3, help="with --hosts: requests queued per host")
    parser.add_argument("--host-interval", type=float, default=1.0, help="with --hosts: each host's interval (s)")
    parser.add_argument("--pops", type=int, default=300, help="with --hosts: pops measured per size")
    parser.add_argument("--want", type=int, default=40, help="with --hosts: requests asked per pop (prefetch)")
    parser.add_argument(
        "--zset-listpack-value",
        type=int,
        default=0,
        help="with --hosts: CONFIG SET zset-max-listpack-value (0 = Redis's default, 64 bytes)",
    )
    args = parser.parse_args(argv)
    if args.hosts:
        sizes = [int(n) for n in args.hosts.split(",")]
        result = frontier_scale(
            sizes, args.per_host, args.host_interval, args.pops, args.want, args.zset_listpack_value
        )
        print(json.dumps(result, indent=None if args.json else 2))
        return 0
    w = Workload(**{name: getattr(args, name) for name in asdict(d)})
    if args.model_only:
        members = sample_payloads(2000, seed=1)
        member_len = statistics.mean(len(m.encode()) for m in members)
        queued = queued_bytes_model(round(member_len), w.pending)
        result = {
            "workload": asdict(w),
            "member_bytes": round(member_len, 1),
            "rates": {k: round(v, 2) for k, v in model(w, int(member_len), queued).items()},
            "memory": {k: round(v, 3) for k, v in memory_model(w, queued).items()},
        }
    else:
        result = simulate(w, args.procs, args.seconds, args.warmup, args.prefill)
        result["memory_model"] = {
            k: round(v, 3) for k, v in memory_model(w, result["bytes_per_queued_request"]).items()
        }
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
