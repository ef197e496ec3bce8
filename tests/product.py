"""The product harness: N workers crawl a local multi-site news web with every default on, on one
Redis topology, into one storage, under one fault; `check_invariants` says, in one place, what must
hold afterwards. tests/test_product.py picks the cases (CI's diagonal, `make test-matrix`'s whole).

Every default is on (change feed, politeness, page types, robots meta, robots.txt, near-duplicates,
dead letters, Bloom dedup, per-host frontier, ARTICLE_REVISITS, item versions, the source registry's
labels) but those in LIFTED and IDLE_CLOSE, each with its reason.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
import redis

from distributed_crawler.events.feed import parse_entry
from tests.conftest import ROOT, RedisServer, free_port
from tests.redis_topologies import RedisClusterNodes, SentinelSet
from tests.site.server import NewsSite

SPIDER = "news"
STREAM = "{news}:events"
LEASE = 5  # seconds
LIFTED = {
    "ALLOWED_PRIVATE_NETWORKS": "127.0.0.0/8",  # the web is served on loopback (docs/security.md)
    "SCHEDULER_LEASE_SECONDS": str(LEASE),  # a dead or stopped worker's work returns within the test (60)
    "HEARTBEAT_INTERVAL": "1",  # renewal well inside that lease (10)
    "RECRAWL_RULES": json.dumps({r"^https?://[^/]+/$": 3600}),  # home pages revisited (no rule by default)
}
IDLE_CLOSE = "3"  # MAX_IDLE_TIME_BEFORE_CLOSE: workers exit by themselves (0 = run forever)
# Six hosts on loopback addresses: at the default 1 request/s per host the web takes ~20 s.
HOSTS = tuple(f"127.0.0.{n}" for n in range(2, 8))
ARTICLES, PER_PAGE = 8, 4  # per host


# ---------------------------------------------------------------------------------- topologies
class Topology(Protocol):
    env: dict[str, str]  # what a worker and `dcrawl` need to reach it (REDIS_URL, REDIS_CLUSTER, ...)
    shards: int

    def client(self) -> Any: ...
    def masters(self) -> list[redis.Redis]: ...
    def stop(self) -> None: ...


@dataclass
class SingleRedis:
    """One redis-server with an fsync-always AOF, so a kill -9 loses no acknowledged write."""

    workdir: Path
    shards: int = 1
    server: RedisServer = field(init=False)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.server = RedisServer(self.workdir, "--appendonly", "yes", "--appendfsync", "always").start()

    @property
    def env(self) -> dict[str, str]:
        return {"REDIS_URL": self.server.url}

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.server.url, socket_timeout=10)

    def masters(self) -> list[redis.Redis]:
        return [self.client()]

    def kill9_and_restart(self, down: float) -> None:
        assert self.server.proc is not None
        self.server.proc.kill()
        self.server.proc.wait(10)
        time.sleep(down)
        self.server.start()  # same port, same dir: the AOF is replayed

    def stop(self) -> None:
        self.server.stop()


@dataclass
class Sentinel:
    """Master + replica + Sentinel; workers find the master through Sentinel."""

    workdir: Path
    shards: int = 1
    nodes: SentinelSet = field(init=False)

    def __post_init__(self) -> None:
        self.nodes = SentinelSet(self.workdir / "sentinel").start()

    @property
    def env(self) -> dict[str, str]:
        return self.nodes.env

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.nodes.master_port(), socket_timeout=10)

    def masters(self) -> list[redis.Redis]:
        return [self.client()]

    def kill_master(self) -> None:
        self.nodes.kill_master()
        self.nodes.wait_failover(timeout=60)

    def stop(self) -> None:
        self.nodes.stop()


@dataclass
class Cluster:
    """A 3-master Redis Cluster (with one replica each when a master is to be killed)."""

    workdir: Path
    shards: int = 1
    replicas: int = 0
    nodes: RedisClusterNodes = field(init=False)

    def __post_init__(self) -> None:
        self.nodes = RedisClusterNodes(self.workdir / "cluster", masters=3, replicas=self.replicas).start()

    @property
    def env(self) -> dict[str, str]:
        """A live node as the seed node (after a master was killed too)."""
        return {"REDIS_URL": f"redis://127.0.0.1:{self.nodes.live_ports()[0]}/0", "REDIS_CLUSTER": "1"}

    def client(self) -> Any:
        return self.nodes.client()

    def masters(self) -> list[redis.Redis]:
        return [redis.Redis(host="127.0.0.1", port=p, socket_timeout=10) for p in self.nodes.master_ports()]

    def kill_master(self) -> None:
        """kill -9 of the master holding the spider's own slot; its replica takes over."""
        port = self.nodes.master_port_of(STREAM)
        self.nodes.kill_node(port)
        self.nodes.wait_slot_moved(STREAM, port)

    def stop(self) -> None:
        self.nodes.stop()


TOPOLOGIES: dict[str, Callable[[Path, bool], Topology]] = {
    "redis": lambda d, _: SingleRedis(d),
    "sentinel": lambda d, _: Sentinel(d),
    "cluster-1": lambda d, replicas: Cluster(d, shards=1, replicas=int(replicas)),
    "cluster-6": lambda d, replicas: Cluster(d, shards=6, replicas=int(replicas)),
}


# ------------------------------------------------------------------------------------ storages
class Storage(Protocol):
    url: str

    def rows(self) -> dict[str, int]: ...  # url -> version
    def down(self, seconds: float) -> None: ...
    def stop(self) -> None: ...


@dataclass
class SQLiteStorage:
    path: Path

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    def rows(self) -> dict[str, int]:
        if not self.path.exists():
            return {}
        try:
            with sqlite3.connect(self.path, timeout=30) as conn:
                return {u: int(v or 1) for u, v in conn.execute("SELECT url, version FROM items")}
        except sqlite3.OperationalError:  # no table yet, or locked by down()
            return {}

    def down(self, seconds: float) -> None:
        """An exclusive lock held `seconds`: every commit meets `database is locked`."""
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            conn.execute("BEGIN EXCLUSIVE")
            time.sleep(seconds)
            conn.execute("ROLLBACK")
        finally:
            conn.close()

    def stop(self) -> None:
        pass


class Gate:
    """A TCP forwarder in front of a database server that can be shut for a while (connections
    refused, open ones cut): a database outage that leaves the server itself to the other tests."""

    request_queue_size = 128

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.port = free_port()
        self._open = threading.Event()
        self._closing = False
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._listen()
        self._thread.start()

    def _listen(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(self.request_queue_size)
        listener.settimeout(0.2)
        self._listener = listener
        self._open.set()

    def _serve(self) -> None:
        while not self._closing:
            if not self._open.wait(0.2) or self._listener is None:
                continue
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _cut(self) -> None:
        self._open.clear()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def down(self, seconds: float) -> None:
        self._cut()
        time.sleep(seconds)
        self._listen()

    def stop(self) -> None:
        self._closing = True
        self._cut()
        self._thread.join(5)


class PostgreSQLStorage:
    """A database of its own on the machine's server (127.0.0.1:5432, trust auth), reached
    through a Gate; each test (and each xdist worker) has its own database."""

    def __init__(self, admin_dsn: str) -> None:
        import psycopg

        self.admin = admin_dsn
        self.name = f"dc_product_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        self.direct = admin_dsn.rsplit("/", 1)[0] + f"/{self.name}"
        self.gate = Gate(5432)
        user = admin_dsn.split("//", 1)[1].split("@", 1)[0]
        self.url = f"postgresql://{user}@127.0.0.1:{self.gate.port}/{self.name}"

    def rows(self) -> dict[str, int]:
        import psycopg

        try:
            with psycopg.connect(self.direct, connect_timeout=10) as conn:
                return {u: int(v or 1) for u, v in conn.execute("SELECT url, version FROM items")}
        except psycopg.errors.UndefinedTable:
            return {}

    def down(self, seconds: float) -> None:
        self.gate.down(seconds)

    def stop(self) -> None:
        import psycopg

        self.gate.stop()
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


class MariaDBStorage:
    """A database of its own on this xdist worker's private mariadbd (tests/test_storage_mysql.py)."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.name = f"dc_product_{uuid.uuid4().hex[:12]}"
        if not server.running:
            server.start()
        server.admin(
            f"CREATE DATABASE `{self.name}` CHARACTER SET utf8mb4", f"GRANT ALL ON `{self.name}`.* TO 'crawler'@'%'"
        )
        self.url = server.url().rsplit("/", 1)[0] + f"/{self.name}"

    def rows(self) -> dict[str, int]:
        import pymysql

        try:
            return {u: int(v or 1) for u, v in self.server.admin(f"SELECT url, version FROM `{self.name}`.items")}
        except pymysql.err.ProgrammingError:  # no table before the first commit
            return {}

    def down(self, seconds: float) -> None:
        self.server.stop()
        time.sleep(seconds)
        self.server.start()

    def stop(self) -> None:
        if self.server.running:
            self.server.admin(f"DROP DATABASE IF EXISTS `{self.name}`")


# ------------------------------------------------------------------------------------- the web
@contextmanager
def news_web() -> Iterator[list[NewsSite]]:
    """One NewsSite per loopback host (each its own politeness budget)."""
    with ExitStack() as stack:
        sites = []
        for host in HOSTS:
            site = NewsSite(articles=ARTICLES, per_page=PER_PAGE, delay=0.05, news_articles=True)
            site.bind_host = host  # type: ignore[attr-defined]
            sites.append(stack.enter_context(site))
        yield sites


def expected_articles(sites: list[NewsSite]) -> set[str]:
    """What STORE_PAGE_TYPES' default (articles) stores of the web: every /article/N."""
    return {f"{s.url}/article/{i}" for s in sites for i in range(1, ARTICLES + 1)}


# ------------------------------------------------------------------------------------- workers
class Fleet:
    """`scrapy crawl news` processes with every default on except LIFTED, each in its own process
    group (kill -9 and SIGSTOP reach the whole node)."""

    def __init__(self, tmp_path: Path, env: dict[str, str], settings: dict[str, str]) -> None:
        self.tmp_path = tmp_path
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "STORAGE_", "SCRAPY_"))}
        self.env.update(env)
        self.settings = settings
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, node: str) -> None:
        args = [sys.executable, "-m", "scrapy", "crawl", SPIDER]
        for name, value in self.settings.items():
            args += ["-s", f"{name}={value}"]
        with open(self.tmp_path / f"{node}.log", "ab") as log:
            self.procs[node] = subprocess.Popen(
                args,
                cwd=ROOT,
                env={**self.env, "NODE_ID": node},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self, node: str) -> str:
        return (self.tmp_path / f"{node}.log").read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{self.log(n)[-2500:]}" for n in self.procs)

    def signal(self, node: str, sig: int) -> None:
        os.killpg(self.procs[node].pid, sig)
        if sig == signal.SIGKILL:
            self.procs[node].wait(10)

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for node in self.procs:
            while "Scheduler on" not in self.log(node):
                if self.procs[node].poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"worker {node} did not start:\n{self.log(node)[-3000:]}")
                time.sleep(0.1)

    def wait_exit(self, timeout: float) -> dict[str, int]:
        """Each worker's exit code; the test fails naming the workers still running at `timeout`."""
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        running = [n for n, p in self.procs.items() if p.poll() is None]
        if running:
            stacks = "\n".join(self.stacks(n) for n in running)
            pytest.fail(f"workers {running} did not exit by themselves within {timeout} s\n{self.logs()}\n{stacks}")
        return {n: p.returncode for n, p in self.procs.items()}

    def stacks(self, node: str) -> str:
        """Every thread's Python stack of a lingering worker (py-spy), to say what it waits on."""
        spy = Path(sys.executable).with_name("py-spy")
        if not spy.exists():
            return f"--- {node}: no stacks (py-spy not installed)"
        try:
            done = subprocess.run(
                [str(spy), "dump", "--pid", str(self.procs[node].pid)], capture_output=True, text=True, timeout=30
            )
        except subprocess.TimeoutExpired:
            return f"--- {node}: py-spy dump timed out"
        return f"--- {node} stacks\n{done.stdout}{done.stderr}"

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGCONT)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


# -------------------------------------------------------------------------------------- faults
@dataclass
class Crawl:
    """What a fault acts on."""

    topology: Topology
    storage: Storage
    fleet: Fleet
    killed: set[str] = field(default_factory=set)


def no_fault(crawl: Crawl) -> None:
    pass


def worker_kill9(crawl: Crawl) -> None:
    """kill -9 of a worker mid-crawl, and a new worker in its place."""
    crawl.fleet.signal("w1", signal.SIGKILL)
    crawl.killed.add("w1")
    crawl.fleet.start("w4")


def worker_sigstop(crawl: Crawl) -> None:
    """A worker frozen past its lease (its leases go to the others), then thawed."""
    crawl.fleet.signal("w1", signal.SIGSTOP)
    time.sleep(LEASE * 2)
    crawl.fleet.signal("w1", signal.SIGCONT)


def redis_kill9_aof(crawl: Crawl) -> None:
    """kill -9 of the Redis server, 3 s down, restarted from its AOF."""
    assert isinstance(crawl.topology, SingleRedis)
    crawl.topology.kill9_and_restart(down=3)


def redis_full(crawl: Crawl) -> None:
    """Every master at maxmemory (noeviction: writes refused) for longer than a lease."""
    masters = crawl.topology.masters()
    try:
        for m in masters:
            m.config_set("maxmemory-policy", "noeviction")
            m.config_set("maxmemory", "1")
        time.sleep(LEASE * 2)
    finally:
        for m in masters:
            m.config_set("maxmemory", "0")
            m.close()


def storage_down(crawl: Crawl) -> None:
    """The database unreachable (SQLite: locked) for 20 s."""
    crawl.storage.down(20)


def master_failover(crawl: Crawl) -> None:
    """kill -9 of the master (Sentinel's, or the Cluster master of the spider's slot); a replica
    takes over."""
    assert isinstance(crawl.topology, Sentinel | Cluster)
    crawl.topology.kill_master()


FAULTS: dict[str, Callable[[Crawl], None]] = {
    "none": no_fault,
    "worker-kill9": worker_kill9,
    "worker-sigstop": worker_sigstop,
    "redis-kill9-aof": redis_kill9_aof,
    "redis-full": redis_full,
    "storage-down": storage_down,
    "master-failover": master_failover,
}
# Asynchronous replication: a write the old master acknowledged but never sent to its replica is
# lost with it (docs/high-availability.md), so a failover may lose a few pages; bounded here.
FAILOVER_MAY_LOSE = 6
# Work redelivered after its commit (its lease expired or its ack was lost) is stored again unchanged
# and announced again with the same key (docs/events.md "At least once"): under these faults only.
FEED_REPEATS_SAME_KEY = {"worker-kill9", "worker-sigstop", "redis-full", "redis-kill9-aof", "master-failover"}


# ---------------------------------------------------------------------------------- one product
@dataclass
class Outcome:
    fault: str
    expected: set[str]
    rows: dict[str, int]
    events: list[dict[str, Any]]
    status: dict[str, Any]
    codes: dict[str, int]
    killed: set[str]
    logs: dict[str, str]
    keys: dict[str, int]  # leftover keys that hold work or leases -> their size
    disallowed_hits: int  # requests to paths robots.txt disallows


def run_product(
    tmp_path: Path, topology: Topology, storage: Storage, fault: str, workers: int = 3, timeout: float = 240
) -> Outcome:
    """`workers` nodes crawl the web from its home pages; `fault` strikes once a quarter of the
    articles is stored (within 60 s); the nodes must then finish and exit by themselves."""
    env = {
        **topology.env,
        **project_settings(tmp_path, topology.shards),
        "STORAGE_URL": storage.url,
        "MAX_IDLE_TIME_BEFORE_CLOSE": IDLE_CLOSE,
    }
    fleet = Fleet(tmp_path, env, LIFTED)
    crawl = Crawl(topology, storage, fleet)
    try:
        with news_web() as sites:
            expected = expected_articles(sites)
            for n in range(1, workers + 1):
                fleet.start(f"w{n}")
            fleet.wait_ready()
            seed = topology.client()
            seed.lpush(f"{SPIDER}:start_urls", *(s.url + "/" for s in sites))
            seed.close()
            deadline = time.monotonic() + 60  # ~15 s on a quiet machine
            while len(storage.rows()) < len(expected) // 4:
                if time.monotonic() > deadline or all(p.poll() is not None for p in fleet.procs.values()):
                    pytest.fail(f"a quarter of the articles not stored (of {len(expected)})\n{fleet.logs()}")
                time.sleep(0.2)
            FAULTS[fault](crawl)
            codes = fleet.wait_exit(timeout)
            disallowed = sum(s.hits("/private/") for s in sites)
        client = topology.client()
        try:
            events = [parse_entry(i, f) for i, f in client.xrange(STREAM)]
            keys = leftover_keys(client)
        finally:
            client.close()
        return Outcome(
            fault=fault,
            expected=expected,
            rows=storage.rows(),
            events=events,
            status=status_json({**topology.env, **project_settings(tmp_path, topology.shards)}),
            codes=codes,
            killed=crawl.killed,
            logs={n: fleet.log(n) for n in fleet.procs},
            keys=keys,
            disallowed_hits=disallowed,
        )
    finally:
        fleet.stop()


# (a capped host's in-flight set is not among them: its members count only while still leased)
HOLDS_WORK = re.compile(r"^\{[^}]*\}:(processing|delayed|requests|q:.*|solo|taken|start_urls:taken)$")


def leftover_keys(client: Any) -> dict[str, int]:
    """Keys that hold work, leases or held requests, of every shard, non-empty after the crawl:
    the queues, leases, retries, held seeds and the requests running alone."""
    sizes = {"zset": client.zcard, "set": client.scard, "list": client.llen, "hash": client.hlen}
    found: dict[str, int] = {}
    for raw in client.scan_iter(count=1000):
        key = raw.decode() if isinstance(raw, bytes) else raw
        if HOLDS_WORK.match(key):
            kind = client.type(key)
            size = sizes.get(kind.decode() if isinstance(kind, bytes) else kind)
            if size and size(key):
                found[key] = size(key)
    return found


def project_settings(tmp_path: Path, shards: int) -> dict[str, str]:
    """The environment of a project whose settings (the demo's) set FRONTIER_SHARDS, as the
    workers and `dcrawl` of one deployment share it."""
    module = f"product_settings_{shards}"
    (tmp_path / f"{module}.py").write_text(f"from demo.settings import *  # noqa: F403\nFRONTIER_SHARDS = {shards}\n")
    path = os.pathsep.join(p for p in (str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {"SCRAPY_SETTINGS_MODULE": module, "PYTHONPATH": path}


def status_json(env: dict[str, str]) -> dict[str, Any]:
    """`dcrawl status news --json`, as an operator runs it."""
    proc = subprocess.run(
        [sys.executable, "-m", "distributed_crawler", "status", SPIDER, "--json"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# ---------------------------------------------------------------------------------- invariants
def check_invariants(out: Outcome) -> None:
    """What holds after every case: the articles stored once, each announced once, nothing left
    pending, leased, delayed or held, every worker gone by itself, exact counts, no traceback."""
    # every worker exited by itself, cleanly, with no traceback
    alive = {n: c for n, c in out.codes.items() if n not in out.killed}
    assert all(c == 0 for c in alive.values()), f"exit codes {alive}"
    for node, log in out.logs.items():
        assert "Traceback" not in log, f"traceback in {node}'s log:\n{log[-4000:]}"

    assert out.disallowed_hits == 0, "a path robots.txt disallows was requested"

    # every article stored exactly once (the table is keyed by url: once = one version)
    stored = set(out.rows)
    assert stored <= out.expected, f"stored what is not an article: {sorted(stored - out.expected)[:5]}"
    lost = sorted(out.expected - stored)
    may_lose = FAILOVER_MAY_LOSE if out.fault == "master-failover" else 0
    assert len(lost) <= may_lose, f"{len(lost)} articles lost: {lost[:10]}"
    assert all(v == 1 for v in out.rows.values()), f"rows written as changed: {out.rows}"

    # every stored row announced once in the change feed (repeats carry the same key)
    keys = Counter(e["key"] for e in out.events if e["event"] == "new")
    assert set(keys) == {f"1 {url}" for url in stored}, "a row without its event, or an event without its row"
    assert not [e for e in out.events if e["event"] != "new"], "changed/removed events of unchanged rows"
    repeats = {k: n for k, n in keys.items() if n > 1}
    if out.fault not in FEED_REPEATS_SAME_KEY:
        assert not repeats, f"rows announced more than once: {repeats}"

    # nothing left pending, leased, delayed or held; nothing dead-lettered
    status = out.status
    left = {k: status[k] for k in ("pending", "leased", "delayed", "failed", "seeds", "seeds_taken")}
    assert left == dict.fromkeys(left, 0), f"left in the frontier: {left} {status['failures']}"
    assert not out.keys, f"keys still holding work: {out.keys}"

    # exact counts in `dcrawl status --json`
    # one per row (counted in its event's write when its insert commits); a failover may lose the
    # last writes of the old master, counts included (docs/high-availability.md)
    if out.fault != "master-failover":
        assert status["page_types"]["article"]["stored"] == len(stored), status["page_types"]
    assert status["events"]["length"] == len(out.events)
    # revisits: each home page (the recrawl rule) and each stored article (ARTICLE_REVISITS' plan)
    scheduled = status["recrawl"]["scheduled"]
    if out.fault != "master-failover":
        assert scheduled == len(HOSTS) + len(stored), status["recrawl"]
    else:
        assert scheduled <= len(HOSTS) + len(out.expected), status["recrawl"]
    dead = {n["id"] for n in status["nodes"] if n["state"] == "dead"}
    assert dead <= out.killed, f"nodes shown dead that were not killed: {dead - out.killed}"
