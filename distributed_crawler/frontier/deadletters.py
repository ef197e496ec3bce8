"""`{spider}:failed`: what could not be crawled, and why, as JSON an operator can read and requeue."""

from __future__ import annotations

import json
import time
from typing import Any

from distributed_crawler.connection.calls import bound, maybe_await
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.connection.untrusted import preview
from distributed_crawler.frontier.codec import read_payload, write_payload
from distributed_crawler.meta import PROXY_FAILURES_META, PROXY_RETRY_TIMES_META, RETRY_TIMES_META

RETRY_COUNTS_META = (RETRY_TIMES_META, PROXY_RETRY_TIMES_META, PROXY_FAILURES_META)  # a requeue starts afresh

PREVIEW_CHARS = 300


def fresh_payload(payload: str) -> str:
    """A dead letter's request payload with its retry counts (site and proxy) reset (for
    `dcrawl failed --requeue`)."""
    json_format = payload.startswith("{")  # stays JSON: it may be anyone's, this only drops a count
    try:
        decoded = json.loads(payload) if json_format else read_payload(payload)
    except (ValueError, RecursionError):  # PayloadError is a ValueError
        return payload  # not ours to rewrite: the scheduler dead-letters it again if it is garbage
    meta = decoded.get("meta") if isinstance(decoded, dict) else None
    if not isinstance(meta, dict) or not any(key in meta for key in RETRY_COUNTS_META):
        return payload
    for key in RETRY_COUNTS_META:
        meta.pop(key, None)
    if json_format:
        return json.dumps(decoded, separators=(",", ":"), ensure_ascii=False)
    slot = decoded.get("slot")
    return write_payload(decoded, slot if isinstance(slot, str) else None, bool(decoded.get("again")))


def failure_entry(url: str, reason: str, node: str, **extra: Any) -> str:
    entry = {"url": url, "reason": reason, "node": node, "time": round(time.time(), 3)}
    entry.update(extra)
    return json.dumps(entry, ensure_ascii=False)


class DeadLetters:
    """Writes entries to the failed list (capped), in the same transaction as the lease removal."""

    def __init__(self, client: AnyRedis | None, key: str, node_id: str, cap: int, processing: str = "") -> None:
        """`processing`: the frontier's lease set, which `take` and `undecodable` remove leases from;
        `client` None: the frontier's, once it is bound."""
        self._client = client
        self.key = key
        self.node_id = node_id
        self.cap = cap
        self.processing = processing

    @property
    def client(self) -> AnyRedis:
        return bound(self._client)

    async def push(self, entries: list[str], remove_leases: tuple[str, list[bytes]] | None = None) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.lpush(self.key, *entries)
        pipe.ltrim(self.key, 0, self.cap - 1)
        if remove_leases and remove_leases[1]:
            pipe.zrem(remove_leases[0], *remove_leases[1])
        await maybe_await(pipe.execute())

    async def take(self, entries: list[str], leases: list[bytes]) -> None:
        """Dead letters written and the leases they replace removed, in one transaction."""
        await self.push(entries, (self.processing, leases))

    async def undecodable(self, bad: list[tuple[bytes, str]], processing_key: str = "", source: str = "queue") -> None:
        """Payloads popped from the queue that are not ours to run (garbage, pickle, unknown class).

        The payload is kept capped and only as text (invalid UTF-8 replaced): never unpickled.
        """
        entries = [
            failure_entry(
                "",
                f"undecodable payload: {reason[:PREVIEW_CHARS]}",
                self.node_id,
                source=source,
                attempts=0,
                payload=preview(lease, PREVIEW_CHARS),
            )
            for lease, reason in bad
        ]
        await self.push(entries, (processing_key or self.processing, [lease for lease, _ in bad]))
