"""The Lua scripts of `distributed_crawler/lua/` as sent to Redis, and what a script call needs to
know of its client.

A script whose header has a line `-- uses: NAME (...)` gets `lua/lib/NAME.lua` prepended by
`lua_source`: the result is still one script text, one SHA, one EVALSHA per call.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distributed_crawler.connection.types import AnyPipeline, AnyRedis


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


def is_cluster(client: AnyRedis | AnyPipeline) -> bool:
    """A Redis Cluster client: its keys of different hash tags live on different masters."""
    return any(cls.__name__ in ("RedisCluster", "ClusterPipeline") for cls in type(client).__mro__)
