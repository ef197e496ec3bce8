"""One node's side of the revisit schedule, shared by the recrawl middlewares and the mover.

`RecrawlNode.of(crawler)` is built once per crawler (like `RedisContext.of`): the config, the
schedule's scripts on the node's one Redis client, and the two things every component needs: a
request's schedule fingerprint and the queue member its next revisit pushes.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from redis.exceptions import ResponseError
from scrapy import signals

from distributed_crawler.connection.clients import refused_for_good
from distributed_crawler.connection.lua import reply_text
from distributed_crawler.connection.policy import NodeStopping, Purpose, RedisPolicy
from distributed_crawler.core.context import RedisContext
from distributed_crawler.core.registry import SourceCache
from distributed_crawler.frontier.base import RevisitRecord
from distributed_crawler.frontier.codec import RequestCodec, UnserializableRequestError, allowed_classes
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.internals import scheduler_of
from distributed_crawler.meta import (
    ARTICLE_REVISIT_META,
    BACKFILL_META,
    DELIVERY_META,
    EXPIRES_AT_META,
    LEASE_META,
    RECRAWL_META,
)
from distributed_crawler.recrawl.rules import RecrawlConfig, Revisit
from distributed_crawler.recrawl.schedule import FINGERPRINT_CHARS, Recorded, RevisitSchedule, recorded_from

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

_NODES: weakref.WeakKeyDictionary[Crawler, RecrawlNode] = weakref.WeakKeyDictionary()
# Headers a downloader middleware adds to every request: the stored revisit gets them afresh.
DOWNLOAD_HEADERS = (
    "If-None-Match",
    "If-Modified-Since",
    "Cookie",
    "User-Agent",
    "Accept",
    "Accept-Language",
    "Accept-Encoding",
    "Referer",
)


class RecrawlTicket(NamedTuple):
    """What recrawl/middleware.py notes on a revisitable request (meta RECRAWL_TICKET_META)."""

    fingerprint: str
    revisit: Revisit
    conditional: bool  # validators were sent: a 304 is ours to handle


class RecrawlNode:
    def __init__(self, crawler: Crawler, config: RecrawlConfig, policy: RedisPolicy) -> None:
        self.crawler = crawler
        self.policy = policy
        self.config = config
        self.stats = crawler.stats
        self._schedule: RevisitSchedule | None = None
        self._codec: RequestCodec | None = None
        self._closed = False
        self.recorded = asyncio.Event()  # set by each record: wakes this node's mover when the schedule was empty

    @classmethod
    def of(cls, crawler: Crawler) -> RecrawlNode:
        node = _NODES.get(crawler)
        if node is None:
            settings = crawler.settings
            node = _NODES[crawler] = cls(
                crawler,
                RecrawlConfig.from_settings(settings),
                RedisContext.of(crawler).policy,
            )
            crawler.signals.connect(node._spider_closed, signal=signals.spider_closed, weak=False)
        return node

    @property
    def schedule(self) -> RevisitSchedule:
        """The schedule on the node's client (acquired on first use; closed with the context on engine_stopped)."""
        if self._schedule is None:
            spider = self._spider()
            context = RedisContext.of(self.crawler).acquire()
            self._schedule = RevisitSchedule(context.client, context.frontier_for(spider.name))
        return self._schedule

    def _spider(self) -> Spider:
        spider = self.crawler.spider
        if spider is None:
            raise RuntimeError("RecrawlNode used before the spider exists")
        return spider

    def _spider_closed(self, spider: Spider, reason: str) -> None:
        """Stop retrying records. The client is not released here: the mover may still be mid-call
        (signal handlers run in any order); the context closes it on engine_stopped."""
        self._closed = True

    def fingerprint(self, request: Request) -> str:
        """The URL's name in the schedule: the first 64 bits of its request fingerprint (hex)."""
        return self.crawler.request_fingerprinter.fingerprint(request).hex()[:FINGERPRINT_CHARS]

    def member(self, request: Request, article: bool = False) -> str:
        """The queue member the next revisit pushes: this request without one delivery's leftovers.

        In a per-host frontier it carries its slot and `again` (a revisit is not a new page for the host's
        budget); `article`: marked to follow ARTICLE_REVISITS. "" when the request cannot travel as JSON
        (then the stored one is kept).
        """
        if self._codec is None:
            self._codec = RequestCodec(self._spider(), allowed_classes(self.crawler.settings))
        headers = request.headers.copy()
        for name in DOWNLOAD_HEADERS:
            headers.pop(name, None)
        # a revisit is a new life of the URL: the expiry of its first enqueue does not carry over
        meta = {k: v for k, v in request.meta.items() if k not in DELIVERY_META and k != EXPIRES_AT_META}
        if article:
            meta[ARTICLE_REVISIT_META] = True
        clean = request.replace(headers=headers, meta=meta, dont_filter=False)
        slot = self.schedule.frontier.placement(clean.url).slot
        try:
            payload = self._codec.encode(clean, slot=slot, again=slot is not None)
        except UnserializableRequestError as exc:
            logger.warning("Revisit of %s keeps its stored request: %s", request.url, exc)
            return ""
        # the codec's compact payload: no "id" without dont_filter, so a revisit pushed again while
        # its previous push still waits is the same queue member, not a second one
        return make_member(payload, clean.priority)

    async def record(self, request: Request, ticket: RecrawlTicket, outcome: str, **fields: str) -> Recorded | None:
        """recrawl_record.lua for a fetched request, retried until Redis takes it (PUSH).

        Not recorded (Redis refuses it, or the node stops during an outage): a revisit keeps its
        due time (RECRAWL_PENDING_SECONDS after its move), a first visit is not scheduled; one
        ERROR line says which.
        """
        return await self._write(request, self.revisit_record(request, ticket, outcome, fields))

    async def _write(self, request: Request, revisit: RevisitRecord) -> Recorded | None:
        async def write() -> Recorded | None:
            try:
                return await self.schedule.write(revisit)
            except ResponseError as exc:
                if not refused_for_good(exc):
                    raise  # a full Redis: PUSH waits until it has room
                logger.error(
                    "Redis refused to record the revisit of %s (%s); check %s with `dcrawl schedule %s`",
                    request.url,
                    str(exc)[:200],
                    self.schedule.keys_for(request.url).state,
                    self._spider().name,
                )
                return None

        try:  # PUSH: the next visit is new work, kept until Redis takes it
            recorded = await self.policy.run(Purpose.PUSH, write, stopped=lambda: self._closed)
        except NodeStopping:
            logger.error(
                "Revisit of %s not recorded (Redis unreachable as the node stops): a revisit comes back after "
                "RECRAWL_PENDING_SECONDS, a first visit is not scheduled until the page is found again",
                request.url,
            )
            return None
        if recorded is None:
            return None
        self._count(recorded)
        return recorded

    def _count(self, recorded: Recorded) -> None:
        self.recorded.set()
        self.stats.inc_value(f"recrawl/recorded/{recorded.change}")
        if recorded.ended:
            self.stats.inc_value("recrawl/ended")

    async def record_at_ack(self, request: Request, ticket: RecrawlTicket, outcome: str, **fields: str) -> None:
        """As `record`, written in the call that acks the request's lease when this node's scheduler
        scrapes it (lua/recrawl_ack.lua: no round trip of its own, never acked without it); else
        (no lease: not from our frontier) recorded now."""
        lease = request.meta.get(LEASE_META)
        attach = getattr(scheduler_of(self.crawler), "record_with_ack", None)
        record = self.revisit_record(request, ticket, outcome, fields)
        if isinstance(lease, bytes) and callable(attach) and attach(lease, record, partial(self._acked, request.url)):
            return
        await self._write(request, record)

    def revisit_record(
        self, request: Request, ticket: RecrawlTicket, outcome: str, fields: dict[str, str]
    ) -> RevisitRecord:
        """The record of a fetch (recrawl_record.lua's arguments, recrawl/schedule.py): `fields` the
        content digest and the response's validators."""
        member = self.member(request, article=ticket.revisit.article)
        etag = fields.get("etag", "")
        # If-None-Match is evaluated first and wins (RFC 9110 13.2.2): one validator is enough
        last_modified = "" if etag else fields.get("last_modified", "")
        revisit = ticket.revisit
        return self.schedule.revisit_record(
            ticket.fingerprint,
            revisit.interval,
            self.config.factor,
            outcome,
            digest=fields.get("digest", ""),
            etag=etag,
            last_modified=last_modified,
            member=member,
            url=request.url,
            horizon=revisit.horizon,
            plan=revisit.plan if revisit.article else None,
        )

    def _acked(self, url: str, reply: Any) -> None:
        """The reply for a record written with its page's ack: counted, or the refusal logged."""
        try:
            recorded = recorded_from(reply)
        except (TypeError, ValueError, IndexError):
            why = reply_text(reply[1]) if isinstance(reply, list) and len(reply) == 2 else str(reply)
            logger.error(
                "Redis refused to record the revisit of %s (%s); check %s with `dcrawl schedule %s`",
                url,
                why[:200],
                self.schedule.keys_for(url).state,
                self._spider().name,
            )
            return
        self._count(recorded)

    def revisit_for(self, request: Request) -> Revisit | None:
        """`meta["recrawl"]`, else the first matching `recrawl` rule of the URL's registered source
        (docs/sources.md), else RECRAWL_RULES, else the article plan (ARTICLE_REVISITS)."""
        if RECRAWL_META not in request.meta:
            matched, interval = SourceCache.of(self.crawler).table.recrawl_rule(request.url)
            if matched:
                return None if interval is None else Revisit(interval)
        return self.config.revisit_for(request)

    def ticket(self, request: Request) -> RecrawlTicket | None:
        """A ticket (no validators sent yet) for a revisitable request; None = never revisited."""
        revisit = self.revisit_for(request)
        return None if revisit is None else RecrawlTicket(self.fingerprint(request), revisit, False)

    def article_ticket(self, request: Request) -> RecrawlTicket | None:
        """A first fetch found an article no rule covers: its ARTICLE_REVISITS ticket (None: `[]`,
        `meta["recrawl"]` = 0 or its registered source's rule says never, or a backfill's story: its
        editing days are long past)."""
        if not self.config.article_revisits or RECRAWL_META in request.meta or BACKFILL_META in request.meta:
            return None
        if SourceCache.of(self.crawler).table.recrawl_rule(request.url)[0]:
            return None  # its source's own rule decided (a `0` there: never revisited)
        return RecrawlTicket(self.fingerprint(request), self.config.article_revisit(), False)
