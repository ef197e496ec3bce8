"""A process held to a fraction of one core: a cgroup of its own with a CFS quota (bench/cluster.py).

Why: on a machine with fewer cores than masters + workers need, no Redis master is ever the
bottleneck, so "3 masters vs 1" compares the machine, not the sharding. Held to `fraction` of a
core each, the masters are the bottleneck and a crawl over 3 of them can show what it buys.
cgroup v1 (`/sys/fs/cgroup/cpu/<name>/cpu.cfs_quota_us`) or v2 (`/sys/fs/cgroup/<name>/cpu.max`),
whichever this machine has; every cgroup made is removed by `close()` (its processes moved back
to the parent first), which the bench calls in `finally`, so also on an error or a signal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PERIOD_US = 100_000
V1 = Path("/sys/fs/cgroup/cpu")
V2 = Path("/sys/fs/cgroup")


def _v2_has_cpu() -> bool:
    controllers = V2 / "cgroup.controllers"
    return controllers.exists() and "cpu" in controllers.read_text().split()


class CpuQuota:
    """Cgroups named `<prefix>-<name>`, each held to `fraction` of one core."""

    def __init__(self, fraction: float, prefix: str) -> None:
        if not 0 < fraction <= 64:
            raise SystemExit(f"--redis-cpu-quota {fraction}: a fraction of one core, e.g. 0.05")
        self.quota_us = max(1000, round(fraction * PERIOD_US))  # the kernel's minimum is 1 ms
        self.prefix = prefix
        self.v2 = not (V1 / "cpu.cfs_quota_us").exists()
        if self.v2 and not _v2_has_cpu():
            raise SystemExit("--redis-cpu-quota needs the cgroup cpu controller (v1 /sys/fs/cgroup/cpu or v2 cpu.max)")
        self.made: list[Path] = []

    def limit(self, pid: int, name: str) -> dict[str, Any]:
        """Move `pid` (all of its threads) into a new cgroup held to the quota; what the kernel has."""
        group = (V2 if self.v2 else V1) / f"{self.prefix}-{name}"
        group.mkdir()
        self.made.append(group)
        if self.v2:
            (group / "cpu.max").write_text(f"{self.quota_us} {PERIOD_US}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(self.quota_us))
        (group / "cgroup.procs").write_text(str(pid))
        limit = (
            (group / "cpu.max").read_text().strip()
            if self.v2
            else f"{(group / 'cpu.cfs_quota_us').read_text().strip()} {(group / 'cpu.cfs_period_us').read_text().strip()}"
        )
        procs = (group / "cgroup.procs").read_text().split()
        return {"cgroup": str(group), "quota_period_us": limit, "pids": [int(p) for p in procs]}

    def close(self) -> None:
        """Remove every cgroup made (processes still in one go back to its parent first)."""
        while self.made:
            group = self.made.pop()
            try:
                for pid in (group / "cgroup.procs").read_text().split():
                    try:
                        (group.parent / "cgroup.procs").write_text(pid)
                    except OSError:  # exited meanwhile
                        pass
                group.rmdir()
            except FileNotFoundError:
                pass
