"""Idempotent item storage: one ``items`` row per URL, in SQLite, PostgreSQL or MySQL/MariaDB.

Every node of the crawl may store the same URL more than once (a request can be
re-leased after a node dies, a page can be re-crawled), so writes are upserts
keyed on ``url``: storing a URL again updates its row and never duplicates it.

``open_storage(url)`` picks the backend from the URL scheme:

* ``sqlite:///relative/path.db`` (resolved against the current working
  directory), ``sqlite:////absolute/path.db`` or ``sqlite:///:memory:``;
* ``postgresql://user:pass@host:port/db`` (``postgres://`` is accepted too);
* ``mysql://user:pass@host:port/db`` (``mariadb://`` is accepted too), see
  :mod:`distributed_crawler.storage.mysql`.

The table's columns are defined once, in :mod:`distributed_crawler.storage.schema`.

Backends are plain synchronous objects and are *not* thread-safe: the item
pipeline drives each one from a single dedicated worker thread.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import unquote

from distributed_crawler.defaults import DEFAULTS
from distributed_crawler.redact import mask_url, safe_error_text
from distributed_crawler.storage.changes import RowChange, chunks, classify, with_previous
from distributed_crawler.storage.schema import (
    COLUMN_TYPES,
    COLUMNS,
    StorageError,
    log_migration,
    missing_columns,
    set_clause,
)
from distributed_crawler.storage.schema import prepare_rows as _prepare
from distributed_crawler.storage.server import OneConnection
from distributed_crawler.storage.versions import (
    VERSION_COLUMN_TYPES,
    archive_columns,
    archive_params,
    archive_select,
    current_select,
    history_columns,
    missing_version_columns,
    versions_keep_error,
)

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg.rows import TupleRow

logger = logging.getLogger(__name__)

#: Value of ``STORAGE_URL`` when neither the setting nor the env var is set.
DEFAULT_STORAGE_URL: str = DEFAULTS["STORAGE_URL"]

#: How long SQLite waits for another writer's lock before giving up (ms).
SQLITE_BUSY_TIMEOUT_MS = 30_000

#: How long a PostgreSQL connection attempt may take (s).
POSTGRES_CONNECT_TIMEOUT = 10

_SUPPORTED_HINT = (
    "use sqlite:///relative/path.db, sqlite:////absolute/path.db, postgresql://user:pass@host:port/db "
    "or mysql://user:pass@host:port/db"
)


@runtime_checkable
class StorageBackend(Protocol):
    """What the pipeline needs from a database: idempotent batch writes."""

    def upsert_many(self, rows: list[dict[str, Any]]) -> None:
        """Insert or update *rows* (dicts keyed by :data:`COLUMNS`) atomically."""

    def upsert_changes(self, rows: list[dict[str, Any]]) -> list[RowChange]:
        """`upsert_many`, and what it did to each row (read in the same transaction)."""

    def count(self) -> int:
        """Return the number of stored items."""

    def iter_urls(self, batch: int = 1000) -> Iterator[list[str]]:
        """Every stored url, in batches (for `dcrawl dedup rebuild`)."""

    def versions(self, url: str) -> list[dict[str, Any]]:
        """Every version of *url*, oldest first: the replaced ones (table item_versions), then the
        current row of ``items`` (``replaced_at`` None); [] when the URL was never stored."""

    def close(self) -> None:
        """Release the connection; safe to call twice."""


_SET_CLAUSE = set_clause(lambda c: f"items.{c}", lambda c: f"excluded.{c}", lambda a, b: f"{a} IS {b}")
# PostgreSQL has no `IS` between values: the same clause with its null-safe equality.
_PG_SET_CLAUSE = set_clause(
    lambda c: f"items.{c}", lambda c: f"excluded.{c}", lambda a, b: f"{a} IS NOT DISTINCT FROM {b}"
)

_SQLITE_ARCHIVE = f"INSERT OR IGNORE INTO item_versions ({archive_columns()}) " + archive_select(
    lambda i: "?", lambda a, b: f"{a} IS {b}"
)
_PG_ARCHIVE = (
    f"INSERT INTO item_versions ({archive_columns()}) "
    + archive_select(lambda i: "%s::text", lambda a, b: f"{a} IS NOT DISTINCT FROM {b}")
    + " ON CONFLICT DO NOTHING"
)
_HISTORY = history_columns()
_VERSIONS_READ = f"SELECT {', '.join(_HISTORY)} FROM item_versions WHERE url = %s ORDER BY version"
_CURRENT_READ = current_select("%s")

#: Generic schema type -> the SQLite / PostgreSQL type (the others are the same in both).
SQLITE_TYPES = {"JSON": "TEXT"}  # JSON text; SQLite's json_extract() reads it
POSTGRES_TYPES = {"JSON": "JSONB"}


def create_versions_sql(types: dict[str, str]) -> str:
    """``CREATE TABLE IF NOT EXISTS item_versions``, keyed by (url, version) (SQLite, PostgreSQL)."""
    columns = ", ".join(
        f"{c} {types.get(t, t)}{' NOT NULL' if c in ('url', 'version') else ''}"
        for c, t in VERSION_COLUMN_TYPES.items()
    )
    return f"CREATE TABLE IF NOT EXISTS item_versions ({columns}, PRIMARY KEY (url, version))"


def prune_versions_sql(mark: str) -> str:
    """Delete a URL's replaced versions but the newest N (params: url, url, N)."""
    return (
        f"DELETE FROM item_versions WHERE url = {mark} AND version <= "
        f"(SELECT COALESCE(version, 1) FROM items WHERE url = {mark}) - 1 - {mark}"
    )


def checked_keep(keep: int) -> int:
    error = versions_keep_error(keep)
    if error:
        raise StorageError(error)
    return keep


def create_table_sql(types: dict[str, str]) -> str:
    return "CREATE TABLE IF NOT EXISTS items ({})".format(
        ", ".join(
            f"{c} {t} PRIMARY KEY NOT NULL" if c == "url" else f"{c} {types.get(t, t)}" for c, t in COLUMN_TYPES.items()
        )
    )


# --------------------------------------------------------------------------
# SQLite
# --------------------------------------------------------------------------


class SQLiteStorage:
    """SQLite file shared by the worker processes of one machine.

    WAL lets readers run beside the single writer, ``busy_timeout`` makes a
    writer wait for another process' lock instead of failing with "database
    is locked", and ``BEGIN IMMEDIATE`` takes the write lock up front so that
    wait is honoured (a deferred transaction upgrading its lock fails at once).
    """

    def __init__(
        self, path: str | Path, *, busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS, versions_keep: int = 0
    ) -> None:
        self.path = str(path)
        self.versions_keep = checked_keep(versions_keep)
        self.url = f"sqlite:///{self.path}"
        if self.path != ":memory:":
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageError(
                    f"Cannot create the directory for SQLite storage {self.url} "
                    f"({safe_error_text(exc, self.url)}); check STORAGE_URL and permissions"
                ) from None
        self._conn: sqlite3.Connection | None = None
        try:
            self._conn = sqlite3.connect(self.path, timeout=busy_timeout_ms / 1000, isolation_level=None)
            self._init_schema(busy_timeout_ms)
        except sqlite3.Error as exc:
            self.close()
            raise StorageError(
                f"Cannot open SQLite storage {self.url} ({safe_error_text(exc, self.url)}); "
                "check STORAGE_URL and that the path is writable and not on a network filesystem"
            ) from None

    def _init_schema(self, busy_timeout_ms: int) -> None:
        conn = self._require()
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        # Switching to WAL needs an exclusive lock; when several processes
        # open a brand-new file at once it may report "locked" even with a
        # busy timeout, so retry for the same duration.
        deadline = time.monotonic() + busy_timeout_ms / 1000
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute(create_table_sql(SQLITE_TYPES))
                self._migrate(conn)
                self._ensure_versions(conn)
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
        if self.path != ":memory:" and str(mode).lower() != "wal":
            logger.warning("SQLite storage %s is in %s journal mode, not WAL", self.url, mode)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Add the columns an older release's table lacks, under the write lock."""
        if not missing_columns(r[1] for r in conn.execute("PRAGMA table_info(items)")):
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Read again under the lock: another process may have migrated meanwhile.
            added = missing_columns(r[1] for r in conn.execute("PRAGMA table_info(items)"))
            for column, sql_type in added:
                conn.execute(f"ALTER TABLE items ADD COLUMN {column} {SQLITE_TYPES.get(sql_type, sql_type)}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        log_migration(self.url, added)

    def _ensure_versions(self, conn: sqlite3.Connection) -> None:
        """Make item_versions (storage/versions.py), or add the columns an older one lacks."""
        conn.execute(create_versions_sql(SQLITE_TYPES))
        for column, sql_type in missing_version_columns(r[1] for r in conn.execute("PRAGMA table_info(item_versions)")):
            conn.execute(f"ALTER TABLE item_versions ADD COLUMN {column} {SQLITE_TYPES.get(sql_type, sql_type)}")

    def _require(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StorageError(f"SQLite storage {self.url} is closed")
        return self._conn

    def upsert_many(self, rows: list[dict[str, Any]]) -> None:
        """Upsert *rows* in one transaction (all or nothing)."""
        self._upsert(rows, report=False)

    def upsert_changes(self, rows: list[dict[str, Any]]) -> list[RowChange]:
        """Upsert *rows* in one transaction; the versions before and after are read inside it."""
        return self._upsert(rows, report=True)

    def _versions(self, conn: sqlite3.Connection, urls: list[str], columns: str) -> list[Any]:
        found: list[Any] = []
        for part in chunks(urls):
            marks = ", ".join("?" for _ in part)
            found += conn.execute(f"SELECT url, {columns} FROM items WHERE url IN ({marks})", part).fetchall()
        return found

    def _upsert(self, rows: list[dict[str, Any]], *, report: bool) -> list[RowChange]:
        prepared = _prepare(rows)
        if not prepared:
            return []
        conn = self._require()
        cols = ", ".join(COLUMNS)
        params = ", ".join(f":{c}" for c in COLUMNS)
        sql = f"INSERT INTO items ({cols}) VALUES ({params}) ON CONFLICT (url) DO UPDATE SET {_SET_CLAUSE}"
        urls = [row["url"] for row in prepared]
        changes: list[RowChange] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                stored = self._versions(conn, urls, "version, title, text") if report else []
                before = {r[0]: r[1] for r in stored}
                conn.executemany(_SQLITE_ARCHIVE, archive_params(prepared))
                conn.executemany(sql, prepared)
                if self.versions_keep:
                    conn.executemany(prune_versions_sql("?"), [(u, u, self.versions_keep) for u in urls])
                if report:
                    after = {r[0]: r[1:] for r in self._versions(conn, urls, "version, first_seen, rowid")}
                    changes = with_previous(classify(urls, before, after), {r[0]: (r[2], r[3]) for r in stored})
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite write to {self.url} failed: {safe_error_text(exc, self.url)}") from exc
        return changes

    def count(self) -> int:
        """Number of rows in ``items``."""
        try:
            return int(self._require().execute("SELECT COUNT(*) FROM items").fetchone()[0])
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite count on {self.url} failed: {safe_error_text(exc, self.url)}") from exc

    def iter_urls(self, batch: int = 1000) -> Iterator[list[str]]:
        cursor = self._require().execute("SELECT url FROM items")
        while rows := cursor.fetchmany(batch):
            yield [r[0] for r in rows]

    def versions(self, url: str) -> list[dict[str, Any]]:
        try:
            conn = self._require()
            found = conn.execute(_VERSIONS_READ.replace("%s", "?"), (url,)).fetchall()
            found += conn.execute(_CURRENT_READ.replace("%s", "?"), (url,)).fetchall()
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite read of {self.url} failed: {safe_error_text(exc, self.url)}") from None
        return [dict(zip(_HISTORY, r)) for r in found]

    def close(self) -> None:
        """Close the connection (idempotent)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:  # pragma: no cover - best effort
                logger.debug("Error closing SQLite storage %s", self.url, exc_info=True)

    def __repr__(self) -> str:
        return f"SQLiteStorage({self.path!r})"


# --------------------------------------------------------------------------
# PostgreSQL
# --------------------------------------------------------------------------

# Arbitrary constant: serialises concurrent CREATE TABLE IF NOT EXISTS from
# several nodes, which otherwise can fail on the pg_type unique index.
_SCHEMA_LOCK_KEY = 0x6463_6974_656D  # "dcitem"


class PostgresStorage(OneConnection):
    """PostgreSQL database shared by every node of the crawl.

    One connection, reconnected transparently after it breaks; each batch is
    one transaction of ``INSERT ... ON CONFLICT (url) DO UPDATE``.
    """

    KIND = "PostgreSQL"

    def __init__(self, dsn: str, *, connect_timeout: int = POSTGRES_CONNECT_TIMEOUT, versions_keep: int = 0) -> None:
        self.dsn = dsn
        self.versions_keep = checked_keep(versions_keep)
        self.masked = mask_url(dsn)
        self._connect_timeout = connect_timeout
        self._conn: Connection[TupleRow] | None = None
        self._closed = False
        self._connect()

    def _connect(self) -> Connection[TupleRow]:
        try:
            import psycopg
        except ImportError:  # pragma: no cover - it is a hard dependency
            raise StorageError(
                f"Cannot use {self.masked}: psycopg is not installed; pip install 'psycopg[binary]'"
            ) from None
        try:
            conn = psycopg.connect(
                self.dsn,
                connect_timeout=self._connect_timeout,
                application_name="distributed_crawler",
                keepalives=1,
                keepalives_idle=30,
                keepalives_interval=10,
                keepalives_count=3,
            )
        except psycopg.Error as exc:
            raise StorageError(
                f"Cannot connect to PostgreSQL storage {self.masked} ({safe_error_text(exc, self.dsn)}); "
                "check that the server is running and reachable, that the database exists "
                "and that STORAGE_URL is correct"
            ) from None
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
                conn.execute(create_table_sql(POSTGRES_TYPES))
                existing = conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = 'items'"
                ).fetchall()
                added = missing_columns(r[0] for r in existing)
                for column, sql_type in added:
                    conn.execute(
                        f"ALTER TABLE items ADD COLUMN IF NOT EXISTS {column} {POSTGRES_TYPES.get(sql_type, sql_type)}"
                    )
                self._ensure_versions(conn)
        except psycopg.Error as exc:
            conn.close()
            raise StorageError(
                f"Cannot create table items in PostgreSQL storage {self.masked} "
                f"({safe_error_text(exc, self.dsn)}); check the user's privileges"
            ) from None
        log_migration(self.masked, added)
        self._conn = conn
        return conn

    @staticmethod
    def _ensure_versions(conn: Any) -> None:
        """Make item_versions (storage/versions.py), or add the columns an older one lacks (under
        the schema lock of `_connect`)."""
        conn.execute(create_versions_sql(POSTGRES_TYPES))
        existing = conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = 'item_versions'"
        ).fetchall()
        for column, sql_type in missing_version_columns(r[0] for r in existing):
            conn.execute(
                f"ALTER TABLE item_versions ADD COLUMN IF NOT EXISTS {column} {POSTGRES_TYPES.get(sql_type, sql_type)}"
            )

    def _connection(self) -> Connection[TupleRow]:
        if self._closed:
            raise StorageError(f"PostgreSQL storage {self.masked} is closed")
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                logger.info("Reconnecting to PostgreSQL storage %s", self.masked)
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - best effort
                    pass
            self._conn = None
            conn = self._connect()
        return conn

    def upsert_many(self, rows: list[dict[str, Any]]) -> None:
        """Upsert *rows* with one executemany in one transaction."""
        self._upsert(rows, report=False)

    def upsert_changes(self, rows: list[dict[str, Any]]) -> list[RowChange]:
        """Upsert *rows* in one transaction; the versions before (rows locked ``FOR UPDATE``) and
        after are read inside it."""
        return self._upsert(rows, report=True)

    @staticmethod
    def _versions(cur: Any, urls: list[str], columns: str, lock: str = "") -> list[Any]:
        found: list[Any] = []
        for part in chunks(urls):
            cur.execute(f"SELECT url, {columns} FROM items WHERE url = ANY(%s) ORDER BY url {lock}", (part,))
            found += cur.fetchall()
        return found

    def _upsert(self, rows: list[dict[str, Any]], *, report: bool) -> list[RowChange]:
        import psycopg

        prepared = _prepare(rows)
        if not prepared:
            return []
        cols = ", ".join(COLUMNS)
        params = ", ".join(f"%({c})s::jsonb" if COLUMN_TYPES[c] == "JSON" else f"%({c})s" for c in COLUMNS)
        sql = f"INSERT INTO items ({cols}) VALUES ({params}) ON CONFLICT (url) DO UPDATE SET {_PG_SET_CLAUSE}"
        urls = [row["url"] for row in prepared]
        changes: list[RowChange] = []
        try:
            conn = self._connection()
            with conn.transaction(), conn.cursor() as cur:
                stored = self._versions(cur, urls, "version, title, text", "FOR UPDATE") if report else []
                before = {r[0]: r[1] for r in stored}
                cur.executemany(_PG_ARCHIVE, archive_params(prepared))
                cur.executemany(sql, prepared)
                if self.versions_keep:
                    cur.executemany(prune_versions_sql("%s"), [(u, u, self.versions_keep) for u in urls])
                if report:
                    after = {r[0]: (r[1], r[2], None) for r in self._versions(cur, urls, "version, first_seen")}
                    changes = with_previous(classify(urls, before, after), {r[0]: (r[2], r[3]) for r in stored})
        except psycopg.Error as exc:
            raise StorageError(f"PostgreSQL write to {self.masked} failed: {safe_error_text(exc, self.dsn)}") from None
        return changes

    def iter_urls(self, batch: int = 1000) -> Iterator[list[str]]:
        conn = self._connection()
        with conn.transaction(), conn.cursor(name="dc_urls") as cur:  # server-side cursor
            cur.execute("SELECT url FROM items")
            while rows := cur.fetchmany(batch):
                yield [r[0] for r in rows]

    def versions(self, url: str) -> list[dict[str, Any]]:
        import psycopg

        try:
            conn = self._connection()
            with conn.transaction():
                found = conn.execute(_VERSIONS_READ, (url,)).fetchall()
                found += conn.execute(_CURRENT_READ, (url,)).fetchall()
        except psycopg.Error as exc:
            raise StorageError(f"PostgreSQL read of {self.masked} failed: {safe_error_text(exc, self.dsn)}") from None
        return [dict(zip(_HISTORY, r)) for r in found]

    def count(self) -> int:
        """Number of rows in ``items``."""
        import psycopg

        try:
            conn = self._connection()
            with conn.transaction():
                row = conn.execute("SELECT COUNT(*) FROM items").fetchone()
            return int(row[0]) if row is not None else 0  # COUNT(*) always answers one row
        except psycopg.Error as exc:
            raise StorageError(f"PostgreSQL count on {self.masked} failed: {safe_error_text(exc, self.dsn)}") from None


# --------------------------------------------------------------------------
# Factory
# --------------------------------------------------------------------------


def sqlite_path_from_url(url: str) -> str:
    """Filesystem path of a ``sqlite:///`` URL (relative to the current directory)."""
    prefix = "sqlite:///"
    if not url.lower().startswith(prefix):
        raise StorageError(f"Invalid SQLite STORAGE_URL {mask_url(url)}: {_SUPPORTED_HINT}")
    path = unquote(url[len(prefix) :].split("?", 1)[0])
    if not path:
        raise StorageError(f"SQLite STORAGE_URL {mask_url(url)} has no file path: {_SUPPORTED_HINT}")
    if path == ":memory:":
        return path
    return str(Path(path).expanduser().absolute())


def open_storage(url: str, *, versions_keep: int = 0) -> StorageBackend:
    """Open the backend named by *url*; raise :class:`StorageError` if impossible.

    The error is one line naming the (masked) URL and what to do about it. *versions_keep*:
    ITEM_VERSIONS_KEEP (replaced versions kept per URL in item_versions; 0 = all).
    """
    if not url or "://" not in url:
        raise StorageError(f"Invalid STORAGE_URL {mask_url(url)!r}: {_SUPPORTED_HINT}")
    scheme = url.split("://", 1)[0].lower()
    base_scheme = scheme.split("+", 1)[0]  # tolerate SQLAlchemy-style postgresql+psycopg://
    if base_scheme == "sqlite":
        return SQLiteStorage(sqlite_path_from_url("sqlite://" + url.split("://", 1)[1]), versions_keep=versions_keep)
    if base_scheme in ("postgresql", "postgres"):
        dsn = url if scheme == base_scheme else "postgresql://" + url.split("://", 1)[1]
        return PostgresStorage(dsn, versions_keep=versions_keep)
    if base_scheme in ("mysql", "mariadb"):
        from distributed_crawler.storage.mysql import MySQLStorage  # PyMySQL only when used

        return MySQLStorage(url, versions_keep=versions_keep)
    raise StorageError(f"Unsupported STORAGE_URL scheme {scheme!r} in {mask_url(url)}: {_SUPPORTED_HINT}")
