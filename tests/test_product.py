"""One crawler proven whole (tests/product.py): topology x storage x fault, every default on.

`make test` runs DIAGONAL (every topology, storage and fault at least once); `make test-matrix`
(`pytest --matrix`) runs MATRIX, every combination that makes sense:
- `redis-kill9-aof` only on one Redis: a Sentinel or Cluster master killed is `master-failover`;
- `master-failover` only where a replica takes over (Sentinel, Cluster with one replica a master);
- every other fault on every topology and every storage.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.product import (
    FAULTS,
    TOPOLOGIES,
    MariaDBStorage,
    PostgreSQLStorage,
    SQLiteStorage,
    Storage,
    Topology,
    check_invariants,
    run_product,
)

STORAGES = ("sqlite", "postgresql", "mariadb")


def applies(topology: str, fault: str) -> bool:
    if fault == "redis-kill9-aof":
        return topology == "redis"
    if fault == "master-failover":
        return topology != "redis"
    return True


MATRIX = [(t, s, f) for t in TOPOLOGIES for s in STORAGES for f in FAULTS if applies(t, f)]
DIAGONAL = [
    ("redis", "sqlite", "none"),
    ("redis", "postgresql", "redis-kill9-aof"),
    ("redis", "mariadb", "worker-sigstop"),
    ("sentinel", "sqlite", "master-failover"),
    ("sentinel", "postgresql", "storage-down"),
    ("cluster-1", "mariadb", "redis-full"),
    ("cluster-6", "sqlite", "worker-kill9"),
    ("cluster-6", "postgresql", "master-failover"),
]
CASES = [
    pytest.param(
        t,
        s,
        f,
        id=f"{t}-{s}-{f}",
        # a group of its own: under xdist the cases spread over the workers
        marks=[pytest.mark.xdist_group(f"{t}-{s}-{f}"), *([] if (t, s, f) in DIAGONAL else [pytest.mark.matrix])],
    )
    for t, s, f in MATRIX
]


@pytest.fixture
def topology(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Topology]:
    name, fault = request.node.callspec.params["topology_name"], request.node.callspec.params["fault"]
    made = TOPOLOGIES[name](tmp_path / "redis", fault == "master-failover")
    yield made
    made.stop()


@pytest.fixture
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    name = request.node.callspec.params["storage_name"]
    made: Storage
    if name == "sqlite":
        made = SQLiteStorage(tmp_path / "items.db")
    elif name == "postgresql":
        made = PostgreSQLStorage(request.getfixturevalue("pg_admin"))
    else:
        made = MariaDBStorage(request.getfixturevalue("mariadb_server"))
    yield made
    made.stop()


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize(("topology_name", "storage_name", "fault"), CASES)
def test_the_whole_crawler(
    topology_name: str, storage_name: str, fault: str, topology: Topology, storage: Storage, tmp_path: Path
) -> None:
    check_invariants(run_product(tmp_path, topology, storage, fault))


def test_the_diagonal_covers_every_axis() -> None:
    """CI's diagonal holds every topology, storage and fault at least once, and only real cases."""
    assert set(DIAGONAL) <= set(MATRIX)
    for axis, values in enumerate((TOPOLOGIES, STORAGES, FAULTS)):
        assert {case[axis] for case in DIAGONAL} == set(values)
