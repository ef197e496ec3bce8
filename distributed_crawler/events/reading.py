"""Reading the change feed: from a point (XREAD), or as a consumer group (XREADGROUP, XAUTOCLAIM).

Shared by `dcrawl events` (cli/events.py) and the webhook sink (events/webhook.py). Sync client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from redis.exceptions import ResponseError

from distributed_crawler.events.feed import parse_entry

BLOCK_MS = 2000


def read_plain(
    client: Any, stream: str, start: str, follow: bool, stop: Callable[[], bool]
) -> Iterator[dict[str, Any]]:
    """Entries after *start*; with *follow*, then every new one until *stop*."""
    last = start
    while not stop():
        reply = client.xread({stream: last}, count=500, block=BLOCK_MS if follow else None)
        if not reply:
            if follow:
                continue
            return
        for entry_id, fields in reply[0][1]:
            last = entry_id
            yield parse_entry(entry_id, fields)


def ensure_group(client: Any, stream: str, group: str, start: str = "0") -> None:
    """XGROUP CREATE ... MKSTREAM unless the group exists (a new group reads from *start*)."""
    try:
        client.xgroup_create(stream, group, id=start, mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def read_group(
    client: Any,
    stream: str,
    group: str,
    consumer: str,
    follow: bool,
    claim_after: float,
    stop: Callable[[], bool],
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(entry id, entry) for this consumer: its own pending ones first (a restart), then entries
    claimed from consumers idle longer than *claim_after*, then new ones. The caller XACKs."""
    own = client.xreadgroup(group, consumer, {stream: "0"}, count=500)
    for entry_id, fields in own[0][1] if own else []:
        if fields:
            yield entry_id, parse_entry(entry_id, fields)
    while not stop():
        _, claimed, *_ = client.xautoclaim(stream, group, consumer, int(claim_after * 1000), "0-0", count=100)
        for entry_id, fields in claimed:
            if fields:
                yield entry_id, parse_entry(entry_id, fields)
        reply = client.xreadgroup(group, consumer, {stream: ">"}, count=100, block=BLOCK_MS if follow else None)
        entries = reply[0][1] if reply else []
        for entry_id, fields in entries:
            yield entry_id, parse_entry(entry_id, fields)
        if not entries and not claimed and not follow:
            return
