"""The change feed: one Redis Stream entry per stored article that is new, changed or removed.

The storage pipeline calls `ChangeFeed.committed` after a batch's commit and before its items
return, so the request of an item is acked only once its event is in the stream (docs/events.md):
a node killed between the commit and the XADD has its request redelivered, and a redelivered
request publishes the stored version's event even when the row is unchanged (at-least-once;
consumers dedupe on `key` = canonical URL + version). The batch's events, trimmed with
`MAXLEN ~ EVENTS_MAXLEN`, and its per-source counts (events/sources.py) go in one round trip per
Redis server (connection/batch.py: on a Cluster too); what landed is never sent again, so a retry
announces no row twice. A Redis outage is waited out with backoff like the other push paths; the
items wait with it. A write Redis refuses (a key of the wrong type) is retried the same way, with
an ERROR naming the cause and the fix at most once a minute; a missing ACL permission is the
policy's (connection/policy.py: the same, naming the rule the node needs).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from distributed_crawler.connection.batch import Batch
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.policy import Purpose, RedisPolicy
from distributed_crawler.connection.types import AnyScript
from distributed_crawler.connection.untrusted import EpisodeLog, is_wrong_type
from distributed_crawler.core.traps import registered_domain
from distributed_crawler.dedup.fingerprint import canonicalize_url
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.events.coverage import CoverageLog
from distributed_crawler.events.diff import story_diff
from distributed_crawler.events.sources import LAG_EDGES, SourcesConfig, lag_bucket, lag_seconds
from distributed_crawler.keyspace import default, fill
from distributed_crawler.news.counts import MAX_HOSTS, stored_field
from distributed_crawler.news.storing import page_type_of
from distributed_crawler.storage.changes import CHANGED, NEW, UNCHANGED, RowChange
from distributed_crawler.urlhost import url_host

logger = logging.getLogger(__name__)

NEW_EVENT, CHANGED_EVENT, REMOVED_EVENT = "new", "changed", "removed"
#: How long a closing node keeps retrying an unreachable Redis for a batch's events (s); then the
#: items fail (not acked: their requests are redelivered and publish then).
CLOSE_RETRY_SECONDS = 30.0
#: Redelivery marks kept at most (an item dropped by an earlier pipeline leaves its mark behind).
MAX_MARKS = 10_000
#: Page types that count as a source's articles (None: a spider that does not classify pages).
ARTICLE_TYPES = frozenset({"article", None, ""})
#: Error counts in flight at once at most (more during an outage are not counted).
MAX_COUNTING = 100
#: While Redis keeps refusing the events, their ERROR line comes again at most this often (s).
REFUSED_LOG_SECONDS = 60.0


class EventsNotPublished(Exception):
    """The rows are committed but their events could not reach Redis before the node closed."""


@dataclass(frozen=True)
class EventsConfig:
    enabled: bool = True
    key: str = default("EVENTS_KEY")
    maxlen: int = 1_000_000
    include_text: bool = False
    batch_seconds: float = 0.25

    @classmethod
    def from_settings(cls, settings: Any) -> EventsConfig:
        read = SettingsReader(settings)
        return cls(
            enabled=read.bool("EVENTS_ENABLED"),
            key=read.str("EVENTS_KEY"),
            maxlen=read.int("EVENTS_MAXLEN", min=0, hint="0 = never trimmed"),
            include_text=read.bool("EVENTS_INCLUDE_TEXT"),
            batch_seconds=read.float("EVENTS_BATCH_SECONDS", min=0),
        )

    def stream(self, spider: str) -> str:
        return fill(self.key, spider)


def idempotency_key(canonical_url: str, version: int, event: str = NEW_EVENT) -> str:
    """`<version> <canonical url>`: the same for every publication of one stored version
    (`removed` events get their own: `removed <version> <url>`)."""
    return f"{event} {version} {canonical_url}" if event == REMOVED_EVENT else f"{version} {canonical_url}"


def source_of(url: str) -> str:
    """The news source of an article: the registered domain of its host."""
    host = url_host(url)
    return registered_domain(host) if host else ""


def article_quality(row: Mapping[str, Any], text_chars: int) -> tuple[bool, bool, bool]:
    """(has a date, has authors, has main text of normal length) of a new article: what a
    changed template silently loses (docs/sources.md "Extraction drift")."""
    authors = row.get("authors")
    text = row.get("text")
    return (
        bool(row.get("published_at")),
        bool(authors) and authors != "[]",
        isinstance(text, str) and len(text) >= text_chars,
    )


def build_event(
    event: str, row: Mapping[str, Any], change: RowChange, *, include_text: bool, canonical: Callable[[str], str]
) -> dict[str, str]:
    """The stream entry's fields (strings; absent values are empty strings)."""
    url = change.url
    canonical_url = canonical(url)
    fields = {
        "event": event,
        "url": url,
        "canonical_url": canonical_url,
        "title": row.get("title") or "",
        "source": row.get("source") or source_of(url),  # the registry's name (docs/sources.md)
        "source_tags": row.get("source_tags") or "",  # JSON array, "" = none
        "host": url_host(url),
        "published_at": row.get("published_at") or "",
        "first_seen": change.first_seen or "",
        "version": str(change.version),
        "row_id": change.row_id or "",
        "key": idempotency_key(canonical_url, change.version, event),
        "time": f"{time.time():.3f}",
    }
    if event == CHANGED_EVENT and change.previous is not None:  # a redelivered unchanged row has none
        old_title, old_text = change.previous
        diff = story_diff(old_title, old_text, row.get("title"), row.get("text"))
        fields["diff"] = json.dumps(diff, separators=(",", ":"))
    if include_text:
        fields["text"] = row.get("text") or ""
        fields["data"] = row.get("data") or ""  # the item's other fields, a JSON object (docs/storage.md)
    return fields


class RedeliveryMarks:
    """Items that came from a redelivered request, by `id(item)`, until the storage takes them."""

    def __init__(self, limit: int = MAX_MARKS) -> None:
        self._marks: OrderedDict[int, None] = OrderedDict()
        self.limit = limit

    def mark(self, item: Any) -> None:
        self._marks[id(item)] = None
        while len(self._marks) > self.limit:
            self._marks.popitem(last=False)

    def take(self, item: Any) -> bool:
        return self._marks.pop(id(item), 0) is None


class ChangeFeed:
    """Writes one spider's events and source counts (asyncio client of the node's RedisContext)."""

    def __init__(
        self,
        config: EventsConfig,
        sources: SourcesConfig,
        client_of: Callable[[], Any],
        spider: str,
        policy: RedisPolicy,
        closing: Callable[[], bool],
        canonical: Callable[[str], str] = canonicalize_url,
        source_name: Callable[[str], str] = lambda url: source_of(url),
        counts_keys: tuple[str, str] | None = None,
    ) -> None:
        self.config = config
        # news_counts.lua's KEYS (the cluster's stats hash, its per-host zset): rows created per page
        # type are counted there in the events' own write (`dcrawl status` stored: one per row)
        self.counts_keys = counts_keys
        self._counts_script: AnyScript | None = None
        self._source_name = source_name  # a URL's source: the registry's name (docs/sources.md), else its domain
        self.sources = sources
        self._client_of = client_of
        self.spider = spider
        self.stream = config.stream(spider)
        self.marks = RedeliveryMarks()
        self._closing = closing
        self._canonical = canonical
        self._close_deadline: float | None = None
        self._policy = policy  # PUSH: retried until written (the items, and so the acks, wait)
        self._script: AnyScript | None = None
        self._coverage_script: AnyScript | None = None
        # listings and page outcomes per source (events/coverage.py), written with the next events
        # write or by `flush_coverage`
        self.coverage = CoverageLog(sources, spider, source_name, canonical)
        self._counting: set[asyncio.Future[None]] = set()
        self._refused = EpisodeLog(logger, every=REFUSED_LOG_SECONDS)
        self.published = 0
        # this node's figures for Prometheus (events/metrics.py): no label per source
        self.published_by_kind: dict[str, int] = defaultdict(int)
        self.lag_counts = [0] * (len(LAG_EDGES) + 1)
        self.lag_sum = 0.0

    # -- the storage pipeline's hooks (storage/changes.py AfterCommit) ---------------------------
    @property
    def linger(self) -> float:
        """How long an idle storage writer gathers items before a commit (each commit costs one
        events write, a Redis round trip): EVENTS_BATCH_SECONDS."""
        return self.config.batch_seconds

    def take_redelivered(self, item: Any) -> bool:
        return self.marks.take(item)

    async def committed(
        self, changes: list[RowChange], rows: Iterable[Mapping[str, Any]], redelivered: set[str]
    ) -> int:
        """Publish the events of one committed batch; returns how many were written."""
        by_url = {row["url"]: row for row in rows}
        events: list[dict[str, str]] = []
        new_by_source: dict[str, list[int]] = defaultdict(list)
        new_count: dict[str, int] = defaultdict(int)
        created: Counter[str] = Counter()  # rows this commit created, per page type (`dcrawl status` stored)
        quality: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # dated, authored, full text
        lags: list[float] = []
        for change in changes:
            row = by_url.get(change.url, {})
            if change.change == NEW and self.counts_keys and row.get("page_type") is not None:
                created[stored_field(page_type_of(row["page_type"]))] += 1
            if change.change == NEW or (
                change.change == UNCHANGED and change.url in redelivered and change.version == 1
            ):
                kind = NEW_EVENT
            elif change.change == CHANGED or (change.change == UNCHANGED and change.url in redelivered):
                kind = CHANGED_EVENT
            else:
                continue
            events.append(
                build_event(kind, row, change, include_text=self.config.include_text, canonical=self._canonical)
            )
            if change.change == NEW and row.get("page_type") in ARTICLE_TYPES:  # list pages are not news
                source = row.get("source") or source_of(change.url)
                new_count[source] += 1
                judged = quality[source]
                for i, ok in enumerate(article_quality(row, self.sources.drift_text_chars)):
                    judged[i] += ok
                lag = lag_seconds(row.get("published_at"), change.first_seen)
                if lag is not None:
                    new_by_source[source].append(lag_bucket(lag))
                    lags.append(lag)
        if events or new_count or created:
            counts = {s: (n, new_by_source.get(s, []), quality[s]) for s, n in new_count.items() if s}
            await self._write(events, counts, created)
        for event in events:
            self.published_by_kind[event["event"]] += 1
        for lag in lags:
            self.lag_counts[lag_bucket(lag)] += 1
            self.lag_sum += max(0.0, lag)
        return len(events)

    async def removed(self, url: str) -> None:
        """A revisit of a stored URL answered 404 or 410 (version 0: the row is not read)."""
        change = RowChange(url, REMOVED_EVENT, 0, None, None)
        event = build_event(REMOVED_EVENT, {}, change, include_text=False, canonical=self._canonical)
        await self._write([event], {})
        self.published_by_kind[REMOVED_EVENT] += 1

    async def record_failure(self, url: str, kind: str) -> None:
        """One error or refusal of a page of this source: counted in the background (one try; the
        page never waits for it, not even through a Redis outage)."""
        source = self._source_name(url)
        if not source or len(self._counting) >= MAX_COUNTING:
            return
        task = asyncio.ensure_future(self._count_failure(source, kind))
        self._counting.add(task)
        task.add_done_callback(self._counting.discard)

    async def _count_failure(self, source: str, kind: str) -> None:
        try:
            await self._source_script()(keys=self._source_keys(source), args=[source, kind, 1, self.sources.days])
        except Exception as exc:  # noqa: BLE001 - a count lost in an outage is only a count
            logger.debug("Source %s %s not counted: %r", source, kind, exc)

    async def flush_coverage(self) -> int:
        """Write the coverage gathered since the last write (one round trip per Redis server); a
        failure is raised to the caller (its policy decides) and those counts are lost."""
        calls = self.coverage.take()
        if not calls:
            return 0
        batch = Batch(self._client_of())
        for keys, args in calls:
            batch.script(self._coverage(), keys, args)
        await batch.execute()
        return len(calls)

    # -- writing ---------------------------------------------------------------------------------
    def _coverage(self) -> AnyScript:
        if self._coverage_script is None:
            self._coverage_script = self._client_of().register_script(lua_source("coverage_record"))
        return self._coverage_script

    def _stored_script(self) -> AnyScript:
        if self._counts_script is None:
            self._counts_script = self._client_of().register_script(lua_source("news_counts"))
        return self._counts_script

    def _source_script(self) -> AnyScript:
        if self._script is None:
            self._script = self._client_of().register_script(lua_source("source_record"))
        return self._script

    def _source_keys(self, source: str) -> list[str]:
        return [self.sources.key_of(self.spider, source), self.sources.index_key(self.spider)]

    def _queue(self, batch: Batch, part: tuple[Any, ...]) -> None:
        """One part of a batch's write: ("event", fields), ("source", name, count, lags, quality) or
        ("stored", {field: rows created}) (news_counts.lua: a garbage field is reset, never a refused write)."""
        if part[0] == "event":
            if self.config.maxlen:
                batch.commands.xadd(self.stream, part[1], maxlen=self.config.maxlen, approximate=True)
            else:
                batch.commands.xadd(self.stream, part[1])
            return
        if part[0] == "coverage":
            batch.script(self._coverage(), part[1], part[2])
            return
        if part[0] == "stored":
            pairs = [value for pair in part[1].items() for value in pair]
            batch.script(self._stored_script(), list(self.counts_keys or ()), [MAX_HOSTS, len(part[1]), *pairs])
            return
        _, source, count, lags, quality = part
        judged = ",".join(str(n) for n in quality)
        args = [source, "article", count, self.sources.days, judged, *lags]
        batch.script(self._source_script(), self._source_keys(source), args)

    async def _write(
        self,
        events: list[dict[str, str]],
        sources: Mapping[str, tuple[int, list[int], list[int]]],
        created: Mapping[str, int] | None = None,
    ) -> None:
        parts: list[tuple[Any, ...]] = [("event", fields) for fields in events]
        parts += [("source", source, *counts) for source, counts in sources.items()]
        if created:
            parts.append(("stored", dict(created)))
        parts += [("coverage", keys, args) for keys, args in self.coverage.take()]  # the same round trip
        what = f"Writing change events to {self.stream}"

        async def call() -> None:
            batch = Batch(self._client_of())
            for part in parts:
                self._queue(batch, part)
            replies = await batch.execute(raise_on_error=False)
            failed = [(part, reply) for part, reply in zip(parts, replies) if isinstance(reply, Exception)]
            for part, reply in failed:
                if part[0] == "coverage":  # only counts: never holds the events back
                    logger.debug("Coverage of source %s not written: %r", part[2][0], reply)
            failed = [(part, reply) for part, reply in failed if part[0] != "coverage"]
            parts[:] = [part for part, _ in failed]  # what landed is not sent again
            if failed:
                raise failed[0][1]

        async def on_error(exc: BaseException) -> None:
            waiting = sum(part[0] == "event" for part in parts)
            if not self._refused.failed(
                what,
                "Change feed: %d events and %d source counts of committed rows not written to %s: Redis refuses "
                "them (%s); %s. Meanwhile this node's storage waits (its items are not acked) and the write is retried",
                waiting,
                len(parts) - waiting,
                self.stream,
                exc,
                self._fix(exc),
            ):
                logger.debug("Change events still not written to %s: %s", self.stream, exc)

        try:
            await self._policy.run(Purpose.PUSH, call, stopped=self._stopped, on_error=on_error)
            self._refused.ok(what)
        except asyncio.CancelledError:
            if self._stopped():
                raise EventsNotPublished(f"Redis unreachable for {CLOSE_RETRY_SECONDS:.0f}s while closing") from None
            raise
        self.published += len(events)

    def _fix(self, exc: BaseException) -> str:
        """What the operator does about a refused events write."""
        if is_wrong_type(exc):
            return (
                f"the key holds another type: check it with `redis-cli type '{self.stream}'` (it must be a "
                f"stream) and remove it with `redis-cli del '{self.stream}'`"
            )
        return (
            "report this line as a bug; to store without announcing meanwhile, set EVENTS_ENABLED=False "
            "and restart the nodes (rows stored then are never announced)"
        )

    def _stopped(self) -> bool:
        if not self._closing():
            return False
        now = time.monotonic()
        if self._close_deadline is None:
            self._close_deadline = now + CLOSE_RETRY_SECONDS
        return now >= self._close_deadline


def parse_entry(entry_id: Any, fields: Mapping[Any, Any]) -> dict[str, Any]:
    """A stream entry as a dict of text (what `dcrawl events --json` prints), with its `id`."""

    def text(value: Any) -> str:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    out: dict[str, Any] = {"id": text(entry_id)}
    for name, value in fields.items():
        out[text(name)] = text(value)
    if out.get("version", "").isdigit():
        out["version"] = int(out["version"])
    if "diff" in out:  # a JSON object in the stream (untrusted: anything else stays text)
        try:
            diff = json.loads(out["diff"])
        except ValueError:
            diff = None
        if isinstance(diff, dict):
            out["diff"] = diff
    return out


def dumps(entry: Mapping[str, Any]) -> str:
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
