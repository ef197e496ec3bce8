"""Reading the change feed: from a point (XREAD), or as a consumer group (XREADGROUP, XAUTOCLAIM).

Shared by `dcrawl events` (cli/events.py) and the webhook sink (events/webhook.py). Sync client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from redis.exceptions import ResponseError

from distributed_crawler.connection.types import SyncRedis
from distributed_crawler.connection.untrusted import text
from distributed_crawler.events.feed import parse_entry

BLOCK_MS = 2000


def read_plain(
    client: SyncRedis, stream: str, start: str, follow: bool, stop: Callable[[], bool]
) -> Iterator[dict[str, Any]]:
    """Entries after *start*; with *follow*, then every new one until *stop*."""
    last = start
    while not stop():
        entries = read_reply(client.xread({stream: last}, count=500, block=BLOCK_MS if follow else None), stream)
        if not entries:
            if follow:
                continue
            return
        for entry_id, fields in entries:
            last = text(entry_id)
            yield parse_entry(entry_id, fields)


def ensure_group(client: SyncRedis, stream: str, group: str, start: str = "0") -> None:
    """XGROUP CREATE ... MKSTREAM unless the group exists (a new group reads from *start*)."""
    try:
        client.xgroup_create(stream, group, id=start, mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def read_group(
    client: SyncRedis,
    stream: str,
    group: str,
    consumer: str,
    follow: bool,
    claim_after: float,
    stop: Callable[[], bool],
) -> Iterator[tuple[bytes | str, dict[str, Any]]]:
    """(entry id, entry) for this consumer: its own pending ones first (a restart), then entries
    claimed from consumers idle longer than *claim_after*, then new ones. The caller XACKs."""
    for entry_id, fields in read_reply(client.xreadgroup(group, consumer, {stream: "0"}, count=500), stream):
        if fields:
            yield entry_id, parse_entry(entry_id, fields)
    while not stop():
        claimed = autoclaimed(
            client.xautoclaim(stream, group, consumer, int(claim_after * 1000), "0-0", count=100), stream
        )
        for entry_id, fields in claimed:
            if fields:
                yield entry_id, parse_entry(entry_id, fields)
        reply = client.xreadgroup(group, consumer, {stream: ">"}, count=100, block=BLOCK_MS if follow else None)
        entries = read_reply(reply, stream)
        for entry_id, fields in entries:
            yield entry_id, parse_entry(entry_id, fields)
        if not entries and not claimed and not follow:
            return


Entries = list[tuple[bytes | str, Mapping[bytes | str, bytes | str]]]


def stream_entries(entries: object, stream: str) -> Entries:
    """(id, fields) pairs of a stream reply; a deleted entry (its fields None) reads as no fields."""
    if not isinstance(entries, list):
        raise ValueError(f"{stream}: expected a list of stream entries, got {entries!r:.80}")
    out: Entries = []
    for entry in entries:
        if not isinstance(entry, (tuple, list)) or len(entry) != 2 or not isinstance(entry[0], (bytes, str)):
            raise ValueError(f"{stream}: expected an (id, fields) stream entry, got {entry!r:.80}")
        fields = entry[1]
        if fields is not None and not isinstance(fields, Mapping):
            raise ValueError(f"{stream}: expected the fields of entry {entry[0]!r} as a map, got {fields!r:.80}")
        out.append((entry[0], fields or {}))
    return out


def read_reply(reply: object, stream: str) -> Entries:
    """The entries of an XREAD / XREADGROUP of one stream ([[stream, entries]]; nothing new: empty)."""
    if not reply:
        return []
    if not isinstance(reply, list) or not isinstance(reply[0], (tuple, list)) or len(reply[0]) != 2:
        raise ValueError(f"{stream}: expected [[stream, entries]] from XREAD, got {reply!r:.80}")
    return stream_entries(reply[0][1], stream)


def autoclaimed(reply: object, stream: str) -> Entries:
    """The entries an XAUTOCLAIM claimed ([next id, entries, deleted ids])."""
    if not isinstance(reply, (tuple, list)) or len(reply) < 2:
        raise ValueError(f"{stream}: expected [next id, entries, ...] from XAUTOCLAIM, got {reply!r:.80}")
    return stream_entries(reply[1], stream)
