"""One host's state in host mode: the hash `{spider}:host:<host>` beside its queue `{spider}:q:<host>` and list `{spider}:q:<host>/`.

The Lua scripts write the hash (lib/host.lua, host_pop.lua, host_block.lua, enqueue.lua) and read
it at lease time; this module is the one Python reader of it and names its fields, so
`HostFrontier.hosts`, `dcrawl hosts` and the status read one list (docs/frontier.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.types import AnyRedis
from distributed_crawler.frontier.keys import SpiderKeys

# field -> what it holds (every value a decimal string; a missing field is its default)
FIELDS: dict[str, str] = {
    "iv": "seconds between two requests from the rate limits (DOMAIN_RATE_LIMIT(S))",
    "cd": "robots.txt Crawl-delay, seconds",
    "bo": "adaptive backoff level after 429/503 and errors (0 = none)",
    "until": "server time a block ends (Retry-After, backoff, robots.txt fetch, operator)",
    "why": "the reason of the last block",
    "pages": "requests leased on their first delivery (the page budget's count)",
    "max": "DOMAIN_MAX_PAGES of the host (absent = no budget)",
    "cap": "DOMAIN_MAX_IN_FLIGHT of the host (absent or 0 = no cap)",
    "ad": "adaptive delay, seconds (DOMAIN_DELAY_FACTOR; 0 = none)",
}
SHOWN = ("iv", "cd", "bo", "until", "why", "pages", "max", "cap")  # what an operator's row shows
CHUNK = 1000  # commands per pipeline round trip


async def read_hosts(
    client: AnyRedis, keys: SpiderKeys, hosts: Sequence[str], fields: Sequence[str] = SHOWN
) -> list[tuple[Any, Any]]:
    """Per host: (its pending requests: ZCARD of its queue + LLEN of its list, HMGET of `fields`
    from its hash, or None when `fields` is empty), in pipelines of CHUNK commands. A reply that is
    an error (a key of another type) comes back in place as the exception, never raised: the
    caller decides."""
    calls: list[tuple[str, tuple[Any, ...]]] = []
    for host in hosts:
        calls.append(("zcard", (keys.host_queue(host),)))
        calls.append(("llen", (keys.host_list(host),)))  # lua/lib/host.lua host_list
        if fields:
            calls.append(("hmget", (keys.host(host), *fields)))
    replies: list[Any] = []
    for start in range(0, len(calls), CHUNK):
        pipe = client.pipeline(transaction=False)
        for method, args in calls[start : start + CHUNK]:
            getattr(pipe, method)(*args)
        replies += await maybe_await(pipe.execute(raise_on_error=False))
    step = 3 if fields else 2
    out = []
    for i in range(0, len(replies), step):
        queued, listed = replies[i], replies[i + 1]
        size = queued if isinstance(queued, Exception) else listed if isinstance(listed, Exception) else queued + listed
        out.append((size, replies[i + 2] if fields else None))
    return out
