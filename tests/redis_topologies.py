"""Real Redis topologies for tests: a 3-master Redis Cluster, and master + replica + Sentinel.

Every server is bound to 127.0.0.1 on free ports with its data in a temp dir; every wait is bounded
and `stop()` kills what was started (also after a failed start).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from redis.cluster import key_slot
from redis.crc import REDIS_CLUSTER_HASH_SLOTS

from tests.conftest import RedisServer, free_port, free_ports


def _require_redis() -> None:
    if not shutil.which("redis-server") or not shutil.which("redis-cli"):
        pytest.fail("redis-server/redis-cli are not installed: run `make test`, which installs them")


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30.0, every: float = 0.1) -> None:
    """Poll `check` until it is true; fail the test naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}")


def _ping(port: int) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
    try:
        return bool(client.ping())
    finally:
        client.close()


class NodeExited(RuntimeError):
    """A redis-server exited while starting (its log's last line says why)."""


def _started(port: int, proc: subprocess.Popen) -> bool:
    """The node answers PING; raises NodeExited (not waited out) when its process is gone."""
    if proc.poll() is not None:
        log = Path(proc.args[proc.args.index("--logfile") + 1])
        last = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        raise NodeExited(f"redis-server :{port} exited with {proc.returncode}: {' '.join(last)}")
    return _ping(port)


class RedisClusterNodes:
    """`redis-server --cluster-enabled yes` x N + `redis-cli --cluster create` (`replicas` per master;
    one master without replicas takes every slot itself)."""

    def __init__(self, workdir: Path, masters: int = 3, replicas: int = 0) -> None:
        self.workdir = workdir
        self.replicas = replicas
        self.size = masters * (1 + replicas)
        self.ports: list[int] = []
        self.procs: list[subprocess.Popen] = []
        self.commands: list[list[str]] = []

    @property
    def url(self) -> str:
        """One seed node, as REDIS_URL names it with REDIS_CLUSTER=1."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self, attempts: int = 3) -> RedisClusterNodes:
        """Start the nodes on fresh ports; a node that exits at start (its port taken by another
        program meanwhile) means a new try on other ports, up to `attempts`."""
        _require_redis()
        for attempt in range(1, attempts + 1):
            try:
                return self._start()
            except NodeExited:
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    def _start(self) -> RedisClusterNodes:
        ports = free_ports(2 * self.size)  # node ports and bus ports, all distinct
        self.ports, bus_ports = ports[: self.size], ports[self.size :]
        self.procs, self.commands = [], []
        try:
            for port, bus_port in zip(self.ports, bus_ports):
                node_dir = self.workdir / str(port)
                node_dir.mkdir(parents=True, exist_ok=True)
                self.commands.append(
                    [
                        "redis-server",
                        "--port",
                        str(port),
                        "--bind",
                        "127.0.0.1",
                        "--dir",
                        str(node_dir),
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                        "--cluster-enabled",
                        "yes",
                        # the bus port is picked too: port + 10000 may be taken or out of range
                        "--cluster-port",
                        str(bus_port),
                        "--logfile",
                        str(node_dir / "redis.log"),
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "2000",
                    ]
                )
                self.procs.append(
                    subprocess.Popen(self.commands[-1], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                )
            for port, proc in zip(self.ports, self.procs):
                wait_for(f"cluster node :{port}", lambda p=port, q=proc: _started(p, q), timeout=10, every=0.025)
            if self.size == 1:  # `redis-cli --cluster create` wants 3 masters: one node takes every slot
                self._own_every_slot(self.ports[0])
            else:
                self._create()
            for port in self.ports:
                wait_for(f"cluster_state:ok on :{port}", lambda p=port: self._state_ok(p), timeout=30)
            if self.replicas:
                wait_for("every replica in sync", self._replicas_in_sync, timeout=30)
        except BaseException:
            self.stop()
            raise
        return self

    @staticmethod
    def _own_every_slot(port: int) -> None:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
        try:
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, REDIS_CLUSTER_HASH_SLOTS - 1)
        finally:
            client.close()

    def _create(self) -> None:
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in self.ports),
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )

    @staticmethod
    def _state_ok(port: int) -> bool:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
        try:
            info = client.execute_command("CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            return "cluster_state:ok" in text and "cluster_slots_assigned:16384" in text
        finally:
            client.close()

    def _replicas_in_sync(self) -> bool:
        synced = 0
        for port in self.ports:
            client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
            try:
                info = client.info("replication")
                synced += info.get("role") == "slave" and info.get("master_link_status") == "up"
            finally:
                client.close()
        return synced == len(self.ports) - len(self.ports) // (1 + self.replicas)

    def live_ports(self) -> list[int]:
        return [port for port, proc in zip(self.ports, self.procs) if proc.poll() is None]

    def master_ports(self) -> list[int]:
        """The live masters' ports, as the cluster names them now (a failover changes them)."""
        for port in self.live_ports():
            client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
            try:
                text = client.execute_command("CLUSTER", "NODES")
                lines = (text.decode() if isinstance(text, bytes) else str(text)).splitlines()
                # <id> <ip:port@bus> <flags> ...: masters not marked failed
                fields = [line.split() for line in lines if line.strip()]
                return sorted(
                    int(f[1].split("@")[0].rsplit(":", 1)[1])
                    for f in fields
                    if "master" in f[2].split(",") and not {"fail", "fail?"} & set(f[2].split(","))
                )
            except (redis.RedisError, OSError):
                continue
            finally:
                client.close()
        raise RuntimeError("no cluster node answers CLUSTER NODES")

    def pin(self, port: int, cpu: int) -> None:
        """`taskset` every thread of the node on `port` to one CPU core (Redis's bio threads too)."""
        if not shutil.which("taskset"):
            raise RuntimeError("taskset is not installed (util-linux)")
        pid = self.procs[self.ports.index(port)].pid
        subprocess.run(["taskset", "-a", "-p", "-c", str(cpu), str(pid)], check=True, capture_output=True, timeout=10)

    def client(self) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.live_ports()[0], socket_timeout=5)

    def kill_node(self, port: int) -> None:
        """kill -9 of one node."""
        proc = self.procs[self.ports.index(port)]
        proc.kill()
        proc.wait(10)

    def wait_slot_moved(self, key: str, old_port: int, timeout: float = 60.0) -> int:
        """Until a live node serves `key`'s slot as master (a replica took over); returns its port."""
        found: list[int] = []

        def moved() -> bool:
            for port in self.live_ports():
                if self._state_ok(port):
                    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
                    try:
                        slot = key_slot(key.encode())
                        for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                            if start <= slot <= end and int(master[1]) != old_port:
                                found.append(int(master[1]))
                                return True
                    finally:
                        client.close()
            return False

        wait_for(f"a replica to take over {key}'s slot", moved, timeout=timeout, every=0.2)
        return found[0]

    def master_port_of(self, key: str) -> int:
        """The port of the master that owns `key`'s hash slot (asked of the cluster, not computed)."""
        client = self.client()
        try:
            return client.get_node_from_key(key).port
        finally:
            client.close()

    def flushall(self) -> None:
        for port in self.ports:
            client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
            try:
                client.flushall()
            finally:
                client.close()

    def restart_all(self, down_seconds: float) -> None:
        """kill -9 of every node, `down_seconds` without a cluster, then the same nodes again (the
        cluster layout survives in nodes.conf; the data does not, there is no AOF here)."""
        self.stop()
        time.sleep(down_seconds)
        self.procs = [
            subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for cmd in self.commands
        ]
        for port in self.ports:
            wait_for(f"cluster_state:ok on :{port}", lambda p=port: self._state_ok(p), timeout=30)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


class SentinelSet:
    """1 master + 1 replica + 1 Sentinel (quorum 1, fast failure detection and failover)."""

    def __init__(
        self,
        workdir: Path,
        master_name: str = "dcmaster",
        down_after_ms: int = 1000,
        password: str = "",
        master_args: tuple[str, ...] = (),
    ) -> None:
        self.workdir = workdir
        self.master_name = master_name
        self.down_after_ms = down_after_ms
        self.password = password
        (workdir / "master").mkdir(parents=True, exist_ok=True)
        (workdir / "replica").mkdir(parents=True, exist_ok=True)
        auth = ("--requirepass", password, "--masterauth", password) if password else ()
        self.master = RedisServer(workdir / "master", *auth, *master_args)
        self.replica = RedisServer(workdir / "replica", *auth, "--replicaof", "127.0.0.1", str(self.master.port))
        if password:
            for server in (self.master, self.replica):
                server.url_override = f"redis://:{password}@127.0.0.1:{server.port}/0"
        self.sentinel_port = free_port()
        self.sentinel_proc: subprocess.Popen | None = None

    @property
    def sentinels(self) -> str:
        """The REDIS_SENTINELS value."""
        return f"127.0.0.1:{self.sentinel_port}"

    @property
    def env(self) -> dict[str, str]:
        """What a worker needs to reach the master through Sentinel."""
        return {
            "REDIS_SENTINELS": self.sentinels,
            "REDIS_SENTINEL_MASTER": self.master_name,
            "REDIS_URL": "redis://127.0.0.1:6379/0",
        }  # host ignored with Sentinel; db, auth, TLS used

    def start(self) -> SentinelSet:
        _require_redis()
        try:
            self.master.start()
            self.replica.start()
            conf = self.workdir / "sentinel.conf"  # Sentinel rewrites its config: a file of its own
            conf.write_text(
                f"port {self.sentinel_port}\nbind 127.0.0.1\ndir {self.workdir}\n"
                f"sentinel monitor {self.master_name} 127.0.0.1 {self.master.port} 1\n"
                f"sentinel down-after-milliseconds {self.master_name} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.master_name} 5000\n"
                f"sentinel parallel-syncs {self.master_name} 1\n"
                + (f"sentinel auth-pass {self.master_name} {self.password}\n" if self.password else "")
            )
            self.sentinel_proc = subprocess.Popen(
                ["redis-server", str(conf), "--sentinel"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wait_for("the replica in sync", self._replica_in_sync, timeout=30)
            wait_for("Sentinel to see the replica", self._sentinel_sees_replica, timeout=30)
        except BaseException:
            self.stop()
            raise
        return self

    def sentinel_client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.sentinel_port, socket_timeout=2)

    def _replica_in_sync(self) -> bool:
        client = redis.Redis.from_url(self.replica.url, socket_timeout=2)
        try:
            return client.info("replication").get("master_link_status") == "up"
        finally:
            client.close()

    def _sentinel_sees_replica(self) -> bool:
        client = self.sentinel_client()
        try:
            replicas = client.sentinel_slaves(self.master_name)
            return any(int(r["port"]) == self.replica.port and "s_down" not in r["flags"] for r in replicas)
        finally:
            client.close()

    def master_port(self) -> int:
        """The master's port as Sentinel names it now."""
        client = self.sentinel_client()
        try:
            _, port = client.sentinel_get_master_addr_by_name(self.master_name)
            return int(port)
        finally:
            client.close()

    def kill_master(self) -> None:
        """kill -9 of the current master (no shutdown save, no goodbye to the replica)."""
        assert self.master.proc is not None
        self.master.proc.kill()
        self.master.proc.wait(10)

    def wait_failover(self, timeout: float = 60.0) -> None:
        """Until Sentinel names the replica as master and the replica accepts writes."""

        def promoted() -> bool:
            if self.master_port() != self.replica.port:
                return False
            client = redis.Redis.from_url(self.replica.url, socket_timeout=2)
            try:
                return client.info("replication").get("role") == "master"
            finally:
                client.close()

        wait_for("the Sentinel failover", promoted, timeout=timeout, every=0.2)

    def stop(self) -> None:
        if self.sentinel_proc and self.sentinel_proc.poll() is None:
            self.sentinel_proc.kill()
            self.sentinel_proc.wait(10)
        for server in (self.replica, self.master):
            if server.proc and server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait(10)
