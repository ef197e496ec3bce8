"""Which nodes work on a spider: a last-seen zset plus a small hash per node (expiring).

The full heartbeat (state, rates, RSS, alerts) belongs to the heartbeat extension; this is the
minimum `dcrawl status` needs to list nodes and tell the live ones from the dead.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from distributed_crawler import __version__
from distributed_crawler.keys import SpiderKeys

ALIVE_INTERVALS = 3  # a node missing this many beats is dead


async def beat(client: Any, keys: SpiderKeys, node_id: str, interval: float, fields: dict[str, Any]) -> None:
    """Record that `node_id` is alive now, with its counters; one round trip."""
    key = keys.node(node_id)
    pipe = client.pipeline(transaction=False)
    pipe.zadd(keys.nodes, {node_id: time.time()})
    pipe.hset(key, mapping={
        "id": node_id, "host": socket.gethostname(), "pid": os.getpid(), "version": __version__,
        "last_seen": round(time.time(), 3), "interval": interval, **fields,
    })
    pipe.expire(key, max(1, int(interval * ALIVE_INTERVALS + 1)))
    await pipe.execute()


def read_nodes(client: Any, keys: SpiderKeys) -> list[dict[str, Any]]:
    """Every node seen for this spider (sync client), newest first, with `alive`."""
    now = time.time()
    nodes = []
    for raw_id, last_seen in client.zrevrange(keys.nodes, 0, -1, withscores=True):
        node_id = raw_id.decode()
        info = {k.decode(): v.decode() for k, v in client.hgetall(keys.node(node_id)).items()}
        interval = float(info.get("interval") or 10)
        pages = int(info.get("pages") or 0)
        started = float(info.get("started") or last_seen)
        nodes.append({
            "id": node_id,
            "alive": bool(info) and now - last_seen <= interval * ALIVE_INTERVALS,
            "last_seen": round(last_seen, 3),
            "pages": pages,
            "items": int(info.get("items") or 0),
            "rate": round(pages / max(last_seen - started, 1e-9), 2) if pages else 0.0,  # pages/s since start
            "leases": int(info.get("leases") or 0),
        })
    return nodes
