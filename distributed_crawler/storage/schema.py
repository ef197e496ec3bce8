"""The ``items`` table every backend stores into: its columns, their types, row normalisation.

The one place to add a column: each backend derives its DDL and its upsert from
:data:`COLUMN_TYPES` (generic SQL types: ``TEXT`` or ``INTEGER``), so SQLite, PostgreSQL and
MySQL/MariaDB stay alike. Imports nothing of ours, so every backend module may use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Column -> generic SQL type, in storage order; ``url`` is the unique key.
COLUMN_TYPES: dict[str, str] = {
    "url": "TEXT",
    "title": "TEXT",
    "text": "TEXT",
    "fetched_at": "TEXT",
    "status": "INTEGER",
    "node": "TEXT",
}

#: Columns of the ``items`` table, in storage order.
COLUMNS: tuple[str, ...] = tuple(COLUMN_TYPES)


class StorageError(Exception):
    """The storage backend cannot be opened or written.

    Messages are single lines and never contain a password (URLs go through
    :func:`distributed_crawler.redact.mask_url`), so they are safe to log as they are.
    """


def prepare_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Normalise rows to exactly :data:`COLUMNS`, one per URL (last wins), sorted.

    Sorting by URL makes concurrent writers lock rows in the same order, which
    rules out deadlocks between overlapping PostgreSQL batches.
    """
    by_url: dict[str, dict[str, Any]] = {}
    for row in rows:
        url = row.get("url")
        if not url:
            raise StorageError(f"row without url cannot be stored: {dict(row)!r:.200}")
        by_url[url] = {col: row.get(col) for col in COLUMNS}
    return [by_url[u] for u in sorted(by_url)]
