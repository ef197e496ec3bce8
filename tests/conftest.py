"""Shared fixtures: a private redis-server per test session, the demo site, worker processes."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.round_trips import count_writes  # noqa: E402
from tests.site.server import NewsSite  # noqa: E402

# Every `scrapy crawl`, `dcrawl` and project-settings read of the suite uses the demo project
# (scrapy.cfg `demo`): the repo root's default project is production's, which refuses the loopback
# test sites. A test of another project strips SCRAPY_* from its subprocess's environment.
TEST_PROJECT = {"SCRAPY_PROJECT": "demo"}
os.environ.update(TEST_PROJECT)


def free_ports(n: int) -> list[int]:
    """n distinct free ports (bound at the same time, so no two are the same)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


class RedisServer:
    """A redis-server on a free port, data in a temp dir; restartable (same port and data)."""

    def __init__(self, workdir: Path, *extra: str) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.url_override: str | None = None  # e.g. rediss:// for a TLS server

    @property
    def url(self) -> str:
        return self.url_override or f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        if not shutil.which("redis-server"):
            pytest.fail("redis-server is not installed: run `make test`, which installs it")
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.workdir),
                "--save",
                "",
                "--appendonly",
                "no",
                *self.extra,
            ],  # later options win
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        for _ in range(400):
            if self.proc.poll() is not None:  # the port was taken meanwhile (another xdist worker's?)
                break
            try:
                client.ping()
            except redis.ConnectionError:
                time.sleep(0.025)
                continue
            if self._answered_by_ours(client):  # not by a server that had the port before
                return self
            time.sleep(0.025)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def _answered_by_ours(self, client: redis.Redis) -> bool:
        assert self.proc is not None
        try:
            return bool(client.info("server")["process_id"] == self.proc.pid)
        except redis.ResponseError:  # INFO not allowed (an ACL test): our process still runs
            return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session server, emptied for this test."""
    redis.Redis.from_url(redis_server.url).flushall()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture(params=["fakeredis", "redis-server"])
def client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """A unit test's Redis twice: fakeredis for the logic, the real redis-server for the scripts."""
    if request.param == "fakeredis":
        fake = fakeredis.FakeRedis()
        yield fake
        fake.close()
    else:
        yield request.getfixturevalue("redis_client")


@pytest.fixture
def site() -> Iterator[NewsSite]:
    with NewsSite(articles=120, per_page=20, delay=0.01) as s:
        yield s


# What a crawl of the local test site relies on, since the defaults are for the open web: it is
# served on loopback (docs/security.md), every one of its pages is expected as a row
# (docs/news.md), and it is our own server, so no politeness limit (DOMAIN_RATE_LIMIT 1/s and
# DOMAIN_MAX_IN_FLIGHT 2 by default, docs/retries-and-politeness.md) slows the tests down.
# `Workers.start` passes these first; a test's own `-s` values win over them.
LOOPBACK_SITE: dict[str, str] = {
    "ALLOWED_PRIVATE_NETWORKS": "127.0.0.0/8,::1/128",
    "STORE_PAGE_TYPES": "article,list,other",
    "DOMAIN_RATE_LIMIT": "0",
    "DOMAIN_MAX_IN_FLIGHT": "0",
}
LOOPBACK_SITE_SETTINGS: tuple[str, ...] = tuple(f"{k}={v}" for k, v in LOOPBACK_SITE.items())


class Workers:
    """`scrapy crawl` worker processes in their own process groups (so kill -9 takes all)."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.tmp_path = tmp_path
        self.env = env
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, node: str, *settings: str, spider: str = "news") -> subprocess.Popen:
        args = [sys.executable, "-m", "scrapy", "crawl", spider]
        for s in (*LOOPBACK_SITE_SETTINGS, *settings):
            args += ["-s", s]
        log = open(self.tmp_path / f"{node}.log", "ab")
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            # PYTHONFAULTHANDLER: a worker that hangs is sent SIGABRT (`wait_all`) and dumps every
            # thread's stack into its log, so a hang in CI names where it hung
            env={**os.environ, **self.env, "NODE_ID": node, "PYTHONFAULTHANDLER": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs[node] = proc
        return proc

    def log(self, node: str) -> str:
        return (self.tmp_path / f"{node}.log").read_text(errors="replace")

    def wait_ready(self, *nodes: str, timeout: float = 30) -> None:
        """Wait until each node's scheduler is open (so a seed pushed now reaches all of them)."""
        deadline = time.monotonic() + timeout
        for node in nodes:
            while "Scheduler on" not in self.log(node):
                if self.procs[node].poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"worker {node} did not start; log:\n{self.log(node)[-3000:]}")
                time.sleep(0.05)

    def kill9(self, node: str) -> None:
        os.killpg(self.procs[node].pid, signal.SIGKILL)
        self.procs[node].wait(10)

    def wait_all(self, timeout: float) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        codes = {}
        for node, proc in self.procs.items():
            try:
                codes[node] = proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"worker {node} did not exit in {timeout}s; log:\n{self.stacks(node)[-6000:]}")
        return codes

    def stacks(self, node: str) -> str:
        """The log of a hung worker after SIGABRT made it dump every thread's stack (faulthandler)."""
        proc = self.procs[node]
        try:
            os.kill(proc.pid, signal.SIGABRT)
            proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        return self.log(node)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


@pytest.fixture
def workers(tmp_path: Path, redis_url: str) -> Iterator[Workers]:
    w = Workers(
        tmp_path,
        {
            "REDIS_URL": redis_url,
            "STORAGE_URL": f"sqlite:///{tmp_path / 'items.db'}",
            "MAX_IDLE_TIME_BEFORE_CLOSE": "2",
        },
    )
    yield w
    w.stop_all()


def dcrawl(redis_url: str, *args: str) -> subprocess.CompletedProcess:
    """`dcrawl ARGS --redis-url URL` in a subprocess, as an operator runs it (undecodable output replaced)."""
    return subprocess.run(
        [sys.executable, "-m", "distributed_crawler", *args, "--redis-url", redis_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        errors="replace",
    )


def crawl_preflight(env: dict[str, str], *args: str, spider: str = "news") -> subprocess.CompletedProcess:
    """`scrapy crawl news` of a node expected to stop at start: only PATH and *env* in its environment."""
    return subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", spider, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **TEST_PROJECT, **env},
        timeout=60,
    )


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The one ERROR line of a node that stopped at start as it should: exit 2, no traceback."""
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return errors[0]


def queued_members(client: redis.Redis, spider: str = "news") -> list[bytes]:
    """Pending queue members of a spider in any queue mode: the per-host queues (host mode, the
    default) plus the single queue of the non-fair modes; keys of another type are skipped."""
    members: list[bytes] = []
    for key in [f"{{{spider}}}:requests".encode(), *client.scan_iter(match=f"{{{spider}}}:q:*")]:
        kind = client.type(key)
        found = client.zrange(key, 0, -1) if kind == b"zset" else client.lrange(key, 0, -1) if kind == b"list" else []
        host = key.split(b":q:", 1)[1].removesuffix(b"/") if b":q:" in key else b""  # a host's list: "<queue>/"
        members += [whole_member(m, host) for m in found]
    return members


def whole_member(member: bytes, host: bytes) -> bytes:
    """A host queue's member with the "<scheme>://<host>" it leaves out put back, as a lease holds
    it (lua/lib/host.lua member_global: "/<path>" is https, "~/<path>" http)."""
    envelope = re.match(rb"(\d+:-?\d+:(\d+:)?)?", member)
    at = envelope.end() if envelope else 0
    if host and member[at : at + 1] == b"/":
        return member[:at] + b"https://" + host + member[at:]
    if host and member[at : at + 2] == b"~/":
        return member[:at] + b"http://" + host + member[at + 1 :]
    return member


def queued_requests(client: redis.Redis, spider: str = "news") -> int:
    """How many requests of a spider are pending (see queued_members)."""
    return len(queued_members(client, spider))


def wait_for(what: str, check: Callable[[], Any], timeout: float, workers: Workers, step: float = 0.2) -> Any:
    """`check()`'s first truthy value within `timeout` s; else fail with the workers' last log lines."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(step)
    logs = "\n".join(f"--- {n}\n{workers.log(n)[-2500:]}" for n in workers.procs)
    pytest.fail(f"timed out after {timeout}s waiting for {what}\n{logs}")


def stored_rows(db: Path) -> dict[str, dict[str, Any]]:
    """The SQLite items table by url ({} before the first commit made it)."""
    if not db.exists():
        return {}
    try:
        with sqlite3.connect(db) as conn:
            conn.row_factory = sqlite3.Row
            return {r["url"]: dict(r) for r in conn.execute("SELECT * FROM items")}
    except sqlite3.OperationalError:  # the table does not exist yet
        return {}


# -- the product harness (tests/product.py) and parallel runs -----------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--matrix", action="store_true", help="run every product-harness case (`make test-matrix`)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Product cases off CI's diagonal run only with --matrix (else deselected). Under `-n N --dist loadgroup` each
    test module stays on one xdist worker (its module fixtures: one MariaDB, one database) unless
    its tests name groups of their own (the product cases: one each, they start their own servers)."""
    if not config.getoption("--matrix"):
        off_diagonal = [item for item in items if item.get_closest_marker("matrix")]
        if off_diagonal:
            config.hook.pytest_deselected(items=off_diagonal)
            items[:] = [item for item in items if not item.get_closest_marker("matrix")]
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


@pytest.fixture(scope="session")
def pg_admin() -> str:
    """A superuser DSN of the machine's PostgreSQL (127.0.0.1:5432, trust auth)."""
    from tests.test_storage import _pg_admin_dsn

    dsn = _pg_admin_dsn()
    if dsn is None:
        pytest.fail("no PostgreSQL at 127.0.0.1:5432 with trust auth (user postgres or root, database 'test')")
    return dsn


@pytest.fixture(scope="session")
def mariadb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """This session's (this xdist worker's) private mariadbd (tests/test_storage_mysql.py's)."""
    from tests.test_storage_mysql import MariaDB

    server = MariaDB(tmp_path_factory.mktemp("mariadb")).install()
    yield server
    server.stop()


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first command of every socket write of redis-py's asyncio connections in this test
    (tests/round_trips.py `count_writes`)."""
    sent: list[str] = []
    count_writes(monkeypatch, sent)
    return sent
