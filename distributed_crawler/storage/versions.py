"""The ``item_versions`` table: every version of a row that a later store replaced (docs/storage.md).

``items`` keeps the current version of each URL. When an upsert changes a row's ``content_hash``
(the version moves), the stored row is copied here first, in the same transaction: ``url``,
``version`` (the replaced one), its text fields, ``content_hash``, ``fetched_at``, and
``replaced_at`` (the ``fetched_at`` of the row that replaced it). Keyed by (url, version), and
written with "insert or ignore", so a store replayed after a crash never doubles a version.
``ITEM_VERSIONS_KEEP`` (> 0) keeps only the newest N replaced versions per URL.

The table is made, and its missing columns added, by its own function in each backend beside the
``items`` migration; this module holds the dialect-neutral parts. Imports nothing of ours but
storage/schema.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

#: Column -> generic SQL type (storage/schema.py's), in storage order; (url, version) is the key.
VERSION_COLUMN_TYPES: dict[str, str] = {
    "url": "TEXT",
    "version": "INTEGER",
    "title": "TEXT",
    "text": "TEXT",
    "description": "TEXT",
    "authors": "TEXT",
    "published_at": "TEXT",
    "modified_at": "TEXT",
    "content_hash": "TEXT",
    "fetched_at": "TEXT",
    "status": "INTEGER",
    "node": "TEXT",
    "replaced_at": "TEXT",  # fetched_at of the row that replaced this version
}
VERSION_COLUMNS: tuple[str, ...] = tuple(VERSION_COLUMN_TYPES)
#: Copied from ``items`` as they are (every version column but the two computed ones).
COPIED = tuple(c for c in VERSION_COLUMNS if c not in ("version", "replaced_at"))


def missing_version_columns(existing: Iterable[str]) -> list[tuple[str, str]]:
    """``(column, generic type)`` the table lacks (made by an older release), in storage order."""
    have = {name.lower() for name in existing}
    return [(c, t) for c, t in VERSION_COLUMN_TYPES.items() if c.lower() not in have]


def archive_select(
    mark: Callable[[int], str],
    same: Callable[[str, str], str],
    quote: Callable[[str], str] = str,
    key: str = "url",
) -> str:
    """``SELECT`` of the rows an upsert is about to replace, as item_versions rows.

    Three parameters per row: the new ``fetched_at`` (``replaced_at``), the URL and the new
    ``content_hash``; *mark(i)* is the dialect's i-th placeholder, *same* its null-safe equality,
    *key* the column the URL parameter is matched against (MySQL: ``url_hash``, its unique key).
    Only an existing row whose stored hash differs from the new one is selected (the upsert's rule
    for moving ``version``, storage/schema.py ``set_clause``).
    """
    table = quote("items")

    def col(name: str) -> str:
        return f"{table}.{quote(name)}"

    copied = ", ".join(col(c) for c in COPIED)
    return (
        f"SELECT {copied}, COALESCE({col('version')}, 1), {mark(0)} FROM {table} "
        f"WHERE {col(key)} = {mark(1)} AND NOT ({same(col('content_hash'), mark(2))})"
    )


def current_select(mark: str, quote: Callable[[str], str] = str, key: str = "url") -> str:
    """The current row of a URL from ``items`` as an item_versions row (``replaced_at`` NULL)."""
    copied = ", ".join(quote(c) for c in COPIED)
    return f"SELECT {copied}, COALESCE({quote('version')}, 1), NULL FROM {quote('items')} WHERE {quote(key)} = {mark}"


def history_columns() -> tuple[str, ...]:
    """The columns of a row read by `current_select` or from item_versions, in that order."""
    return (*COPIED, "version", "replaced_at")


def archive_columns(quote: Callable[[str], str] = str) -> str:
    """The insert's column list, in the order `archive_select` yields them."""
    return ", ".join(quote(c) for c in (*COPIED, "version", "replaced_at"))


def archive_params(rows: Iterable[dict[str, Any]]) -> list[tuple[Any, Any, Any]]:
    """Per prepared row: (replaced_at, url, new content_hash), `archive_select`'s parameters."""
    return [(r["fetched_at"], r["url"], r["content_hash"]) for r in rows]


def versions_keep_error(keep: Any) -> str | None:
    """Why `keep` is not a valid ITEM_VERSIONS_KEEP (None: it is)."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        return f"ITEM_VERSIONS_KEEP ({keep!r}) must be an integer >= 0 (0 = keep every version)"
    return None
