"""What Redis may throw at a node's scheduler, and what the node does about it.

Outages are the node's RedisPolicy's (connection/policy.py): each call names its Purpose (lease,
ack, push, dead letter, heartbeat, stats). What is left here is data: a key of the wrong type, a
corrupt key or a script that refuses it mean "wait and retry" (or skip, for a degraded purpose),
with one ERROR line per episode for the operator; no scheduler task dies because of data.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from redis.exceptions import ResponseError

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.policy import Purpose, RedisPolicy
from distributed_crawler.connection.untrusted import EpisodeLog, WrongTypeLog, is_wrong_type, preview
from distributed_crawler.core.lifecycle import Lifecycle
from distributed_crawler.dedup.dupefilter import DEDUP_TYPES, DedupDataError
from distributed_crawler.dedup.recent import RecentFingerprints
from distributed_crawler.frontier.base import Frontier

logger = logging.getLogger(__name__)

DATA_BACKOFF_MAX = 5.0  # a degraded call refused for its data: how long its loop waits before the next round
BROKEN_HOSTS_LOGGED = 10_000  # host queue keys of the wrong type remembered (logged once each)


class RedisTrouble:
    def __init__(
        self,
        frontier: Frontier,
        dupefilter: Any,
        policy: RedisPolicy,
        recent: RecentFingerprints,
        lifecycle: Lifecycle,
    ) -> None:
        self.frontier = frontier
        self.df = dupefilter
        self.policy = policy
        self.recent = recent
        self.lifecycle = lifecycle
        # a failover or a restart may have lost writes Redis had acknowledged (asynchronous
        # replication): links this node sent may be gone, so the shared filter decides again
        policy.when_back(recent.clear)
        self._wrong_types = WrongTypeLog("scheduling", logger)
        self._data_errors = EpisodeLog(logger)
        self._broken_hosts: set[str] = set()  # host queue keys of the wrong type, logged once each

    async def run(  # Any, as RedisPolicy.run (see there)
        self, purpose: Purpose, what: str, call: Any, default: Any = None, stopped: Callable[[], bool] | None = None
    ) -> Any:
        """Run a Redis call for `purpose` (the policy's behaviour: retry, wait or degrade), backing
        off on bad data too. Closing: NodeStopping, the caller's work stays leased or in the outbox."""
        return await self.policy.run(
            purpose,
            call,
            default=default,
            stopped=stopped or self._stopped,
            on_error=partial(self.failed, what),  # re-raises what is a bug
            on_ok=partial(self.ok, what),
        )

    def _stopped(self) -> bool:
        return self.lifecycle.stopped

    def _expected_types(self) -> dict[str, tuple[str, ...]]:
        """Every key the scheduler's scripts touch, with the Redis types they need."""
        expected = self.frontier.expected_types()
        dedup = getattr(self.df, "dedup", None)
        expected[self.df.key] = DEDUP_TYPES.get(getattr(dedup, "mode", ""), ("hash", "set", "MBbloom--"))
        return expected

    def report_broken_hosts(self, hosts: list[str]) -> None:
        """The lease dropped these hosts from ready (queue key of the wrong type): one ERROR per key."""
        for host in hosts:
            key = self.frontier.host_queue_key(host)
            if key in self._broken_hosts:
                continue
            if len(self._broken_hosts) < BROKEN_HOSTS_LOGGED:
                self._broken_hosts.add(key)
            shown = preview(key)
            logger.error(
                "Redis key %s (the queue of host %s) is not a sorted set, or %s/ (its list) not a list: that "
                "host is no longer served; inspect them with `redis-cli type '%s'` and `redis-cli type '%s/'`, "
                "then remove the wrong one with `redis-cli del` (new requests for the host queue again)",
                shown,
                preview(host),
                shown,
                shown,
                shown,
            )

    async def failed(self, what: str, exc: BaseException) -> None:
        """Why a Redis call refused its data, logged once per episode; re-raises what is a bug
        (a transient error raised while looking counts as the call's: the policy's)."""
        frontier = self.frontier
        if isinstance(exc, DedupDataError):
            self._data_errors.failed(what, "%s; the node waits and retries (%s)", exc, what)
        elif is_wrong_type(exc):
            fixes = {self.df.key: f"dcrawl dedup reset {frontier.spider}"}
            await self._wrong_types.check(frontier.client, self._expected_types(), fixes, exc)
        elif isinstance(exc, ResponseError):
            await self._diagnose_script_error(what, exc)
        else:
            raise exc

    async def _diagnose_script_error(self, what: str, exc: ResponseError) -> None:
        """A script error that is not WRONGTYPE: a corrupt counter, foreign data, or a bug."""
        frontier = self.frontier
        fix = f"a corrupt key or a bug: check the keys of this spider (`dcrawl status {frontier.spider}`)"
        if "integer" in str(exc) or "overflow" in str(exc):
            seq = frontier.sequence_key
            try:
                raw = await maybe_await(frontier.client.get(seq))
            except ResponseError:
                raw = None
            if raw is not None and not raw.isdigit():
                fix = f"{seq} holds {preview(raw, 40)!r}, not a counter: `redis-cli del '{seq}'`"
        self._data_errors.failed(
            what,
            "Redis refused %s (%s); %s. The node keeps its work and retries with backoff",
            what,
            str(exc)[:300],
            fix,
            exc_info=exc,
        )

    async def ok(self, what: str) -> None:
        self._data_errors.ok(what)
        if self._wrong_types.reported:
            try:
                await self._wrong_types.resolved(self.frontier.client, self._expected_types())
            except ResponseError:
                pass  # looked at again after the next call
