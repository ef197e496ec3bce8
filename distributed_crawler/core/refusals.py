"""What a node does with a refused request: a dead letter, a stat, a rate-limited WARNING, a count.

Shared by the admission checks at enqueue (core/admission.py) and the refusals at connect time
(the private-address guard): the scheduler turns both into outbox entries, so the dead letter is
written once, in order with everything else this node enqueued, before the lease it concerns is
acked. Per-host, per-reason counts go to `{spider}:refused` (lua/refused.lua, bounded), which
`dcrawl hosts` shows.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

from redis.exceptions import ResponseError

from distributed_crawler.core.admission import Refusal, host_of
from distributed_crawler.queue.deadletters import failure_entry
from distributed_crawler.queue.scripts import lua_source

logger = logging.getLogger(__name__)

WARN_EVERY = 60.0  # at most one WARNING per host per this many seconds
WARNED_HOSTS_MAX = 10_000  # hosts whose last WARNING time is remembered (then forgotten all at once)
COUNTED_FIELDS_MAX = 10_000  # (reason, host) pairs counted in Redis; more go to "<reason> *"


def count_field(reason: str, host: str) -> str:
    return f"{reason} {host or '?'}"


def split_field(field: str) -> tuple[str, str]:
    """(reason, host) of a `{spider}:refused` field; host "*" = every host over the cap."""
    reason, _, host = field.partition(" ")
    return reason, host


class RefusalLog:
    """Stats, WARNINGs and dead-letter entries of refused requests, for one node."""

    def __init__(self, stats: Any, node_id: str, clock: Any = time.monotonic) -> None:
        self.stats = stats
        self.node_id = node_id
        self.clock = clock
        self._warned: dict[str, float] = {}
        self._pending: Counter[str] = Counter()  # count fields not yet added in Redis
        self._script: Any = None

    def note(self, url: str, refusal: Refusal, source: str, counted: bool = False, **extra: Any) -> str:
        """Count and log one refusal (unless it was `counted` already); returns its dead-letter entry (JSON)."""
        if counted:
            return failure_entry(url, refusal.reason, self.node_id, detail=refusal.detail, source=source, **extra)
        host = host_of(url)
        self.stats.inc_value("dc/refused")
        self.stats.inc_value(f"dc/refused/{refusal.reason}")
        self._add(count_field(refusal.reason, host), 1)
        now = self.clock()
        if now - self._warned.get(host, -WARN_EVERY) >= WARN_EVERY:
            if len(self._warned) >= WARNED_HOSTS_MAX:
                self._warned.clear()
            self._warned[host] = now
            logger.warning(
                "Refused %s (%s): %s; dead-lettered, not retried (further refusals for host %s within %ds are "
                "only counted: stats dc/refused/%s, `dcrawl hosts`)",
                url[:300],
                refusal.reason,
                refusal.detail,
                host or "?",
                WARN_EVERY,
                refusal.reason,
            )
        return failure_entry(url, refusal.reason, self.node_id, detail=refusal.detail, source=source, **extra)

    @property
    def counting(self) -> bool:
        """Counts wait to be added in Redis."""
        return bool(self._pending)

    def take_counts(self) -> Counter[str]:
        counts, self._pending = self._pending, Counter()
        return counts

    def _add(self, field: str, n: int) -> None:
        if field not in self._pending and len(self._pending) >= COUNTED_FIELDS_MAX:  # Redis away for long
            field = count_field(split_field(field)[0], "*")
        self._pending[field] += n

    def give_back(self, counts: Counter[str]) -> None:
        """Counts Redis did not take (an outage): added again with the next ones."""
        for field, n in counts.items():
            self._add(field, n)

    async def push_counts(self, client: Any, key: str) -> None:
        """Add the pending counts to `key` (lua/refused.lua); kept for later on an outage, dropped
        if Redis refuses them (the caller logs that)."""
        counts = self.take_counts()
        if not counts:
            return
        if self._script is None:
            self._script = client.register_script(lua_source("refused"))
        args: list[Any] = [COUNTED_FIELDS_MAX]
        for field, n in counts.items():
            args += [field, n]
        try:
            await self._script(keys=[key], args=args)
        except BaseException as exc:
            if not isinstance(exc, ResponseError):  # an outage (or a cancel): not written, kept
                self.give_back(counts)
            raise
