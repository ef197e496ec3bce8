"""A redelivered request runs alone on its node (reclaim.lua's killed_worker counts on it).

A redelivery means a node died or an ack was lost: the request may be what killed its last node,
so it runs with nothing beside it. Otherwise every request in flight beside it would be charged a
delivery each time it crashes a node, and innocent requests would be dead-lettered with the poison.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from functools import partial
from typing import TYPE_CHECKING

from distributed_crawler.connection.policy import Purpose
from distributed_crawler.core.leases import LeaseTracker, Stage
from distributed_crawler.core.trouble import RedisTrouble
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.internals import downloads_in_flight, wake_engine
from distributed_crawler.meta import LEASE_META

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


class Quarantine:
    def __init__(
        self,
        frontier: Frontier,
        trouble: RedisTrouble,
        leases: LeaseTracker,
        buffer: deque[Request],
        crawler: Crawler,
        node_id: str,
    ) -> None:
        self.frontier = frontier
        self.trouble = trouble
        self.leases = leases
        self.buffer = buffer
        self.crawler = crawler
        self.node_id = node_id
        self.request: Request | None = None  # the redelivered request, run alone
        self.draining = False  # waiting for this node to be empty before taking one

    @property
    def active(self) -> bool:
        """Leasing is paused: a quarantined request runs, or the node drains to take one."""
        return self.request is not None or self.draining

    @property
    def lease(self) -> bytes | None:
        return self.request.meta[LEASE_META] if self.request is not None else None

    def node_empty(self) -> bool:
        """This node holds no lease at all (nothing buffered, running or waiting for its ack)."""
        return not self.buffer and not len(self.leases) and not self.leases.pending_acks()

    def _node_empty_but(self, lease: bytes) -> bool:
        return not self.buffer and self.leases.held() == [lease] and not self.leases.pending_acks()

    async def admit(self, suspects: list[Request], normal: list[Request], was_empty: bool) -> list[Request]:
        """Redelivered requests just leased: one runs alone if the node was empty, else the node
        drains first. Returns the requests to give back (released, no delivery counted)."""
        if self.request is None and was_empty:
            # marked before it runs: if this node dies now, reclaim.lua knows it died running it alone
            lease = suspects[0].meta[LEASE_META]
            await self.trouble.run(Purpose.LEASE, "marking a quarantined request", partial(self._mark, lease))
            self.request = suspects[0]
            self.crawler.stats.inc_value("scheduler/quarantined")
            return suspects[1:] + normal
        self.buffer.extend(normal)
        self.draining = True  # finish current work, then take the redelivered one alone
        return suspects

    async def _mark(self, lease: bytes) -> None:
        await self.frontier.mark_solo(lease, self.node_id)

    async def unmark(self, leases: list[bytes], done: bool = False) -> None:
        """The quarantine mark of leases given back (and, `done`: the death count of a request that
        ran alone and finished, so a later redelivery starts from none)."""
        deaths = [hashlib.sha1(lease.split(b":", 2)[2]).hexdigest() for lease in leases] if done else []
        await self.frontier.unmark_solo(leases, deaths)

    async def step(self) -> None:
        """While draining or running a quarantined request, do not lease anything else."""
        lease = self.lease
        if lease is not None:
            if not self.leases.holds(lease) and not self.leases.pending_acks():
                self.request = None  # done and acked: it killed no one this time
                await self.trouble.run(
                    Purpose.ACK, "unmarking a quarantined request", partial(self.unmark, [lease], True)
                )
            elif self.leases.holds(lease) and self._node_empty_but(lease):
                wake_engine(self.crawler)
        elif self.draining and self.node_empty():
            self.draining = False
        await asyncio.sleep(0.05)

    def take(self) -> Request | None:
        """The quarantined request, once it is alone on the node and not started yet."""
        lease = self.lease
        if lease is None or downloads_in_flight(self.crawler):
            return None
        if self.leases.stage(lease) is Stage.BUFFERED and self._node_empty_but(lease):
            self.leases.started(lease)
            return self.request
        return None

    def unstarted(self) -> list[bytes]:
        """The quarantined lease if it never started (given back at close or flush)."""
        lease = self.lease
        return [lease] if lease is not None and self.leases.stage(lease) is Stage.BUFFERED else []

    def forget(self) -> None:
        self.request = None
