"""The Lua scripts of `distributed_crawler/lua/`, registered on a client.

redis-py's `register_script` sends EVALSHA and falls back to EVAL on NOSCRIPT, so scripts survive
a restart or failover that empties the script cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any


@cache
def lua_source(name: str) -> str:
    return resources.files("distributed_crawler").joinpath("lua", f"{name}.lua").read_text()


@dataclass(frozen=True)
class Scripts:
    """The lease scripts on one client (enqueue.lua is driven by enqueue.Enqueuer)."""

    client: Any
    pop: Any
    renew: Any
    reclaim: Any
    release: Any

    @classmethod
    def register(cls, client: Any) -> Scripts:
        """Works for sync and asyncio clients alike (calls return values or awaitables)."""
        names = [name for name in cls.__dataclass_fields__ if name != "client"]
        return cls(client=client, **{name: client.register_script(lua_source(name)) for name in names})
