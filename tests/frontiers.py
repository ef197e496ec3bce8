"""Frontier helpers only tests need (the package's Frontier has no test-only methods)."""

from __future__ import annotations

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.unsharded import UnshardedFrontier


def pop(frontier: Frontier, count: int, lease_seconds: float, due_batch: int = 100) -> list[bytes]:
    """`lease` as a flat list: the leased members, then b"" for each expired request dropped."""
    leased = run_sync(frontier.lease(count, lease_seconds, due_batch))
    return [x.lease for x in leased.leases] + [b""] * leased.expired


def with_mode(frontier: UnshardedFrontier, mode: str) -> UnshardedFrontier:
    """Another mode on the same client and keys, reusing the registered scripts."""
    return frontier_for_mode(frontier.client, frontier.keys, mode, frontier._scripts, **frontier.options)
