"""deploy/: workers under a real supervisord, and a Redis run with deploy/redis.conf restarted mid-crawl."""

from __future__ import annotations

import configparser
import os
import platform
import re
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
import xmlrpc.client
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from supervisor.xmlrpc import SupervisorTransport

from tests.conftest import LOOPBACK_SITE_SETTINGS, ROOT, RedisServer, Workers
from tests.site.server import NewsSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DEPLOY = ROOT / "deploy"
VENV_BIN = ROOT / ".venv" / "bin"
# Directives of deploy/redis.conf the tests replace: where the private server listens and writes.
LOCAL_DIRECTIVES = {"bind", "port", "dir", "logfile"}


def stored_urls(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT url FROM items")]


def article_fetches(site: NewsSite) -> Counter[str]:
    """Fetches per article (tracking-parameter variants of one article count as the same page)."""
    return Counter(m.group(1) for p in site.requested_paths() if (m := re.match(r"/article/(\d+)", p)))


def wait_for(what: str, check, timeout: float, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def crawl_done(client: redis.Redis, db: Path, expected: set[str]) -> bool:
    """Complete: nothing pending, leased or delayed, and every expected page stored."""
    if client.zcard("{news}:requests") or client.zcard("{news}:processing") or client.zcard("{news}:delayed"):
        return False
    return db.exists() and len(stored_urls(db)) >= len(expected)


# -- supervisor ------------------------------------------------------------------------------
class Supervisor:
    """supervisord -n with deploy/supervisord.conf, paths templated to a private run directory."""

    def __init__(self, run_dir: Path, env: dict[str, str], lease_seconds: int, numprocs: int = 2) -> None:
        text = (DEPLOY / "supervisord.conf").read_text()
        assert "\nnumprocs=2\n" in text
        text = text.replace("\nnumprocs=2\n", f"\nnumprocs={numprocs}\n")
        text = text.replace("%(here)s/../.run", str(run_dir)).replace("%(here)s/..", str(ROOT))
        # The test machine has no `crawler` user: supervisord runs as whoever runs the test.
        assert "\nuser=crawler\n" in text
        text = text.replace("\nuser=crawler\n", "\n")
        assert not [line for line in text.splitlines() if "%(here)s" in line and not line.startswith(";")]
        # Short leases only so the killed worker's pages come back within the test's time; what a crawl
        # of the local site relies on, as the workers fixture passes it.
        site = " ".join(f"-s {s}" for s in LOOPBACK_SITE_SETTINGS)
        command = "/.venv/bin/scrapy crawl news\n"  # the command line, not the comment naming it
        assert text.count(command) == 1
        text = text.replace(command, command[:-1] + f" {site} -s SCHEDULER_LEASE_SECONDS={lease_seconds}\n")
        self.conf = run_dir / "supervisord.conf"
        self.conf.write_text(text)
        self.run_dir = run_dir
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.run_dir / "supervisord.out", "ab")
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "supervisord"), "-n", "-c", str(self.conf)],
            cwd=ROOT,
            # the production project, as deployed (not the demo the rest of the suite runs)
            env={**{k: v for k, v in os.environ.items() if not k.startswith("SCRAPY_")}, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_for(
            "supervisord's socket",
            lambda: (self.run_dir / "supervisor.sock").exists() or self.proc.poll() is not None,
            30,
        )
        assert self.proc.poll() is None, (self.run_dir / "supervisord.out").read_text()

    def rpc(self) -> xmlrpc.client.ServerProxy:
        transport = SupervisorTransport(None, None, f"unix://{self.run_dir / 'supervisor.sock'}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)

    def processes(self) -> dict[str, dict]:
        return {p["name"]: p for p in self.rpc().supervisor.getAllProcessInfo()}

    def log(self, name: str) -> str:
        path = self.run_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self) -> None:
        """supervisord and its workers (each in its own process group, found by supervisor's env)."""
        marker = f"SUPERVISOR_SERVER_URL=unix://{self.run_dir / 'supervisor.sock'}".encode()
        for entry in os.scandir("/proc"):
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if entry.name.isdigit() and marker in f.read().split(b"\0"):
                        os.killpg(os.getpgid(int(entry.name)), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def run_dir() -> Iterator[Path]:
    # Short path: a unix socket path must stay under ~100 characters.
    d = Path(tempfile.mkdtemp(prefix="dcsv-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.timeout(180)
def test_supervisor_restarts_a_killed_worker_and_the_crawl_completes(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, run_dir: Path
) -> None:
    db = tmp_path / "items.db"
    sup = Supervisor(
        run_dir,
        {
            "REDIS_URL": redis_url,
            "STORAGE_URL": f"sqlite:///{db}",
            "MAX_IDLE_TIME_BEFORE_CLOSE": "2",
        },  # the conf must pin it to 0
        lease_seconds=8,
    )
    groups: set[int] = set()
    try:
        with NewsSite(articles=200, per_page=20, delay=0.05) as site:
            sup.start()
            wait_for(
                "both workers RUNNING (up startsecs=5)",
                lambda: (
                    all(p["statename"] == "RUNNING" for p in sup.processes().values()) and len(sup.processes()) == 2
                ),
                60,
            )
            wait_for(
                "both schedulers open", lambda: all("Scheduler on" in sup.log(n) for n in ("news-0", "news-1")), 30
            )
            before = sup.processes()
            groups.update(p["pid"] for p in before.values())
            redis_client.lpush("news:start_urls", site.url + "/")
            wait_for("20 articles fetched", lambda: site.hits("/article") >= 20, 60, 0.02)

            victim = before["news-0"]["pid"]
            os.killpg(victim, signal.SIGKILL)  # the worker and everything it started
            wait_for(
                "news-0 restarted with a new pid and RUNNING",
                lambda: (p := sup.processes()["news-0"])["statename"] == "RUNNING" and p["pid"] not in (0, victim),
                60,
            )
            restarted = sup.processes()["news-0"]
            groups.add(restarted["pid"])
            assert sup.processes()["news-1"]["pid"] == before["news-1"]["pid"], "the other worker must not restart"

            expected = site.expected_urls()
            wait_for("the crawl to complete", lambda: crawl_done(redis_client, db, expected), 120, 0.2)
            time.sleep(2)  # a page fetched late (by the reclaim) would show up now
            fetches = article_fetches(site)
            assert sup.processes()["news-1"]["statename"] == "RUNNING", "MAX_IDLE_TIME_BEFORE_CLOSE is pinned to 0"

            # systemctl stop / supervisorctl shutdown: SIGTERM to supervisord drains every worker.
            sup.proc.send_signal(signal.SIGTERM)
            assert sup.proc.wait(150) == 0
    finally:
        sup.kill()
    urls = stored_urls(db)
    assert len(urls) == len(set(urls)), "a page was stored twice"
    assert set(urls) == expected
    assert len(fetches) == 200
    twice = sum(1 for n in fetches.values() if n > 1)
    print(
        f"\nkill -9 under supervisor: {len(urls)} pages stored once each, {twice} articles fetched twice "
        f"(the killed worker's unacked leases), pid {victim} -> {restarted['pid']}"
    )
    assert redis_client.zcard("{news}:processing") == 0, "a graceful stop leaves no lease behind"
    assert not any(group_alive(g) for g in groups), "a worker process outlived supervisord"
    assert not (run_dir / "supervisord.pid").exists()
    host = platform.node()
    assert {n for (n,) in sqlite3.connect(db).execute("SELECT DISTINCT node FROM items")} <= {
        f"{host}-news-0",
        f"{host}-news-1",
    }
    log0, log1 = sup.log("news-0"), sup.log("news-1")
    assert log0.count("Scheduler on") == 2, "the restarted worker appends to its own log file"
    assert "Closing spider (shutdown)" in log0 and "Closing spider (shutdown)" in log1
    assert "Traceback" not in log0 + log1


@pytest.mark.timeout(120)
def test_a_worker_started_before_redis_is_retried_until_redis_is_up(tmp_path: Path, run_dir: Path) -> None:
    server = RedisServer(tmp_path)  # its port, not listening yet
    sup = Supervisor(
        run_dir,
        {"REDIS_URL": server.url, "STORAGE_URL": f"sqlite:///{tmp_path / 'items.db'}"},
        lease_seconds=60,
        numprocs=1,
    )
    try:
        sup.start()
        wait_for("the worker to fail its first start", lambda: "ERROR: Cannot reach Redis" in sup.log("news-0"), 60)
        # Exit code 2 within startsecs: BACKOFF then STARTING again (RUNNING then EXITED when the
        # machine is so loaded that the failed start took over 5 s); never given up (FATAL).
        assert sup.processes()["news-0"]["statename"] != "FATAL"
        server.start()
        wait_for("the worker's scheduler open once Redis is up", lambda: "Scheduler on" in sup.log("news-0"), 60)
        wait_for("the worker RUNNING", lambda: sup.processes()["news-0"]["statename"] == "RUNNING", 30)
        log = sup.log("news-0")
        assert "Traceback" not in log
        assert all(line.count("ERROR") <= 1 for line in log.splitlines())
        sup.proc.send_signal(signal.SIGTERM)
        assert sup.proc.wait(60) == 0
    finally:
        sup.kill()
        server.stop()


# -- Redis restart with deploy/redis.conf ------------------------------------------------------
def redis_conf_args() -> list[str]:
    """Every directive of deploy/redis.conf as command-line options (later options win)."""
    args: list[str] = []
    for line in (DEPLOY / "redis.conf").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, *values = line.split()
        if name in LOCAL_DIRECTIVES:
            continue
        args += [f"--{name}", *(v.strip('"') for v in values)]
    return args


def test_deploy_redis_conf_is_production_safe(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, *redis_conf_args()).start()
    try:
        config = redis.Redis.from_url(server.url, decode_responses=True).config_get("*")
    finally:
        server.stop()
    assert config["appendonly"] == "yes" and config["appendfsync"] == "everysec"
    assert config["maxmemory-policy"] == "noeviction"
    assert int(config["maxmemory"]) > 0
    assert config["protected-mode"] == "yes" and config["timeout"] == "0"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_redis_restart_with_deploy_conf_loses_nothing(tmp_path: Path, stop: str) -> None:
    """`systemctl restart` (SIGTERM: AOF fsynced at exit) or a crash of the Redis process (SIGKILL:
    with appendfsync everysec every write is in the kernel before Redis replies, so a process
    crash loses nothing either; only a machine crash can lose the last second)."""
    server = RedisServer(tmp_path, *redis_conf_args()).start()
    db = tmp_path / "items.db"
    workers = Workers(
        tmp_path, {"REDIS_URL": server.url, "STORAGE_URL": f"sqlite:///{db}", "MAX_IDLE_TIME_BEFORE_CLOSE": "3"}
    )
    try:
        with NewsSite(articles=200, per_page=20, delay=0.05) as site:
            workers.start("w1", "CONCURRENT_REQUESTS=4")
            workers.start("w2", "CONCURRENT_REQUESTS=4")
            workers.wait_ready("w1", "w2")
            redis.Redis.from_url(server.url).lpush("news:start_urls", site.url + "/")
            wait_for("40 articles fetched", lambda: site.hits("/article") >= 40, 60, 0.02)
            client = redis.Redis.from_url(server.url)
            before = (client.zcard("{news}:requests"), client.zcard("{news}:processing"))
            client.close()
            if stop == "sigterm":
                server.stop()
            else:
                server.proc.kill()
                server.proc.wait(10)
            time.sleep(3)
            server.start()  # same port and dir: the AOF is replayed
            assert workers.wait_all(150) == {"w1": 0, "w2": 0}
            fetches = article_fetches(site)
            expected = site.expected_urls()
    finally:
        workers.stop_all()
        server.stop()
    assert before[0] + before[1] > 0, "Redis went down mid-crawl"
    urls = stored_urls(db)
    assert len(urls) == len(set(urls)) and set(urls) == expected, "a page was lost or stored twice"
    twice = sorted(a for a, n in fetches.items() if n > 1)
    print(f"\nRedis {stop} mid-crawl: {len(urls)} pages stored once each, articles fetched twice: {twice}")
    if stop == "sigterm":  # the AOF is written out at exit: no ack or lease can be lost
        assert not twice, f"articles fetched twice (an ack or lease was lost): {twice}"
    # SIGKILL: everysec may postpone AOF writes while a slow fsync runs (busy disk) and still reply,
    # so a pop or an ack can die with the process: a page fetched twice is allowed (stored once).
    for node in ("w1", "w2"):
        log = workers.log(node)
        assert "Traceback" not in log and " ERROR" not in log, log[-4000:]
        outages = re.findall(r"Redis at \S+ unreachable since ", log)
        recoveries = re.findall(r"Redis at \S+ back after [\d.]+s \((.+?)\)", log)
        assert outages, f"{node} did not notice the outage"
        # the node's Redis policy: one line per outage (a flap at most), not per call or per purpose
        assert len(outages) <= 2, f"{node}: an outage is logged once per node: {outages}"
        assert len(recoveries) == len(outages), f"{node}: every outage logs its end once: {recoveries}"


def test_the_systemd_unit_runs_unprivileged_and_hardened() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((DEPLOY / "supervisor.service").read_text())
    service = unit["Service"]
    assert service["User"] not in ("", "root", "0") and service["Group"] not in ("", "root", "0")
    assert service["NoNewPrivileges"] == "yes" and service["ProtectSystem"] == "strict"
    assert service["ProtectHome"] == "yes" and service["PrivateTmp"] == "yes"
    assert service["MemoryMax"].rstrip("GMK").isdigit()
    assert "/.run" in service["ReadWritePaths"]  # supervisord's logs and socket stay writable
