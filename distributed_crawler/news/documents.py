"""Sitemaps and feeds as lists of dated entries, with caps: both come from untrusted sites.

A sitemap (urlset or sitemap index, gzipped or not, with Google News `news:publication_date` and
`news:title`) is read by lxml without entities or network access; a feed (RSS 0.9x/1.0/2.0,
Atom) by feedparser. A document bigger than `max_bytes` once decompressed (a zip bomb) or that
is not a sitemap / feed raises `DocumentError` with a one-line reason; past `max_entries` the rest
is left unread (`truncated`).
"""

from __future__ import annotations

import gzip
import io
import re
import time
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urljoin, urlsplit

import feedparser
from lxml import etree

GZIP_MAGIC = b"\x1f\x8b"
MAX_URL = 2048
MAX_TITLE = 1000
FEED_TYPES = ("application/rss+xml", "application/atom+xml", "application/rdf+xml", "application/feed+json")


class DocumentError(ValueError):
    """Not a usable sitemap or feed; the message is one line saying why."""


@dataclass(frozen=True)
class Entry:
    url: str
    date: datetime | None = None  # news:publication_date, else lastmod (sitemaps); published, else updated (feeds)
    title: str | None = None
    story: bool = False  # a feed item or a news sitemap's <news:news> entry: it lists a story


@dataclass
class Document:
    kind: str  # "urlset", "sitemapindex" or "feed"
    entries: list[Entry] = field(default_factory=list)
    truncated: bool = False  # max_entries reached: the rest was not read
    warning: str = ""  # read, but not cleanly (a feed's encoding, malformed markup feedparser recovered)


def decompressed(body: bytes, max_bytes: int) -> bytes:
    """The body, gunzipped if it is gzip, never more than `max_bytes` of it."""
    if body[:2] != GZIP_MAGIC:
        if len(body) > max_bytes:
            raise DocumentError(f"larger than {max_bytes} bytes (SITEMAP_MAX_BYTES)")
        return body
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(body)) as unzipped:
            data = unzipped.read(max_bytes + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise DocumentError(f"broken gzip ({exc})") from None
    if len(data) > max_bytes:
        raise DocumentError(f"larger than {max_bytes} bytes once gunzipped (SITEMAP_MAX_BYTES): a zip bomb?")
    return data


def parse_date(value: str | None) -> datetime | None:
    """A W3C datetime (`2026-11-30`, `2026-11-30T08:00:00+01:00`, `...Z`), as aware UTC; else None."""
    if not value or len(value) > 64:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)


def _http_url(value: str | None, base: str) -> str | None:
    value = (value or "").strip()
    if not value or len(value) > MAX_URL:
        return None
    try:
        url = urljoin(base, value)
        scheme = urlsplit(url).scheme
    except ValueError:
        return None
    return url if scheme in ("http", "https") else None


def _local(tag: Any) -> str:
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def _clip(value: str | None) -> str | None:
    value = " ".join(value.split()) if value else ""
    return value[:MAX_TITLE] or None


def _sitemap_entry(elem: Any, base: str) -> Entry | None:
    loc = lastmod = published = title = None
    story = False
    for child in elem:
        name = _local(child.tag)
        if name == "loc":
            loc = child.text
        elif name == "lastmod":
            lastmod = child.text
        elif name == "news":  # Google News: <news:news><news:publication_date>, <news:title>
            story = True
            for part in child:
                if _local(part.tag) == "publication_date":
                    published = part.text
                elif _local(part.tag) == "title":
                    title = part.text
    url = _http_url(loc, base)
    if url is None:
        return None
    return Entry(url, parse_date(published) or parse_date(lastmod), _clip(title), story)


def parse_sitemap(body: bytes, url: str, max_bytes: int, max_entries: int) -> Document:
    """A urlset or sitemap index (gzip accepted); entries without a usable <loc> are skipped."""
    data = decompressed(body, max_bytes)
    events = etree.iterparse(
        io.BytesIO(data),
        events=("start", "end"),
        resolve_entities=False,
        no_network=True,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
        load_dtd=False,
    )
    doc: Document | None = None
    try:
        for event, elem in events:
            name = _local(elem.tag)
            if doc is None:
                if name not in ("urlset", "sitemapindex"):
                    raise DocumentError(f"not a sitemap (root element <{name or elem.tag}>)")
                doc = Document(name)
                continue
            if event != "end" or name not in ("url", "sitemap") or elem.getparent() is None:
                continue
            entry = _sitemap_entry(elem, url)
            if entry is not None:
                if len(doc.entries) >= max_entries:
                    doc.truncated = True
                    break
                doc.entries.append(entry)
            elem.clear()
            parent = elem.getparent()
            while elem.getprevious() is not None:  # keep memory flat on a 50,000-entry sitemap
                del parent[0]
    except etree.XMLSyntaxError as exc:
        raise DocumentError(f"malformed XML ({str(exc)[:200]})") from None
    if doc is None:
        raise DocumentError("empty document")
    return doc


def _struct_date(value: Any) -> datetime | None:
    if not isinstance(value, time.struct_time):
        return None
    try:
        return datetime(*value[:6], tzinfo=UTC)
    except (TypeError, ValueError):
        return None


def parse_feed(
    body: bytes, url: str, max_bytes: int, max_entries: int, content_type: str = "application/xml"
) -> Document:
    """RSS 0.9x/1.0/2.0 or Atom; feedparser resolves relative links against `url`."""
    data = decompressed(body, max_bytes)
    headers = {"content-location": url, "content-type": content_type or "application/xml"}
    parsed = feedparser.parse(data, response_headers=headers, sanitize_html=False)
    problem = parsed.get("bozo_exception")
    if not parsed.get("version") and not parsed.entries:
        why = f"{type(problem).__name__}: {str(problem)[:200]}" if problem else "no feed elements"
        raise DocumentError(f"not an RSS or Atom feed ({why})")
    doc = Document("feed", warning=f"{type(problem).__name__}: {str(problem)[:200]}" if problem else "")
    for item in parsed.entries:
        link = _http_url(item.get("link"), url)
        if link is None:
            continue
        if len(doc.entries) >= max_entries:
            doc.truncated = True
            break
        date = _struct_date(item.get("published_parsed")) or _struct_date(item.get("updated_parsed"))
        doc.entries.append(Entry(link, date, _clip(item.get("title")), story=True))
    return doc


_FIRST_TAG = re.compile(rb"<([A-Za-z][\w:.-]*)")
_LINKS = etree.XPath("//link[@href]")


def sniff(body: bytes) -> str:
    """ "sitemap", "feed" or "" (anything else) from the first element of a response (gzip looked into)."""
    head = body[:4096]
    if head[:2] == GZIP_MAGIC:
        try:
            head = gzip.GzipFile(fileobj=io.BytesIO(body)).read(4096)
        except (OSError, EOFError, zlib.error):
            return ""
    first = _FIRST_TAG.search(head)
    name = first.group(1).lower().rpartition(b":")[2] if first else b""
    if name in (b"urlset", b"sitemapindex"):
        return "sitemap"
    return "feed" if name in (b"rss", b"feed", b"rdf") else ""


def feed_links(html_root: Any, base: str) -> list[str]:
    """Feeds a page announces: `<link rel="alternate" type="application/rss+xml" href>` (and Atom, RDF)."""
    urls = []
    for link in _LINKS(html_root):
        rel = (link.get("rel") or "").lower().split()
        kind = (link.get("type") or "").lower().split(";")[0].strip()
        if "alternate" in rel and kind in FEED_TYPES[:3]:
            url = _http_url(link.get("href"), base)
            if url is not None and url not in urls:
                urls.append(url)
    return urls[:20]
