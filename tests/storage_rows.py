"""What the storage tests share: a sample row, the row as first stored, backends closed at teardown.

Used by test_storage.py (SQLite, PostgreSQL) and test_storage_mysql.py (MariaDB), so every backend
is held to the same contract with the same data.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from distributed_crawler.storage.backends import StorageBackend, StorageError, open_storage
from distributed_crawler.storage.digest import content_digest
from distributed_crawler.storage.schema import COLUMNS

#: Columns the storage fills itself when it writes a row; an item never carries them.
STORAGE_FILLED = ("first_seen", "last_changed", "version")


def empty_row(**values: Any) -> dict[str, Any]:
    """An item's row with every column None but `values`: what an item without those fields maps to
    (the columns the storage fills itself only where `values` gives them)."""
    return {column: None for column in COLUMNS if column not in STORAGE_FILLED} | values


def row(i: int | str, **overrides: Any) -> dict[str, Any]:
    base = {
        "url": f"https://example.com/{i}",
        "title": f"title {i}",
        "text": f"text {i}",
        "fetched_at": "2024-01-01T00:00:00+00:00",
        "status": 200,
        "node": "node-a",
        "authors": '["A. Writer", "B. Reporter"]',
        "published_at": "2023-12-31T08:00:00+00:00",
        "lang": "en-gb",
        "description": f"about {i}",
        "duplicate_of": None,
        "modified_at": "2023-12-31T09:30:00",
        "page_type": "article",
        "paywalled": True,
        "truncated": False,
        "data": None,  # the item's other fields: test_storage*.py's data tests
        "image": f"https://example.com/{i}.jpg",
        "section": "Politics",
        "tags": '["budget", "city"]',
        "site_name": "Example News",
        "source": "Example News",  # the registry's name (docs/sources.md)
        "source_tags": '["national", "en"]',
    }
    base.update(overrides)
    return base


def stored(written: dict[str, Any]) -> dict[str, Any]:
    """A row as first stored: content_hash of its text, first seen / last changed at fetch, version 1."""
    text = written.get("text")
    return {
        **written,
        "content_hash": content_digest(text) if text else None,
        "first_seen": written["fetched_at"],
        "last_changed": written["fetched_at"],
        "version": 1,
    }


@contextmanager
def backends_on(url: str) -> Iterator[Callable[[], StorageBackend]]:
    """Factory opening backends on ``url`` (an `opened` fixture's body); all closed on exit."""
    backends: list[StorageBackend] = []

    def factory() -> StorageBackend:
        backend = open_storage(url)
        backends.append(backend)
        return backend

    yield factory
    for backend in backends:
        backend.close()


def check_close_is_idempotent(backend: StorageBackend) -> None:
    backend.close()
    backend.close()
    with pytest.raises(StorageError, match="closed"):
        backend.upsert_many([row(1)])


def write_overlapping_rows(url: str, writers: int, timeout: float, start_together: bool = False) -> list[BaseException]:
    """*writers* threads, each with its own backend, upserting 20 batches of 30 of the same 120 URLs
    (all opening their backend at the same moment when *start_together*); what they raised."""
    barrier = threading.Barrier(writers) if start_together else None
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            if barrier is not None:
                barrier.wait(10)
            backend = open_storage(url)
            try:
                for b in range(20):
                    backend.upsert_many([row((b * 5 + worker + i) % 120, node=f"t{worker}") for i in range(30)])
            finally:
                backend.close()
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return errors


def check_upsert_changes(backend: StorageBackend) -> None:
    """`upsert_changes`: new, then unchanged (same text) or changed (new text), with the stored
    version, first_seen kept; the change feed's source of truth (docs/events.md)."""
    first = sorted(backend.upsert_changes([row(1), row(2)]))  # MySQL writes in url-hash order
    assert [(c.url, c.change, c.version) for c in first] == [
        ("https://example.com/1", "new", 1),
        ("https://example.com/2", "new", 1),
    ]
    again = sorted(backend.upsert_changes([row(1), row(2, text="text 2, corrected")]))
    assert [(c.change, c.version) for c in again] == [("unchanged", 1), ("changed", 2)]
    assert [c.previous for c in again] == [None, ("title 2", "text 2")]  # what the event's diff compares
    assert again[0].first_seen == first[0].first_seen
    assert backend.upsert_changes([]) == []


def check_item_versions(url: str) -> None:
    """item_versions (docs/storage.md): each store that changes a row's text keeps the replaced
    row there, `items` keeps the current one; a replayed store adds nothing; ITEM_VERSIONS_KEEP."""
    story = f"versions-{uuid.uuid4().hex[:8]}"
    backend = open_storage(url)
    try:
        written = row(story, fetched_at="2026-12-01T08:00:00+00:00")
        backend.upsert_many([written])
        backend.upsert_many([{**written, "fetched_at": "2026-12-01T09:00:00+00:00"}])  # same text: no version
        assert [(v["version"], v["replaced_at"]) for v in backend.versions(written["url"])] == [(1, None)]
        edited = {**written, "text": "text, with a correction", "fetched_at": "2026-12-01T10:00:00+00:00"}
        backend.upsert_changes([edited])
        retitled = {
            **edited,
            "title": "a new headline",
            "text": "text, updated",
            "fetched_at": "2026-12-01T11:00:00+00:00",
        }
        backend.upsert_many([retitled])
        backend.upsert_many([retitled])  # a redelivered store: the same text, nothing more kept
        kept = backend.versions(written["url"])
        assert [(v["version"], v["title"], v["text"], v["fetched_at"], v["replaced_at"]) for v in kept] == [
            (1, written["title"], written["text"], "2026-12-01T09:00:00+00:00", "2026-12-01T10:00:00+00:00"),
            (2, written["title"], "text, with a correction", "2026-12-01T10:00:00+00:00", "2026-12-01T11:00:00+00:00"),
            (3, "a new headline", "text, updated", "2026-12-01T11:00:00+00:00", None),  # the current row
        ]
        assert kept[0]["content_hash"] == content_digest(written["text"]) and kept[0]["url"] == written["url"]
        assert backend.versions("https://example.com/never-stored") == []
    finally:
        backend.close()
    keeping = open_storage(url, versions_keep=1)
    try:
        keeping.upsert_many([{**retitled, "text": "text, updated twice", "fetched_at": "2026-12-01T12:00:00+00:00"}])
        assert [v["version"] for v in keeping.versions(written["url"])] == [3, 4]  # the newest replaced one, current
    finally:
        keeping.close()
    with pytest.raises(StorageError, match="ITEM_VERSIONS_KEEP"):
        open_storage(url, versions_keep=-1)
