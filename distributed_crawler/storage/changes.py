"""What an upsert did to each row: `new`, `changed` or `unchanged`, with the stored version.

The change feed (distributed_crawler/events/) announces rows only after their commit, so the
backends read each row's version before and after the upsert inside the same transaction and
hand back one `RowChange` per URL. Imports nothing of ours: every backend module may use it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, Protocol

NEW = "new"
CHANGED = "changed"
UNCHANGED = "unchanged"

#: URLs per `IN (...)` list: far below SQLite's and MySQL's parameter limits.
LOOKUP_CHUNK = 500


class RowChange(NamedTuple):
    """One committed row: what the upsert did and the stored row's change-tracking columns."""

    url: str
    change: str  # NEW | CHANGED | UNCHANGED
    version: int
    first_seen: str | None
    row_id: str | None  # SQLite rowid, MySQL id; None on PostgreSQL (its table is keyed by url)
    previous: tuple[Any, Any] | None = None  # CHANGED: the replaced version's (title, text)


def chunks(urls: list[str], size: int = LOOKUP_CHUNK) -> Iterable[list[str]]:
    for start in range(0, len(urls), size):
        yield urls[start : start + size]


def classify(
    urls: Iterable[str], before: Mapping[str, Any], after: Mapping[str, tuple[Any, Any, Any]]
) -> list[RowChange]:
    """*before*: url -> stored version (absent = no row); *after*: url -> (version, first_seen, row id).

    A row from an older release has version NULL: it counts as version 1, as the upsert does.
    """
    changes = []
    for url in urls:
        if url not in after:  # not stored (cannot happen after a commit): announce nothing
            continue
        version, first_seen, row_id = after[url]
        version = int(version or 1)
        if url not in before:
            change = NEW
        elif int(before[url] or 1) != version:
            change = CHANGED
        else:
            change = UNCHANGED
        changes.append(RowChange(url, change, version, first_seen, None if row_id is None else str(row_id)))
    return changes


def with_previous(changes: list[RowChange], stored: Mapping[str, tuple[Any, Any]]) -> list[RowChange]:
    """*changes* with each CHANGED row's replaced (title, text) from *stored* (url -> read before
    the upsert, in its transaction): what the change feed's `diff` compares."""
    return [c._replace(previous=stored.get(c.url)) if c.change == CHANGED else c for c in changes]


class AfterCommit(Protocol):
    """What the storage pipeline calls around a commit (the change feed, events/feed.py)."""

    @property
    def linger(self) -> float:
        """Seconds an idle writer gathers items before a commit (each commit publishes once)."""

    def take_redelivered(self, item: Any) -> bool:
        """True (once) for an item whose request was delivered before: publish even if unchanged."""

    async def committed(
        self, changes: list[RowChange], rows: Iterable[Mapping[str, Any]], redelivered: set[str]
    ) -> int:
        """Publish what the committed batch changed; returns only once it is published."""


_HOOKS: weakref.WeakKeyDictionary[Any, AfterCommit] = weakref.WeakKeyDictionary()


def attach(crawler: Any, hook: AfterCommit) -> None:
    """Make *hook* the after-commit hook of *crawler*'s storage pipeline (an extension calls this:
    extensions are built before item pipelines)."""
    _HOOKS[crawler] = hook


def attached(crawler: Any) -> AfterCommit | None:
    return None if crawler is None else _HOOKS.get(crawler)
