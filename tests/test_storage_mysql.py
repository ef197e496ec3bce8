"""MySQL/MariaDB storage on a real mariadbd: the SQLite/PostgreSQL contract, outages, masking, a crawl.

The module starts its own MariaDB (Debian's `mariadb-server`, installed by `make test`) on a free
port with a temporary data directory, a database and a user with a password, and stops it at the
end. Tests that need it are marked e2e; URL parsing and DDL tests run in `make test-fast`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from distributed_crawler.storage.backends import COLUMNS, StorageBackend, StorageError, open_storage
from distributed_crawler.storage.digest import content_digest
from distributed_crawler.storage.mysql import MySQLStorage, connect_kwargs, create_table_sql, upsert_sql
from distributed_crawler.storage.pipeline import StoragePipeline, item_to_row
from tests.conftest import crawl_preflight, free_port, one_error_line
from tests.storage_rows import (
    backends_on,
    check_close_is_idempotent,
    check_item_versions,
    check_upsert_changes,
    row,
    stored,
    write_overlapping_rows,
)

pytestmark = pytest.mark.timeout(90)

USER = "crawler"
PASSWORD = "S3cr3t@pw/x:y"  # unencoded @, / and : in the URL must still work and never leak
DATABASE = "dc_items"


# --------------------------------------------------------------------------
# A private MariaDB server
# --------------------------------------------------------------------------


def _binary(*names: str) -> str:
    for name in names:
        path = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
        if path:
            return path
    pytest.fail(f"{names[0]} is not installed: run `make test`, which installs mariadb-server")


class MariaDB:
    """mariadbd on a free port with its data in `workdir`; restartable (same port and data)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.datadir = workdir / "data"
        self.socket = str(workdir / "mysqld.sock")
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.user_opts = ["--user=root"] if os.geteuid() == 0 else []
        self.small = ["--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M"]
        # a temp dir of its own: servers bootstrapped at once in the shared /tmp (one per xdist
        # worker) clash on their temporary tables ("Unknown table 'mysql.tmp_user_sys'"), 7 in 18
        self.tmpdir = workdir / "tmp"
        self.tmpdir.mkdir(exist_ok=True)

    def install(self) -> MariaDB:
        done = subprocess.run(
            [
                _binary("mariadb-install-db", "mysql_install_db"),
                "--no-defaults",
                f"--datadir={self.datadir}",
                f"--tmpdir={self.tmpdir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
                *self.user_opts,
                *self.small,
            ],
            capture_output=True,
            timeout=60,
        )
        if done.returncode:
            pytest.fail(
                f"mariadb-install-db failed ({done.returncode}):\n{(done.stdout + done.stderr).decode(errors='replace')[-3000:]}"
            )
        self.start()
        self.admin(
            f"CREATE DATABASE `{DATABASE}` CHARACTER SET utf8mb4",
            f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'",
            f"GRANT ALL ON `{DATABASE}`.* TO '{USER}'@'%'",
        )
        return self

    def start(self) -> MariaDB:
        log = open(self.workdir / "mariadbd.log", "ab")
        self.proc = subprocess.Popen(
            [
                _binary("mariadbd", "mysqld"),
                "--no-defaults",
                f"--datadir={self.datadir}",
                f"--tmpdir={self.tmpdir}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--socket={self.socket}",
                f"--pid-file={self.workdir / 'mariadbd.pid'}",
                "--skip-name-resolve",
                "--innodb-flush-log-at-trx-commit=2",
                *self.user_opts,
                *self.small,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                self.admin("SELECT 1")
                return self
            except Exception:  # noqa: BLE001 - not up yet
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(f"mariadbd did not start:\n{(self.workdir / 'mariadbd.log').read_text()[-3000:]}")
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def admin(self, *statements: str) -> list[tuple[Any, ...]]:
        """Run statements as root over the socket; the last one's rows."""
        import pymysql

        conn = pymysql.connect(unix_socket=self.socket, user="root", connect_timeout=2, charset="utf8mb4")
        try:
            with conn.cursor() as cur:
                for sql in statements:
                    cur.execute(sql)
                rows = list(cur.fetchall())
            conn.commit()
            return rows
        finally:
            conn.close()

    def url(self, password: str = PASSWORD, scheme: str = "mysql") -> str:
        return f"{scheme}://{USER}:{password}@127.0.0.1:{self.port}/{DATABASE}"


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDB]:
    server = MariaDB(tmp_path_factory.mktemp("mariadb")).install()
    yield server
    server.stop()


@pytest.fixture
def mysql_url(mariadb: MariaDB) -> str:
    """The server's URL (running, restarted if a test stopped it) with no `items` table yet."""
    if not mariadb.running:
        mariadb.start()
    mariadb.admin(f"DROP TABLE IF EXISTS `{DATABASE}`.`items`")
    mariadb.admin(f"DROP TABLE IF EXISTS `{DATABASE}`.`item_versions`")
    return mariadb.url()


@pytest.fixture
def opened(mysql_url: str) -> Iterator[Callable[[], StorageBackend]]:
    with backends_on(mysql_url) as factory:
        yield factory


def read_rows(mariadb: MariaDB) -> list[dict[str, Any]]:
    cols = ", ".join(f"`{c}`" for c in COLUMNS)
    data = mariadb.admin(f"SELECT {cols} FROM `{DATABASE}`.`items` ORDER BY `url`")
    return [dict(zip(COLUMNS, r)) for r in data]


# --------------------------------------------------------------------------
# URL and DDL (no server)
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "mysql://u:p%40ss@db.internal/items",
            {"host": "db.internal", "port": 3306, "user": "u", "password": "p@ss", "database": "items"},
        ),
        (
            "mariadb://u:pa@ss/w:x@10.0.0.5:3307/items",
            {"host": "10.0.0.5", "port": 3307, "user": "u", "password": "pa@ss/w:x", "database": "items"},
        ),
        (
            "mysql+pymysql://u@[::1]:3308/db",
            {"host": "::1", "port": 3308, "user": "u", "password": "", "database": "db"},
        ),
        (
            "mysql://u:pw@localhost/db?unix_socket=/run/mysqld/mysqld.sock&ssl_verify_cert=true",
            {"unix_socket": "/run/mysqld/mysqld.sock", "ssl_verify_cert": True, "database": "db"},
        ),
    ],
)
def test_connect_kwargs(url: str, expected: dict[str, Any]) -> None:
    kwargs = connect_kwargs(url)
    assert {k: kwargs[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u:s3cretpw@host/", "names no database"),
        ("mysql://u:s3cretpw@host:99999/db", "invalid port"),
        ("mysql://u:s3cretpw@host:x/db", "invalid port"),
        ("mysql://u:s3cretpw@host/db?charset=latin1", "unknown parameter 'charset'"),
    ],
)
def test_bad_urls_are_one_masked_line(url: str, message: str) -> None:
    with pytest.raises(StorageError, match=message) as info:
        open_storage(url)
    assert "s3cretpw" not in str(info.value) and "u:***@host" in str(info.value)
    assert "\n" not in str(info.value)


def test_ddl_and_upsert_follow_the_schema() -> None:
    ddl, sql = create_table_sql(), upsert_sql()
    for column in COLUMNS:
        assert f"`{column}`" in ddl and f"`{column}`" in sql
    assert "UNIQUE KEY `items_url_hash` (`url_hash`)" in ddl and "utf8mb4" in ddl
    assert "ON DUPLICATE KEY UPDATE" in sql and "`url` = VALUES" not in sql


def test_unreachable_mysql_is_storage_error() -> None:
    url = f"mysql://crawler:s3cretpw@127.0.0.1:{free_port()}/items"
    with pytest.raises(StorageError) as info:
        open_storage(url)
    message = str(info.value)
    assert f"mysql://crawler:***@127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}/items" in message
    assert "s3cretpw" not in message and "\n" not in message
    assert "check that the server is running" in message


# --------------------------------------------------------------------------
# The backend contract on a real server
# --------------------------------------------------------------------------

server = pytest.mark.e2e


@server
def test_table_created(mariadb: MariaDB, opened: Callable[[], StorageBackend]) -> None:
    backend = opened()
    assert isinstance(backend, MySQLStorage) and backend.count() == 0
    info = mariadb.admin(
        "SELECT column_name, data_type, character_set_name FROM information_schema.columns "
        f"WHERE table_schema = '{DATABASE}' AND table_name = 'items'"
    )
    types = {name: dtype for name, dtype, _ in info}
    assert set(types) == {*COLUMNS, "id", "url_hash"}
    assert types["status"] == types["version"] == "int" and types["url_hash"] == "binary"
    assert types["paywalled"] == "tinyint"  # BOOLEAN
    assert all(types[c] == "longtext" for c in COLUMNS if c not in ("status", "version", "paywalled", "truncated"))
    assert {cs for _, _, cs in info if cs} == {"utf8mb4"}


@server
def test_table_of_an_older_release_gains_the_missing_columns(
    mariadb: MariaDB, opened: Callable[[], StorageBackend], caplog: pytest.LogCaptureFixture
) -> None:
    # The table as the MySQL backend's first release made it, minus status and node.
    old_ddl = create_table_sql().replace(", `status` INT", "").replace(", `node` LONGTEXT", "")
    assert "`status`" not in old_ddl and "`node`" not in old_ddl
    mariadb.admin(
        f"USE `{DATABASE}`",
        old_ddl,
        "INSERT INTO `items` (`url`, `title`) VALUES ('https://example.com/old', 'old')",
    )
    with caplog.at_level(logging.INFO, logger="distributed_crawler.storage.schema"):
        backend = opened()
    assert "added column(s) status, node to table items" in caplog.text
    backend.upsert_many([row("new")])
    rows = {r["url"]: r for r in read_rows(mariadb)}
    assert rows["https://example.com/old"]["title"] == "old"
    assert rows["https://example.com/old"]["node"] is None
    assert rows["https://example.com/new"] == stored(row("new"))


@server
def test_table_of_the_release_before_page_types_gains_them_and_keeps_its_rows(
    mariadb: MariaDB, opened: Callable[[], StorageBackend], caplog: pytest.LogCaptureFixture
) -> None:
    old_ddl = (
        create_table_sql()
        .replace(", `modified_at` LONGTEXT", "")
        .replace(", `page_type` LONGTEXT", "")
        .replace(", `paywalled` BOOLEAN", "")
        .replace(", `truncated` BOOLEAN", "")
    )
    assert "`page_type`" not in old_ddl and "`paywalled`" not in old_ddl and "`modified_at`" not in old_ddl
    mariadb.admin(
        f"USE `{DATABASE}`",
        old_ddl,
        *(
            f"INSERT INTO `items` (`url`, `title`, `lang`, `version`) VALUES ('https://example.com/old{i}', 'old', 'de', 1)"
            for i in range(3)
        ),
    )
    with caplog.at_level(logging.INFO, logger="distributed_crawler.storage.schema"):
        backend = opened()
    assert "added column(s) modified_at, page_type, paywalled, truncated to table items" in caplog.text
    assert backend.count() == 3
    rows = read_rows(mariadb)
    assert [(r["url"], r["title"], r["lang"], r["page_type"], r["paywalled"], r["modified_at"]) for r in rows] == [
        (f"https://example.com/old{i}", "old", "de", None, None, None) for i in range(3)
    ]
    backend.upsert_many([row("new"), row("free", paywalled=False, page_type="list")])
    rows = {r["url"]: r for r in read_rows(mariadb)}
    assert len(rows) == 5
    assert rows["https://example.com/new"] == stored(row("new"))
    assert (rows["https://example.com/free"]["paywalled"], rows["https://example.com/free"]["page_type"]) == (0, "list")


@server
def test_table_of_the_release_before_data_gains_it_and_keeps_every_row(
    mariadb: MariaDB, opened: Callable[[], StorageBackend], caplog: pytest.LogCaptureFixture
) -> None:
    old_ddl = create_table_sql().replace(", `data` JSON", "")
    for column in ("image", "section", "tags", "site_name"):
        old_ddl = old_ddl.replace(f", `{column}` LONGTEXT", "")
    assert "`data`" not in old_ddl and "`site_name`" not in old_ddl
    mariadb.admin(
        f"USE `{DATABASE}`",
        old_ddl,
        *(
            f"INSERT INTO `items` (`url`, `title`, `version`) VALUES ('https://example.com/old{i}', 'old', 1)"
            for i in range(50)
        ),
    )
    with caplog.at_level(logging.INFO, logger="distributed_crawler.storage.schema"):
        backend = opened()
    assert "added column(s) data, image, section, tags, site_name to table items" in caplog.text
    assert backend.count() == 50 and all(r["data"] is None and r["title"] == "old" for r in read_rows(mariadb))
    item = {"url": "https://example.com/p", "headline": "Ünïcode", "price": 9.5, "labels": {"b", "a"}, "raw": b"\xff"}
    backend.upsert_many([item_to_row(item)])
    new = {r["url"]: r for r in read_rows(mariadb)}["https://example.com/p"]
    assert json.loads(new["data"]) == {"headline": "Ünïcode", "price": 9.5, "labels": ["a", "b"], "raw": "\ufffd"}
    query = f"SELECT JSON_VALUE(`data`, '$.headline') FROM `{DATABASE}`.`items` WHERE `data` IS NOT NULL"
    assert [tuple(r) for r in mariadb.admin(query)] == [("Ünïcode",)]  # the server reads it as JSON
    assert backend.count() == 51


@server
def test_table_of_the_release_before_sources_gains_source_and_source_tags(
    mariadb: MariaDB, opened: Callable[[], StorageBackend], caplog: pytest.LogCaptureFixture
) -> None:
    old_ddl = create_table_sql().replace(", `source` LONGTEXT", "").replace(", `source_tags` LONGTEXT", "")
    assert "`source" not in old_ddl
    mariadb.admin(
        f"USE `{DATABASE}`",
        old_ddl,
        "INSERT INTO `items` (`url`, `title`, `version`) VALUES ('https://example.com/old', 'old', 1)",
    )
    with caplog.at_level(logging.INFO, logger="distributed_crawler.storage.schema"):
        backend = opened()
    assert "added column(s) source, source_tags to table items" in caplog.text
    backend.upsert_many([row("new")])
    rows = {r["url"]: r for r in read_rows(mariadb)}
    assert (rows["https://example.com/old"]["source"], rows["https://example.com/old"]["source_tags"]) == (None, None)
    assert rows["https://example.com/new"] == stored(row("new"))  # source "Example News", its tags


def test_reopen_keeps_rows(opened: Callable[[], StorageBackend]) -> None:
    opened().upsert_many([row(1)])
    assert opened().count() == 1


@server
def test_upsert_updates_instead_of_duplicating(mariadb: MariaDB, opened: Callable[[], StorageBackend]) -> None:
    backend = opened()
    backend.upsert_many([row(1), row(2)])
    backend.upsert_many([row(1, title="new", status=404, node="node-b"), row(3)])
    backend.upsert_many([row(1, title="new", status=404, node="node-b")])  # unchanged row: still fine
    assert backend.count() == 3
    rows = {r["url"]: r for r in read_rows(mariadb)}
    assert rows["https://example.com/1"] == stored(row(1, title="new", status=404, node="node-b"))
    assert rows["https://example.com/2"] == stored(row(2))


@server
def test_change_tracking_first_seen_version_last_changed(
    mariadb: MariaDB, opened: Callable[[], StorageBackend]
) -> None:
    """ON DUPLICATE KEY UPDATE reads the stored content_hash before overwriting it."""
    backend = opened()
    t = [f"2024-01-0{d}T00:00:00+00:00" for d in range(1, 5)]
    backend.upsert_many([row(1, text="a", fetched_at=t[0])])
    backend.upsert_many([row(1, text=" a ", fetched_at=t[1])])
    (r,) = read_rows(mariadb)
    assert (r["first_seen"], r["last_changed"], r["version"], r["fetched_at"]) == (t[0], t[0], 1, t[1])
    backend.upsert_many([row(1, text="b", fetched_at=t[2])])
    backend.upsert_many([row(1, text="b", fetched_at=t[3])])
    (r,) = read_rows(mariadb)
    assert (r["first_seen"], r["last_changed"], r["version"], r["content_hash"]) == (t[0], t[2], 2, content_digest("b"))


@server
def test_url_is_unique_for_any_writer(mariadb: MariaDB, opened: Callable[[], StorageBackend]) -> None:
    import pymysql

    opened()
    insert = f"INSERT INTO `{DATABASE}`.`items` (url) VALUES ('https://example.com/dup')"
    mariadb.admin(insert)
    with pytest.raises(pymysql.IntegrityError):
        mariadb.admin(insert)


@server
def test_same_url_twice_in_one_batch_last_wins(mariadb: MariaDB, opened: Callable[[], StorageBackend]) -> None:
    backend = opened()
    backend.upsert_many([row(1, title="old"), row(2), row(1, title="latest")])
    assert backend.count() == 2
    assert read_rows(mariadb)[0]["title"] == "latest"


@server
def test_missing_columns_are_null_and_bad_rows_rejected(mariadb: MariaDB, opened: Callable[[], StorageBackend]) -> None:
    backend = opened()
    backend.upsert_many([{"url": "https://example.com/bare"}])
    (bare,) = read_rows(mariadb)
    assert bare["version"] == 1 and bare["first_seen"] and bare["first_seen"] == bare["last_changed"]
    untracked = ("url", "version", "first_seen", "last_changed")
    assert {c: bare[c] for c in COLUMNS if c not in untracked} == {c: None for c in COLUMNS if c not in untracked}
    with pytest.raises(StorageError, match="without url"):
        backend.upsert_many([row(1), {"title": "no url"}])
    backend.upsert_many([])
    assert backend.count() == 1


@server
def test_many_rows_span_several_statements_in_one_transaction(
    mariadb: MariaDB, opened: Callable[[], StorageBackend]
) -> None:
    backend = opened()
    body = "x" * 2000  # 3000 rows of 2 KB: PyMySQL splits the INSERT at 1 MB
    backend.upsert_many([row(i, text=body) for i in range(3000)])
    backend.upsert_many([row(i, status=301) for i in range(2500, 3500)])
    assert backend.count() == 3500
    assert mariadb.admin(f"SELECT COUNT(*) FROM `{DATABASE}`.items WHERE status = 301")[0][0] == 1000
    assert sum(len(batch) for batch in backend.iter_urls(batch=700)) == 3500


@server
def test_unicode_long_and_case_distinct_urls(mariadb: MariaDB, opened: Callable[[], StorageBackend]) -> None:
    backend = opened()
    prefix = "https://example.com/" + "a" * 5000
    rows = [
        row("emoji", url="https://example.com/😀/naïve", title="Ünïcödé 😀🚀 𝔘", text="日本語 " * 1000),
        row("long-1", url=prefix + "/1"),
        row("long-2", url=prefix + "/2"),  # same 5000-char prefix: no prefix-index collision
        row("case", url="https://example.com/Page"),
        row("case2", url="https://example.com/page"),  # URLs are case-sensitive
    ]
    backend.upsert_many(rows)
    backend.upsert_many(rows)
    assert sorted(read_rows(mariadb), key=lambda r: r["url"]) == sorted(map(stored, rows), key=lambda r: r["url"])
    assert {u for batch in backend.iter_urls() for u in batch} == {r["url"] for r in rows}


@server
def test_close_is_idempotent(opened: Callable[[], StorageBackend]) -> None:
    check_close_is_idempotent(opened())


@server
def test_nodes_starting_at_once_and_writing_overlapping_urls(mysql_url: str, mariadb: MariaDB) -> None:
    """Six connections create the table at the same moment, then upsert overlapping URLs."""
    assert not write_overlapping_rows(mysql_url, 6, timeout=60, start_together=True)
    assert len(read_rows(mariadb)) == 120


@server
def test_killed_connection_is_replaced_silently(
    mariadb: MariaDB, opened: Callable[[], StorageBackend], caplog: pytest.LogCaptureFixture
) -> None:
    backend = opened()
    assert isinstance(backend, MySQLStorage)
    backend.upsert_many([row(1)])
    thread_id = backend._conn.thread_id()
    mariadb.admin(f"KILL {thread_id}")  # what wait_timeout or a proxy does to an idle connection
    with caplog.at_level(logging.INFO):
        backend.upsert_many([row(2)])  # no error: reconnected at once
    assert backend._conn.thread_id() != thread_id
    assert backend.count() == 2
    assert "Reconnecting to MySQL storage mysql://crawler:***@" in caplog.text


@server
def test_wrong_password_and_missing_database(mariadb: MariaDB, mysql_url: str) -> None:
    with pytest.raises(StorageError) as info:
        open_storage(mariadb.url(password="Wr0ngPassw0rd"))
    message = str(info.value)
    assert "Wr0ngPassw0rd" not in message and "\n" not in message
    assert "mysql://crawler:***@127.0.0.1" in message and "Access denied" in message
    assert "check the user and password" in message
    with pytest.raises(StorageError) as info:
        open_storage(mysql_url.rsplit("/", 1)[0] + "/dc_no_such_db")
    assert "CREATE DATABASE `dc_no_such_db`" in str(info.value) or "Access denied" in str(info.value)
    assert PASSWORD not in str(info.value)


@server
def test_mariadb_scheme_and_encoded_password(mariadb: MariaDB, mysql_url: str) -> None:
    backend = open_storage(mariadb.url(password=quote(PASSWORD, safe=""), scheme="mariadb"))
    try:
        backend.upsert_many([row(1)])
        assert backend.count() == 1
    finally:
        backend.close()


# --------------------------------------------------------------------------
# The pipeline on MariaDB: an outage mid-crawl
# --------------------------------------------------------------------------


@server
@pytest.mark.slow
def test_outage_items_wait_nothing_lost_one_warning(
    mariadb: MariaDB, mysql_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from scrapy.utils.test import get_crawler

    crawler = get_crawler(
        settings_dict={"STORAGE_URL": mysql_url, "STORAGE_FLUSH_SECONDS": 0.05, "STORAGE_RETRY_MAX_SECONDS": 0.5}
    )
    pipeline = StoragePipeline.from_crawler(crawler)

    async def scenario() -> None:
        await pipeline.open_spider()
        await asyncio.gather(*(pipeline.process_item(row(i)) for i in range(50)))
        await asyncio.to_thread(mariadb.stop)
        waiting = [asyncio.ensure_future(pipeline.process_item(row(i))) for i in range(50, 120)]
        await asyncio.sleep(1.5)
        assert not any(w.done() for w in waiting), "items returned while the database was down"
        await asyncio.to_thread(mariadb.start)
        await asyncio.wait_for(asyncio.gather(*waiting), 30)
        await pipeline.close_spider()

    with caplog.at_level(logging.INFO):
        asyncio.run(asyncio.wait_for(scenario(), 80))
    assert len(read_rows(mariadb)) == 120
    assert crawler.stats.get_value("storage/committed") == 120
    assert crawler.stats.get_value("storage/errors") >= 1
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "mysql://crawler:***@127.0.0.1" in warnings[0].getMessage()
    assert "writable again" in caplog.text
    assert PASSWORD not in caplog.text and quote(PASSWORD, safe="") not in caplog.text


# --------------------------------------------------------------------------
# Real crawls
# --------------------------------------------------------------------------


@server
def test_wrong_password_at_crawl_start_is_one_line_exit_2(mariadb: MariaDB, redis_url: str) -> None:
    storage = mariadb.url(password="Wr0ngPassw0rd")
    proc = crawl_preflight({"REDIS_URL": redis_url, "STORAGE_URL": storage})
    error = one_error_line(proc)
    assert "mysql://crawler:***@127.0.0.1" in error and "check the user and password" in error
    assert "Wr0ngPassw0rd" not in proc.stderr + proc.stdout


def test_upsert_changes_reports_new_changed_unchanged(opened: Callable[[], StorageBackend]) -> None:
    check_upsert_changes(opened())


def test_replaced_versions_are_kept_in_item_versions(mysql_url: str) -> None:
    check_item_versions(mysql_url)
