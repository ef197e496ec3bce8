"""The ``items`` table every backend stores into: its columns, their types, row normalisation.

The one place to add a column: each backend derives its DDL and its upsert from
:data:`COLUMN_TYPES` (generic SQL types: ``TEXT`` or ``INTEGER``), so SQLite, PostgreSQL and
MySQL/MariaDB stay alike. A table made by an older release is migrated when a backend opens it:
every column it lacks is added (nullable, so existing rows read NULL there); nothing is ever
dropped or retyped. Imports nothing of ours, so every backend module may use it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

logger = logging.getLogger(__name__)

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


def missing_columns(existing: Iterable[str]) -> list[tuple[str, str]]:
    """``(column, generic type)`` of :data:`COLUMN_TYPES` not in *existing*, in storage order.

    Compared case-insensitively, as SQL identifiers are; ``url`` is never reported (a table
    without it is not ours and the backend refuses it).
    """
    have = {name.lower() for name in existing}
    return [(c, t) for c, t in COLUMN_TYPES.items() if c != "url" and c.lower() not in have]


def log_migration(where: str, added: list[tuple[str, str]]) -> None:
    """One INFO line when opening *where* (a masked URL) added columns to its table."""
    if added:
        logger.info(
            "Storage %s: added column(s) %s to table items (made by an older release; existing rows read NULL there)",
            where,
            ", ".join(c for c, _ in added),
        )


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
