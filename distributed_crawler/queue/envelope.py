"""The queue member format: `<deliveries>:<priority>:<json payload>`.

Delivery count and priority live outside the JSON so Lua scripts can count redeliveries and put a
reclaimed request back at the front of its priority without decoding or re-encoding the payload.
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


def make_member(payload: str, priority: int, deliveries: int = 0) -> str:
    priority = max(-MAX_PRIORITY, min(MAX_PRIORITY, int(priority)))
    return f"{deliveries}:{priority}:{payload}"


def split_member(member: str | bytes) -> Envelope:
    """Parse a member; raises ValueError when it was not written by us."""
    if isinstance(member, bytes):
        member = member.decode("utf-8", errors="replace")
    deliveries, priority, payload = member.split(":", 2)
    return Envelope(int(deliveries), int(priority), payload)
