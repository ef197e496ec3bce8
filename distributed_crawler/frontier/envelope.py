"""The queue member format: `[<deliveries>:<priority>:[<expires_at>:]]<payload>`.

Delivery count, priority and expiry live outside the payload so Lua scripts can count redeliveries,
put a reclaimed request back at the front of its priority and drop an expired one at lease without
decoding or re-encoding the payload. The envelope is left out when all three are at their default
(0 deliveries, priority 0, never expires): most pending requests are new links, and every byte of
a member is paid once per pending request. `expires_at` (Unix seconds, REQUEST_TTL or meta
`expires_at`) is written only when set: a member without it (all members written before expiry
existed) never expires. A payload (frontier/codec.py: a URL, or a JSON object) never starts with a
digit, so a member that does carries an envelope.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# Priorities are folded into one zset score with a 2^36 sequence number (see enqueue.lua);
# doubles hold 53 bits, which leaves |priority| < 2^17.
MAX_PRIORITY = 2**17 - 1
_ENVELOPE = re.compile(r"(\d+):(-?\d+):(?:(\d+):)?")
_PAYLOAD_STARTS = ("{", "http://", "https://")  # a member without an envelope: a payload of frontier/codec.py


class Envelope(NamedTuple):
    deliveries: int
    priority: int
    payload: str
    expires_at: int = 0  # Unix seconds; 0 = never


def make_member(payload: str, priority: int, deliveries: int = 0, expires_at: int = 0) -> str:
    priority = max(-MAX_PRIORITY, min(MAX_PRIORITY, int(priority)))
    if expires_at > 0:
        return f"{deliveries}:{priority}:{int(expires_at)}:{payload}"
    if deliveries == 0 and priority == 0 and not payload[:1].isdigit():
        return payload
    return f"{deliveries}:{priority}:{payload}"


def split_member(member: str | bytes) -> Envelope:
    """Parse a member; raises ValueError when it was not written by us (no valid envelope, and not
    a request payload: JSON or an http(s) URL)."""
    if isinstance(member, bytes):
        member = member.decode("utf-8", errors="replace")
    found = _ENVELOPE.match(member)
    if found is None:
        if not member.startswith(_PAYLOAD_STARTS):
            raise ValueError("not a queue member (no <deliveries>:<priority>: envelope, and not a request payload)")
        return Envelope(0, 0, member)
    deliveries, priority, expires_at = found.groups()
    return Envelope(int(deliveries), int(priority), member[found.end() :], int(expires_at or 0))
