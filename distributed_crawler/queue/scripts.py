"""The Lua scripts of `distributed_crawler/lua/`, and the frontier scripts registered on a client.

Their KEYS/ARGV order is owned by the Frontier classes (queue/base.py, host.py, single.py).

redis-py's `register_script` sends EVALSHA and falls back to EVAL on NOSCRIPT, so scripts survive
a restart or failover that empties the script cache.

A script whose header has a line `-- uses: NAME (...)` gets `lua/lib/NAME.lua` prepended by
`lua_source`: the result is still one script text, one SHA, one EVALSHA per call.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from functools import cache
from importlib import resources
from typing import Any, TypeVar

T = TypeVar("T")


def reply_text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


_USES = re.compile(r"^-- uses: (\w+)", re.MULTILINE)


def _read(path: str) -> str:
    return resources.files("distributed_crawler").joinpath("lua", path).read_text()


@cache
def lua_source(name: str) -> str:
    """The text sent to Redis for `lua/NAME.lua`: its declared preludes (lua/lib/) first."""
    source = _read(f"{name}.lua")
    preludes = [_read(f"lib/{lib}.lua") for lib in dict.fromkeys(_USES.findall(source))]
    return "".join(preludes) + source


def is_cluster(client: Any) -> bool:
    """A Redis Cluster client: its keys of different hash tags live on different masters."""
    return any(cls.__name__ in ("RedisCluster", "ClusterPipeline") for cls in type(client).__mro__)


def then(result: Any, convert: Callable[[Any], T]) -> T | Awaitable[T]:
    """`convert` the reply of a sync client now, or of an asyncio client once awaited."""
    if inspect.isawaitable(result):

        async def converted() -> T:
            return convert(await result)

        return converted()
    return convert(result)


class Scripts:
    """The frontier scripts registered on one client (once per client: EVALSHA, not the source).

    Mode-agnostic: the Frontier classes (queue/base.py, host.py, single.py) pass their KEYS/ARGV.
    """

    NAMES = ("pop", "renew", "reclaim", "release", "enqueue", "host_block", "host_pop", "host_purge")

    def __init__(self, registered: dict[str, Any]) -> None:
        self.pop, self.renew, self.reclaim = registered["pop"], registered["renew"], registered["reclaim"]
        self.release, self.enqueue = registered["release"], registered["enqueue"]
        self.host_block, self.host_pop = registered["host_block"], registered["host_pop"]
        self.host_purge = registered["host_purge"]

    @classmethod
    def register(cls, client: Any) -> Scripts:
        return cls({name: client.register_script(lua_source(name)) for name in cls.NAMES})
