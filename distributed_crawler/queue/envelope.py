"""The queue member format: `<deliveries>:<priority>:[<expires_at>:]<json payload>`.

Delivery count, priority and expiry live outside the JSON so Lua scripts can count redeliveries,
put a reclaimed request back at the front of its priority and drop an expired one at lease without
decoding or re-encoding the payload. `expires_at` (Unix seconds, REQUEST_TTL or meta `expires_at`)
is written only when set: a member without it (all members written before expiry existed) never
expires. The payload is a JSON object, so it never starts with a digit.
"""

from __future__ import annotations

from typing import NamedTuple

# Priorities are folded into one zset score with a 2^36 sequence number (see enqueue.lua);
# doubles hold 53 bits, which leaves |priority| < 2^17.
MAX_PRIORITY = 2**17 - 1


class Envelope(NamedTuple):
    deliveries: int
    priority: int
    payload: str
    expires_at: int = 0  # Unix seconds; 0 = never


def make_member(payload: str, priority: int, deliveries: int = 0, expires_at: int = 0) -> str:
    priority = max(-MAX_PRIORITY, min(MAX_PRIORITY, int(priority)))
    if expires_at > 0:
        return f"{deliveries}:{priority}:{int(expires_at)}:{payload}"
    return f"{deliveries}:{priority}:{payload}"


def split_member(member: str | bytes) -> Envelope:
    """Parse a member; raises ValueError when it was not written by us."""
    if isinstance(member, bytes):
        member = member.decode("utf-8", errors="replace")
    deliveries, priority, payload = member.split(":", 2)
    expires_at = "0"
    if payload[:1].isdigit():
        expires_at, payload = payload.split(":", 1)
    return Envelope(int(deliveries), int(priority), payload, int(expires_at))
