"""The ``items`` table every backend stores into: its columns, their types, row normalisation.

The one place to add a column: each backend derives its DDL and its upsert from
:data:`COLUMN_TYPES` (generic SQL types: ``TEXT``, ``INTEGER``, ``BOOLEAN`` or ``JSON``), so SQLite, PostgreSQL and
MySQL/MariaDB stay alike. A table made by an older release is migrated when a backend opens it:
every column it lacks is added (nullable, so existing rows read NULL there); nothing is ever
dropped or retyped. Imports nothing of ours but storage/digest.py, so every backend module may use it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from distributed_crawler.storage.digest import content_digest

logger = logging.getLogger(__name__)

#: Column -> generic SQL type, in storage order; ``url`` is the unique key.
COLUMN_TYPES: dict[str, str] = {
    "url": "TEXT",
    "title": "TEXT",
    "text": "TEXT",
    "fetched_at": "TEXT",
    "status": "INTEGER",
    "node": "TEXT",
    # news spiders (docs/news.md): article metadata; authors as a JSON array of names
    "authors": "TEXT",
    "published_at": "TEXT",
    "lang": "TEXT",
    "description": "TEXT",
    "duplicate_of": "TEXT",
    "modified_at": "TEXT",
    "page_type": "TEXT",  # article | list | other
    "paywalled": "BOOLEAN",  # true / false / NULL (the page does not say)
    "truncated": "BOOLEAN",  # true: the page was cut to EXTRACT_MAX_BYTES before extraction
    # Change tracking (docs/recrawl.md): merged by `set_clause`, not simply overwritten.
    "content_hash": "TEXT",  # digest of the normalised `text` (storage/digest.py)
    "first_seen": "TEXT",  # ISO 8601 UTC of the first store of this URL: kept on update
    "last_changed": "TEXT",  # ISO 8601 UTC of the last store whose content_hash differed
    "version": "INTEGER",  # 1, +1 each time content_hash changes
    # every other field of the item, as one JSON object (storage/extra_fields.py); NULL: none
    "data": "JSON",
    # news spiders (docs/news.md): top image URL, section, tags (a JSON array), the site's name
    "image": "TEXT",
    "section": "TEXT",
    "tags": "TEXT",
    "site_name": "TEXT",
}


def add_source_columns(columns: dict[str, str]) -> None:
    """The source registry's columns (docs/sources.md): the source's name (the registered domain
    when the site is not registered) and its tags (a JSON array); added last, migrated as any column."""
    columns["source"] = "TEXT"
    columns["source_tags"] = "TEXT"


add_source_columns(COLUMN_TYPES)

#: Columns of the ``items`` table, in storage order.
COLUMNS: tuple[str, ...] = tuple(COLUMN_TYPES)


def set_clause(
    old: Callable[[str], str],
    new: Callable[[str], str],
    same: Callable[[str, str], str],
    name: Callable[[str], str] = str,
) -> str:
    """The ``SET`` list of an upsert: the new row's values, but the change-tracking columns merged.

    *old* / *new* name a column of the stored / incoming row in the dialect, *same* is its
    null-safe equality, *name* quotes a column being set. ``first_seen`` keeps the stored value; ``version`` and ``last_changed``
    move only when ``content_hash`` differs from the stored one. The merged columns come first:
    MySQL evaluates ``ON DUPLICATE KEY UPDATE`` left to right, so they must read the stored
    ``content_hash`` before it is overwritten.
    """
    changed = f"NOT ({same(old('content_hash'), new('content_hash'))})"
    merged = {
        # a row from an older release (no first_seen) was first seen at its stored fetch at the latest
        "first_seen": f"COALESCE({old('first_seen')}, {old('fetched_at')}, {new('first_seen')})",
        "version": f"CASE WHEN {changed} THEN COALESCE({old('version')}, 0) + 1 ELSE COALESCE({old('version')}, 1) END",
        "last_changed": (
            f"CASE WHEN {changed} THEN {new('last_changed')} "
            f"ELSE COALESCE({old('last_changed')}, {new('last_changed')}) END"
        ),
    }
    plain = [c for c in COLUMNS if c != "url" and c not in merged]
    sets = [(c, expr) for c, expr in merged.items()] + [(c, new(c)) for c in plain]
    return ", ".join(f"{name(c)} = {expr}" for c, expr in sets)


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
        prepared = {col: row.get(col) for col in COLUMNS}
        # A new row: version 1, first seen and last changed now (the merge in `set_clause` keeps
        # or moves them for an existing row); content_hash from the text unless given.
        text = prepared["text"]
        if prepared["content_hash"] is None and isinstance(text, str) and text:
            prepared["content_hash"] = content_digest(text)
        seen = prepared["fetched_at"] or datetime.now(UTC).isoformat(timespec="seconds")
        prepared["first_seen"] = prepared["first_seen"] or seen
        prepared["last_changed"] = prepared["last_changed"] or seen
        prepared["version"] = 1
        by_url[url] = prepared
    return [by_url[u] for u in sorted(by_url)]
