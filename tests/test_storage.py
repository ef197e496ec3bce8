"""Storage backends: same idempotency contract on SQLite and PostgreSQL.

PostgreSQL tests use the machine's server (127.0.0.1:5432, trust auth) in a
fresh throwaway database, and are skipped with a reason when none answers.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from distributed_crawler.redact import mask_url
from distributed_crawler.storage.backends import (
    COLUMNS,
    PostgresStorage,
    SQLiteStorage,
    StorageBackend,
    StorageError,
    open_storage,
)
from distributed_crawler.storage.digest import content_digest
from distributed_crawler.storage.pipeline import item_to_row
from tests.conftest import ROOT
from tests.storage_rows import (
    backends_on,
    check_close_is_idempotent,
    check_item_versions,
    check_upsert_changes,
    empty_row,
    row,
    stored,
    write_overlapping_rows,
)

pytestmark = pytest.mark.timeout(60)

PG_HOST, PG_PORT = "127.0.0.1", 5432


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------


def _pg_admin_dsn() -> str | None:
    """DSN of a reachable server (trust auth), or None."""
    try:
        import psycopg
    except ImportError:
        return None
    for user in ("postgres", "root"):
        dsn = f"postgresql://{user}@{PG_HOST}:{PG_PORT}/test"
        try:
            psycopg.connect(dsn, connect_timeout=3).close()
        except psycopg.Error:
            continue
        return dsn
    return None


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """URL of a fresh database ``dc_test_<hex>``, dropped afterwards."""
    admin = _pg_admin_dsn()
    if admin is None:
        pytest.skip(
            f"no PostgreSQL reachable at {PG_HOST}:{PG_PORT} with trust auth as user postgres or root (database 'test')"
        )
    import psycopg

    name = f"dc_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = admin.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A storage URL with no ``items`` table yet, for each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/db/items.db"
    url: str = request.getfixturevalue("pg_url")
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS items")
        conn.execute("DROP TABLE IF EXISTS item_versions")
    return url


def read_rows(url: str) -> list[dict[str, Any]]:
    """All rows of ``items``, read independently of the code under test."""
    cols = ", ".join(COLUMNS)
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url[len("sqlite:///") :]) as conn:
            data = conn.execute(f"SELECT {cols} FROM items ORDER BY url").fetchall()
    else:
        import psycopg

        with psycopg.connect(url) as conn:
            data = conn.execute(f"SELECT {cols} FROM items ORDER BY url").fetchall()
    return [dict(zip(COLUMNS, row)) for row in data]


def table_columns(url: str) -> dict[str, str]:
    """Column name -> declared type of ``items``."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url[len("sqlite:///") :]) as conn:
            info = conn.execute("PRAGMA table_info(items)").fetchall()
        return {row[1]: row[2].upper() for row in info}
    import psycopg

    with psycopg.connect(url) as conn:
        info = conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'items'"
        ).fetchall()
    return {name: dtype.upper() for name, dtype in info}


@pytest.fixture
def opened(storage_url: str) -> Iterator[Callable[[], StorageBackend]]:
    """Factory opening backends on ``storage_url``; all closed at teardown."""
    with backends_on(storage_url) as factory:
        yield factory


# --------------------------------------------------------------------------
# Behaviour shared by both backends
# --------------------------------------------------------------------------


def test_table_created(storage_url: str, opened: Callable[[], StorageBackend]) -> None:
    backend = opened()
    assert isinstance(backend, StorageBackend)
    assert backend.count() == 0
    cols = table_columns(storage_url)
    assert set(cols) == set(COLUMNS)
    assert cols["status"] == cols["version"] == "INTEGER"
    assert cols["paywalled"] == cols["truncated"] == "BOOLEAN"
    assert cols["data"] == ("TEXT" if storage_url.startswith("sqlite") else "JSONB")  # an item's other fields
    others = ("status", "version", "paywalled", "truncated", "data")
    assert all(cols[c] == "TEXT" for c in COLUMNS if c not in others)


def _execute(url: str, *statements: str) -> None:
    """Run SQL on the storage database, independently of the code under test."""
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :])
        path.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(path) as conn:
            for sql in statements:
                conn.execute(sql)
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)


def test_table_of_an_older_release_gains_the_missing_columns(
    storage_url: str, opened: Callable[[], StorageBackend], caplog: pytest.LogCaptureFixture
) -> None:
    # The table as the first release made it: no status, no node.
    _execute(
        storage_url,
        "CREATE TABLE items (url TEXT PRIMARY KEY NOT NULL, title TEXT, text TEXT, fetched_at TEXT)",
        "INSERT INTO items (url, title, text, fetched_at) VALUES ('https://example.com/old', 'old', 'x', 't')",
    )
    with caplog.at_level(logging.INFO, logger="distributed_crawler.storage.schema"):
        backend = opened()
    assert set(table_columns(storage_url)) == set(COLUMNS)
    assert (
        "added column(s) status, node, authors, published_at, lang, description, duplicate_of, modified_at, "
        "page_type, paywalled, truncated, content_hash, first_seen, last_changed, version, data, image, section, tags, site_name, source, source_tags to table items"
    ) in caplog.text
    # The old row survives with NULL in the new columns; new rows fill them.
    backend.upsert_many([row("new")])
    rows = {r["url"]: r for r in read_rows(storage_url)}
    assert rows["https://example.com/old"]["title"] == "old"
    assert rows["https://example.com/old"]["status"] is None
    assert rows["https://example.com/new"] == stored(row("new"))
    # Opening again is a no-op (nothing left to add, no log line).
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="distributed_crawler.storage.schema"):
        opened().close()
    assert "added column" not in caplog.text


def test_table_of_the_release_before_news_gains_the_article_columns(
    storage_url: str, opened: Callable[[], StorageBackend], caplog: pytest.LogCaptureFixture
) -> None:
    # The table as it was before the news spider: six columns, a stored row.
    _execute(
        storage_url,
        "CREATE TABLE items (url TEXT PRIMARY KEY NOT NULL, title TEXT, text TEXT, fetched_at TEXT, "
        "status INTEGER, node TEXT)",
        "INSERT INTO items (url, title, text, fetched_at, status, node) "
        "VALUES ('https://example.com/old', 'old', 'x', 't', 200, 'n')",
    )
    with caplog.at_level(logging.INFO, logger="distributed_crawler.storage.schema"):
        backend = opened()
    assert (
        "added column(s) authors, published_at, lang, description, duplicate_of, modified_at, page_type, "
        "paywalled, truncated, content_hash, first_seen, last_changed, version, data, image, section, tags, site_name, source, source_tags to table items"
    ) in caplog.text
    assert set(table_columns(storage_url)) == set(COLUMNS)
    backend.upsert_many([row("new", duplicate_of="https://example.com/old", text="")])
    rows = {r["url"]: r for r in read_rows(storage_url)}
    assert rows["https://example.com/old"] == {
        **dict.fromkeys(COLUMNS),
        **{"url": "https://example.com/old", "title": "old", "text": "x", "fetched_at": "t", "status": 200},
        "node": "n",
    }
    tracking = {"content_hash": None, "version": 1}  # an empty text has no digest
    tracking["first_seen"] = tracking["last_changed"] = "2024-01-01T00:00:00+00:00"  # its fetched_at
    assert rows["https://example.com/new"] == {
        **row("new", duplicate_of="https://example.com/old", text=""),
        **tracking,
    }
    assert json.loads(rows["https://example.com/new"]["authors"]) == ["A. Writer", "B. Reporter"]


RELEASE_BEFORE_PAGE_TYPES = (
    "CREATE TABLE items (url TEXT PRIMARY KEY NOT NULL, title TEXT, text TEXT, fetched_at TEXT, status INTEGER, "
    "node TEXT, authors TEXT, published_at TEXT, lang TEXT, description TEXT, duplicate_of TEXT, "
    "content_hash TEXT, first_seen TEXT, last_changed TEXT, version INTEGER)"
)


def test_table_of_the_release_before_page_types_gains_them_and_keeps_its_rows(
    storage_url: str, opened: Callable[[], StorageBackend], caplog: pytest.LogCaptureFixture
) -> None:
    old = [row(i) for i in range(3)]
    for r in old:
        for column in (
            "modified_at",
            "page_type",
            "paywalled",
            "truncated",
            "data",
            "image",
            "section",
            "tags",
            "site_name",
            "source",
            "source_tags",
        ):
            r.pop(column)
    _execute(storage_url, RELEASE_BEFORE_PAGE_TYPES)
    columns = list(old[0])
    values = ", ".join(
        "("
        + ", ".join("NULL" if r[c] is None else str(r[c]) if isinstance(r[c], int) else f"'{r[c]}'" for c in columns)
        + ")"
        for r in old
    )
    _execute(storage_url, f"INSERT INTO items ({', '.join(columns)}) VALUES {values}")
    with caplog.at_level(logging.INFO, logger="distributed_crawler.storage.schema"):
        backend = opened()
    assert (
        "added column(s) modified_at, page_type, paywalled, truncated, data, image, section, tags, site_name, source, source_tags to table items"
        in caplog.text
    )
    assert set(table_columns(storage_url)) == set(COLUMNS)
    assert table_columns(storage_url)["paywalled"] == "BOOLEAN"
    assert backend.count() == 3
    rows = read_rows(storage_url)
    assert rows == [{**dict.fromkeys(COLUMNS), **r} for r in old]  # every old row, NULL in the new columns
    backend.upsert_many([row(1, paywalled=False, page_type="list"), row("new")])
    rows = {r["url"]: r for r in read_rows(storage_url)}
    assert len(rows) == 4
    assert (rows[row(1)["url"]]["page_type"], rows[row(1)["url"]]["paywalled"]) == ("list", False)
    assert rows[row("new")["url"]] == stored(row("new"))


def test_reopen_keeps_rows(storage_url: str, opened: Callable[[], StorageBackend]) -> None:
    opened().upsert_many([row(1)])
    assert opened().count() == 1  # CREATE TABLE IF NOT EXISTS, data kept


def test_upsert_updates_instead_of_duplicating(storage_url: str, opened: Callable[[], StorageBackend]) -> None:
    backend = opened()
    backend.upsert_many([row(1), row(2)])
    backend.upsert_many([row(1, title="new", status=404, node="node-b"), row(3)])
    assert backend.count() == 3
    rows = {r["url"]: r for r in read_rows(storage_url)}
    assert rows["https://example.com/1"] == stored(row(1, title="new", status=404, node="node-b"))
    assert rows["https://example.com/2"] == stored(row(2))


def test_url_is_primary_key(storage_url: str, opened: Callable[[], StorageBackend]) -> None:
    opened()
    insert = "INSERT INTO items (url) VALUES ('https://example.com/dup')"
    if storage_url.startswith("sqlite"):
        with sqlite3.connect(storage_url[len("sqlite:///") :]) as conn:
            conn.execute(insert)
            with pytest.raises(sqlite3.IntegrityError):
                conn.execute(insert)
    else:
        import psycopg

        with psycopg.connect(storage_url, autocommit=True) as conn:
            conn.execute(insert)
            with pytest.raises(psycopg.errors.UniqueViolation):
                conn.execute(insert)


def test_same_url_twice_in_one_batch_last_wins(storage_url: str, opened: Callable[[], StorageBackend]) -> None:
    backend = opened()
    backend.upsert_many([row(1, title="old"), row(2), row(1, title="latest")])
    assert backend.count() == 2
    assert read_rows(storage_url)[0]["title"] == "latest"


RELEASE_BEFORE_DATA = RELEASE_BEFORE_PAGE_TYPES.replace(
    "version INTEGER)", "version INTEGER, modified_at TEXT, page_type TEXT, paywalled BOOLEAN, truncated BOOLEAN)"
)


def test_table_of_the_release_before_data_gains_it_and_keeps_every_row(
    storage_url: str, opened: Callable[[], StorageBackend], caplog: pytest.LogCaptureFixture
) -> None:
    _execute(
        storage_url,
        RELEASE_BEFORE_DATA,
        *(
            f"INSERT INTO items (url, title, version) VALUES ('https://example.com/old{i}', 'old', 1)"
            for i in range(50)
        ),
    )
    with caplog.at_level(logging.INFO, logger="distributed_crawler.storage.schema"):
        backend = opened()
    assert "added column(s) data, image, section, tags, site_name, source, source_tags to table items" in caplog.text
    assert backend.count() == 50 and all(r["data"] is None and r["title"] == "old" for r in read_rows(storage_url))
    backend.upsert_many([row("new", data=json.dumps({"price": 9.5, "headline": "Ünïcode"}))])
    new = {r["url"]: r for r in read_rows(storage_url)}[row("new")["url"]]
    assert _json(new["data"]) == {"price": 9.5, "headline": "Ünïcode"}
    assert backend.count() == 51


RELEASE_BEFORE_SOURCES = RELEASE_BEFORE_DATA.replace(
    "truncated BOOLEAN)", "truncated BOOLEAN, data TEXT, image TEXT, section TEXT, tags TEXT, site_name TEXT)"
)


def test_table_of_the_release_before_sources_gains_source_and_source_tags(
    storage_url: str, opened: Callable[[], StorageBackend], caplog: pytest.LogCaptureFixture
) -> None:
    _execute(
        storage_url, RELEASE_BEFORE_SOURCES, "INSERT INTO items (url, version) VALUES ('https://example.com/old', 1)"
    )
    with caplog.at_level(logging.INFO, logger="distributed_crawler.storage.schema"):
        backend = opened()
    assert "added column(s) source, source_tags to table items" in caplog.text
    backend.upsert_many([row("new", source="Le Monde", source_tags='["national"]')])
    rows = {r["url"]: r for r in read_rows(storage_url)}
    assert (rows["https://example.com/old"]["source"], rows["https://example.com/old"]["source_tags"]) == (None, None)
    assert (rows[row("new")["url"]]["source"], rows[row("new")["url"]]["source_tags"]) == ("Le Monde", '["national"]')


def _json(value: Any) -> Any:
    """A `data` value as read: PostgreSQL's jsonb comes back decoded, SQLite's is JSON text."""
    return value if isinstance(value, dict) else json.loads(value)


def test_an_items_own_fields_are_kept_in_data(storage_url: str, opened: Callable[[], StorageBackend]) -> None:
    item = {
        "url": "https://example.com/p",
        "title": "A project's item",
        "headline": "Harbour bridge reopens",
        "price": 12.5,
        "labels": {"b", "a"},
        "seen": datetime(2026, 12, 1, 8, 0, tzinfo=UTC),
        "raw": b"caf\xc3\xa9 \xff",
        "ratio": float("nan"),
    }
    opened().upsert_many([item_to_row(item)])
    (stored_row,) = read_rows(storage_url)
    assert stored_row["title"] == "A project's item"
    assert _json(stored_row["data"]) == {
        "headline": "Harbour bridge reopens",
        "price": 12.5,
        "labels": ["a", "b"],
        "seen": "2026-12-01T08:00:00+00:00",
        "raw": "café \ufffd",
        "ratio": None,
    }


def test_missing_columns_are_null(storage_url: str, opened: Callable[[], StorageBackend]) -> None:
    opened().upsert_many([{"url": "https://example.com/bare"}])
    (stored_row,) = read_rows(storage_url)
    assert stored_row["first_seen"] and stored_row["first_seen"] == stored_row["last_changed"]  # now
    first_seen = stored_row["first_seen"]
    assert stored_row == empty_row(
        url="https://example.com/bare", first_seen=first_seen, last_changed=first_seen, version=1
    )


def test_row_without_url_is_rejected(opened: Callable[[], StorageBackend]) -> None:
    backend = opened()
    with pytest.raises(StorageError, match="without url"):
        backend.upsert_many([row(1), {"title": "no url"}])
    assert backend.count() == 0


def test_batch_of_500(storage_url: str, opened: Callable[[], StorageBackend]) -> None:
    backend = opened()
    backend.upsert_many([row(i) for i in range(500)])
    assert backend.count() == 500
    backend.upsert_many([row(i, status=301) for i in range(250, 750)])
    assert backend.count() == 750
    rows = read_rows(storage_url)
    assert len({r["url"] for r in rows}) == 750
    assert sum(r["status"] == 301 for r in rows) == 500


def test_empty_batch_is_a_no_op(opened: Callable[[], StorageBackend]) -> None:
    backend = opened()
    backend.upsert_many([])
    assert backend.count() == 0


def test_close_is_idempotent(opened: Callable[[], StorageBackend]) -> None:
    check_close_is_idempotent(opened())


_WRITER_SCRIPT = textwrap.dedent(
    """
    import sys
    from distributed_crawler.storage.backends import open_storage

    url, worker, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    backend = open_storage(url)
    for b in range(batches):
        # Overlapping ranges: every URL is written by several workers.
        start = (b * 10 + worker * 7) % 300
        backend.upsert_many([
            {"url": f"https://example.com/{(start + i) % 300}", "title": f"w{worker}b{b}",
             "status": 200, "node": f"worker-{worker}"}
            for i in range(25)
        ])
    backend.close()
    print("done", worker)
    """
)


@pytest.mark.e2e
@pytest.mark.slow
def test_concurrent_writer_processes(storage_url: str, opened: Callable[[], StorageBackend]) -> None:
    """Several processes on one store (a brand-new SQLite file): no dups, no lock errors."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER_SCRIPT, storage_url, str(w), "30"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for w in range(4)
    ]
    for w, proc in enumerate(procs):
        out, err = proc.communicate(timeout=50)
        assert proc.returncode == 0, err
        assert "locked" not in err
        assert out.strip() == f"done {w}"
    rows = read_rows(storage_url)
    urls = [r["url"] for r in rows]
    assert len(urls) == len(set(urls)) == opened().count() == 300


def test_concurrent_writer_threads(storage_url: str, opened: Callable[[], StorageBackend]) -> None:
    """Threads with their own connections writing overlapping URLs."""
    opened()  # create the table first; the process test covers the creation race
    assert not write_overlapping_rows(storage_url, 4, timeout=50)
    assert opened().count() == 120
    assert len(read_rows(storage_url)) == 120


# --------------------------------------------------------------------------
# SQLite specifics
# --------------------------------------------------------------------------


def test_sqlite_pragmas(tmp_path: Path) -> None:
    backend = open_storage(f"sqlite:///{tmp_path}/items.db")
    try:
        assert isinstance(backend, SQLiteStorage)
        conn = backend._conn
        assert conn is not None
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    finally:
        backend.close()
    with sqlite3.connect(tmp_path / "items.db") as other:  # WAL is persistent
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_sqlite_relative_path_uses_cwd_and_creates_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    backend = open_storage("sqlite:///data/items.db")
    try:
        backend.upsert_many([row(1)])
    finally:
        backend.close()
    assert (tmp_path / "data" / "items.db").is_file()


def test_sqlite_absolute_path(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "items.db"
    backend = open_storage(f"sqlite:///{target}")  # sqlite:////tmp/... (four slashes)
    try:
        assert backend.count() == 0
    finally:
        backend.close()
    assert target.is_file()


def test_sqlite_lock_error_is_storage_error_then_recovers(tmp_path: Path) -> None:
    """A lock held longer than busy_timeout surfaces as StorageError (retryable)."""
    path = tmp_path / "items.db"
    backend = SQLiteStorage(path, busy_timeout_ms=200)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StorageError, match="locked"):
            backend.upsert_many([row(1)])
        blocker.execute("ROLLBACK")
        backend.upsert_many([row(1)])
        assert backend.count() == 1
    finally:
        blocker.close()
        backend.close()


def test_sqlite_unwritable_location(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StorageError) as info:
        open_storage(f"sqlite:///{blocker}/items.db")
    assert "\n" not in str(info.value)
    assert "check STORAGE_URL" in str(info.value)


# --------------------------------------------------------------------------
# PostgreSQL specifics
# --------------------------------------------------------------------------


def test_postgres_scheme_alias(pg_url: str) -> None:
    backend = open_storage("postgres://" + pg_url.split("://", 1)[1])
    try:
        assert isinstance(backend, PostgresStorage)
        backend.upsert_many([row(1)])
        assert backend.count() >= 1
    finally:
        backend.close()


def test_postgres_reconnects_after_connection_loss(pg_url: str) -> None:
    import psycopg

    backend = open_storage(pg_url)
    assert isinstance(backend, PostgresStorage)
    try:
        backend.upsert_many([row(1)])
        pid = backend._conn.info.backend_pid
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        try:
            backend.upsert_many([row(2)])  # may notice the loss only now
        except StorageError as exc:
            assert "\n" not in str(exc)
            backend.upsert_many([row(2)])  # the retry reconnects
        assert backend._conn.info.backend_pid != pid
        assert {r["url"] for r in read_rows(pg_url)} >= {row(1)["url"], row(2)["url"]}
    finally:
        backend.close()


def test_postgres_missing_database_is_storage_error(pg_url: str) -> None:
    base = pg_url.rsplit("/", 1)[0]
    user_host = base.split("://", 1)[1]
    user, host = user_host.split("@", 1)
    url = f"postgresql://{user}:Hunter2secret@{host}/dc_no_such_db_{uuid.uuid4().hex[:8]}"
    with pytest.raises(StorageError) as info:
        open_storage(url)
    message = str(info.value)
    assert "Hunter2secret" not in message
    assert f"{user}:***@{host}" in message
    assert "does not exist" in message
    assert "\n" not in message


# --------------------------------------------------------------------------
# Errors and masking
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["mongodb://root:s3cretpw@db/items", "items.db", "redis://:s3cretpw@localhost:6379/0", ""],
)
def test_unknown_scheme_is_storage_error(url: str) -> None:
    with pytest.raises(StorageError) as info:
        open_storage(url)
    message = str(info.value)
    assert "s3cretpw" not in message
    assert "\n" not in message
    assert "sqlite:///" in message and "postgresql://" in message and "mysql://" in message  # says what to use
    if "@" in url:
        assert mask_url(url) in message


def test_unreachable_postgres_is_storage_error() -> None:
    url = "postgresql://crawler:s3cretpw@127.0.0.1:1/items"
    with pytest.raises(StorageError) as info:
        open_storage(url)
    message = str(info.value)
    assert "postgresql://crawler:***@127.0.0.1:1/items" in message
    assert "s3cretpw" not in message
    assert "\n" not in message
    assert "check that the server is running" in message


def test_change_tracking_first_seen_version_last_changed(
    storage_url: str, opened: Callable[[], StorageBackend]
) -> None:
    """first_seen is kept, version and last_changed move only when content_hash changes."""
    backend = opened()
    t = [f"2024-01-0{d}T00:00:00+00:00" for d in range(1, 6)]

    def at(i: int, text: str) -> dict[str, Any]:
        return row(1, text=text, fetched_at=t[i])

    backend.upsert_many([at(0, "first text")])
    backend.upsert_many([at(1, "first   text\n")])  # same text, whitespace aside: unchanged
    (r,) = read_rows(storage_url)
    assert (r["first_seen"], r["last_changed"], r["version"], r["fetched_at"]) == (t[0], t[0], 1, t[1])
    assert r["content_hash"] == content_digest("first text")
    backend.upsert_many([at(2, "second text")])
    backend.upsert_many([at(3, "second text")])
    (r,) = read_rows(storage_url)
    assert (r["first_seen"], r["last_changed"], r["version"], r["fetched_at"]) == (t[0], t[2], 2, t[3])
    backend.upsert_many([at(4, "first text")])  # back to an earlier text: still a change
    (r,) = read_rows(storage_url)
    assert (r["first_seen"], r["last_changed"], r["version"]) == (t[0], t[4], 3)
    # a hash given by the item wins over the computed one; a version given by it is ignored
    backend.upsert_many([row(2, content_hash="given", version=99)])
    assert {x["url"]: (x["content_hash"], x["version"]) for x in read_rows(storage_url)}[row(2)["url"]] == ("given", 1)


def test_rows_of_an_older_release_start_their_history_on_next_store(
    storage_url: str, opened: Callable[[], StorageBackend]
) -> None:
    _execute(
        storage_url,
        "CREATE TABLE items (url TEXT PRIMARY KEY NOT NULL, title TEXT, text TEXT, fetched_at TEXT, status INTEGER, "
        "node TEXT)",
        "INSERT INTO items (url, title, text, fetched_at) VALUES ('https://example.com/1', 'old', 'x', 't0')",
    )
    backend = opened()
    (old,) = read_rows(storage_url)
    assert (old["content_hash"], old["first_seen"], old["version"]) == (None, None, None)
    backend.upsert_many([row(1, text="x")])
    (r,) = read_rows(storage_url)
    # no stored hash: this store is its first known content (version 1); first seen at its old fetch
    assert (r["content_hash"], r["version"], r["first_seen"]) == (content_digest("x"), 1, "t0")
    assert r["last_changed"] == r["fetched_at"] == row(1)["fetched_at"]


def test_upsert_changes_reports_new_changed_unchanged(opened: Callable[[], StorageBackend]) -> None:
    check_upsert_changes(opened())


def test_replaced_versions_are_kept_in_item_versions(storage_url: str) -> None:
    check_item_versions(storage_url)


def test_item_versions_of_an_older_release_gains_the_missing_columns(tmp_path: Path) -> None:
    db = tmp_path / "items.db"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE item_versions (url TEXT NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (url, version))"
        )
        conn.execute("INSERT INTO item_versions VALUES ('https://example.com/old', 1)")
    open_storage(f"sqlite:///{db}").close()
    with sqlite3.connect(db) as conn:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(item_versions)")]
        kept = conn.execute("SELECT url, version, text FROM item_versions").fetchall()
    assert columns[:2] == ["url", "version"] and {"text", "content_hash", "replaced_at"} <= set(columns)
    assert kept == [("https://example.com/old", 1, None)]


def test_dcrawl_versions_of_a_url_not_stored_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from distributed_crawler.cli.main import parse_args

    url = f"sqlite:///{tmp_path / 'items.db'}"
    open_storage(url).close()
    args = parse_args(["versions", "news", "https://example.com/nothing#frag", "--from", url])
    assert args.func(args) == 1
    assert "is not stored" in capsys.readouterr().out
    backend = open_storage(url)
    backend.upsert_many([row("canonical")])
    backend.close()
    args = parse_args(["versions", "news", "https://example.com/canonical#comments", "--from", url, "--json"])
    assert args.func(args) == 0  # found in its canonical form
    shown = json.loads(capsys.readouterr().out)
    assert shown["url"] == "https://example.com/canonical" and [v["version"] for v in shown["versions"]] == [1]
