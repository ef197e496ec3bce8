"""MySQL / MariaDB storage: ``STORAGE_URL=mysql://user:pass@host:port/db`` (``mariadb://`` too).

Works with MariaDB 10.11 (Debian 12) and MySQL 8, through PyMySQL (pure Python, maintained).
Query parameters: ``unix_socket``, ``ssl_ca``, ``ssl_cert``, ``ssl_key``, ``ssl_verify_cert``,
``ssl_verify_identity``; the port defaults to 3306. Percent-encode special characters in the
user and password (unencoded ``@``, ``/`` or ``:`` in a password still work).

Table design (the columns come from :mod:`distributed_crawler.storage.schema`):

* ``url`` is ``LONGTEXT`` (``utf8mb4_bin``: URLs are case-sensitive): a unique index on a
  ``VARCHAR(2048)`` in utf8mb4 (8 KB) is over InnoDB's 3072-byte key limit, and a prefix index
  would let two URLs sharing a prefix collide. Uniqueness is a ``UNIQUE`` key on the stored
  generated column ``url_hash BINARY(32) = UNHEX(SHA2(url, 256))``: the server computes it, so
  any writer, manual SQL included, gets the same guarantee; MySQL 8 and MariaDB both index it.
* ``id BIGINT AUTO_INCREMENT`` is the primary key (MariaDB cannot make a generated column the
  primary key; Galera and MySQL's ``sql_require_primary_key`` want one). Upserts that update
  skip ids: gaps are normal.
* Text columns are ``LONGTEXT``, the table ``utf8mb4`` (4-byte emoji included), ``InnoDB``.

Each batch is one transaction of multi-row ``INSERT ... ON DUPLICATE KEY UPDATE col =
VALUES(col)`` (``VALUES()`` because MariaDB lacks MySQL 8's row alias; MySQL 8 only notes it as
deprecated). A deadlock or lock wait timeout between nodes is retried here; a lost connection is
dropped and reopened on the next call (once at once, silently, if it had gone stale while idle),
so an outage surfaces as :class:`StorageError` the pipeline retries with backoff.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote

from distributed_crawler.redact import mask_url, safe_error_text
from distributed_crawler.storage.changes import RowChange, chunks, classify, with_previous
from distributed_crawler.storage.schema import (
    COLUMN_TYPES,
    COLUMNS,
    StorageError,
    log_migration,
    missing_columns,
    prepare_rows,
    set_clause,
)
from distributed_crawler.storage.server import OneConnection
from distributed_crawler.storage.versions import (
    VERSION_COLUMN_TYPES,
    archive_columns,
    archive_select,
    current_select,
    history_columns,
    missing_version_columns,
    versions_keep_error,
)

if TYPE_CHECKING:
    from pymysql.connections import Connection

logger = logging.getLogger(__name__)

#: How long connecting may take (s).
MYSQL_CONNECT_TIMEOUT = 10

#: How long one read or write on the socket may take (s): a hung server fails the batch.
MYSQL_IO_TIMEOUT = 120

#: How long a node waits for another node's schema creation (s).
SCHEMA_LOCK_SECONDS = 30

DEFAULT_PORT = 3306

#: Generic schema type -> MySQL type.
MYSQL_TYPES = {"TEXT": "LONGTEXT", "INTEGER": "INT", "BOOLEAN": "BOOLEAN", "JSON": "JSON"}  # BOOLEAN: TINYINT(1)

# Retried at once in upsert_many: ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK.
_LOCK_ERRORS = frozenset({1205, 1213})
_LOCK_RETRIES = 3

_BOOL_PARAMS = ("ssl_verify_cert", "ssl_verify_identity")
_STR_PARAMS = ("unix_socket", "ssl_ca", "ssl_cert", "ssl_key")


def _q(name: str) -> str:
    return f"`{name}`"


def create_table_sql() -> str:
    """``CREATE TABLE IF NOT EXISTS items`` for MySQL/MariaDB, derived from the schema."""
    columns = ["`id` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT"]
    for name, generic in COLUMN_TYPES.items():
        if name == "url":
            columns.append("`url` LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL")
        else:
            columns.append(f"{_q(name)} {MYSQL_TYPES[generic]}")
    columns += [
        "`url_hash` BINARY(32) AS (UNHEX(SHA2(`url`, 256))) STORED",
        "PRIMARY KEY (`id`)",
        "UNIQUE KEY `items_url_hash` (`url_hash`)",
    ]
    return (
        "CREATE TABLE IF NOT EXISTS `items` (" + ", ".join(columns) + ") "
        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci"
    )


def create_versions_sql() -> str:
    """``CREATE TABLE IF NOT EXISTS item_versions`` (storage/versions.py), unique on (url_hash, version)
    (a generated column cannot be in a primary key, as for ``items``)."""
    columns = ["`id` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT"]
    for name, generic in VERSION_COLUMN_TYPES.items():
        if name == "url":
            columns.append("`url` LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL")
        else:
            columns.append(f"{_q(name)} {MYSQL_TYPES[generic]}{' NOT NULL' if name == 'version' else ''}")
    columns += [
        "`url_hash` BINARY(32) AS (UNHEX(SHA2(`url`, 256))) STORED",
        "PRIMARY KEY (`id`)",
        "UNIQUE KEY `item_versions_url_version` (`url_hash`, `version`)",
    ]
    return (
        "CREATE TABLE IF NOT EXISTS `item_versions` (" + ", ".join(columns) + ") "
        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci"
    )


#: Copy the rows an upsert replaces into item_versions (params: replaced_at, url_hash, new hash).
ARCHIVE_SQL = f"INSERT IGNORE INTO `item_versions` ({archive_columns(_q)}) " + archive_select(
    lambda i: "%s", lambda a, b: f"{a} <=> {b}", _q, key="url_hash"
)
#: Keep a URL's newest N replaced versions (params: url_hash, url_hash, N).
PRUNE_SQL = (
    "DELETE FROM `item_versions` WHERE `url_hash` = %s AND `version` <= "
    "(SELECT COALESCE(`version`, 1) FROM `items` WHERE `url_hash` = %s) - 1 - %s"
)


def upsert_sql() -> str:
    """Multi-row upsert keyed on the ``url_hash`` unique key (PyMySQL batches its executemany)."""
    cols = ", ".join(_q(c) for c in COLUMNS)
    params = ", ".join("%s" for _ in COLUMNS)
    updates = set_clause(lambda c: f"`items`.{_q(c)}", lambda c: f"VALUES({_q(c)})", lambda a, b: f"{a} <=> {b}", _q)
    return f"INSERT INTO `items` ({cols}) VALUES ({params}) ON DUPLICATE KEY UPDATE {updates}"


def url_hash(url: str) -> bytes:
    """What the server stores in ``url_hash`` (SHA-256 of the UTF-8 URL)."""
    return hashlib.sha256(url.encode("utf-8", "surrogatepass")).digest()


def connect_kwargs(url: str) -> dict[str, Any]:
    """PyMySQL ``connect()`` arguments for a ``mysql://`` / ``mariadb://`` URL.

    Raises :class:`StorageError` (one line, password masked) for a malformed URL.
    """
    masked = mask_url(url)
    hint = "use mysql://user:pass@host:port/db"
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower().split("+", 1)[0] not in ("mysql", "mariadb"):
        raise StorageError(f"Invalid MySQL STORAGE_URL {masked}: {hint}")
    user = password = None
    at = rest.rfind("@")
    if at != -1:
        userinfo, rest = rest[:at], rest[at + 1 :]
        name, colon, secret = userinfo.partition(":")
        user = unquote(name) or None
        password = unquote(secret) if colon else None
    hostport, _, query = rest.partition("?")
    hostport, _, database = hostport.partition("/")
    database = unquote(database.rstrip("/"))
    if hostport.startswith("["):  # [::1]:3306
        host, _, port_text = hostport[1:].partition("]")
        port_text = port_text.removeprefix(":")
    else:
        host, _, port_text = hostport.partition(":")
    params = dict(parse_qsl(query, keep_blank_values=True))
    if not database:
        raise StorageError(f"MySQL STORAGE_URL {masked} names no database: {hint}")
    if not host and "unix_socket" not in params:
        raise StorageError(f"MySQL STORAGE_URL {masked} names no host: {hint}")
    try:
        port = int(port_text) if port_text else DEFAULT_PORT
        if not 0 < port < 65536:
            raise ValueError
    except ValueError:
        raise StorageError(f"MySQL STORAGE_URL {masked} has an invalid port {port_text!r}: {hint}") from None
    kwargs: dict[str, Any] = {
        "host": unquote(host) or "localhost",
        "port": port,
        "user": user,
        "password": password or "",
        "database": database,
    }
    for key, value in params.items():
        if key in _STR_PARAMS:
            kwargs[key] = value
        elif key in _BOOL_PARAMS:
            kwargs[key] = value.lower() in ("1", "true", "yes", "on")
        else:
            allowed = ", ".join(_STR_PARAMS + _BOOL_PARAMS)
            raise StorageError(f"MySQL STORAGE_URL {masked} has an unknown parameter {key!r}; allowed: {allowed}")
    return kwargs


def _code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _connect_hint(code: int | None, database: str) -> str:
    if code == 1045:
        return "check the user and password in STORAGE_URL"
    if code == 1049:
        return f"create the database: CREATE DATABASE `{database}` CHARACTER SET utf8mb4"
    if code in (1044, 1142):
        return "grant the user CREATE, SELECT, INSERT and UPDATE on the database"
    return "check that the server is running and reachable, that the database exists and that STORAGE_URL is correct"


class MySQLStorage(OneConnection):
    """MySQL or MariaDB database shared by every node of the crawl.

    One autocommit connection, dropped after a connection-level error and reopened on the next
    call; each batch is one explicit transaction.
    """

    KIND = "MySQL"

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: int = MYSQL_CONNECT_TIMEOUT,
        io_timeout: int = MYSQL_IO_TIMEOUT,
        versions_keep: int = 0,
    ) -> None:
        error = versions_keep_error(versions_keep)
        if error:
            raise StorageError(error)
        self.versions_keep = versions_keep
        self.url = url
        self.masked = mask_url(url)
        self._kwargs = connect_kwargs(url)
        self._connect_timeout = connect_timeout
        self._io_timeout = io_timeout
        self._conn: Connection | None = None
        self._closed = False
        self._connect()

    # -- connection ----------------------------------------------------------

    def _error(self, exc: BaseException) -> str:
        return safe_error_text(exc, self.url)

    def _connect(self) -> Connection:
        try:
            import pymysql
        except ImportError:  # pragma: no cover - it is a hard dependency
            raise StorageError(f"Cannot use {self.masked}: PyMySQL is not installed; pip install PyMySQL") from None
        try:
            conn = pymysql.connect(
                **self._kwargs,
                charset="utf8mb4",
                autocommit=True,
                connect_timeout=self._connect_timeout,
                read_timeout=self._io_timeout,
                write_timeout=self._io_timeout,
                program_name="distributed_crawler",
                init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
            )
        except (pymysql.MySQLError, OSError) as exc:
            raise StorageError(
                f"Cannot connect to MySQL storage {self.masked} ({self._error(exc)}); "
                f"{_connect_hint(_code(exc), self._kwargs['database'])}"
            ) from None
        try:
            self._init_schema(conn)
        except (pymysql.MySQLError, OSError) as exc:
            conn.close()
            raise StorageError(
                f"Cannot create table items in MySQL storage {self.masked} ({self._error(exc)}); "
                f"{_connect_hint(_code(exc), self._kwargs['database'])}"
            ) from None
        self._conn = conn
        return conn

    def _init_schema(self, conn: Any) -> None:
        """Create ``items`` once, even when several nodes start at the same moment.

        ``CREATE TABLE IF NOT EXISTS`` is safe on its own under MySQL's metadata locks; the
        named lock (server-wide, so it includes the database name) also keeps a node from
        checking the table while another one is still creating it.
        """
        lock = f"distributed_crawler.items.{self._kwargs['database']}"[:64]
        with conn.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, %s)", (lock, SCHEMA_LOCK_SECONDS))
            try:
                cur.execute(create_table_sql())
                cur.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = DATABASE() AND table_name = 'items'"
                )
                added = missing_columns(r[0] for r in cur.fetchall())
                for column, generic in added:
                    cur.execute(f"ALTER TABLE `items` ADD COLUMN {_q(column)} {MYSQL_TYPES[generic]}")
                cur.execute(
                    "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() "
                    "AND table_name = 'items' AND non_unique = 0 AND column_name IN ('url_hash', 'url')"
                )
                row = cur.fetchone()
                self._ensure_versions(cur)
            finally:
                cur.execute("SELECT RELEASE_LOCK(%s)", (lock,))
        log_migration(self.masked, added)
        if not row or not row[0]:
            raise StorageError(
                f"Table items in MySQL storage {self.masked} has no unique key on url (created by hand?); "
                "rename or drop it so the crawler creates its own"
            )

    @staticmethod
    def _ensure_versions(cur: Any) -> None:
        """Make item_versions, or add the columns an older one lacks (under `_init_schema`'s lock)."""
        cur.execute(create_versions_sql())
        cur.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name = 'item_versions'"
        )
        for column, generic in missing_version_columns(r[0] for r in cur.fetchall()):
            cur.execute(f"ALTER TABLE `item_versions` ADD COLUMN {_q(column)} {MYSQL_TYPES[generic]}")

    def _connection(self) -> Connection:
        if self._closed:
            raise StorageError(f"MySQL storage {self.masked} is closed")
        return self._conn if self._conn is not None else self._connect()

    def _drop(self) -> None:
        """Forget a connection in an unknown state; the next call reconnects."""
        conn, self._conn = self._conn, None
        if conn is not None:
            logger.info("Reconnecting to MySQL storage %s", self.masked)
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - best effort, it is broken already
                pass

    def _failed(self, exc: BaseException) -> bool:
        """Clean up after *exc*; True if the connection was dropped (it may be broken)."""
        import pymysql

        code = _code(exc)
        if code not in _LOCK_ERRORS and isinstance(exc, OSError | pymysql.InterfaceError | pymysql.OperationalError):
            self._drop()  # lost, killed, timed out, server shutting down: state unknown
            return True
        try:
            if self._conn is not None:
                self._conn.rollback()
        except Exception:  # noqa: BLE001 - a failed rollback means the connection is gone
            self._drop()
            return True
        return False

    # -- StorageBackend --------------------------------------------------------

    def upsert_many(self, rows: list[dict[str, Any]]) -> None:
        """Upsert *rows* in one transaction (all or nothing)."""
        self._upsert(rows, report=False)

    def upsert_changes(self, rows: list[dict[str, Any]]) -> list[RowChange]:
        """Upsert *rows* in one transaction; the versions before (rows locked ``FOR UPDATE``) and
        after are read inside it."""
        return self._upsert(rows, report=True)

    @staticmethod
    def _versions(cur: Any, urls: list[str], columns: str, lock: str = "") -> list[Any]:
        found: list[Any] = []
        for part in chunks(urls):
            marks = ", ".join("%s" for _ in part)
            cur.execute(
                f"SELECT `url`, {columns} FROM `items` WHERE `url_hash` IN ({marks}) {lock}",
                [url_hash(u) for u in part],
            )
            found += cur.fetchall()
        return found

    def _upsert(self, rows: list[dict[str, Any]], *, report: bool) -> list[RowChange]:
        import pymysql

        prepared = prepare_rows(rows)
        if not prepared:
            return []
        # Lock rows in unique-key order, the same in every node: fewer deadlocks.
        prepared.sort(key=lambda r: url_hash(r["url"]))
        params = [tuple(r[c] for c in COLUMNS) for r in prepared]
        urls = [r["url"] for r in prepared]
        sql = upsert_sql()
        stale_retry = True
        attempt = 0
        while True:
            fresh = self._conn is None
            conn = self._connection()
            try:
                conn.begin()
                with conn.cursor() as cur:
                    stored = self._versions(cur, urls, "`version`, `title`, `text`", "FOR UPDATE") if report else []
                    before = {r[0]: r[1] for r in stored}
                    cur.executemany(
                        ARCHIVE_SQL, [(r["fetched_at"], url_hash(r["url"]), r["content_hash"]) for r in prepared]
                    )
                    cur.executemany(sql, params)
                    if self.versions_keep:
                        hashes = [url_hash(u) for u in urls]
                        cur.executemany(PRUNE_SQL, [(h, h, self.versions_keep) for h in hashes])
                    after = (
                        {r[0]: r[1:] for r in self._versions(cur, urls, "`version`, `first_seen`, `id`")}
                        if report
                        else {}
                    )
                conn.commit()
                if not report:
                    return []
                return with_previous(classify(urls, before, after), {r[0]: (r[2], r[3]) for r in stored})
            except (pymysql.MySQLError, OSError) as exc:
                lost = self._failed(exc)
                if lost and stale_retry and not fresh:
                    stale_retry = False  # idle connection closed by the server: reconnect once at once
                    continue
                if _code(exc) in _LOCK_ERRORS and attempt < _LOCK_RETRIES:
                    attempt += 1
                    time.sleep(0.05 * attempt)
                    continue
                raise StorageError(f"MySQL write to {self.masked} failed: {self._error(exc)}") from None

    def count(self) -> int:
        """Number of rows in ``items``."""
        return int(self._query("SELECT COUNT(*) FROM `items`")[0][0])

    def versions(self, url: str) -> list[dict[str, Any]]:
        """Every version of *url*, oldest first: item_versions, then the current row of ``items``."""
        history = history_columns()
        columns = ", ".join(_q(c) for c in history)
        key = (url_hash(url),)
        found = list(
            self._query(f"SELECT {columns} FROM `item_versions` WHERE `url_hash` = %s ORDER BY `version`", key)
        )
        found += self._query(current_select("%s", _q, key="url_hash"), key)
        return [dict(zip(history, r)) for r in found]

    def iter_urls(self, batch: int = 1000) -> Iterator[list[str]]:
        """Every stored url, in batches, by primary key (no long-running cursor)."""
        last = 0
        while rows := self._query(
            "SELECT `id`, `url` FROM `items` WHERE `id` > %s ORDER BY `id` LIMIT %s", (last, batch)
        ):
            last = rows[-1][0]
            yield [r[1] for r in rows]

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], ...]:
        import pymysql

        conn = self._connection()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall()
        except (pymysql.MySQLError, OSError) as exc:
            self._failed(exc)
            raise StorageError(f"MySQL query on {self.masked} failed: {self._error(exc)}") from None
