"""Chaos: three workers crawl while a fuzzer writes garbage into every key and one worker is
killed -9 and restarted. Nothing a node reads from Redis can stop it: every page is stored exactly
once, nothing from the fuzzer is ever run or fetched, garbage queue entries end as dead letters.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from tests.conftest import ROOT, Workers
from tests.garbage import BAD_SCORES, all_values, pickle_payload, queue_members
from tests.site.server import NewsSite

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

SETTINGS = [
    "SCHEDULER_LEASE_SECONDS=3",
    "MAX_IDLE_TIME_BEFORE_CLOSE=5",
    "CONCURRENT_REQUESTS=8",
    "HEARTBEAT_INTERVAL=1",
    "PROXY_ENABLED=false",
    "DOMAIN_RATE_LIMIT=1000",
]
TOKEN = re.compile(r"QZ(\d+)Q")


def rows(db: Path) -> list[str]:
    if not db.exists():
        return []
    with sqlite3.connect(db, timeout=10) as conn:
        try:
            return [r[0] for r in conn.execute("SELECT url FROM items")]
        except sqlite3.OperationalError:
            return []


class Fuzzer(threading.Thread):
    """Writes each kind of garbage into every key, in rounds, until stopped."""

    def __init__(self, url: str, marker: Path, site_url: str) -> None:
        super().__init__(daemon=True, name="fuzzer")
        self.client = redis.Redis.from_url(url)
        self.marker = marker
        self.site_url = site_url
        self.stop_event = threading.Event()
        self.queue_tokens: set[int] = set()  # every garbage member written to requests/processing/delayed
        self.written = 0
        self.rounds = 0
        self.wrong_type_episodes = 0
        self.errors: list[str] = []
        self._n = 0

    def token(self) -> str:
        self._n += 1
        return f"QZ{self._n}Q"

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.round()
            except redis.RedisError as exc:  # the fuzzer's own writes may race a wrong-type episode
                self.errors.append(repr(exc))
            self.stop_event.wait(0.3)

    def queue_garbage(self, key: str, base: float) -> None:
        mapping: dict[bytes, float] = {}
        for _, member in queue_members(self.marker, self.token()):
            mapping[member] = base
        # a JSON request of ours for a page of the site, with a callback that must never run
        for callback in ("no_such_callback", "_set_crawler", "__init__"):
            t = self.token()
            mapping[b"0:0:" + json.dumps({"url": f"{self.site_url}/fuzz/{t}", "callback": callback}).encode()] = base
        for score in BAD_SCORES[1::2]:  # -inf and -1e308: due / expired at once
            mapping[b"0:0:" + self.token().encode() + b" bad score"] = score
        self.client.zadd(key, mapping)
        for member in mapping:
            self.queue_tokens.update(int(t) for t in TOKEN.findall(member[:300].decode("latin-1")))
        self.written += len(mapping)

    def round(self) -> None:
        c = self.client
        self.rounds += 1
        now = float(c.time()[0])
        kinds = list(all_values(self.marker, f"X{self.rounds}X"))
        values = [v for _, v in kinds]
        # seeds: only invalid ones (a valid JSON seed, even to a closed port, would be crawled legitimately)
        bad_seeds = [
            v
            for k, v in kinds
            if k in ("pickle", "invalid_utf8", "binary", "truncated_json", "non_object_json", "huge", "bad_number")
        ]
        c.lpush(
            "news:start_urls",
            *bad_seeds,
            b'{"url": 5}',
            b'{"url": "http://127.0.0.1:9/fuzz/x", "meta": [1]}',
            b'{"url": "' + self.site_url.encode() + b'/fuzz/seed", "callback": "_set_crawler"}',
        )
        # host mode (the default): garbage in one host's queue, due in the ready zset, and in the
        # ready zset itself (hosts without a queue, a score never due)
        self.queue_garbage("{news}:q:fuzz", 0.0)
        c.zadd("{news}:hosts", {"fuzz": 0, "ghost": 0, b"\xff\xfe": float("inf")})
        self.queue_garbage("{news}:processing", now - 60)
        self.queue_garbage("{news}:delayed", now - 1)
        c.lpush("{news}:failed", *values[:8])
        c.lpush("{news}:alerts", *values[:8])
        c.ltrim("{news}:alerts", 0, 200)
        # seq: garbage for a moment, then a number again (INCR needs one)
        if self.rounds % 5 == 0:
            saved = c.get("{news}:seq")
            c.set("{news}:seq", b"nan")
            time.sleep(0.3)
            c.set("{news}:seq", saved or b"0") if c.get("{news}:seq") == b"nan" else None
        c.hset("{news}:dupefilter", mapping={f"junk{self.rounds}": b"\xff\xfe", "zz:nan": b"nan"})
        c.set("{news}:dupefilter:99:99", pickle_payload(self.marker))
        c.zadd(
            "{news}:nodes",
            {
                b"\xff\xfe" + str(self.rounds).encode(): now,
                pickle_payload(self.marker)[:30]: float("inf"),
                b"ghost": now,
                b"n" * 300: 1e308,
            },
        )
        for node in ("ghost", "n1", "n2", "n3"):
            c.hset(
                f"{{news}}:node:{node}",
                mapping={
                    "rate": b"nan",
                    "pages": b"inf",
                    "report": b"[1,",
                    "state": b"\xff",
                    "interval": b"-1e999",
                    "rss": b"9" * 400,
                },
            )
        c.hset("{news}:nodes:last", mapping={"ghost": values[0], "n1": b'{"rate": NaN, "pages": [1]}'})
        c.hset("{news}:nodes:alerted", mapping={"ghost": b"inf", b"\xff": values[1]})
        c.hset("{news}:stats", mapping={f"junk{self.rounds}": b"nan", "bogus": pickle_payload(self.marker)})
        c.hset("{news}:minutes", mapping={"p:nan": b"inf", f"i:{int(now // 60)}x": b"\xff"})
        c.zadd("dc:proxies", {b"\xff\xfe": float("inf"), b"not a proxy": float("-inf")})
        c.hset("dc:proxies:dead", mapping={b"http://dead.invalid:1": b"[1,2", b"\xff": pickle_payload(self.marker)})
        c.set("dc:rate:127.0.0.1", [b"nan", b"inf", b"1e308", b"\xff\xfe", b"-inf"][self.rounds % 5], px=500)
        self.written += 40
        # a brief WRONGTYPE episode on a non-essential key, and (every 4th round) on the queue for ~2 s
        if self.rounds % 3 == 0:
            c.delete("{news}:minutes")
            c.set("{news}:minutes", "not a hash")
            time.sleep(1)
            c.delete("{news}:minutes")
            self.wrong_type_episodes += 1
        if self.rounds % 4 == 2:
            saved = c.rename("{news}:hosts", "{news}:hosts:saved") if c.exists("{news}:hosts") else None
            c.set("{news}:hosts", "not a queue")  # the ready zset: the key every pop reads
            time.sleep(2)
            pipe = c.pipeline(transaction=True)
            pipe.delete("{news}:hosts")
            if saved:
                pipe.rename("{news}:hosts:saved", "{news}:hosts")
            pipe.execute()
            self.wrong_type_episodes += 1


@pytest.mark.timeout(150)
def test_three_workers_crawl_through_garbage_and_kill9(
    workers: Workers, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    db = tmp_path / "items.db"
    marker = tmp_path / "unpickled-by-someone"
    started = time.monotonic()
    with NewsSite(articles=300, per_page=20, delay=0.02) as site:
        expected = site.expected_urls()
        fuzzer = Fuzzer(redis_url, marker, site.url)
        for node in ("n1", "n2", "n3"):
            workers.start(node, *SETTINGS)
        workers.wait_ready("n1", "n2", "n3")
        fuzzer.start()
        redis_client.lpush("news:start_urls", site.url + "/")
        kills = 0
        statuses = 0
        try:
            for threshold in (0.2, 0.45, 0.7):
                deadline = time.monotonic() + 40
                while len(rows(db)) < threshold * len(expected):
                    assert time.monotonic() < deadline, f"stuck at {len(rows(db))}/{len(expected)} pages"
                    time.sleep(0.2)
                # the operator's view during the chaos
                proc = subprocess.run(
                    [sys.executable, "-m", "distributed_crawler", "status", "news", "--json", "--redis-url", redis_url],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
                json.loads(proc.stdout)
                statuses += 1
                workers.kill9("n3")
                kills += 1
                workers.start("n3", *SETTINGS)
            deadline = time.monotonic() + 30
            while set(rows(db)) != expected and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            fuzzer.stop_event.set()
            fuzzer.join(10)
        codes = workers.wait_all(timeout=max(10, 140 - (time.monotonic() - started)))
        stored = rows(db)
        fuzz_hits = site.hits("/fuzz")
    failed = []
    for raw in redis_client.lrange("{news}:failed", 0, -1):
        try:
            entry = json.loads(raw)
        except ValueError:
            continue  # the fuzzer's own garbage in the failed list
        if isinstance(entry, dict) and entry.get("reason") and isinstance(entry.get("payload"), str):
            failed.append(entry)
    dead_tokens = {int(t) for e in failed for t in TOKEN.findall(e["payload"])}
    figures = (
        f"pages {len(stored)}/{len(expected)}, kills {kills}, fuzz rounds {fuzzer.rounds}, garbage written "
        f"{fuzzer.written}, queue garbage {len(fuzzer.queue_tokens)}, dead letters {len(failed)}, "
        f"wrong-type episodes {fuzzer.wrong_type_episodes}, status calls {statuses}"
    )
    print(figures)
    assert not marker.exists(), "a pickle from the fuzzer was unpickled"
    assert fuzz_hits == 0, "a request written by the fuzzer was fetched"
    assert len(stored) == len(set(stored)), "duplicate rows"
    assert set(stored) == expected, f"lost: {sorted(expected - set(stored))[:10]}; {figures}"
    for node in workers.procs:
        log = workers.log(node)
        assert "'finish_reason': 'scheduler_error'" not in log, log[-4000:]
        assert "Traceback" not in log, f"{node}: {log[log.index('Traceback') - 2000 :][:6000]}"
    assert codes == {"n1": 0, "n2": 0, "n3": 0}, figures
    missing = fuzzer.queue_tokens - dead_tokens
    assert not missing, (
        f"{len(missing)} garbage queue entries not dead-lettered, e.g. QZ{sorted(missing)[0]}Q; {figures}"
    )
    assert redis_client.zcard("{news}:processing") == 0
