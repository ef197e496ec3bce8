"""What bench/e2e.py and bench/kill9.py share: private redis-server, site process, workers, probes.

Why its own module: both benchmarks must treat the two sides exactly alike (same site, same
settings, same storage, same measurement), so there is one way to start and measure things.
Every child runs in its own session (process group); `Children.kill_all` runs on exit, on
exceptions, on Ctrl-C and on SIGTERM, so nothing outlives a benchmark.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from distributed_crawler.dedup.fingerprint import canonicalize_url  # noqa: E402

PYTHON = sys.executable
SIDES = ("ours", "scrapy-redis")
SPIDER = "news"
SEED_KEY = "news:start_urls"  # the same default key on both sides
PROBE_EXTENSIONS = json.dumps({"bench.probe.RedisProbe": 0})


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- child processes ----------------------------------------------------------------------------
class Children:
    """Every process a benchmark starts, each in its own process group."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        atexit.register(self.kill_all)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    @staticmethod
    def _on_signal(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)  # unwinds through `finally`, then atexit

    def start(self, args: list[str], **kwargs: Any) -> subprocess.Popen:
        proc = subprocess.Popen(args, start_new_session=True, **kwargs)
        self.procs.append(proc)
        return proc

    @staticmethod
    def signal_group(proc: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, proc: subprocess.Popen, timeout: float = 10.0) -> None:
        """SIGTERM the group, SIGKILL it after `timeout`."""
        if proc.poll() is None:
            self.signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.signal_group(proc, signal.SIGKILL)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def kill_all(self) -> None:
        for proc in self.procs:
            self.signal_group(proc, signal.SIGKILL)
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        self.procs.clear()


def start_redis(children: Children, workdir: Path, config: list[str] | None = None) -> tuple[subprocess.Popen, str]:
    """A redis-server on a free port with its files in *workdir*, up and answering.

    *config*: command-line settings in place of the throwaway ones (no RDB, no AOF), e.g.
    deploy/redis.conf's (bench/scale.py); port, bind, dir and logfile are always set here."""
    if not shutil.which("redis-server"):
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    proc = children.start(
        [
            "redis-server",
            *(["--save", "", "--appendonly", "no"] if config is None else config),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(workdir),
            "--logfile",
            str(workdir / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_timeout=2)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except (redis.RedisError, OSError):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"redis-server did not start; see {workdir / 'redis.log'}") from None
            time.sleep(0.05)
    client.close()
    return proc, url


@contextmanager
def private_redis(socket_timeout: float = 300) -> Iterator[redis.Redis]:
    """A client of a fresh redis-server (start_redis) in a temporary directory, killed on exit."""
    children = Children()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            _, url = start_redis(children, Path(tmp))
            yield redis.Redis.from_url(url, socket_timeout=socket_timeout)
        finally:
            children.kill_all()


def start_site(
    children: Children, articles: int, workdir: Path, per_page: int = 20, code_root: Path = ROOT
) -> tuple[subprocess.Popen, str]:
    proc = children.start(
        [PYTHON, str(code_root / "bench" / "site.py"), "--articles", str(articles), "--per-page", str(per_page)],
        stdout=subprocess.PIPE,
        stderr=open(workdir / "site.log", "wb"),
        text=True,
    )
    line = proc.stdout.readline().strip() if proc.stdout else ""
    if not line.startswith("READY "):
        raise SystemExit(f"bench site did not start: {line!r}; see {workdir / 'site.log'}")
    return proc, line.split()[1]


def site_state(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/__bench__/state", timeout=30) as resp:
        return json.load(resp)


# -- workers ------------------------------------------------------------------------------------
# The bench sites are our own servers on loopback, and the baselines have no per-host limit: ours
# (DOMAIN_RATE_LIMIT 1/s, DOMAIN_MAX_IN_FLIGHT 2 per host by default) is lifted in every bench.
LOOPBACK_RATES = ("DOMAIN_RATE_LIMIT=0", "DOMAIN_MAX_IN_FLIGHT=0")


@dataclass
class WorkerSpec:
    side: str
    redis_url: str
    storage_url: str
    idle_close: float
    workdir: Path
    extra: dict[str, str] = field(default_factory=dict)
    code_root: Path = ROOT  # where `distributed_crawler` and scrapy.cfg are imported from

    def command(self, node: str) -> tuple[list[str], dict[str, str], Path, Path]:
        """argv, env, log file and probe file of worker `node`."""
        probe = self.workdir / f"probe-{node}.json"
        logfile = self.workdir / f"{node}.log"
        settings = {
            "CONCURRENT_REQUESTS": "32",
            "CONCURRENT_REQUESTS_PER_DOMAIN": "32",
            "LOG_LEVEL": "INFO",
            "EXTENSIONS": PROBE_EXTENSIONS,
            "BENCH_PROBE_FILE": str(probe),
            **self.extra,
        }
        env = {k: v for k, v in os.environ.items() if k not in ("SCRAPY_SETTINGS_MODULE", "REDIS_URL")}
        env.update(
            {
                "PYTHONPATH": os.pathsep.join(filter(None, [str(self.code_root), env.get("PYTHONPATH", "")])),
                "STORAGE_URL": self.storage_url,
                "NODE_ID": node,
            }
        )
        if self.side in ("ours", "ref"):  # "ref": our code at another git ref (code_root)
            # the baselines' parse (bench/page_parse.py): visible text, no article extraction
            # the bench site is on loopback, which the private-address guard refuses by default,
            # and every page stored, whatever its type (the baselines store every page)
            settings = {
                "EXTRACT_MAIN_TEXT": "False",
                "NEAR_DUPLICATES": "False",
                "ALLOWED_PRIVATE_NETWORKS": "127.0.0.0/8",
                "STORE_PAGE_TYPES": "article,list,other",
                **dict(s.split("=", 1) for s in LOOPBACK_RATES),
                # the bench site's pagination is ~pages/40 links deep: no hop limit, as the baselines
                "DEPTH_LIMIT": "0",
                **settings,
            }
            env["SCRAPY_SETTINGS_MODULE"] = "demo.settings"  # the repo root's default is production's
            env["REDIS_URL"] = self.redis_url
            env["MAX_IDLE_TIME_BEFORE_CLOSE"] = str(self.idle_close)
        elif self.side == "plain":  # plain Scrapy, memory scheduler; Redis only for its seed
            env["SCRAPY_SETTINGS_MODULE"] = "bench.plain_scrapy_project.settings"
            env.pop("MAX_IDLE_TIME_BEFORE_CLOSE", None)
            settings["REDIS_URL"] = self.redis_url
        else:
            env["SCRAPY_SETTINGS_MODULE"] = "bench.scrapy_redis_project.settings"
            env.pop("MAX_IDLE_TIME_BEFORE_CLOSE", None)
            settings["REDIS_URL"] = self.redis_url
            settings["MAX_IDLE_TIME_BEFORE_CLOSE"] = str(int(self.idle_close))
        args = [PYTHON, "-m", "scrapy", "crawl", SPIDER]
        for key, value in settings.items():
            args += ["-s", f"{key}={value}"]
        return args, env, logfile, probe


class Workers:
    def __init__(self, children: Children, spec: WorkerSpec) -> None:
        self.children = children
        self.spec = spec
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.probes: dict[str, Path] = {}

    def start(self, node: str) -> subprocess.Popen:
        args, env, logfile, probe = self.spec.command(node)
        with open(logfile, "ab") as out:
            proc = self.children.start(args, cwd=self.spec.code_root, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.procs[node], self.logs[node], self.probes[node] = proc, logfile, probe
        return proc

    def alive(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is None]

    def wait_ready(self, nodes: list[str], timeout: float = 90.0) -> None:
        """Until each node logged "Spider opened" (its scheduler and storage are open)."""
        deadline = time.monotonic() + timeout
        pending = set(nodes)
        while pending:
            for node in list(pending):
                if "Spider opened" in self.logs[node].read_text(errors="replace"):
                    pending.discard(node)
                elif self.procs[node].poll() is not None:
                    raise RuntimeError(f"worker {node} exited at start; log:\n{self.tail(node)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers {sorted(pending)} not ready after {timeout}s")
            time.sleep(0.1)

    def kill9(self, node: str) -> None:
        self.children.signal_group(self.procs[node], signal.SIGKILL)
        self.procs[node].wait(10)

    def wait_exit(self, timeout: float) -> dict[str, int | None]:
        """Wait up to `timeout` for idle-close; then SIGTERM (Scrapy's graceful stop), then SIGKILL."""
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        forced = self.alive()
        if forced and timeout > 0:
            log(f"workers {forced} still running after {timeout:.0f}s: SIGTERM")
        for node in forced:  # one SIGTERM only: Scrapy takes a second one as "force unclean stop"
            self.children.signal_group(self.procs[node], signal.SIGTERM)
        deadline = time.monotonic() + 20
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        for node in self.alive():
            log(f"worker {node} ignored SIGTERM for 20s: SIGKILL")
            self.children.signal_group(self.procs[node], signal.SIGKILL)
            self.procs[node].wait(5)
        return {n: p.returncode for n, p in self.procs.items()}

    def tail(self, node: str, chars: int = 3000) -> str:
        return self.logs[node].read_text(errors="replace")[-chars:]

    def probe(self, node: str) -> dict[str, Any] | None:
        path = self.probes[node]
        return json.loads(path.read_text()) if path.exists() else None


# -- measurements -------------------------------------------------------------------------------
def commandstats(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """`INFO commandstats` as {command: (calls, usec)}."""
    info = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"])) for name, v in info.items()}


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of one process so far (Linux /proc), None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (/proc/stat), to see load from other programs."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


def cpu_snapshot(procs: dict[str, subprocess.Popen]) -> dict[str, float | None]:
    snap: dict[str, float | None] = {name: cpu_seconds(p.pid) for name, p in procs.items()}
    snap["harness"] = cpu_seconds(os.getpid())
    snap["machine_busy"] = machine_busy_seconds()
    return snap


def cpu_delta(before: dict[str, float | None], after: dict[str, float | None]) -> dict[str, float | None]:
    return {
        name: round(after[name] - before[name], 2)
        if after.get(name) is not None and before.get(name) is not None
        else None
        for name in before
    }


def stats_delta(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> tuple[dict[str, int], int]:
    """Calls per command and total server microseconds between two snapshots, without the
    harness's own INFO calls."""
    calls = {k: v[0] - before.get(k, (0, 0))[0] for k, v in after.items() if k != "info"}
    usec = sum(v[1] - before.get(k, (0, 0))[1] for k, v in after.items() if k != "info")
    return {k: v for k, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v}, usec


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def git_state() -> dict[str, Any]:
    """Which code was measured: HEAD and the files of the package that differ from it."""
    dirty = _git("status", "--porcelain", "--", "distributed_crawler")
    return {"commit": _git("rev-parse", "--short", "HEAD"), "uncommitted_package_files": dirty.splitlines()}


def prepare_code(ref: str | None) -> tuple[Path, dict[str, Any]]:
    """The tree the workers and the site run from, and what it is.

    Without `ref`: this working tree, as it is while the benchmark runs (others may be editing it;
    `git_state` is recorded before and after). With `ref` (e.g. HEAD): a read-only `git archive`
    snapshot of that commit in a temp dir, plus this bench/ directory, so every run of one
    invocation measures the same code. Nothing in the repository is modified.
    """
    if not ref:
        return ROOT, {"tree": "working tree", **git_state()}
    commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}")
    if not commit:
        raise SystemExit(f"--code {ref}: not a commit")
    dest = Path(tempfile.mkdtemp(prefix="bench-code-"))
    atexit.register(shutil.rmtree, dest, True)
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, timeout=60, check=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=60)
    shutil.rmtree(dest / "bench", ignore_errors=True)
    shutil.copytree(ROOT / "bench", dest / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    return dest, {"tree": f"snapshot of {ref}", "commit": commit[:7], "uncommitted_package_files": []}


class StoredCounter:
    """Row count of the items table, read by the harness while the workers write."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.conn: sqlite3.Connection | None = None

    def count(self) -> int:
        if self.conn is None:
            if not self.db.exists():
                return 0
            self.conn = sqlite3.connect(str(self.db), timeout=5, isolation_level=None)
        try:
            return int(self.conn.execute("SELECT COUNT(*) FROM items").fetchone()[0])
        except sqlite3.OperationalError:  # table not created yet
            return 0

    def urls(self) -> set[str]:
        if not self.db.exists():
            return set()
        conn = sqlite3.connect(str(self.db), timeout=5)
        try:
            return {row[0] for row in conn.execute("SELECT url FROM items")}
        finally:
            conn.close()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def probe_at(probe: dict[str, Any] | None, t: float, column: int = 1) -> float | None:
    """A probe counter (1 = round trips, 2 = seconds blocked in sync calls) at wall time t,
    linear between the 0.1 s samples."""
    if not probe or not probe["samples"]:
        return None
    samples = probe["samples"]
    if t <= samples[0][0]:
        return float(samples[0][column])
    for s1, s2 in zip(samples, samples[1:]):
        t1, t2 = s1[0], s2[0]
        if t1 <= t <= t2:
            c1, c2 = s1[column], s2[column]
            return c1 + (c2 - c1) * ((t - t1) / (t2 - t1) if t2 > t1 else 1.0)
    return float(samples[-1][column])


def probe_delta(probes: list[dict[str, Any] | None], t0: float, t1: float, column: int = 1) -> float:
    """Sum over workers of a probe counter's increase between t0 and t1."""
    total = 0.0
    for p in probes:
        a, b = probe_at(p, t0, column), probe_at(p, t1, column)
        if a is not None and b is not None:
            total += b - a
    return total


def sum_stats(probes: list[dict[str, Any] | None], keys: list[str]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for p in probes:
        if p:
            for k in keys:
                total[k] += int(p["stats"].get(k, 0) or 0)
    return {k: total[k] for k in keys}


def fetch_accounting(state: dict[str, Any]) -> dict[str, Any]:
    """Fetches per canonical URL from the site's hit counts (the site sees every worker, dead or not).

    A duplicate fetch is a fetch of a canonical URL beyond what a correct crawler needs: one, except
    /flaky which answers 503 `flaky_failures` times by design. robots.txt is fetched once per worker
    process start and reported apart.
    """
    base = state["url"]
    per_url: Counter[str] = Counter()
    robots = 0
    for path, n in state["hits"].items():
        if path == "/robots.txt":
            robots += n
            continue
        per_url[canonicalize_url(base + path)] += n
    allowed = {url: 1 for url in per_url}
    allowed[canonicalize_url(base + "/flaky")] = 1 + int(state["flaky_failures"])
    dups = {url: n - allowed[url] for url, n in per_url.items() if n > allowed[url]}
    return {
        "fetches": sum(per_url.values()),
        "unique_urls_fetched": len(per_url),
        "duplicate_fetches": sum(dups.values()),
        "urls_fetched_more_than_once": len(dups),
        "robots_fetches": robots,
    }


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def make_workdir(keep: str | None, name: str) -> tuple[Path, bool]:
    """A directory for logs, probes and the SQLite file; kept only with --keep."""
    if keep:
        path = Path(keep).resolve() / name
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path, True
    return Path(tempfile.mkdtemp(prefix=f"bench-{name}-")), False
