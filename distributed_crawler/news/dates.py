"""Publication and modification dates of a page, from the signals a page gives, best first.

A date is kept as precise as the page gives it (docs/news.md "Dates"): with its UTC offset, as a
local date-time when the page names no zone, or as a day. A date without an offset is never
dropped: its zone is unknown, its day is not. Dates after now + 1 day or before 1995 are a
template's placeholder or a clock's mistake, not a publication: rejected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from email.utils import parsedate_to_datetime

from lxml import etree
from lxml.html import HtmlElement

EARLIEST = datetime(1995, 1, 1)
_HAS_TIME = re.compile(r"\d{1,2}:\d{2}")
_LEADING_DAY = re.compile(r"\s*((?:19|20)\d\d)[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)")
_URL_DAY = re.compile(r"/((?:19|20)\d\d)[/-](0?[1-9]|1[0-2])[/-](0?[1-9]|[12]\d|3[01])(?=[/._-]|$)")
_URL_COMPACT_DAY = re.compile(r"/((?:19|20)\d\d)(0[1-9]|1[0-2])(0[1-9]|[12]\d|3[01])(?=[/._-]|$)")
_MARKED_TIME = etree.XPath(
    "//time[@datetime][@pubdate or ancestor::header or ancestor::article]/@datetime", smart_strings=False
)

# Meta names (name=, property=, itemprop=, all lower case) publishers put dates in, best first.
PUBLISHED_META = (
    "article:published_time",
    "og:article:published_time",
    "og:published_time",
    "datepublished",
    "parsely-pub-date",
    "sailthru.date",
    "dc.date.issued",
    "dcterms.issued",
    "dc.date",
    "dcterms.date",
    "dc.date.created",
    "dcterms.created",
    "pubdate",
    "publishdate",
    "publish-date",
    "publish_date",
    "article.published",
    "article_date_original",
    "original-publish-date",
    "cxenseparse:recs:publishtime",
    "date",
)
MODIFIED_META = (
    "article:modified_time",
    "og:article:modified_time",
    "og:updated_time",
    "datemodified",
    "dc.date.modified",
    "dcterms.modified",
    "article.updated",
    "last-modified",
    "lastmod",
)


def parse_date(value: object, now: datetime | None = None) -> str | None:
    """An ISO 8601 string (offset kept; local date-time; or a day) for a date a page gives, or None
    when it is no date or an implausible one (before 1995, after now + 1 day)."""
    if not isinstance(value, str):
        return None
    text = value.strip()[:64]
    if not text:
        return None
    parsed = _parse(text)
    if parsed is None:
        return None
    moment = parsed if isinstance(parsed, datetime) else datetime(parsed.year, parsed.month, parsed.day)
    try:
        naive = moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment
    except OverflowError:  # year 1 or 9999 with an offset
        return None
    latest = (now or datetime.now(UTC)).astimezone(UTC).replace(tzinfo=None) + timedelta(days=1)
    if not EARLIEST <= naive <= latest:
        return None
    return parsed.isoformat()


def _parse(text: str) -> datetime | date | None:
    has_time = bool(_HAS_TIME.search(text))
    try:
        moment = datetime.fromisoformat(text.replace(" ", "T", 1) if has_time else text)
        return moment if has_time else moment.date()
    except ValueError:
        pass
    if has_time and "," in text or text[:3].isalpha():
        try:
            return parsedate_to_datetime(text)  # RFC 2822 (feeds, some meta): "Tue, 10 Jun 2003 04:00:00 GMT"
        except (TypeError, ValueError, IndexError, OverflowError):
            pass
    match = _LEADING_DAY.match(text)  # "2024/05/01", "2024-05-01 10h30", "2024.05.01, Tuesday"
    if match:
        try:
            return date(int(match[1]), int(match[2]), int(match[3]))
        except ValueError:
            return None
    return None


def url_date(url: str, now: datetime | None = None) -> str | None:
    """The day in an article URL's path (`/2024/05/01/slug`, `/2024-05-01-slug`, `/20240501/`)."""
    path = url.split("?", 1)[0].split("#", 1)[0]
    for pattern in (_URL_DAY, _URL_COMPACT_DAY):
        match = pattern.search(path)
        if match:
            return parse_date(f"{match[1]}-{int(match[2]):02d}-{int(match[3]):02d}", now)
    return None


def first_date(candidates: Iterable[object], now: datetime | None = None) -> str | None:
    """The first candidate that is a plausible date, as parse_date gives it."""
    for candidate in candidates:
        parsed = parse_date(candidate, now)
        if parsed:
            return parsed
    return None


def time_element_date(root: HtmlElement, now: datetime | None = None) -> str | None:
    """`<time datetime>` marked as the publication's: `pubdate`, or in the article or its header.
    Any other `<time>` (a sidebar's, a comment's) is left to htmldate, which weighs them all."""
    marked = _MARKED_TIME(root)
    return first_date(marked[:5], now)


def same_instant_local(found: str, others: Iterable[str | None]) -> str:
    """`found` if it has a non-UTC offset or none; else another signal's value naming the same
    instant with the site's own offset (JSON-LD often says UTC where the meta says +02:00, and
    the local offset also tells the day the site published it)."""
    moment = _parse(found)
    if not isinstance(moment, datetime) or moment.utcoffset() != timedelta(0):
        return found
    for other in others:
        if not other:
            continue
        local = _parse(other)
        if isinstance(local, datetime) and local.utcoffset() and abs((local - moment).total_seconds()) <= 60:
            return other
    return found


def day_of(value: str) -> date | None:
    """The calendar day an ISO value names, as written (no zone conversion)."""
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        return None


def contradicts(found: str, in_url: str | None) -> bool:
    """A day in the article's URL (the CMS wrote it when the story was created) more than a day
    away from the markup's date: the markup names another date (a template's, a re-publication's)."""
    found_day, url_day = day_of(found), day_of(in_url) if in_url else None
    return found_day is not None and url_day is not None and abs((found_day - url_day).days) > 1
