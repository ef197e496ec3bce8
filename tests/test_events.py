"""The change feed: events written after the commit only, at least once, trimmed, read by groups.

Real redis-server (the session fixture) and real SQLite; the storage pipeline's coroutines run in
a plain asyncio loop, as in tests/test_pipeline.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Coroutine
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio as aioredis

from distributed_crawler.connection.policy import RedisPolicy
from distributed_crawler.events.feed import ChangeFeed, EventsConfig, EventsNotPublished, idempotency_key, parse_entry
from distributed_crawler.events.middleware import delivered_before
from distributed_crawler.events.reading import ensure_group, read_group, read_plain
from distributed_crawler.events.sources import SourcesConfig
from distributed_crawler.events.webhook import SIGNATURE_HEADER, WebhookConfig, WebhookSink, sign, verify
from distributed_crawler.storage.backends import SQLiteStorage, StorageError
from distributed_crawler.storage.pipeline import StorageConfig, StoragePipeline
from tests.site.local import LoopbackServer

pytestmark = pytest.mark.timeout(60)
_T = TypeVar("_T")
STREAM = "{news}:events"


def run(coro: Coroutine[Any, Any, _T], timeout: float = 30) -> _T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def make_feed(client_of: Callable[[], Any], closing: Callable[[], bool] = lambda: False, **config: Any) -> ChangeFeed:
    return ChangeFeed(EventsConfig(**config), SourcesConfig(), client_of, "news", RedisPolicy("redis://test"), closing)


def article(i: int, text: str = "body", **extra: Any) -> dict[str, Any]:
    return {"url": f"https://news.example.com/a/{i}", "title": f"t{i}", "text": text, "status": 200, **extra}


def events(client: redis.Redis) -> list[dict[str, Any]]:
    return [parse_entry(i, f) for i, f in client.xrange(STREAM)]


async def store(tmp_path: Path, feed: Any, items: list[dict[str, Any]], redelivered: bool = False) -> None:
    pipeline = StoragePipeline(StorageConfig(url=f"sqlite:///{tmp_path}/items.db"), None, feed)
    await pipeline.open_spider()
    if redelivered:
        for each in items:
            feed.marks.mark(each)
    try:
        await asyncio.gather(*(pipeline.process_item(each) for each in items))
    finally:
        await pipeline.close_spider()


def test_new_changed_unchanged_and_redelivered(tmp_path: Path, redis_url: str, redis_client: redis.Redis) -> None:
    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        feed = make_feed(lambda: client)
        await store(tmp_path, feed, [article(1), article(2)])
        await store(tmp_path, feed, [article(1), article(2, "new body")])  # 1 unchanged, 2 changed
        await store(tmp_path, feed, [article(1)], redelivered=True)  # unchanged, but redelivered
        await client.aclose()

    run(scenario())
    got = [(e["event"], e["url"].rsplit("/", 1)[1], e["version"]) for e in events(redis_client)]
    assert got == [("new", "1", 1), ("new", "2", 1), ("changed", "2", 2), ("new", "1", 1)]
    first, *_, again = events(redis_client)
    assert first["key"] == again["key"] == idempotency_key(first["canonical_url"], 1)  # consumers dedupe
    assert first["row_id"] and first["first_seen"] and first["source"] == "example.com"
    assert "text" not in first


def test_a_changed_event_carries_its_diff(tmp_path: Path, redis_url: str, redis_client: redis.Redis) -> None:
    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        feed = make_feed(lambda: client)
        await store(tmp_path, feed, [article(1, "First paragraph.\nSecond paragraph.")])
        edited = "First paragraph.\nSecond paragraph, fixed.\nCorrection: an earlier version misnamed the mayor."
        await store(tmp_path, feed, [article(1, edited, title="t1, updated")])
        await store(tmp_path, feed, [article(1, edited, title="t1, updated")], redelivered=True)
        await client.aclose()

    run(scenario())
    new, changed, redelivered = events(redis_client)
    assert "diff" not in new and "diff" not in redelivered  # nothing was replaced for either
    added = len(", fixed") + len("\nCorrection: an earlier version misnamed the mayor.")
    assert changed["diff"] == {"title_changed": True, "text_added": added, "text_removed": 0, "correction": True}
    from distributed_crawler.cli.events import plain_line

    assert plain_line(changed).endswith(f"[+{added} -0 chars, title changed, correction]")
    assert parse_entry("1-0", {"diff": "not json"})["diff"] == "not json"  # untrusted: left as text


def test_include_text(tmp_path: Path, redis_url: str, redis_client: redis.Redis) -> None:
    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        feed = make_feed(lambda: client, include_text=True)
        await store(tmp_path, feed, [article(1, "the story"), article(2, headline="H", price=2.5)])
        await client.aclose()

    run(scenario())
    first, second = events(redis_client)
    assert (first["text"], first["data"]) == ("the story", "")  # no field beside the columns
    assert json.loads(second["data"]) == {"headline": "H", "price": 2.5}  # an item's own fields


class FailingBackend(SQLiteStorage):
    def upsert_changes(self, rows: list[dict[str, Any]]) -> Any:
        raise StorageError("disk on fire")


def test_failed_commit_writes_no_event(tmp_path: Path, redis_url: str, redis_client: redis.Redis) -> None:
    class Pipeline(StoragePipeline):
        backend_factory = staticmethod(lambda url, **options: FailingBackend(":memory:"))  # type: ignore[assignment]

    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        pipeline = Pipeline(
            StorageConfig(url="sqlite:///:memory:", close_retry_seconds=0.5), None, make_feed(lambda: client)
        )
        await pipeline.open_spider()
        task = asyncio.ensure_future(pipeline.process_item(article(1)))
        await asyncio.sleep(0.3)
        await pipeline.close_spider()
        with pytest.raises(StorageError):
            await task
        await client.aclose()

    run(scenario())
    assert redis_client.xlen(STREAM) == 0


@pytest.mark.slow  # over 5 s
def test_redis_outage_waits_then_publishes(tmp_path: Path, redis_url: str, redis_client: redis.Redis) -> None:
    """The items wait (no ack) while Redis is unreachable, and their events arrive once it is back."""

    async def scenario() -> None:
        dead = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
        live = aioredis.Redis.from_url(redis_url)
        current = [dead]
        feed = make_feed(lambda: current[0])
        pipeline = StoragePipeline(StorageConfig(url=f"sqlite:///{tmp_path}/items.db"), None, feed)
        await pipeline.open_spider()
        task = asyncio.ensure_future(pipeline.process_item(article(1)))
        await asyncio.sleep(1.0)
        assert not task.done()  # stored, not yet announced: the request is not acked
        current[0] = live
        await asyncio.wait_for(task, 20)
        await pipeline.close_spider()
        await live.aclose()
        await dead.aclose()

    run(scenario())
    assert [e["event"] for e in events(redis_client)] == ["new"]


@pytest.mark.slow  # over 5 s
def test_outage_at_close_fails_the_items_not_silently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("distributed_crawler.events.feed.CLOSE_RETRY_SECONDS", 0.5)

    async def scenario() -> None:
        dead = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
        feed = make_feed(lambda: dead, closing=lambda: True)
        with pytest.raises(StorageError, match="change events not written"):
            await store(tmp_path, feed, [article(1)])
        await dead.aclose()

    run(scenario())
    assert EventsNotPublished.__doc__


def test_trimming_keeps_the_stream_bounded(tmp_path: Path, redis_url: str, redis_client: redis.Redis) -> None:
    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        await store(tmp_path, make_feed(lambda: client, maxlen=50), [article(i) for i in range(600)])
        await client.aclose()

    run(scenario())
    # approximate trimming drops whole nodes (100 entries by default): never exact, always bounded
    assert 50 <= redis_client.xlen(STREAM) < 50 + 200


def test_consumer_groups_share_and_claim(redis_client: redis.Redis) -> None:
    for i in range(10):
        redis_client.xadd(STREAM, {"event": "new", "url": f"u{i}", "version": "1", "key": f"1 u{i}"})
    for group in ("index", "alerts"):
        ensure_group(redis_client, STREAM, group)
        ensure_group(redis_client, STREAM, group)  # exists: no error
    # two downstream jobs each read every event
    alerts = [e["url"] for _, e in read_group(redis_client, STREAM, "alerts", "a1", False, 60, lambda: False)]
    assert len(alerts) == 10
    # N consumers of one job share them: c1 takes 4 and dies before acking
    taken = redis_client.xreadgroup("index", "c1", {STREAM: ">"}, count=4)[0][1]
    seen = []
    for entry_id, entry in read_group(redis_client, STREAM, "index", "c2", False, 3600, lambda: False):
        seen.append(entry["url"])
        redis_client.xack(STREAM, "index", entry_id)
    assert len(seen) == 6 and not set(seen) & {parse_entry(i, f)["url"] for i, f in taken}
    # after the claim timeout, c2 takes over c1's pending entries
    claimed = []
    for entry_id, entry in read_group(redis_client, STREAM, "index", "c2", False, 0, lambda: False):
        claimed.append(entry["url"])
        redis_client.xack(STREAM, "index", entry_id)
    assert sorted(claimed) == sorted(parse_entry(i, f)["url"] for i, f in taken)


def test_read_plain_from_an_id(redis_client: redis.Redis) -> None:
    ids = [redis_client.xadd(STREAM, {"event": "new", "url": f"u{i}"}) for i in range(3)]
    assert [e["url"] for e in read_plain(redis_client, STREAM, ids[0].decode(), False, lambda: False)] == ["u1", "u2"]


def test_delivered_before_reads_the_lease() -> None:
    from scrapy import Request

    assert delivered_before(Request("https://a.example/", meta={"_dc_lease": b'2:0:{"url":"x"}'}))
    assert not delivered_before(Request("https://a.example/", meta={"_dc_lease": b'1:0:{"url":"x"}'}))
    assert not delivered_before(Request("https://a.example/", meta={"_dc_lease": b"garbage"}))
    assert not delivered_before(Request("https://a.example/"))


def test_signature_verifies_with_the_secret_only() -> None:
    body = json.dumps({"event": "new"}).encode()
    signature = sign(body, "s3cret")
    assert verify(body, "s3cret", signature)
    assert not verify(body, "other", signature)
    assert not verify(body + b" ", "s3cret", signature)


def test_webhook_sink_retries_until_2xx_then_acks(redis_client: redis.Redis) -> None:
    received: list[tuple[dict[str, Any], str]] = []
    failures = [3]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if failures[0] > 0:
                failures[0] -= 1
                self.send_response(503)
            else:
                received.append((json.loads(body), self.headers[SIGNATURE_HEADER]))
                assert verify(body, "k", self.headers[SIGNATURE_HEADER])
                self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = LoopbackServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for i in range(3):
        redis_client.xadd(STREAM, {"event": "new", "url": f"u{i}", "key": f"1 u{i}"})
    config = WebhookConfig(url=f"http://127.0.0.1:{server.server_address[1]}/hook", secret="k", max_backoff=0.1)
    sink = WebhookSink(config, redis_client, "news", "w1", STREAM, RedisPolicy("redis://test"))

    import distributed_crawler.events.webhook as webhook

    webhook_first = webhook.FIRST_BACKOFF
    webhook.FIRST_BACKOFF = 0.05
    stopper = threading.Timer(0.1, lambda: None)
    try:

        def stop_when_done() -> None:
            for _ in range(200):
                if len(received) == 3:
                    break
                threading.Event().wait(0.05)
            sink.stopping = True

        stopper = threading.Thread(target=stop_when_done)  # type: ignore[assignment]
        stopper.start()
        sink.run()
    finally:
        webhook.FIRST_BACKOFF = webhook_first
        server.shutdown()
    assert [r[0]["url"] for r in received] == ["u0", "u1", "u2"]
    stats = redis_client.hgetall("{news}:events:webhook")
    assert int(stats[b"delivered"]) == 3 and int(stats[b"failed_attempts"]) == 3
    assert redis_client.xpending(STREAM, "webhook")["pending"] == 0


def test_prometheus_totals_and_lag_histogram_without_source_labels(tmp_path: Path, redis_url: str) -> None:
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from distributed_crawler.events.metrics import feed_metrics

    feed: ChangeFeed

    async def scenario() -> None:
        nonlocal feed
        client = aioredis.Redis.from_url(redis_url)
        feed = make_feed(lambda: client)
        items = [article(1, published_at="2020-01-01T00:00:00+00:00"), article(2)]
        await store(tmp_path, feed, items)
        await client.aclose()

    run(scenario())

    class Collector:
        def collect(self) -> Any:
            return feed_metrics(feed, "news", "n1")

    registry = CollectorRegistry()
    registry.register(Collector())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert 'dcrawl_events_total{event="new",node="n1",spider="news"} 2.0' in text
    assert 'dcrawl_publish_lag_seconds_bucket{le="+Inf",node="n1",spider="news"} 1.0' in text
    assert "source" not in text


def test_since_accepts_ids_times_and_durations() -> None:
    from distributed_crawler.cli.events import since_to_id

    assert since_to_id(None, 1000.0) == "0-0"
    assert since_to_id("1733300000000-5", 0) == "1733300000000-5"
    assert since_to_id("2h", 10_000.0) == f"{(10_000 - 7200) * 1000}-0"
    assert since_to_id("2026-12-04T10:00:00Z", 0) == "1796378400000-0"
    with pytest.raises(ValueError, match="--since"):
        since_to_id("yesterday", 0)


def test_redelivered_items_middleware_marks_only_redelivered_responses() -> None:
    from scrapy import Request
    from scrapy.http import HtmlResponse

    from distributed_crawler.events.middleware import RedeliveredItemsMiddleware

    feed = make_feed(lambda: None)
    middleware = RedeliveredItemsMiddleware(feed)

    async def outputs(lease: bytes) -> list[Any]:
        request = Request("https://a.example/", meta={"_dc_lease": lease})
        response = HtmlResponse("https://a.example/", request=request, body=b"<html></html>")

        async def result() -> Any:
            yield {"url": "https://a.example/"}
            yield Request("https://a.example/next")

        return [o async for o in middleware.process_spider_output(response, result())]

    first = run(outputs(b'1:0:{"url":"x"}'))
    again = run(outputs(b'2:0:{"url":"x"}'))
    assert not feed.take_redelivered(first[0])
    assert feed.take_redelivered(again[0]) and not feed.take_redelivered(again[0])  # taken once


@pytest.mark.slow  # dcrawl subprocesses
def test_cli_events_and_sources(redis_url: str, redis_client: redis.Redis) -> None:
    from tests.conftest import dcrawl

    for i in range(3):
        redis_client.xadd(STREAM, {"event": "new", "url": f"https://a.example/{i}", "version": "1", "key": f"1 u{i}"})
    listed = dcrawl(redis_url, "events", "news", "--json")
    assert [json.loads(line)["url"] for line in listed.stdout.splitlines()] == [
        f"https://a.example/{i}" for i in range(3)
    ]
    grouped = dcrawl(redis_url, "events", "news", "--group", "g", "--consumer", "c1")
    assert grouped.returncode == 0 and "3 events" in grouped.stderr
    assert redis_client.xpending(STREAM, "g")["pending"] == 0  # acked
    again = dcrawl(redis_url, "events", "news", "--group", "g", "--consumer", "c1", "--json")
    assert again.stdout == ""  # the group has read them all
    half = dcrawl(redis_url, "events", "news", "--group", "g")
    assert half.returncode == 1 and "--group and --consumer go together" in half.stderr
    sources = dcrawl(redis_url, "sources", "news", "--json")
    assert json.loads(sources.stdout)["sources"] == []
    assert "no source recorded" in dcrawl(redis_url, "sources", "news").stdout
    redis_client.set("{news}:sources", "garbage")
    assert dcrawl(redis_url, "status", "news", "--json").returncode == 0
    refused = dcrawl(redis_url, "sources", "news")
    assert refused.returncode == 1 and "redis-cli type {news}:sources" in refused.stderr
    assert "Traceback" not in refused.stderr


@pytest.mark.slow  # over 5 s
def test_killed_between_commit_and_event_publishes_on_redelivery(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first delivery commits, then cannot write its event (the node "dies"): its item fails,
    so the request is not acked. The redelivery finds the row unchanged and publishes it anyway."""
    monkeypatch.setattr("distributed_crawler.events.feed.CLOSE_RETRY_SECONDS", 0.3)

    async def scenario() -> None:
        dead = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
        with pytest.raises(StorageError):
            await store(tmp_path, make_feed(lambda: dead, closing=lambda: True), [article(1)])
        await dead.aclose()
        assert redis_client.xlen(STREAM) == 0  # stored, not announced
        live = aioredis.Redis.from_url(redis_url)
        feed = make_feed(lambda: live)
        await store(tmp_path, feed, [article(1)])  # a first delivery of an unchanged row: nothing
        assert redis_client.xlen(STREAM) == 0
        await store(tmp_path, feed, [article(1)], redelivered=True)
        await live.aclose()

    run(scenario())
    assert [(e["event"], e["version"]) for e in events(redis_client)] == [("new", 1)]


def test_a_stream_key_of_another_type_holds_the_items_and_says_so(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    redis_client.set(STREAM, "not a stream")

    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        pipeline = StoragePipeline(StorageConfig(url=f"sqlite:///{tmp_path}/items.db"), None, make_feed(lambda: client))
        await pipeline.open_spider()
        task = asyncio.ensure_future(pipeline.process_item(article(1)))
        await asyncio.sleep(1.5)
        assert not task.done()  # waits, never acked without its event
        redis_client.delete(STREAM)
        await asyncio.wait_for(task, 20)
        await pipeline.close_spider()
        await client.aclose()

    run(scenario())
    assert redis_client.xlen(STREAM) == 1
    errors = [r for r in caplog.records if "redis-cli type '{news}:events'" in r.getMessage()]
    assert len(errors) == 1  # once per stall (then once a minute), not once per retry


def test_a_refused_source_count_is_retried_alone_so_the_row_is_announced_once(
    tmp_path: Path,
    redis_url: str,
    redis_client: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Redis user that may XADD but not run scripts: the event lands, the source count is refused;
    the items wait, the node's Redis policy logs an ERROR naming the cause and the fix (again while it
    lasts: once a minute, here shortened), and once the ACL is fixed only the count is sent again: one
    event, not one a retry."""
    monkeypatch.setattr("distributed_crawler.connection.policy.DENIED_LOG_SECONDS", 0.3)  # once a minute, shortened
    redis_client.acl_setuser(
        "feeder", enabled=True, passwords=["+pw"], keys=["*"], categories=["+@all", "-@scripting"], reset=True
    )

    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url.replace("redis://", "redis://feeder:pw@"))
        pipeline = StoragePipeline(StorageConfig(url=f"sqlite:///{tmp_path}/items.db"), None, make_feed(lambda: client))
        await pipeline.open_spider()
        task = asyncio.ensure_future(pipeline.process_item(article(1)))
        await asyncio.sleep(2.0)
        assert not task.done()  # committed, not announced in full: never acked
        redis_client.acl_setuser("feeder", categories=["+@scripting"])
        await asyncio.wait_for(task, 20)
        await pipeline.close_spider()
        await client.aclose()

    try:
        run(scenario())
    finally:
        redis_client.acl_deluser("feeder")
    assert [e["event"] for e in events(redis_client)] == ["new"]
    assert redis_client.hget("{news}:source:example.com", "n") == b"1"
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors and all("no permissions" in e and "+@scripting" in e for e in errors), errors
    assert len(errors) >= 2 and "since the last line" in errors[-1], errors  # repeated while it lasts
    assert any("calls work again" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_the_webhook_program_block_parses_when_included(tmp_path: Path) -> None:
    """deploy/events-webhook.conf, included as its comment says, adds the sink beside the workers."""
    import shutil

    from supervisor.options import ServerOptions

    deploy = Path(__file__).resolve().parent.parent / "deploy"
    (tmp_path / "deploy").mkdir()
    (tmp_path / ".run").mkdir()
    shutil.copy(deploy / "events-webhook.conf", tmp_path / "deploy")
    conf = (deploy / "supervisord.conf").read_text().replace("\nuser=crawler\n", "\n")
    (tmp_path / "deploy" / "supervisord.conf").write_text(conf + "\n[include]\nfiles = events-webhook.conf\n")
    options = ServerOptions()
    options.realize(args=["-c", str(tmp_path / "deploy" / "supervisord.conf")])
    commands = {p.name: p.command for g in options.process_group_configs for p in g.process_configs}
    assert commands["news-webhook"].startswith(f"{tmp_path}/deploy/../.venv/bin/dcrawl events news --webhook")
    assert "news-0" in commands


def test_stored_counts_one_per_row_in_the_events_write(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    """`dcrawl status` stored: a row counted when its insert commits, in its event's write; a changed
    row, an unchanged one and a redelivered one (announced again) add nothing; a garbage field is reset."""
    redis_client.hset("{news}:stats", "page_type:list:stored", "garbage")

    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        feed = ChangeFeed(
            EventsConfig(),
            SourcesConfig(),
            lambda: client,
            "news",
            RedisPolicy("redis://test"),
            lambda: False,
            counts_keys=("{news}:stats", "{news}:language:skipped"),
        )
        await store(
            tmp_path,
            feed,
            [article(1, page_type="article"), article(2, page_type="article"), article(3, page_type="list")],
        )
        await store(tmp_path, feed, [article(1, "edited", page_type="article"), article(2, page_type="article")])
        await store(tmp_path, feed, [article(2, page_type="article")], redelivered=True)
        await client.aclose()

    run(scenario())
    assert [e["event"] for e in events(redis_client)] == ["new", "new", "new", "changed", "new"]
    stats = redis_client.hgetall("{news}:stats")
    assert stats[b"page_type:article:stored"] == b"2" and stats[b"page_type:list:stored"] == b"1", stats
