"""Item pipeline that commits items to the idempotent ``items`` table.

``process_item`` returns only once the item's row is committed, so Scrapy's
``item_scraped`` signal means "durably stored": the scheduler can ack a
request after its items are scraped without risking their loss if the node
dies. Items of concurrent responses still share batches: a batch is committed
when it holds ``STORAGE_BATCH_SIZE`` items or ``STORAGE_FLUSH_SECONDS`` after
its first item, whichever comes first.

Settings (read once, see :class:`StorageConfig`):

* ``STORAGE_URL`` (env var ``STORAGE_URL`` wins), default ``sqlite:///data/items.db``
* ``STORAGE_BATCH_SIZE`` (100), ``STORAGE_FLUSH_SECONDS`` (1.0)
* ``STORAGE_RETRY_MAX_SECONDS`` (30): longest pause between retries of a failed batch
* ``STORAGE_CLOSE_RETRY_SECONDS`` (60): how long failed batches are retried
  once the spider is closing, before they are reported as not stored

Stats: ``storage/committed`` (items), ``storage/batches``, ``storage/errors``
(failed write attempts), ``storage/lost`` (items given up at close, if any).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from itemadapter import ItemAdapter
from scrapy.exceptions import CloseSpider, DropItem

from distributed_crawler.defaults import SettingsReader
from distributed_crawler.internals import downloads_in_flight, spider_closing
from distributed_crawler.redact import mask_url, safe_error_text
from distributed_crawler.storage.backends import DEFAULT_STORAGE_URL, StorageBackend, StorageError, open_storage
from distributed_crawler.storage.changes import AfterCommit, attached
from distributed_crawler.storage.extra_fields import data_json
from distributed_crawler.storage.labels import attached_labels, label_row

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
Item = TypeVar("Item")  # whatever the spider yields: itemadapter reads it, the pipeline passes it on

#: finish_reason of a crawl stopped because the storage could not be opened.
STORAGE_UNAVAILABLE = "storage_unavailable"

#: First pause after a failed write; doubles up to ``retry_seconds_max``.
RETRY_INITIAL_SECONDS = 0.5

#: During an outage, repeat the WARNING at most this often (s).
OUTAGE_REMINDER_SECONDS = 60.0

_INT32 = (-(2**31), 2**31 - 1)


# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class StorageConfig:
    """Storage settings, read and validated once when the pipeline is built."""

    url: str = DEFAULT_STORAGE_URL
    batch_size: int = 100
    flush_seconds: float = 1.0
    retry_seconds_max: float = 30.0
    close_retry_seconds: float = 60.0
    versions_keep: int = 0  # ITEM_VERSIONS_KEEP: replaced versions kept per URL in item_versions (0 = all)

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.strip():
            raise ValueError(f"STORAGE_URL ({self.url!r}) must be a non-empty URL")
        checks: list[tuple[str, Any, bool, str]] = [
            ("STORAGE_BATCH_SIZE", self.batch_size, self.batch_size >= 1, ">= 1"),
            ("STORAGE_FLUSH_SECONDS", self.flush_seconds, self.flush_seconds >= 0, ">= 0"),
            ("STORAGE_RETRY_MAX_SECONDS", self.retry_seconds_max, self.retry_seconds_max > 0, "> 0"),
            ("STORAGE_CLOSE_RETRY_SECONDS", self.close_retry_seconds, self.close_retry_seconds >= 0, ">= 0"),
            ("ITEM_VERSIONS_KEEP", self.versions_keep, self.versions_keep >= 0, ">= 0 (0 = keep every version)"),
        ]
        for name, value, ok, rule in checks:
            if not ok or not math.isfinite(value):
                raise ValueError(f"{name} ({value!r}) must be {rule}")

    @classmethod
    def from_settings(
        cls, settings: Mapping[str, Any] | Any, environ: Mapping[str, str] | None = None
    ) -> StorageConfig:
        """Build from Scrapy settings (or a dict); the ``STORAGE_URL`` env var wins.

        Raises ``ValueError`` naming the setting, e.g.
        ``STORAGE_BATCH_SIZE (0) must be >= 1``.
        """
        read = SettingsReader(settings, environ)
        return cls(
            url=read.str("STORAGE_URL") or DEFAULT_STORAGE_URL,
            batch_size=read.int("STORAGE_BATCH_SIZE"),
            flush_seconds=read.float("STORAGE_FLUSH_SECONDS"),
            retry_seconds_max=read.float("STORAGE_RETRY_MAX_SECONDS"),
            close_retry_seconds=read.float("STORAGE_CLOSE_RETRY_SECONDS"),
            versions_keep=read.int("ITEM_VERSIONS_KEEP", min=0, hint="(0 = keep every version)"),
        )

    @property
    def masked_url(self) -> str:
        """The URL with its password masked, for logs."""
        return mask_url(self.url)

    def __repr__(self) -> str:  # never leak the password through a repr
        return (
            f"StorageConfig(url={self.masked_url!r}, batch_size={self.batch_size}, "
            f"flush_seconds={self.flush_seconds}, retry_seconds_max={self.retry_seconds_max}, "
            f"close_retry_seconds={self.close_retry_seconds})"
        )


# --------------------------------------------------------------------------
# Item -> row
# --------------------------------------------------------------------------


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    elif isinstance(value, (list, tuple)):
        value = "\n".join(str(v) for v in value if v is not None)
    elif not isinstance(value, str):
        value = str(value)
    # PostgreSQL text cannot hold NUL; one such row would block its batch forever.
    return value.replace("\x00", "")


def _json_list(value: Any) -> str | None:
    """A list field (authors) as a JSON array of strings; a lone string is a list of one."""
    if value is None:
        return None
    values = value if isinstance(value, (list, tuple)) else [value]
    return _text(json.dumps([_text(v) for v in values if v is not None], ensure_ascii=False))


def _iso_utc(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=UTC).isoformat()
    return _text(value)


def _status(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        status = int(value)
    except (TypeError, ValueError):
        logger.debug("Ignoring non-integer status %r", value)
        return None
    return status if _INT32[0] <= status <= _INT32[1] else None


def _flag(value: Any) -> bool | None:
    """True, False or None (unknown); anything but a bool (or 0 / 1) is unknown, not a guess."""
    if isinstance(value, bool) or value is None:
        return value
    return bool(value) if isinstance(value, int) and value in (0, 1) else None


def item_to_row(item: Any) -> dict[str, Any]:
    """Map a dict, ``scrapy.Item``, dataclass or attrs item to an ``items`` row; missing fields are
    None, fields that are not columns go to ``data`` (storage/extra_fields.py).

    Raises ``DropItem`` for an item without ``url``: it has no key to be
    stored under, and letting it into a batch would make the batch fail.
    """
    adapter = ItemAdapter(item)
    url = _text(adapter.get("url"))
    if not url:
        raise DropItem("item has no 'url' field, StoragePipeline cannot store it")
    return {
        "url": url,
        "title": _text(adapter.get("title")),
        "text": _text(adapter.get("text")),
        "fetched_at": _iso_utc(adapter.get("fetched_at")),
        "status": _status(adapter.get("status")),
        "node": _text(adapter.get("node")),
        "authors": _json_list(adapter.get("authors")),
        "published_at": _iso_utc(adapter.get("published_at")),
        "lang": _text(adapter.get("lang")),
        "description": _text(adapter.get("description")),
        "duplicate_of": _text(adapter.get("duplicate_of")),
        "modified_at": _iso_utc(adapter.get("modified_at")),
        "page_type": _text(adapter.get("page_type")),
        "paywalled": _flag(adapter.get("paywalled")),
        "truncated": _flag(adapter.get("truncated")),
        # from the text when the item has none; first_seen, last_changed, version: the upsert's
        "content_hash": _text(adapter.get("content_hash")),
        "data": data_json((k, v) for k, v in adapter.items() if k not in ITEM_COLUMNS),
        "image": _text(adapter.get("image")),
        "section": _text(adapter.get("section")),
        "tags": _json_list(adapter.get("tags")) if adapter.get("tags") else None,
        "site_name": _text(adapter.get("site_name")),
        "source": _text(adapter.get("source")),  # else the registry's (storage/labels.py)
        "source_tags": _json_list(adapter.get("source_tags")) if adapter.get("source_tags") else None,
    }


#: The item fields item_to_row maps to columns; every other field goes to `data`.
ITEM_COLUMNS = frozenset(
    {
        "url", "title", "text", "fetched_at", "status", "node", "authors", "published_at", "lang",
        "description", "duplicate_of", "modified_at", "page_type", "paywalled", "truncated", "content_hash",
        "image", "section", "tags", "site_name", "source", "source_tags",
    }
)  # fmt: skip


# --------------------------------------------------------------------------
# Pipeline
# --------------------------------------------------------------------------


def _mark_retrieved(fut: asyncio.Future[None]) -> None:
    # A batch may fail with nobody awaiting it (e.g. cancelled waiters); avoid
    # asyncio's "exception was never retrieved" noise.
    if not fut.cancelled():
        fut.exception()


@dataclass(eq=False)
class _Batch:
    done: asyncio.Future[None]
    rows: list[dict[str, Any]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class StoragePipeline:
    """Commit items in batches; an item is returned only once committed.

    Database calls run in one dedicated worker thread (the backend is opened
    there too, as SQLite connections are bound to their thread), so the
    reactor never blocks. Batches are committed one at a time, in order, so a
    later version of a URL is never overwritten by an older retried batch.

    A failed write is logged (WARNING at the start of an outage, then at most
    every minute) and retried with exponential backoff up to
    ``STORAGE_RETRY_MAX_SECONDS`` between tries, for as long as the spider is
    open: items are never dropped silently, their ``process_item`` just waits,
    which also back-pressures the crawl. Once the spider is closing, failed
    batches get ``STORAGE_CLOSE_RETRY_SECONDS`` more; then an ERROR lists the
    URLs not stored and their ``process_item`` raises :class:`StorageError`
    (Scrapy's ``item_error``, so those requests are never acked as done).
    Caveat (Scrapy 2.19, not this pipeline): if the close starts while items
    yielded directly by ``Spider.start()`` are still in item pipelines, the
    scraper never re-checks for idleness after them and the close hangs;
    items produced from responses are unaffected.

    Opening the storage failure: ``open_spider`` logs ONE error line (masked
    URL, reason, what to do; no traceback) and raises
    ``CloseSpider("storage_unavailable")``. In Scrapy 2.19,
    ``ExecutionEngine.open_spider_async`` catches ``CloseSpider`` from item
    pipelines' ``open_spider`` and ``Crawler.crawl`` then closes the engine
    with that reason: nothing is fetched, no traceback is printed and the
    crawl's ``finish_reason`` stat is ``storage_unavailable``. Raising any
    other exception instead would make Scrapy print a full traceback (and
    "Unhandled error in Deferred"/"Task exception was never retrieved"). As
    ``scrapy crawl`` exits 0 after a ``CloseSpider``, the project CLI must map
    ``finish_reason == STORAGE_UNAVAILABLE`` to a non-zero exit status.
    """

    #: Opens the backend in the worker thread; tests substitute their own.
    backend_factory: Callable[..., StorageBackend] = staticmethod(open_storage)

    def __init__(
        self, config: StorageConfig, crawler: Crawler | None = None, after_commit: AfterCommit | None = None
    ) -> None:
        self.config = config
        self.crawler = crawler
        # the change feed (events/feed.py): told what each commit did before its items return
        self.after_commit = after_commit
        self.stats: Any = None
        if crawler is not None:
            try:
                self.stats = crawler.stats
            except RuntimeError:  # crawler settings not applied yet
                self.stats = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._backend: StorageBackend | None = None
        self._current: _Batch | None = None
        self._pending: deque[_Batch] = deque()
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False
        self._close_deadline: float | None = None
        self._gave_up = False
        self._outage_started: float | None = None
        self._outage_failures = 0
        self._last_warning = 0.0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> StoragePipeline:
        """Read the settings once; bad values raise ``ValueError`` at startup."""
        return cls(StorageConfig.from_settings(crawler.settings), crawler, attached(crawler))

    # -- helpers -----------------------------------------------------------

    def _inc(self, key: str, count: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(key, count)

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run *fn* in the storage thread without blocking the event loop."""
        assert self._loop is not None and self._executor is not None
        return await self._loop.run_in_executor(self._executor, fn, *args)

    def _open_backend(self) -> StorageBackend:
        return self.backend_factory(self.config.url, versions_keep=self.config.versions_keep)

    def _is_closing(self) -> bool:
        """True once the spider has started closing.

        Scrapy calls ``close_spider`` only after every request and item in
        progress has finished, so waiting for that call during an outage
        would deadlock the shutdown: internals.spider_closing sees the close
        coming. Without it the pipeline retries until ``close_spider``.
        """
        return self._closing or (self.crawler is not None and spider_closing(self.crawler))

    # -- Scrapy hooks ------------------------------------------------------

    async def open_spider(self, spider: Spider | None = None) -> None:
        """Open the backend in the storage thread; stop the crawl if impossible."""
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "StoragePipeline needs Scrapy's asyncio reactor (TWISTED_REACTOR="
                "'twisted.internet.asyncioreactor.AsyncioSelectorReactor', the default)"
            ) from None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="storage")
        try:
            self._backend = await self._call(self._open_backend)
        except Exception as exc:  # noqa: BLE001 - any failure to open is one line for the operator
            reason = (
                str(exc)
                if isinstance(exc, StorageError)
                else (
                    f"Cannot open storage {self.config.masked_url}: "
                    f"{type(exc).__name__}: {safe_error_text(exc, self.config.url)}"
                )
            )
            logger.error("Storage unavailable, stopping the crawl: %s", reason)
            self._executor.shutdown(wait=False)
            self._executor = None
            self._closed = True
            raise CloseSpider(STORAGE_UNAVAILABLE) from None
        logger.info(
            "Storing items in %s (batch_size=%d, flush_seconds=%s)",
            self.config.masked_url,
            self.config.batch_size,
            self.config.flush_seconds,
        )

    async def process_item(self, item: Item, spider: Spider | None = None) -> Item:
        """Add the item to the open batch and return it once that batch is committed."""
        row = item_to_row(item)
        label_row(row, attached_labels(self.crawler))
        if self._backend is None or self._closed:
            raise StorageError(
                f"StoragePipeline for {self.config.masked_url} is not open; item {row['url']} not stored"
            )
        if self.after_commit is not None and self.after_commit.take_redelivered(item):
            row["_redelivered"] = True  # not a column: prepare_rows keeps only COLUMNS
        batch = self._add(row)
        await asyncio.shield(batch.done)
        return item

    async def close_spider(self, spider: Spider | None = None) -> None:
        """Flush the open batch (bounded retries), then close the backend."""
        if self._closed or self._executor is None:
            return
        self._closing = True
        if self._close_deadline is None:
            self._close_deadline = time.monotonic() + self.config.close_retry_seconds
        if self._current is not None:
            self._seal(self._current)
        writer = self._writer
        if writer is not None and not writer.done():
            # The writer bounds its own retries by _close_deadline; this only
            # guards against a database call hanging in the worker thread.
            timeout = self.config.close_retry_seconds + 35.0
            try:
                await asyncio.wait_for(asyncio.shield(writer), timeout=timeout)
            except TimeoutError:
                writer.cancel()
                for batch in list(self._pending):
                    self._fail(batch, f"storage call still running after {timeout:.0f}s")
                self._pending.clear()
        self._closed = True
        if self._backend is not None:
            try:
                await asyncio.wait_for(self._call(self._backend.close), timeout=10)
            except Exception as exc:  # noqa: BLE001 - closing is best effort
                logger.warning(
                    "Error closing storage %s: %s",
                    self.config.masked_url,
                    safe_error_text(exc, self.config.url),
                )
        self._executor.shutdown(wait=False)
        logger.info(
            "Storage %s closed: %s items committed in %s batches",
            self.config.masked_url,
            self.stats.get_value("storage/committed", 0) if self.stats else "?",
            self.stats.get_value("storage/batches", 0) if self.stats else "?",
        )

    # -- batching ----------------------------------------------------------

    def _add(self, row: dict[str, Any]) -> _Batch:
        assert self._loop is not None
        batch = self._current
        if batch is None:
            batch = _Batch(self._loop.create_future())
            batch.done.add_done_callback(_mark_retrieved)
            self._current = batch
            linger = self._linger()
            batch.timer = self._loop.call_later(linger or self.config.flush_seconds, self._seal, batch)
            if not linger and (self._writer is None or self._writer.done()):
                # Group commit: an idle writer takes the batch as soon as this loop turn ends,
                # so a lone item waits milliseconds, not flush_seconds; under load, items
                # gather while the previous commit runs.
                self._loop.call_soon(self._seal, batch)
        batch.rows.append(row)
        if len(batch.rows) >= self.config.batch_size or self._closing:
            self._seal(batch)
        return batch

    def _linger(self) -> float:
        """With a change feed, a batch gathers for its linger (EVENTS_BATCH_SECONDS, at most
        flush_seconds) even while the writer is idle, since each commit costs one events write;
        but only while downloads are in flight (more items are coming): a lone request (a
        quarantined one, the end of a crawl) is not slowed down."""
        try:
            if self.crawler is not None and not downloads_in_flight(self.crawler):
                return 0.0
        except RuntimeError:  # no engine (a pipeline driven without a crawl): the linger as set
            pass
        return min(getattr(self.after_commit, "linger", 0.0), self.config.flush_seconds)

    def _seal(self, batch: _Batch) -> None:
        """Stop adding to *batch* and queue it for the writer."""
        if batch is not self._current:
            return
        self._current = None
        if batch.timer is not None:
            batch.timer.cancel()
        self._pending.append(batch)
        if self._writer is None or self._writer.done():
            assert self._loop is not None
            self._writer = self._loop.create_task(self._write_pending())

    async def _write_pending(self) -> None:
        """Commit queued batches one at a time, in order; then take what gathered meanwhile."""
        while self._pending or (
            self._current is not None and self._current.rows and not self._closed and not self._linger()
        ):
            if not self._pending:
                assert self._current is not None  # the loop condition
                self._seal(self._current)
                continue
            batch = self._pending[0]
            try:
                await self._commit(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug, not a storage error: never hang items
                logger.exception("Unexpected error committing a batch to %s", self.config.masked_url)
                self._fail(batch, safe_error_text(exc, self.config.url))
            if self._pending and self._pending[0] is batch:
                self._pending.popleft()

    async def _commit(self, batch: _Batch) -> None:
        """Write *batch*, retrying with backoff until it succeeds or the close deadline."""
        assert self._backend is not None
        if self._gave_up:
            self._fail(batch, "storage unavailable at close")
            return
        delay = min(RETRY_INITIAL_SECONDS, self.config.retry_seconds_max)
        changes: Any = None
        while True:
            try:
                if self.after_commit is None:
                    await self._call(self._backend.upsert_many, batch.rows)
                else:
                    changes = await self._call(self._backend.upsert_changes, batch.rows)
            except Exception as exc:  # noqa: BLE001 - any storage failure is retried
                error = safe_error_text(exc, self.config.url)
                self._inc("storage/errors")
                self._note_failure(batch, error)
                if self._is_closing():
                    now = time.monotonic()
                    if self._close_deadline is None:
                        self._close_deadline = now + self.config.close_retry_seconds
                    if now >= self._close_deadline:
                        self._gave_up = True
                        self._fail(batch, error)
                        return
                await self._backoff(delay * random.uniform(0.8, 1.0))
                delay = min(delay * 2, self.config.retry_seconds_max)
                continue
            break
        if self._outage_started is not None:
            logger.info(
                "Storage %s is writable again after %.1fs (%d failed attempts)",
                self.config.masked_url,
                time.monotonic() - self._outage_started,
                self._outage_failures,
            )
            self._outage_started = None
            self._outage_failures = 0
        self._inc("storage/committed", len(batch.rows))
        self._inc("storage/batches")
        if self.after_commit is not None and not await self._announce(batch, changes):
            return
        if not batch.done.done():
            batch.done.set_result(None)

    async def _announce(self, batch: _Batch, changes: Any) -> bool:
        """Publish the batch's change events (they retry through a Redis outage); False when they
        could not be before the close: the items fail, so their requests are redelivered."""
        assert self.after_commit is not None
        redelivered = {row["url"] for row in batch.rows if row.get("_redelivered")}
        try:
            self._inc("events/published", await self.after_commit.committed(changes, batch.rows, redelivered))
        except Exception as exc:  # noqa: BLE001 - stored but not announced: not acked, redelivered later
            logger.error(
                "%d items stored in %s but their change events were not written (%s); their requests "
                "are not acked and publish on redelivery",
                len(batch.rows),
                self.config.masked_url,
                exc,
            )
            if not batch.done.done():
                batch.done.set_exception(StorageError(f"change events not written: {exc}"))
            return False
        return True

    async def _backoff(self, seconds: float) -> None:
        """Sleep *seconds*, cut short by the close deadline once the spider closes."""
        end = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            if self._close_deadline is None and self._is_closing():
                self._close_deadline = now + self.config.close_retry_seconds
            limit = end if self._close_deadline is None else min(end, self._close_deadline)
            if now >= limit:
                return
            await asyncio.sleep(min(limit - now, 0.25))

    def _note_failure(self, batch: _Batch, error: str) -> None:
        """Log a failed write: WARNING once per outage, then a reminder each minute."""
        now = time.monotonic()
        self._outage_failures += 1
        first_url = batch.rows[0]["url"] if batch.rows else "-"
        if self._outage_started is None:
            self._outage_started = self._last_warning = now
            logger.warning(
                "Storage write to %s failed (%s); batch of %d items (first %s) not committed yet, "
                "retrying with backoff up to %ss",
                self.config.masked_url,
                error,
                len(batch.rows),
                first_url,
                self.config.retry_seconds_max,
            )
        elif now - self._last_warning >= OUTAGE_REMINDER_SECONDS:
            self._last_warning = now
            logger.warning(
                "Storage %s still failing after %.0fs and %d attempts (%s); %d items waiting (first %s)",
                self.config.masked_url,
                now - self._outage_started,
                self._outage_failures,
                error,
                sum(len(b.rows) for b in self._pending),
                first_url,
            )
        else:
            logger.debug("Storage write to %s failed again: %s", self.config.masked_url, error)

    def _fail(self, batch: _Batch, error: str) -> None:
        """Give up on *batch*: log ERROR with its URLs, fail its waiting items."""
        if batch.done.done():
            return
        urls = [row["url"] for row in batch.rows]
        self._inc("storage/lost", len(urls))
        logger.error(
            "%d items NOT stored in %s (%s): %s",
            len(urls),
            self.config.masked_url,
            error,
            " ".join(urls),
        )
        batch.done.set_exception(StorageError(f"item not stored in {self.config.masked_url}: {error}"))
