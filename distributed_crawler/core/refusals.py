"""What a node does with a refused request: a dead letter, a stat, a rate-limited WARNING, a count.

Shared by the admission checks at enqueue (core/admission.py) and the refusals at connect time
(the private-address guard): the scheduler turns both into outbox entries, so the dead letter is
written once, in order with everything else this node enqueued, before the lease it concerns is
acked. A request refused after it was leased for a reason Scrapy only drops it for (robots.txt)
is `count`ed, not dead-lettered.

Every refusal is counted per host and reason in `{spider}:refused` (lua/refused.lua, bounded: `dcrawl
hosts`) and, with the change feed on, per source and reason in the source's hash (field
`x:<reason>`, lua/source_record.lua: `dcrawl sources`), never as an error of the source. The counts
are kept here and written together (connection/batch.py: one round trip per Redis server) by the
lease task at most every FLUSH_SECONDS: a refusal costs no round trip of its own.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from distributed_crawler.connection.batch import Batch
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.core.admission import Refusal, host_of
from distributed_crawler.core.registry import SourceCache
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.frontier.deadletters import failure_entry
from distributed_crawler.keyspace import fill

logger = logging.getLogger(__name__)

WARN_EVERY = 60.0  # at most one WARNING per host per this many seconds
WARNED_HOSTS_MAX = 10_000  # hosts whose last WARNING time is remembered (then forgotten all at once)
COUNTED_FIELDS_MAX = 10_000  # (reason, host) pairs counted in Redis; more go to "<reason> *"
SOURCES_COUNTED_MAX = 10_000  # (source, reason) pairs kept for the next write; more are not counted
FLUSH_SECONDS = 1.0  # the counts are written at most this often (core/lease_keeper.py)


@dataclass(frozen=True)
class SourceCounts:
    """Where a refusal is counted for its source (the change feed's source hashes, events/sources.py):
    SOURCE_KEY, SOURCES_KEY, SOURCE_DAYS; `source_of` names a URL's source. Off with the feed."""

    source_key: str
    index_key: str
    days: int
    source_of: Callable[[str], str]

    @classmethod
    def from_settings(cls, settings: Any, spider: str, source_of: Callable[[str], str]) -> SourceCounts | None:
        read = SettingsReader(settings)
        if not read.bool("EVENTS_ENABLED"):
            return None
        return cls(
            source_key=read.str("SOURCE_KEY"),
            index_key=fill(read.str("SOURCES_KEY"), spider),
            days=read.int("SOURCE_DAYS", min=1, max=366),
            source_of=source_of,
        )

    def keys(self, spider: str, source: str) -> list[str]:
        return [fill(self.source_key, spider, source=source), self.index_key]


def count_field(reason: str, host: str) -> str:
    return f"{reason} {host or '?'}"


def split_field(field: str) -> tuple[str, str]:
    """(reason, host) of a `{spider}:refused` field; host "*" = every host over the cap."""
    reason, _, host = field.partition(" ")
    return reason, host


class RefusalLog:
    """Stats, WARNINGs and dead-letter entries of refused requests, for one node."""

    def __init__(
        self,
        stats: Any,
        node_id: str,
        clock: Any = time.monotonic,
        sources: SourceCounts | None = None,
        spider: str = "",
    ) -> None:
        self.stats = stats
        self.node_id = node_id
        self.clock = clock
        self.sources = sources
        self.spider = spider
        self._warned: dict[str, float] = {}
        self._pending: Counter[str] = Counter()  # count fields not yet added in Redis
        self._by_source: Counter[tuple[str, str]] = Counter()  # (source, reason) not yet added
        self._script: Any = None
        self._source_script: Any = None
        self._flushed = clock()

    @classmethod
    def of_node(cls, crawler: Any, node_id: str, spider: str) -> RefusalLog:
        """The scheduler's: counted per source as the storage labels rows (core/registry.py
        SourceCache: the registry's name, else the registered domain)."""
        sources = SourceCache.of(crawler)
        counts = SourceCounts.from_settings(crawler.settings, spider, lambda url: sources.label(url)[0])
        return cls(crawler.stats, node_id, sources=counts, spider=spider)

    def count(self, url: str, reason: str) -> None:
        """Count one refusal that has no dead letter (robots.txt: Scrapy drops the request)."""
        self.stats.inc_value("dc/refused")
        self.stats.inc_value(f"dc/refused/{reason}")
        self._add(count_field(reason, host_of(url)), 1)
        self._add_source(url, reason, 1)

    def note(self, url: str, refusal: Refusal, source: str, counted: bool = False, **extra: Any) -> str:
        """Count and log one refusal (unless it was `counted` already); returns its dead-letter entry (JSON)."""
        if counted:
            return failure_entry(url, refusal.reason, self.node_id, detail=refusal.detail, source=source, **extra)
        host = host_of(url)
        self.stats.inc_value("dc/refused")
        self.stats.inc_value(f"dc/refused/{refusal.reason}")
        self._add(count_field(refusal.reason, host), 1)
        self._add_source(url, refusal.reason, 1)
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
        return bool(self._pending or self._by_source)

    def due(self) -> bool:
        """Counts wait, and the last write is FLUSH_SECONDS old."""
        return self.counting and self.clock() - self._flushed >= FLUSH_SECONDS

    def take_counts(self) -> Counter[str]:
        counts, self._pending = self._pending, Counter()
        return counts

    def _add_source(self, url: str, reason: str, n: int) -> None:
        if self.sources is None:
            return
        source = self.sources.source_of(url)
        if not source:
            return
        if (source, reason) in self._by_source or len(self._by_source) < SOURCES_COUNTED_MAX:
            self._by_source[(source, reason)] += n

    def _add(self, field: str, n: int) -> None:
        if field not in self._pending and len(self._pending) >= COUNTED_FIELDS_MAX:  # Redis away for long
            field = count_field(split_field(field)[0], "*")
        self._pending[field] += n

    def give_back(self, counts: Counter[str]) -> None:
        """Counts Redis did not take (an outage): added again with the next ones."""
        for field, n in counts.items():
            self._add(field, n)

    async def push_counts(self, client: AnyRedis, key: str) -> None:
        """Add the pending counts: per host to `key` (lua/refused.lua) and per source (lua/source_record.lua),
        in one batch (one round trip per Redis server). Kept for later on an outage; a part Redis
        refuses is dropped (the caller logs that)."""
        self._flushed = self.clock()
        counts = self.take_counts()
        by_source, self._by_source = self._by_source, Counter()
        if not counts and not by_source:
            return
        batch = Batch(client)
        if counts:
            if self._script is None:
                self._script = client.register_script(lua_source("refused"))
            args: list[Any] = [COUNTED_FIELDS_MAX]
            for field, n in counts.items():
                args += [field, n]
            batch.script(self._script, [key], args)
        if by_source and self.sources is not None:
            if self._source_script is None:
                self._source_script = client.register_script(lua_source("source_record"))
            for (source, reason), n in by_source.items():
                keys = self.sources.keys(self.spider, source)
                batch.script(self._source_script, keys, [source, "refused", n, self.sources.days, reason])
        try:
            replies = await batch.execute(raise_on_error=False)
        except BaseException:  # an outage (or a cancel): not written, kept
            self.give_back(counts)
            for pair, n in by_source.items():
                self._by_source[pair] += n
            raise
        for reply in replies:
            if isinstance(reply, ResponseError):
                raise reply
