"""What a node of a spider needs from its Redis ACL user, and the start-up check that it has it.

The keys come from the settings that name them (every `*_KEY` of defaults.py, as configured, on
the spider's hash tag and on each `FRONTIER_SHARDS` tag; the seed key's hold zset), the channels
from the `*_CHANNEL` settings, the commands from the Lua scripts (lua/*.lua) plus the few a node
sends outside them. A missing one is one line and exit code 2 at start (`scrapy crawl`,
commands/crawl.py) instead of a traceback; `dcrawl` runs the same check to explain a refusal. A
command outside this list that an ACL refuses later is the Redis policy's (connection/policy.py):
one ERROR a minute naming it, and the call waits.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

from redis.connection import parse_url

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.permissions import AccessNeeds, PermissionDenied, check_access
from distributed_crawler.defaults import DEFAULTS, SettingsReader
from distributed_crawler.frontier.factory import mode_class
from distributed_crawler.frontier.seedkey import taken_key
from distributed_crawler.frontier.shards import check_shards, shard_tags
from distributed_crawler.keyspace import fill
from distributed_crawler.keyspace import key as spider_key

# Commands a node sends outside its Lua scripts that an ACL rule may leave out: scripts themselves
# (EVALSHA, SCRIPT LOAD after a restart or failover, EVAL for the dedup filter's growth), the
# doorbell's SUBSCRIBE, the connection's name, the change feed's XADD, the start-up checks.
DIRECT_COMMANDS = ("evalsha", "script|load", "eval", "subscribe", "client|setname", "xadd", "ping", "type")
# Single-queue modes keep per-domain politeness under these keys; a per-host frontier does it at lease.
SINGLE_QUEUE_KEYS = ("DOMAIN_RATE_KEY", "DOMAIN_IN_FLIGHT_KEY")

_CALL_RE = re.compile(r"""redis\.p?call\(\s*["']([\w.|]+)["']""")
_PLACEHOLDER_RE = re.compile(r"%\((?!spider\)|name\))\w+\)s")


@cache
def script_commands() -> tuple[str, ...]:
    """Every command the Lua scripts call (lower case, sorted)."""
    found: set[str] = set()
    lua = resources.files("distributed_crawler").joinpath("lua")
    for folder in (lua, lua.joinpath("lib")):
        for entry in folder.iterdir():
            if entry.name.endswith(".lua"):
                found.update(name.lower() for name in _CALL_RE.findall(entry.read_text()))
    return tuple(sorted(found))


def _pattern(template: str, tag: str) -> tuple[str, str]:
    """(a key the template names for `tag`, the ACL pattern that grants all of its keys)."""
    glob = fill(_PLACEHOLDER_RE.sub("*", template), tag)
    sample = glob.replace("*", "x")
    if glob.startswith("{") and "}" in glob:
        return sample, glob[: glob.index("}") + 1] + "*"  # everything on this hash tag
    return sample, glob


def node_needs(settings: Any, spider: str) -> AccessNeeds:
    """The keys, channels and commands a node of `spider` uses, from its settings."""
    read = SettingsReader(settings)
    tags = shard_tags(spider, check_shards(read.raw("FRONTIER_SHARDS")))
    single_queue = not mode_class(str(read.raw("SCHEDULER_QUEUE_CLASS")))[0].per_host
    seeds = spider_key(settings, "REDIS_START_URLS_KEY", spider)
    keys = [_pattern(seeds.replace("%", "%%"), spider), _pattern(taken_key(seeds).replace("%", "%%"), spider)]
    for name, default in DEFAULTS.items():
        if not name.endswith("_KEY") or not isinstance(default, str):
            continue
        if name in SINGLE_QUEUE_KEYS and not (single_queue or read.bool("DOMAIN_RATE_LIMIT_PER_PROXY")):
            continue
        template = read.str(name)
        keys.append(_pattern(template, spider))
        if "{%(spider)s}" in template:  # a frontier key: on every shard's tag too
            keys.extend(_pattern(template, tag) for tag in tags if tag != spider)
    # the spider's own tag first, its shards' next, then the rest (seeds, the proxy pool) as found
    keys.sort(key=lambda each: (not each[1].startswith(f"{{{spider}}}"), not each[1].startswith(f"{{{spider}~")))
    channels = tuple(spider_key(settings, name, spider) for name in DEFAULTS if name.endswith("_CHANNEL"))
    return AccessNeeds(
        who=f"a node of spider '{spider}'",
        keys=tuple(dict.fromkeys(keys)),
        channels=channels,
        commands=tuple(dict.fromkeys([*DIRECT_COMMANDS, *script_commands()])),
    )


def url_user(config: RedisConfig) -> str:
    """The ACL user the settings log in as (REDIS_URL's, else REDIS_PARAMS's, else `default`)."""
    return str(parse_url(config.url).get("username") or dict(config.options).get("username") or "default")


def check_node_access(settings: Any, config: RedisConfig, spider: str) -> None:
    """Raise `PermissionDenied` (one line: what is missing, the ACL SETUSER that adds it) unless the
    configured user may do all a node of `spider` does. Outages propagate."""
    needs = node_needs(settings, spider)
    client = config.sync_client()
    try:
        report = run_sync(check_access(client, needs, url_user(config)))
    finally:
        client.close()
    if not report.ok:
        raise PermissionDenied(report.line(config.masked_url, needs, cluster=config.cluster))
