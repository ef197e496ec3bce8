"""StoragePipeline: items are returned only once committed, in batches, never lost.

Unit tests drive the pipeline's coroutines in a plain asyncio loop (which is
what Scrapy's default asyncio reactor runs them in); end-to-end tests run real
crawls in a subprocess, so the reactor state of this test process is
irrelevant.
"""

from __future__ import annotations

import asyncio
import dataclasses
import decimal
import json
import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Coroutine
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import attrs
import pytest
import scrapy
from scrapy.exceptions import CloseSpider, DropItem
from scrapy.utils.deprecate import argument_is_required
from scrapy.utils.test import get_crawler

from distributed_crawler.storage.backends import StorageBackend, StorageError, open_storage
from distributed_crawler.storage.extra_fields import data_json
from distributed_crawler.storage.pipeline import (
    STORAGE_UNAVAILABLE,
    StorageConfig,
    StoragePipeline,
    item_to_row,
)
from tests.conftest import ROOT
from tests.storage_rows import empty_row

pytestmark = pytest.mark.timeout(60)

_T = TypeVar("_T")


def run(coro: Coroutine[Any, Any, _T], timeout: float = 30) -> _T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/items.db"


def db_rows(tmp_path: Path) -> dict[str, tuple[Any, ...]]:
    with sqlite3.connect(tmp_path / "items.db") as conn:
        return {r[0]: r for r in conn.execute("SELECT url, title, status FROM items")}


def make_pipeline(
    tmp_path: Path, pipeline_cls: type[StoragePipeline] = StoragePipeline, **settings: Any
) -> StoragePipeline:
    crawler = get_crawler(settings_dict={"STORAGE_URL": db_url(tmp_path), **settings})
    return pipeline_cls.from_crawler(crawler)


def item(i: int, **extra: Any) -> dict[str, Any]:
    return {"url": f"https://example.com/{i}", "title": f"t{i}", "status": 200, **extra}


class FlakyBackend:
    """Wraps a real backend; upsert_many fails ``fail_first`` times, then always if ``down``."""

    def __init__(self, inner: StorageBackend, fail_first: int = 0, down: bool = False) -> None:
        self.inner = inner
        self.fail_first = fail_first
        self.down = down
        self.calls = 0
        self.batch_sizes: list[int] = []

    def upsert_many(self, rows: list[dict[str, Any]]) -> None:
        self.calls += 1
        if self.down or self.calls <= self.fail_first:
            raise StorageError("SQLite write failed: database is locked")
        self.inner.upsert_many(rows)
        self.batch_sizes.append(len(rows))

    def count(self) -> int:
        return self.inner.count()

    def close(self) -> None:
        self.inner.close()


def flaky_pipeline_cls(tmp_path: Path, **flaky: Any) -> tuple[type[StoragePipeline], list[FlakyBackend]]:
    """A pipeline class whose backend is a FlakyBackend on tmp_path's database.

    The configured STORAGE_URL is ignored, so tests can give it a password and
    check that it never reaches the logs.
    """
    made: list[FlakyBackend] = []

    def factory(url: str, **options: Any) -> StorageBackend:
        backend = FlakyBackend(open_storage(db_url(tmp_path), **options), **flaky)
        made.append(backend)
        return backend

    class Pipeline(StoragePipeline):
        backend_factory = staticmethod(factory)

    return Pipeline, made


# --------------------------------------------------------------------------
# Committing and batching
# --------------------------------------------------------------------------


def test_scrapy_will_not_pass_spider_argument() -> None:
    """Scrapy 2.19 calls process_item(item) when ``spider`` is optional."""
    for name in ("process_item", "open_spider", "close_spider"):
        assert not argument_is_required(getattr(StoragePipeline, name), "spider")


def test_250_concurrent_items_committed_once_in_batches(tmp_path: Path) -> None:
    pipeline = make_pipeline(tmp_path, STORAGE_BATCH_SIZE=100, STORAGE_FLUSH_SECONDS=0.2)
    not_visible: list[str] = []

    async def main() -> None:
        await pipeline.open_spider()
        reader = sqlite3.connect(tmp_path / "items.db", isolation_level=None)

        async def one(i: int) -> None:
            it = item(i)
            assert await pipeline.process_item(it) is it
            found = reader.execute("SELECT 1 FROM items WHERE url = ?", (it["url"],)).fetchone()
            if found is None:
                not_visible.append(it["url"])

        try:
            await asyncio.gather(*(one(i) for i in range(250)))
        finally:
            reader.close()
            await pipeline.close_spider()

    run(main())
    assert not_visible == []  # returned => committed
    rows = db_rows(tmp_path)
    assert len(rows) == 250
    stats = pipeline.stats.get_stats()
    assert stats["storage/committed"] == 250
    assert stats["storage/batches"] < 250 / 10  # batched, not one commit per item
    assert "storage/errors" not in stats


def first_commit_held() -> tuple[type[StoragePipeline], threading.Event]:
    """A pipeline class whose first commit blocks until the returned event is set."""
    release = threading.Event()

    class Slow(FlakyBackend):
        calls = 0

        def upsert_many(self, rows: list[dict[str, Any]]) -> None:
            Slow.calls += 1
            if Slow.calls == 1:
                release.wait(10)
            super().upsert_many(rows)

    class Pipeline(StoragePipeline):
        backend_factory = staticmethod(lambda url, **options: Slow(open_storage(url, **options)))

    return Pipeline, release


def test_idle_writer_commits_at_once_not_after_flush_seconds(tmp_path: Path) -> None:
    """Group commit: a lone batch does not wait for the timer when nothing else is being written."""
    pipeline = make_pipeline(tmp_path, STORAGE_BATCH_SIZE=1000, STORAGE_FLUSH_SECONDS=60)

    async def main() -> None:
        await pipeline.open_spider()
        tasks = [asyncio.ensure_future(pipeline.process_item(item(i))) for i in range(10)]
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=20)  # far below 60 s
        await pipeline.close_spider()

    run(main())
    assert len(db_rows(tmp_path)) == 10
    assert pipeline.stats.get_value("storage/batches") == 1  # same loop turn: one batch


class LingeringFeed:
    """An after-commit hook (the change feed's shape) that asks batches to gather for 0.2 s."""

    linger = 0.2

    def __init__(self) -> None:
        self.batches: list[int] = []

    def take_redelivered(self, item: Any) -> bool:
        return False

    async def committed(self, changes: list[Any], rows: Any, redelivered: set[str]) -> int:
        self.batches.append(len(changes))
        return 0


def test_with_a_change_feed_items_gather_for_its_linger_before_a_commit(tmp_path: Path) -> None:
    """Each commit costs one events write: items arriving apart while the writer is idle share one."""
    pipeline = make_pipeline(tmp_path, STORAGE_BATCH_SIZE=1000, STORAGE_FLUSH_SECONDS=60)
    feed = LingeringFeed()
    pipeline.after_commit = feed

    async def main() -> None:
        await pipeline.open_spider()
        tasks = []
        for i in range(5):
            tasks.append(asyncio.ensure_future(pipeline.process_item(item(i))))
            await asyncio.sleep(0.02)  # the writer is idle meanwhile
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=20)  # the linger, not the 60 s timer
        await pipeline.close_spider()

    run(main())
    assert len(db_rows(tmp_path)) == 5
    assert feed.batches == [5]


def test_items_gather_into_one_batch_while_a_commit_runs(tmp_path: Path) -> None:
    Pipeline, release = first_commit_held()

    pipeline = make_pipeline(tmp_path, Pipeline, STORAGE_BATCH_SIZE=1000, STORAGE_FLUSH_SECONDS=60)

    async def main() -> None:
        await pipeline.open_spider()
        first = asyncio.ensure_future(pipeline.process_item(item(0)))
        await asyncio.sleep(0.05)
        rest = [asyncio.ensure_future(pipeline.process_item(item(i))) for i in range(1, 30)]
        await asyncio.sleep(0.05)
        assert not any(t.done() for t in [first, *rest])
        release.set()
        await asyncio.wait_for(asyncio.gather(first, *rest), timeout=20)
        await pipeline.close_spider()

    run(main())
    assert len(db_rows(tmp_path)) == 30
    assert pipeline.stats.get_value("storage/batches") == 2  # 1, then the 29 that gathered


def test_full_batch_commits_without_waiting_for_timer(tmp_path: Path) -> None:
    pipeline = make_pipeline(tmp_path, STORAGE_BATCH_SIZE=5, STORAGE_FLUSH_SECONDS=30)

    async def main() -> float:
        await pipeline.open_spider()
        started = time.monotonic()
        await asyncio.gather(*(pipeline.process_item(item(i)) for i in range(10)))
        elapsed = time.monotonic() - started
        await pipeline.close_spider()
        return elapsed

    assert run(main()) < 5
    assert pipeline.stats.get_value("storage/batches") == 2


def test_close_flushes_open_batch(tmp_path: Path) -> None:
    Pipeline, release = first_commit_held()  # the writer stays busy: the next batch stays open

    pipeline = make_pipeline(tmp_path, Pipeline, STORAGE_BATCH_SIZE=1000, STORAGE_FLUSH_SECONDS=60)

    async def main() -> None:
        await pipeline.open_spider()
        first = asyncio.ensure_future(pipeline.process_item(item(0)))
        await asyncio.sleep(0.05)
        tasks = [asyncio.ensure_future(pipeline.process_item(item(i))) for i in range(1, 8)]
        await asyncio.sleep(0.05)
        assert not any(t.done() for t in tasks)
        closing = asyncio.ensure_future(pipeline.close_spider())
        release.set()
        await closing
        await asyncio.gather(first, *tasks)

    started = time.monotonic()
    run(main())
    assert time.monotonic() - started < 5  # did not wait for the 60 s timer
    assert len(db_rows(tmp_path)) == 8


def test_same_url_is_upserted(tmp_path: Path) -> None:
    pipeline = make_pipeline(tmp_path, STORAGE_BATCH_SIZE=1, STORAGE_FLUSH_SECONDS=0)

    async def main() -> None:
        await pipeline.open_spider()
        await pipeline.process_item(item(1, title="v1"))
        await pipeline.process_item(item(1, title="v2"))
        await pipeline.close_spider()

    run(main())
    assert db_rows(tmp_path) == {"https://example.com/1": ("https://example.com/1", "v2", 200)}


def test_commits_run_in_one_worker_thread(tmp_path: Path) -> None:
    """Backend opened and written in one thread that is not the event loop's."""
    threads: set[str] = set()

    class Spy(FlakyBackend):
        def upsert_many(self, rows: list[dict[str, Any]]) -> None:
            threads.add(threading.current_thread().name)
            super().upsert_many(rows)

    class Recording(StoragePipeline):
        def _open_backend(self) -> StorageBackend:
            threads.add(threading.current_thread().name)
            return Spy(super()._open_backend())

    pipeline = make_pipeline(tmp_path, Recording, STORAGE_BATCH_SIZE=3, STORAGE_FLUSH_SECONDS=0.05)

    async def main() -> None:
        await pipeline.open_spider()
        await asyncio.gather(*(pipeline.process_item(item(i)) for i in range(20)))
        await pipeline.close_spider()

    run(main())
    assert len(threads) == 1
    assert threading.current_thread().name not in threads


# --------------------------------------------------------------------------
# Failures
# --------------------------------------------------------------------------


def test_storage_errors_are_retried_and_nothing_is_lost(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cls, made = flaky_pipeline_cls(tmp_path, fail_first=2)
    pipeline = make_pipeline(
        tmp_path,
        cls,
        STORAGE_URL="postgresql://crawler:s3cretpw@db.internal:5432/items",
        STORAGE_BATCH_SIZE=20,
        STORAGE_FLUSH_SECONDS=0.05,
        STORAGE_RETRY_MAX_SECONDS=0.05,
    )

    async def main() -> None:
        await pipeline.open_spider()
        await asyncio.gather(*(pipeline.process_item(item(i)) for i in range(50)))
        await pipeline.close_spider()

    with caplog.at_level(logging.DEBUG, logger="distributed_crawler"):
        run(main())
    assert len(db_rows(tmp_path)) == 50
    stats = pipeline.stats.get_stats()
    assert stats["storage/errors"] == 2
    assert stats["storage/committed"] == 50
    assert made[0].calls == 5 and made[0].batch_sizes == [20, 20, 10]  # 2 failed + 3 batches
    assert "storage/lost" not in stats
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per outage, not once per try
    message = warnings[0].getMessage()
    assert "postgresql://crawler:***@db.internal:5432/items" in message
    assert "https://example.com/0" in message  # first item of the failing batch
    assert "database is locked" in message
    assert any("writable again" in r.getMessage() for r in caplog.records)
    assert "s3cretpw" not in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_retry_keeps_batches_in_order(tmp_path: Path) -> None:
    """A newer version of a URL is never overwritten by an older, retried batch."""
    cls, made = flaky_pipeline_cls(tmp_path, fail_first=3)
    pipeline = make_pipeline(
        tmp_path, cls, STORAGE_BATCH_SIZE=1, STORAGE_FLUSH_SECONDS=0, STORAGE_RETRY_MAX_SECONDS=0.05
    )

    async def main() -> None:
        await pipeline.open_spider()
        first = asyncio.ensure_future(pipeline.process_item(item(1, title="old")))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(pipeline.process_item(item(1, title="new")))
        await asyncio.gather(first, second)
        await pipeline.close_spider()

    run(main())
    assert db_rows(tmp_path)["https://example.com/1"][1] == "new"
    assert made[0].batch_sizes == [1, 1]


def test_outage_at_close_is_bounded_and_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cls, _ = flaky_pipeline_cls(tmp_path, down=True)
    pipeline = make_pipeline(
        tmp_path,
        cls,
        STORAGE_URL="postgresql://crawler:s3cretpw@db.internal/items",
        STORAGE_BATCH_SIZE=100,
        STORAGE_FLUSH_SECONDS=0.05,
        STORAGE_RETRY_MAX_SECONDS=0.1,
        STORAGE_CLOSE_RETRY_SECONDS=0.5,
    )

    async def main() -> list[Any]:
        await pipeline.open_spider()
        tasks = [asyncio.ensure_future(pipeline.process_item(item(i))) for i in range(3)]
        await asyncio.sleep(0.3)  # retrying while the spider is open
        assert not any(t.done() for t in tasks)
        await pipeline.close_spider()
        return await asyncio.gather(*tasks, return_exceptions=True)

    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="distributed_crawler"):
        results = run(main())
    assert time.monotonic() - started < 10
    assert all(isinstance(r, StorageError) for r in results)  # item_error, never "scraped"
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "3 items NOT stored" in errors[0]
    assert all(f"https://example.com/{i}" in errors[0] for i in range(3))
    assert pipeline.stats.get_value("storage/lost") == 3
    assert "s3cretpw" not in caplog.text


def test_item_without_url_is_dropped(tmp_path: Path) -> None:
    pipeline = make_pipeline(tmp_path, STORAGE_FLUSH_SECONDS=0)

    async def main() -> None:
        await pipeline.open_spider()
        try:
            with pytest.raises(DropItem, match="url"):
                await pipeline.process_item({"title": "orphan"})
        finally:
            await pipeline.close_spider()

    run(main())


def test_open_failure_stops_crawl_with_one_line(caplog: pytest.LogCaptureFixture) -> None:
    crawler = get_crawler(settings_dict={"STORAGE_URL": "postgresql://crawler:s3cretpw@127.0.0.1:1/items"})
    pipeline = StoragePipeline.from_crawler(crawler)

    async def main() -> None:
        with pytest.raises(CloseSpider) as info:
            await pipeline.open_spider()
        assert info.value.reason == STORAGE_UNAVAILABLE
        await pipeline.close_spider()  # Scrapy still calls it: must be harmless

    with caplog.at_level(logging.INFO, logger="distributed_crawler"):
        run(main())
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) == 1
    assert records[0].levelno == logging.ERROR and records[0].exc_info is None
    message = records[0].getMessage()
    assert "\n" not in message
    assert "postgresql://crawler:***@127.0.0.1:1/items" in message
    assert "s3cretpw" not in caplog.text


# --------------------------------------------------------------------------
# Items and configuration
# --------------------------------------------------------------------------


class Page(scrapy.Item):
    url = scrapy.Field()
    title = scrapy.Field()
    text = scrapy.Field()
    status = scrapy.Field()
    extra = scrapy.Field()


def test_item_to_row_accepts_dicts_and_items() -> None:
    fetched = datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    # a field that is no column is kept in `data` (storage/extra_fields.py)
    assert item_to_row({"url": "https://e/1", "title": "T", "fetched_at": fetched, "status": "404", "other": 1}) == (
        empty_row(url="https://e/1", title="T", fetched_at="2024-05-01T10:00:00+00:00", status=404, data='{"other": 1}')
    )
    # content_hash stays None: the storage computes it from the text (schema.prepare_rows)
    row = item_to_row(Page(url="https://e/2", text="body\x00", extra="x"))
    assert row == empty_row(url="https://e/2", text="body", data='{"extra": "x"}')
    with pytest.raises(DropItem):
        item_to_row(Page(title="no url"))


def test_every_kind_of_item_keeps_its_own_fields_in_data() -> None:
    @dataclasses.dataclass
    class Story:
        url: str
        headline: str
        price: decimal.Decimal
        labels: tuple[str, ...]

    @attrs.define
    class Product:
        url: str
        sizes: frozenset[int]
        when: date

    story = item_to_row(Story("https://e/s", "Bridge", decimal.Decimal("1.50"), ("a", "b")))
    assert json.loads(story["data"]) == {"headline": "Bridge", "price": "1.50", "labels": ["a", "b"]}
    product = item_to_row(Product("https://e/p", frozenset({3, 1}), date(2026, 12, 1)))
    assert json.loads(product["data"]) == {"sizes": [1, 3], "when": "2026-12-01"}
    assert item_to_row({"url": "https://e/bare", "title": "t"})["data"] is None  # no other field: NULL


def test_a_data_object_too_large_is_cut_and_flagged_never_dropped() -> None:
    fields = [("small", "kept"), ("big", "x" * 5000), ("bigger", ["y" * 3000] * 3), ("n", 7)]
    data = json.loads(data_json(fields, max_chars=2000) or "")
    assert len(json.dumps(data, ensure_ascii=False)) <= 2000
    assert data["_truncated"] == ["big", "bigger"] and (data["small"], data["n"]) == ("kept", 7)
    assert data["bigger"].startswith('["yyy') and data["big"].startswith('"xxx')
    assert json.loads(data_json(fields) or "")["big"] == "x" * 5000  # under the default cap: whole


def test_item_to_row_stores_article_fields() -> None:
    published = datetime(2026, 12, 1, 9, 30, tzinfo=timezone(timedelta(hours=1)))
    row = item_to_row(
        {
            "url": "https://e/story",
            "authors": ["Jane Doe", None, "Ünal Öz"],
            "published_at": published,
            "lang": "en-gb",
            "description": "A story.",
            "duplicate_of": "https://other/story",
        }
    )
    assert json.loads(row["authors"]) == ["Jane Doe", "Ünal Öz"]
    assert row["published_at"] == "2026-12-01T08:30:00+00:00"
    assert (row["lang"], row["description"], row["duplicate_of"]) == ("en-gb", "A story.", "https://other/story")
    assert item_to_row({"url": "https://e/1", "authors": "One Name"})["authors"] == '["One Name"]'
    assert item_to_row({"url": "https://e/1", "authors": []})["authors"] == "[]"


def test_item_to_row_stores_page_type_paywall_and_modified_date() -> None:
    row = item_to_row(
        {"url": "https://e/s", "page_type": "article", "paywalled": True, "modified_at": "2026-12-02T10:00:00"}
    )
    assert (row["page_type"], row["paywalled"], row["modified_at"]) == ("article", True, "2026-12-02T10:00:00")
    # paywalled is a flag or unknown: never a guess from another type
    for value, flag in ((False, False), (None, None), (0, False), (1, True), ("false", None), ("yes", None), (2, None)):
        assert item_to_row({"url": "https://e/s", "paywalled": value})["paywalled"] is flag


def test_scrapy_item_through_pipeline(tmp_path: Path) -> None:
    pipeline = make_pipeline(tmp_path, STORAGE_FLUSH_SECONDS=0)

    async def main() -> None:
        await pipeline.open_spider()
        page = Page(url="https://e/item", title="from Item", status=200)
        assert await pipeline.process_item(page) is page
        await pipeline.close_spider()

    run(main())
    assert db_rows(tmp_path) == {"https://e/item": ("https://e/item", "from Item", 200)}


def test_config_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_URL", raising=False)
    config = StorageConfig.from_settings({})
    assert config == StorageConfig(
        url="sqlite:///data/items.db", batch_size=100, flush_seconds=1.0, retry_seconds_max=30
    )


def test_config_env_overrides_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_URL", "postgresql://u:pw@h/db")
    crawler = get_crawler(settings_dict={"STORAGE_URL": "sqlite:///x.db", "STORAGE_BATCH_SIZE": "7"})
    config = StoragePipeline.from_crawler(crawler).config
    assert config.url == "postgresql://u:pw@h/db"
    assert config.batch_size == 7
    assert "pw" not in repr(config) and "u:***@h" in repr(config)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"STORAGE_BATCH_SIZE": 0}, "STORAGE_BATCH_SIZE (0) must be >= 1"),
        ({"STORAGE_BATCH_SIZE": "abc"}, "STORAGE_BATCH_SIZE ('abc') must be an integer"),
        ({"STORAGE_BATCH_SIZE": 2.5}, "STORAGE_BATCH_SIZE (2.5) must be an integer"),
        ({"STORAGE_FLUSH_SECONDS": -1}, "STORAGE_FLUSH_SECONDS (-1.0) must be >= 0"),
        ({"STORAGE_FLUSH_SECONDS": "soon"}, "STORAGE_FLUSH_SECONDS ('soon') must be a number"),
        ({"STORAGE_RETRY_MAX_SECONDS": 0}, "STORAGE_RETRY_MAX_SECONDS (0.0) must be > 0"),
        ({"STORAGE_RETRY_MAX_SECONDS": "inf"}, "STORAGE_RETRY_MAX_SECONDS (inf) must be > 0"),
    ],
)
def test_config_validation(settings: dict[str, Any], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_URL", raising=False)
    with pytest.raises(ValueError) as info:
        StorageConfig.from_settings(settings)
    assert str(info.value) == message
    with pytest.raises(ValueError, match=r"^STORAGE_"):
        StoragePipeline.from_crawler(get_crawler(settings_dict=settings))


# --------------------------------------------------------------------------
# Real crawls (subprocess: own reactor, own event loop)
# --------------------------------------------------------------------------

_CRAWL_SCRIPT = textwrap.dedent(
    """
    import json, sqlite3, sys
    import scrapy
    from scrapy import signals
    from scrapy.crawler import AsyncCrawlerProcess
    from distributed_crawler.storage.pipeline import StoragePipeline
    from distributed_crawler.storage.backends import StorageError, open_storage

    cfg = json.loads(sys.argv[1])

    class Flaky:
        calls = 0
        def __init__(self, inner):
            self.inner = inner
        def upsert_many(self, rows):
            Flaky.calls += 1
            if cfg["down"] or Flaky.calls <= cfg["fail_first"]:
                raise StorageError("SQLite write failed: database is locked")
            self.inner.upsert_many(rows)
        def count(self):
            return self.inner.count()
        def close(self):
            self.inner.close()

    class FlakyPipeline(StoragePipeline):
        backend_factory = staticmethod(lambda url, **options: Flaky(open_storage(url, **options)))

    class ItemsSpider(scrapy.Spider):
        # Items come from responses of data: URIs (no network), or from start().
        name = "items"

        async def start(self):
            if cfg["from_start"]:
                for i in range(cfg["items"]):
                    yield {"url": f"https://example.com/{i}", "title": f"t{i}", "status": 200}
                return
            for r in range(0, cfg["items"], cfg["per_response"]):
                yield scrapy.Request(f"data:,{r}", cb_kwargs={"first": r})

        def parse(self, response, first):
            for i in range(first, min(first + cfg["per_response"], cfg["items"])):
                yield {"url": f"https://example.com/{i}", "title": f"t{i}", "status": response.status}

    not_visible = []

    def on_item_scraped(item, response, spider):
        conn = sqlite3.connect(cfg["db"])
        try:
            if conn.execute("SELECT 1 FROM items WHERE url = ?", (item["url"],)).fetchone() is None:
                not_visible.append(item["url"])
        finally:
            conn.close()

    process = AsyncCrawlerProcess({
        "ITEM_PIPELINES": {"__main__.FlakyPipeline": 300},
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        **cfg["settings"],
    })
    crawler = process.create_crawler(ItemsSpider)
    crawler.signals.connect(on_item_scraped, signal=signals.item_scraped)
    process.crawl(crawler)
    process.start()
    stats = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, (int, str))}
    print(json.dumps({"stats": stats, "not_visible": not_visible}))
    """
)


def crawl(
    tmp_path: Path,
    *,
    items: int = 250,
    per_response: int = 50,
    from_start: bool = False,
    fail_first: int = 0,
    down: bool = False,
    **settings: Any,
) -> tuple[dict[str, Any], list[str], str]:
    """Run ItemsSpider in a fresh process; return (stats, URLs scraped before visible, log)."""
    db = tmp_path / "items.db"
    cfg = {
        "items": items,
        "per_response": per_response,
        "from_start": from_start,
        "fail_first": fail_first,
        "down": down,
        "db": str(db),
        "settings": {"STORAGE_URL": f"sqlite:///{db}", **settings},
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("STORAGE_URL", None)
    proc = subprocess.run(
        [sys.executable, "-c", _CRAWL_SCRIPT, json.dumps(cfg)],
        capture_output=True,
        text=True,
        timeout=50,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["stats"], result["not_visible"], proc.stderr


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("from_start", [False, True], ids=["from_responses", "from_start"])
def test_real_crawl_commits_before_item_scraped(tmp_path: Path, from_start: bool) -> None:
    stats, not_visible, log = crawl(tmp_path, from_start=from_start, STORAGE_BATCH_SIZE=100, STORAGE_FLUSH_SECONDS=0.5)
    assert stats["finish_reason"] == "finished"
    assert stats["item_scraped_count"] == 250
    assert not_visible == []  # item_scraped fired only for committed rows
    assert stats["storage/committed"] == 250
    assert 3 <= stats["storage/batches"] < 250
    assert len(db_rows(tmp_path)) == 250
    assert " ERROR: " not in log and "Traceback" not in log


@pytest.mark.e2e
def test_real_crawl_survives_storage_errors(tmp_path: Path) -> None:
    stats, not_visible, log = crawl(
        tmp_path,
        fail_first=2,
        STORAGE_BATCH_SIZE=100,
        STORAGE_FLUSH_SECONDS=0.3,
        STORAGE_RETRY_MAX_SECONDS=0.2,
    )
    assert stats["finish_reason"] == "finished"
    assert stats["item_scraped_count"] == 250
    assert stats["storage/errors"] == 2
    assert not_visible == []
    assert len(db_rows(tmp_path)) == 250
    assert log.count(" WARNING: ") == 1


@pytest.mark.e2e
def test_real_crawl_closing_during_outage_does_not_hang(tmp_path: Path) -> None:
    """The spider closes (here by timeout) while the storage is down: bounded, reported.

    Items come from responses: with Scrapy 2.19, items yielded by start() that
    are still in progress when the close begins make the close hang whatever
    the pipeline does (the scraper never re-checks for idleness after them).
    """
    stats, not_visible, log = crawl(
        tmp_path,
        items=5,
        per_response=5,
        down=True,
        CLOSESPIDER_TIMEOUT=1,
        STORAGE_FLUSH_SECONDS=0.1,
        STORAGE_RETRY_MAX_SECONDS=0.2,
        STORAGE_CLOSE_RETRY_SECONDS=1,
    )
    assert stats["finish_reason"] == "closespider_timeout"
    assert "item_scraped_count" not in stats
    assert stats["storage/lost"] == 5
    assert "5 items NOT stored" in log


@pytest.mark.e2e
def test_real_crawl_storage_unavailable(tmp_path: Path) -> None:
    stats, _, log = crawl(tmp_path, STORAGE_URL="postgresql://crawler:s3cretpw@127.0.0.1:1/items")
    assert stats["finish_reason"] == STORAGE_UNAVAILABLE
    assert "item_scraped_count" not in stats
    error_lines = [line for line in log.splitlines() if " ERROR: " in line]
    assert len(error_lines) == 1, log
    assert "postgresql://crawler:***@127.0.0.1:1/items" in error_lines[0]
    assert "Traceback" not in log
    assert "s3cretpw" not in log
