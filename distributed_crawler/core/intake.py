"""What a node does with a request the engine enqueues: drop it as a local duplicate, refuse it,
or encode it for the frontier (its placement, expiry and envelope) and put it in the outbox."""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from distributed_crawler.connection.policy import Purpose
from distributed_crawler.connection.untrusted import finite
from distributed_crawler.core.admission import Admission, Refusal
from distributed_crawler.core.held import HeldRequests
from distributed_crawler.core.leases import LeaseTracker
from distributed_crawler.core.outbox import Outbox, OutboxEntry
from distributed_crawler.core.refusals import RefusalLog
from distributed_crawler.core.trouble import RedisTrouble
from distributed_crawler.dedup.recent import RecentFingerprints
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.codec import RequestCodec, UnserializableRequestError
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.meta import EXPIRES_AT_META, HOLD_META, LEASE_META, RETRY_DELAY_META, RETRY_TIMES_META
from distributed_crawler.urlhost import url_host

if TYPE_CHECKING:
    from scrapy import Request

    from distributed_crawler.core.scheduler_config import SchedulerConfig

logger = logging.getLogger(__name__)


class Intake:
    def __init__(
        self,
        config: SchedulerConfig,
        frontier: Frontier,
        codec: RequestCodec,
        trouble: RedisTrouble,
        leases: LeaseTracker,
        outbox: Outbox,
        recent: RecentFingerprints,
        dupefilter: Any,
        admission: Admission,
        refusals: RefusalLog,
        stats: Any,
        held: HeldRequests | None = None,
    ) -> None:
        self.config = config
        self.frontier = frontier
        self.codec = codec
        self.trouble = trouble
        self.held = held
        self.leases = leases
        self.outbox = outbox
        self.recent = recent
        self.df = dupefilter
        self.admission = admission
        self.refusals = refusals
        self.stats = stats
        self._refused: Counter[str] = Counter()  # requests the codec refused, by kind

    def enqueue(self, request: Request) -> bool:
        lease = request.meta.get(LEASE_META)
        hold = request.meta.pop(HOLD_META, None)
        if hold is not None:
            # a leased request a middleware will send itself a moment later: held here, lease and all
            if lease and self.held is not None and self.leases.held_back(lease):
                self.held.hold(request, hold)
                self.stats.inc_value("scheduler/held")
                return True
            if callable(getattr(hold, "cancel", None)):  # not ours to hold: handed back as any other
                hold.cancel()
        handover = lease if lease and self.leases.hand_over(lease) else None
        fingerprint = self.df.fingerprint_hex(request)
        # a new link this node already sent to the shared filter is a duplicate: dropped here
        # (dedup/recent.py); a hand-over must reach Redis (it removes its lease there)
        checked = handover is None and not request.dont_filter
        if checked and fingerprint in self.recent:
            self.stats.inc_value("dupefilter/filtered")
            self.stats.inc_value("dupefilter/filtered_locally")
            return False
        domain_hosts = self.outbox.domain_hosts
        host = url_host(request.url) if self.config.domain_max_hosts else ""
        refusal = self.admission.check(request)
        if refusal is None and host and not domain_hosts.allowed(host):  # Redis said so for an earlier request
            refusal = domain_hosts.refusal(host)
        if refusal is not None:
            self._refuse(request, refusal, "enqueue", fingerprint if checked else "", handover)
            if checked:
                self.recent.add(fingerprint)
            return False
        placement = self.frontier.placement(request.url)
        expires_at = self._expires_at(request)
        try:
            # a retry or a hand-back (it waits in delayed) of a page its host's budget already counted
            again = handover is not None and request.meta.get(RETRY_DELAY_META) is not None
            payload = self.codec.encode(request, slot=placement.slot, again=placement.slot is not None and again)
        except UnserializableRequestError as exc:
            self._log_refused(exc)
            if handover:
                self.leases.finished(handover, self.outbox.enqueued_seq)
            return False
        entry = OutboxEntry(
            fingerprint,
            request.dont_filter,
            # a successor starts at 0 deliveries: a retry or redirect is not a redelivery
            make_member(payload, request.priority, expires_at=expires_at),
            handover,
            max(0.0, finite(request.meta.get(RETRY_DELAY_META))),
            host=host,
        )
        p = placement
        if p.slot is not None:
            entry = entry._replace(slot=p.slot, interval=p.interval, budget=p.budget, in_flight=p.in_flight)
        self.outbox.add(entry)
        if checked:
            self.recent.add(fingerprint)
        return True

    def already_sent(self, request: Request) -> bool:
        """A new link this node sent to the shared filter lately (dedup/recent.py): `enqueue` would
        drop it, so it is counted as filtered here. A spider that asks before it yields a link spares
        the duplicate its trip through the spider middlewares, the engine and the scheduler."""
        if request.dont_filter or LEASE_META in request.meta or not self.recent.size:
            return False
        if self.df.fingerprint_hex(request) not in self.recent:
            return False
        self.stats.inc_value("dupefilter/filtered")
        self.stats.inc_value("dupefilter/filtered_locally")
        return True

    def _expires_at(self, request: Request) -> int:
        """Unix seconds after which `request` is dropped at lease (0 = never): meta `expires_at`,
        else REQUEST_TTL from its first enqueue (kept in meta, so a retry does not start again)."""
        given = request.meta.get(EXPIRES_AT_META)
        if isinstance(given, (int, float)) and not isinstance(given, bool) and math.isfinite(given) and given > 0:
            return int(given)
        if not self.config.request_ttl:
            return 0
        request.meta[EXPIRES_AT_META] = expires = int(time.time()) + self.config.request_ttl
        return expires

    def refuse(self, request: Request, refusal: Refusal, source: str = "download", counted: bool = False) -> None:
        """A request refused after it left the queue (e.g. at connect time): dead-lettered once and
        never retried; its lease is acked as usual once its failure went through the scraper.
        `counted`: the refusal was counted and logged when it happened (the browser's proxy)."""
        attempts = int(request.meta.get(RETRY_TIMES_META, 0)) + 1  # it was tried, and refused at this try
        self._refuse(request, refusal, source, "", None, attempts, counted)

    def _refuse(
        self,
        request: Request,
        refusal: Refusal,
        source: str,
        fingerprint: str,
        handover: bytes | None,
        attempts: int = 0,
        counted: bool = False,
    ) -> None:
        """Queue the dead letter of a refused request in the outbox (so in order with this node's other
        writes, before the lease it concerns is acked); a hand-over's lease goes with it.

        `fingerprint` (a new link): dead-lettered only if the shared filter had not seen it, so a
        refused link found on a thousand pages is one dead letter."""
        extra: dict[str, Any] = {"attempts": attempts, "priority": request.priority}
        try:
            extra["payload"] = self.codec.encode(request)
        except UnserializableRequestError as exc:
            extra["payload_error"] = str(exc)[:300]
        letter = self.refusals.note(request.url, refusal, source, counted, **extra)
        self.outbox.add(OutboxEntry(fingerprint, not fingerprint, "", handover, refused=letter))

    async def mark_seen(self, requests: Sequence[Request]) -> list[bool]:
        """Add the requests' fingerprints to the seen-filter without queueing them (a page's
        canonical URL, fetched under another URL); True = it was new."""
        fingerprints = [self.df.fingerprint_hex(r) for r in requests]
        entries: list[Any] = [(fp, False, "") for fp in fingerprints]
        add = partial(self.outbox.enqueuer.run, "add", entries, (), [r.url for r in requests])
        result = await self.trouble.run(Purpose.PUSH, "dedup add", add)
        for fingerprint in fingerprints:
            self.recent.add(fingerprint)  # a link to it from this node is dropped here too
        self.stats.inc_value("dupefilter/added", sum(1 for r in result if r))
        return [bool(r) for r in result]

    def _log_refused(self, exc: UnserializableRequestError) -> None:
        """A request the codec refused: counted by kind, logged once per kind with its reason."""
        kind = getattr(exc, "kind", "value")
        self._refused[kind] += 1
        self.stats.inc_value("scheduler/unserializable")
        self.stats.inc_value(f"scheduler/unserializable/{kind}")
        if self._refused[kind] == 1:
            logger.error(
                "Request not scheduled (%s): %s. Further requests refused for this reason are not logged, "
                "only counted in stats scheduler/unserializable/%s",
                kind,
                exc,
                kind,
            )
