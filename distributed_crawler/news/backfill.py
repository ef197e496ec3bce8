"""A backfill window: a site's past stories between two dates (`dcrawl seed SPIDER --site URL --since
DATE --until DATE`, docs/news.md "Backfill").

The window travels with the site's seed and its sitemap and feed requests as `meta["backfill"]`
(`{"since": ISO, "until": ISO}`, untrusted when read). A listing entry is followed only when its date
(`news:publication_date`, else `lastmod`; a feed's `pubDate`) is in the window; an undated entry is
not. A sitemap index's entry (a sitemap) is skipped when its `lastmod` is before the window (it
cannot list later stories) or when its URL names a period (a year, month or day: `sitemap-2026-09.xml`,
`/2026/09/sitemap.xml`, `?yyyy=2026&mm=09`, `sitemap-202609.xml`) wholly outside the window.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

# A year, and optionally a month and a day, in a sitemap's URL: 2026-09, 2026/09/14, 2026_09, 202609,
# yyyy=2026&mm=09. Not inside a longer number.
_PERIOD = re.compile(
    r"(?<!\d)(?P<y>(?:19|20)\d\d)(?:(?P<sep>[-_/.]?)(?P<m>0[1-9]|1[0-2])(?:(?P=sep)(?P<d>0[1-9]|[12]\d|3[01]))?)?(?!\d)"
)
_QUERY_PERIOD = re.compile(r"(?:^|[?&])(?:yyyy|year|y)=(?P<y>(?:19|20)\d\d)(?:&(?:mm|month|m)=(?P<m>0?[1-9]|1[0-2]))?")


class WindowError(ValueError):
    """A --since / --until that is not a date, or an empty window."""


@dataclass(frozen=True)
class Window:
    since: datetime  # inclusive, UTC
    until: datetime  # inclusive, UTC

    def contains(self, when: datetime | None) -> bool:
        """An entry dated `when` is in the window (undated: no, a backfill takes nothing unknown)."""
        if when is None:
            return False
        when = when if when.tzinfo else when.replace(tzinfo=UTC)
        return self.since <= when <= self.until

    def may_list(self, url: str, lastmod: datetime | None) -> bool:
        """A sitemap an index names may list stories of the window (see the module's docstring)."""
        if lastmod is not None:
            lastmod = lastmod if lastmod.tzinfo else lastmod.replace(tzinfo=UTC)
            if lastmod < self.since:
                return False
        period = period_of(url)
        return period is None or (period[0] <= self.until and period[1] >= self.since)

    def as_meta(self) -> dict[str, str]:
        return {"since": self.since.isoformat(), "until": self.until.isoformat()}


def parse_day(text: str, end: bool) -> datetime:
    """An ISO date or date-time (UTC unless it says otherwise); a bare date is its first second, or
    with `end` its last one (`--until 2026-09-30` takes all of that day)."""
    text = text.strip()
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime.combine(day, time.max if end else time.min, tzinfo=UTC)
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise WindowError(
            f"{text!r} is not a date: use YYYY-MM-DD or an ISO date-time (2026-09-01T00:00:00Z)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def window_from_args(since: str | None, until: str | None, now: datetime | None = None) -> Window:
    """--since (required) and --until (default: now) -> Window."""
    if not since:
        raise WindowError("--until needs --since: the window's first day (YYYY-MM-DD)")
    start = parse_day(since, end=False)
    stop = parse_day(until, end=True) if until else (now or datetime.now(UTC))
    if stop < start:
        raise WindowError(f"--until ({until}) is before --since ({since})")
    return Window(start.astimezone(UTC), stop.astimezone(UTC))


def window_from_meta(value: Any) -> Window | None:
    """`meta["backfill"]` as a Window; None when absent or malformed (read from Redis: untrusted)."""
    if not isinstance(value, dict):
        return None
    since, until = value.get("since"), value.get("until")
    if not isinstance(since, str) or not isinstance(until, str) or len(since) > 40 or len(until) > 40:
        return None
    try:
        window = Window(parse_day(since, end=False).astimezone(UTC), parse_day(until, end=True).astimezone(UTC))
    except WindowError:
        return None
    return window if window.since <= window.until else None


def period_of(url: str) -> tuple[datetime, datetime] | None:
    """The (first, last) moment of the year, month or day a sitemap URL names; None if none. The
    last match in the path wins (`/news/2026/sitemap-09.xml`: the year 2026)."""
    path, _, query = url.partition("?")
    match = _QUERY_PERIOD.search(query)
    found: tuple[int, int | None, int | None] | None = None
    if match:
        found = (int(match.group("y")), int(match.group("m")) if match.group("m") else None, None)
    else:
        name = path.split("://", 1)[-1].split("/", 1)[-1]  # not the host: example2026.com is no period
        matches = list(_PERIOD.finditer(name))
        if matches:
            m = matches[-1]
            found = (
                int(m.group("y")),
                int(m.group("m")) if m.group("m") else None,
                int(m.group("d")) if m.group("d") else None,
            )
    if found is None:
        return None
    year, month, day = found
    if month is None:
        first, last = date(year, 1, 1), date(year, 12, 31)
    elif day is None:
        first, last = date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])
    else:
        try:
            first = last = date(year, month, day)
        except ValueError:  # 2026-02-30: not a day
            return None
    return (
        datetime.combine(first, time.min, tzinfo=UTC),
        datetime.combine(last, time.min, tzinfo=UTC) + timedelta(days=1) - timedelta(microseconds=1),
    )
