"""The Lua scripts of `distributed_crawler/lua/`, and the frontier scripts registered on a client.

Their KEYS/ARGV order is owned by the Frontier classes (frontier/base.py, host.py, single.py).

redis-py's `register_script` sends EVALSHA and falls back to EVAL on NOSCRIPT, so scripts survive
a restart or failover that empties the script cache.

A script whose header has a line `-- uses: NAME (...)` gets `lua/lib/NAME.lua` prepended by
`lua_source`: the result is still one script text, one SHA, one EVALSHA per call.
"""

from __future__ import annotations

from distributed_crawler.connection.lua import lua_source
from distributed_crawler.connection.types import AnyRedis, AnyScript


class Scripts:
    """The frontier scripts registered on one client (once per client: EVALSHA, not the source).

    Mode-agnostic: the Frontier classes (frontier/base.py, host.py, single.py) pass their KEYS/ARGV.
    """

    NAMES = (
        "pop",
        "renew",
        "reclaim",
        "release",
        "enqueue",
        "host_block",
        "host_pop",
        "host_purge",
        "host_due",
        "recrawl_ack",
    )

    def __init__(self, registered: dict[str, AnyScript]) -> None:
        self.pop, self.renew, self.reclaim = registered["pop"], registered["renew"], registered["reclaim"]
        self.release, self.enqueue = registered["release"], registered["enqueue"]
        self.host_block, self.host_pop = registered["host_block"], registered["host_pop"]
        self.host_purge, self.host_due = registered["host_purge"], registered["host_due"]
        self.recrawl_ack = registered["recrawl_ack"]

    @classmethod
    def register(cls, client: AnyRedis) -> Scripts:
        return cls({name: client.register_script(lua_source(name)) for name in cls.NAMES})
