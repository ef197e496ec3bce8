"""Coverage: per news source, the URLs its sitemaps and feeds listed against those stored.

A listing's article entries (within SITEMAP_SINCE, news/ spider) are *listed*; what becomes of each
page is its *state*: not fetched yet, failed, refused (by the site or its robots.txt), skipped (the
crawl's own rules: a language not in LANGUAGES, a robots `noindex`), not an article, a
near-duplicate, or stored. A state only rises (stored wins over everything), so the order in
which nodes report does not matter. A page fetched before any listing named it (a link from the
home page often comes first) keeps its outcome until a listing names it.

Each node gathers these in a `CoverageLog` (bounded) and writes them with the change feed's next
write, or on its own every FLUSH_SECONDS (one round trip per Redis server either way:
connection/batch.py); lua/coverage_record.lua keeps one sorted set per source whose score holds
the state and the time, so each state's count over the window is one ZCOUNT. The
SOURCE_COVERAGE_WINDOW (a day) bounds what is kept and judged, SOURCE_COVERAGE_MAX_URLS the URLs
per source.

Coverage = stored / listed. The alert (events/coverage_alert.py) judges only URLs listed more than
SOURCE_COVERAGE_GRACE ago or already fetched: a URL listed a minute ago is not missing yet.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.dedup.fingerprint import canonicalize_url
from distributed_crawler.events.sources import SourcesConfig
from distributed_crawler.meta import COVERAGE_URL_META

logger = logging.getLogger(__name__)

#: Score layout of the coverage zset (lua/coverage_record.lua): code * SCORE_BASE + seconds.
SCORE_BASE = 2**34
LISTED = 8  # code of a listed URL = LISTED + its state
NOT_FETCHED, FAILED, REFUSED, SKIPPED, NOT_ARTICLE, NEAR_DUPLICATE, STORED = range(7)
#: Why a listed URL is missing, by state (JSON and `dcrawl sources --coverage` names).
REASONS = ("not_fetched", "failed", "refused", "skipped", "not_article", "near_duplicate")
WORDS = {
    "not_fetched": "not fetched yet",
    "failed": "failed",
    "refused": "refused",
    "skipped": "skipped",
    "not_article": "not an article",
    "near_duplicate": "near-duplicate",
}
#: What a node keeps for the next write at most; beyond it (a long Redis outage) new ones are dropped.
MAX_PENDING = 20_000
FLUSH_SECONDS = 2.0
CHUNK = 1000  # sources per coverage_counts.lua call
MAX_URL_CHARS = 2048  # a longer URL is not tracked (URLLENGTH_LIMIT's order of size)


@dataclass(frozen=True)
class Coverage:
    """One source's coverage over the window, read from its zset (counts per state of listed URLs)."""

    source: str
    counts: tuple[int, ...] = (0,) * 7  # listed URLs per state
    fresh: int = 0  # not fetched yet, and listed within the grace: not judged by the alert
    evicted: int = 0  # listed URLs dropped over SOURCE_COVERAGE_MAX_URLS (ever)
    low_flag: bool = False  # the check alerted coverage_low and has not seen it recover
    missing_urls: tuple[tuple[str, str, float], ...] = ()  # (url, reason, listed at)

    @property
    def listed(self) -> int:
        return sum(self.counts)

    @property
    def stored(self) -> int:
        return self.counts[STORED]

    @property
    def missing(self) -> int:
        return self.listed - self.stored

    @property
    def ratio(self) -> float | None:
        return self.stored / self.listed if self.listed else None

    @property
    def judged(self) -> int:
        """Listed URLs the alert judges: all but those still within their grace."""
        return self.listed - self.fresh

    def judged_ratio(self) -> float | None:
        return self.stored / self.judged if self.judged else None

    def is_low(self, minimum: float, min_listed: int) -> bool | None:
        """True / False once at least *min_listed* URLs are judged; None: too few to say."""
        if self.judged < min_listed:
            return None
        ratio = self.judged_ratio()
        return ratio is not None and ratio < minimum

    def by_reason(self) -> dict[str, int]:
        return {reason: self.counts[state] for state, reason in enumerate(REASONS)}

    def judged_by_reason(self) -> dict[str, int]:
        """Missing URLs by reason among those the alert judges (not those within their grace)."""
        return {**self.by_reason(), "not_fetched": max(0, self.counts[NOT_FETCHED] - self.fresh)}

    def as_dict(self) -> dict[str, Any]:
        ratio = self.ratio
        return {
            "listed": self.listed,
            "stored": self.stored,
            "missing": self.missing,
            "coverage": None if ratio is None else round(ratio, 4),
            "missing_by_reason": self.by_reason(),
            "missing_urls": [{"url": u, "reason": r, "listed_at": t} for u, r, t in self.missing_urls],
            "coverage_judged": self.judged,
            "coverage_low": self.low_flag,
            "coverage_evicted": self.evicted,
        }


def score_range(state: int, since: float, listed: bool = True) -> tuple[str, str]:
    """ZCOUNT / ZRANGEBYSCORE bounds of one state's URLs whose time is at or after *since*."""
    code = (LISTED if listed else 0) + state
    return f"{code * SCORE_BASE + max(0, int(since))}", f"({(code + 1) * SCORE_BASE}"


def parse_counts(source: str, numbers: Sequence[Any]) -> Coverage:
    """A `Coverage` from coverage_counts.lua's 10 integers for one source (garbage counts as 0)."""

    def count(value: Any) -> int:
        return value if isinstance(value, int) and value >= 0 else 0

    values = [count(v) for v in numbers] + [0] * (10 - len(numbers))
    return Coverage(source, tuple(values[:7]), fresh=values[7], evicted=values[8], low_flag=values[9] == 1)


def parse_missing(replies: Sequence[Any]) -> tuple[tuple[str, str, float], ...]:
    """(url, reason, listed at) from one ZRANGEBYSCORE ... WITHSCORES reply per reason, oldest first."""
    missing: list[tuple[str, str, float]] = []
    for state, reply in enumerate(replies):
        if not isinstance(reply, list):
            continue
        for member, score in reply:
            url = member.decode("utf-8", "replace") if isinstance(member, bytes) else str(member)
            missing.append((url, REASONS[state], float(score) - (LISTED + state) * SCORE_BASE))
    return tuple(sorted(missing, key=lambda m: m[2]))


async def read_coverage(
    client: AnyRedis, config: SourcesConfig, spider: str, sources: Iterable[str], now: float, missing: int = 0
) -> dict[str, Coverage]:
    """Each source's coverage (a sync or asyncio client): one coverage_counts.lua call per 1,000
    sources; with *missing*, up to that many missing URLs per reason (one pipeline)."""
    script = client.register_script(lua_source("coverage_counts"))
    out: dict[str, Coverage] = {}
    names = list(sources)
    for start in range(0, len(names), CHUNK):
        chunk = names[start : start + CHUNK]
        keys = [k for s in chunk for k in (config.coverage_key_of(spider, s), config.key_of(spider, s))]
        args: list[str | float] = [f"{now:.0f}", config.coverage_window, config.coverage_grace]
        numbers = list(await maybe_await(script(keys=keys, args=args)))
        for i, source in enumerate(chunk):
            out[source] = parse_counts(source, numbers[10 * i : 10 * i + 10])
    short = [s for s in names if out[s].missing] if missing else []
    if short:
        since = now - config.coverage_window
        pipe = client.pipeline(transaction=False)
        for source in short:
            for state in range(len(REASONS)):
                low, high = score_range(state, since)
                pipe.zrangebyscore(
                    config.coverage_key_of(spider, source), low, high, start=0, num=missing, withscores=True
                )
        replies = await maybe_await(pipe.execute(raise_on_error=False))
        for i, source in enumerate(short):
            urls = parse_missing(replies[i * len(REASONS) : (i + 1) * len(REASONS)])
            out[source] = dataclasses.replace(out[source], missing_urls=urls)
    return out


def listed_url(meta: Mapping[str, Any]) -> str | None:
    """The entry URL a listing gave this request (`COVERAGE_URL_META`, read from Redis: only a
    string of a URL's size counts)."""
    value = meta.get(COVERAGE_URL_META)
    if isinstance(value, str) and 0 < len(value) <= MAX_URL_CHARS and value.startswith(("http://", "https://")):
        return value
    return None


class CoverageLog:
    """This node's listings and page outcomes not yet written, by source (bounded: MAX_PENDING).

    A URL is kept canonical (dedup/fingerprint.py), as the seen-filter and the rows know it; its
    source is the registry's name, else its registered domain (the rows' `source`)."""

    def __init__(
        self,
        config: SourcesConfig,
        spider: str,
        source_of: Callable[[str], str] = lambda url: "",
        canonical: Callable[[str], str] = canonicalize_url,
    ) -> None:
        self.config = config
        self.spider = spider
        self._source_of = source_of
        self._canonical = canonical
        self.pending: OrderedDict[str, list[str]] = OrderedDict()  # source -> url, what, url, what...
        self.size = 0
        self.dropped = 0  # not kept: MAX_PENDING reached

    def listed(self, url: str) -> str:
        """A sitemap or feed listed *url*; returns its canonical form (the request's COVERAGE_URL_META)."""
        canonical = self._canonical_of(url)
        self._add(canonical, "L")
        return canonical

    def _canonical_of(self, url: str) -> str:
        try:
            return self._canonical(url)
        except ValueError:  # not a URL we can read: not tracked
            return ""

    def outcome(self, url: str, meta: Mapping[str, Any], state: int, *also: str) -> None:
        """What became of the page fetched as *url* (and of the listed URL it was requested as, and
        of *also*: its item's canonical URL)."""
        if not FAILED <= state <= STORED:
            return
        urls = {self._canonical_of(url), *(self._canonical_of(u) for u in also if u)}
        listed = listed_url(meta)
        if listed is not None:
            urls.add(listed)
        for u in urls:
            self._add(u, str(state))

    def _add(self, url: str, what: str) -> None:
        if not url or len(url) > MAX_URL_CHARS:
            return
        source = self._source_of(url)
        if not source:
            return
        pairs = self.pending.setdefault(source, [])
        # a source keeps SOURCE_COVERAGE_MAX_URLS at most: more in one write would only be evicted
        if self.size >= MAX_PENDING or len(pairs) >= 2 * self.config.coverage_max_urls:
            self.dropped += 1
            return
        pairs.extend((url, what))
        self.size += 1

    def take(self) -> list[tuple[list[str], list[Any]]]:
        """The (keys, args) of one coverage_record.lua call per source, and forget them."""
        calls = []
        for source, pairs in self.pending.items():
            keys = [
                self.config.coverage_key_of(self.spider, source),
                self.config.index_key(self.spider),
                self.config.key_of(self.spider, source),
            ]
            calls.append((keys, [source, self.config.coverage_window, self.config.coverage_max_urls, *pairs]))
        self.pending = OrderedDict()
        self.size = 0
        return calls
