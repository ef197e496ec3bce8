"""Redis ACL permissions: what a refusal means, and which of a node's needs a user lacks.

Redis (6 and later) checks every command against the connection's ACL user: the command (or its
category), the keys it names (`~pattern`) and the pub/sub channels (`&pattern`). A refusal is a
`NOPERM` reply (redis-py's `NoPermissionError`), or, for a command a Lua script runs, an ERR reply
("The user executing the script can't ..." on Redis 7.0, "ACL failure in script: ..." from 7.2).
It is neither an outage nor bad data: the user's ACL rule lacks something and only the operator
can add it, so the answer is one line naming what to add (`AccessReport.line`), never a traceback.

`check_access` asks the server which of `AccessNeeds` the user lacks without touching data: one
EVALSHA of lua/acl_probe.lua per hash slot of the needed keys (Redis checks the keys before it runs
the script; `redis.acl_check_cmd` checks the commands and channels inside it, Redis >= 7.0): any
user may run it, where ACL DRYRUN and ACL GETUSER are administrative commands a crawler user lacks. The
scripting commands are checked by calling them (EVALSHA and SCRIPT LOAD run the probe; EVAL runs
`return 0`): `acl_check_cmd` on EVAL/EVALSHA crashes Redis 7.0.15 (see the script's header).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import cache
from importlib import resources
from typing import Any

from redis.crc import key_slot
from redis.exceptions import NoPermissionError, NoScriptError, ResponseError

from distributed_crawler.connection.calls import maybe_await
from distributed_crawler.connection.clients import RedisUnavailable
from distributed_crawler.connection.replies import reply_list
from distributed_crawler.connection.types import AnyRedis

# Where an operator reads how to fix a user's rule.
ACL_DOC = "docs/security.md#redis-acl-and-tls"
# What the commands part of a node's rule is (deploy/redis.conf's `user crawler` line): every command
# but the administrative ones; a node never needs those.
NODE_COMMAND_RULE = "+@all -@admin -flushall -flushdb"
# A denied command of these is fixed by the category: the node runs Lua scripts (EVALSHA, loaded
# again with SCRIPT LOAD after a restart or failover; EVAL for the dedup filter's growth).
SCRIPTING = frozenset({"eval", "evalsha", "script|load"})

_IN_SCRIPT = ("the user executing the script can't", "acl failure in script")
_COMMAND_RE = re.compile(r"run the '([^']+)' command")


class PermissionDenied(RedisUnavailable):
    """The Redis user's ACL rule lacks something the caller needs; the message is the one line to show."""


def is_permission_error(exc: BaseException) -> bool:
    """An ACL refusal: NOPERM, or a command refused inside a Lua script."""
    if isinstance(exc, NoPermissionError):
        return True
    return isinstance(exc, ResponseError) and any(marker in str(exc).lower() for marker in _IN_SCRIPT)


def denied_command(exc: BaseException) -> str | None:
    """The command a refusal names (`evalsha`, `script|load`), when it names one."""
    found = _COMMAND_RE.search(str(exc))
    return found.group(1).lower() if found else None


def what_was_denied(exc: BaseException) -> str:
    """What the user may not do, as a phrase: "run 'evalsha'", "use a key", "use a channel"."""
    command = denied_command(exc)
    if command is not None:
        return f"run '{command}'"
    message = str(exc).lower()
    if "channel" in message or "publish" in message:
        return "use a channel"
    if "key" in message:
        return "use a key"
    if "run this command" in message:
        return "run a command a Lua script calls"
    return "do this"


def fix_for_commands(commands: list[str] | tuple[str, ...]) -> list[str]:
    """ACL rule items that allow `commands` (the category for scripting, else each command)."""
    items: list[str] = []
    for command in commands:
        item = "+@scripting" if command in SCRIPTING else f"+{command}"
        if item not in items:
            items.append(item)
    return items


@dataclass(frozen=True)
class AccessNeeds:
    """What a client needs from its ACL user: keys (a sample name and its pattern), channels, commands."""

    who: str  # for messages: "a node of spider 'news'"
    keys: tuple[tuple[str, str], ...]  # (a key it uses, the pattern a rule grants it with)
    channels: tuple[str, ...]
    commands: tuple[str, ...]  # lower case; a subcommand as "script|load"

    @property
    def patterns(self) -> tuple[str, ...]:
        """Key patterns of the rule, without one another covers (`{news}:q:*` is in `{news}*`)."""
        unique = list(dict.fromkeys(pattern for _, pattern in self.keys))
        return tuple(p for p in unique if not any(o != p and fnmatchcase(p, o) for o in unique))

    @property
    def rule(self) -> str:
        """The ACL rule that gives these: key patterns, channels, deploy/redis.conf's commands."""
        return " ".join([*(f"~{p}" for p in self.patterns), *(f"&{c}" for c in self.channels), NODE_COMMAND_RULE])

    def pattern_of(self, key: str) -> str:
        return next((p for k, p in self.keys if k == key), key)


@dataclass
class AccessReport:
    """What the user lacks of `AccessNeeds` (empty: nothing)."""

    user: str
    commands: list[str] = field(default_factory=list)
    key_patterns: list[str] = field(default_factory=list)
    channels: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.commands or self.key_patterns or self.channels)

    def line(self, where: str, needs: AccessNeeds, cluster: bool = False) -> str:
        """One line: what is missing, the ACL SETUSER that adds it (`cluster`: on every node, each
        keeps its own users), and everything `needs` asks."""
        missing = []
        if self.commands:
            missing.append(f"may not run {', '.join(self.commands)}")
        if self.key_patterns:
            missing.append(f"may not use the keys {', '.join(self.key_patterns)}")
        if self.channels:
            missing.append(f"may not subscribe to {', '.join(self.channels)}")
        add = [
            *fix_for_commands(self.commands),
            *(f"~{p}" for p in self.key_patterns),
            *(f"&{c}" for c in self.channels),
        ]
        return (
            f"Redis user '{self.user}' at {where} {'; '.join(missing)}, which {needs.who} needs: "
            f"run `ACL SETUSER {self.user} {' '.join(add)}`{' on every node of the cluster' if cluster else ''} "
            f"(or add them to its `user` line in the ACL file); all a node needs: {needs.rule} ({ACL_DOC})"
        )


@cache
def _probe_source() -> str:
    return resources.files("distributed_crawler").joinpath("lua", "acl_probe.lua").read_text()


async def whoami(client: AnyRedis, fallback: str) -> str:
    """The connection's ACL user (`fallback` when the server does not say: Redis < 6, ACL WHOAMI denied)."""
    try:
        name: object = await maybe_await(client.execute_command("ACL WHOAMI"))
    except ResponseError:
        return fallback
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)


async def check_access(client: AnyRedis, needs: AccessNeeds, user: str = "default") -> AccessReport:
    """Which of `needs` the client's ACL user lacks (a sync or an asyncio client, any topology).

    Without the scripting commands nothing else can be asked: the report names those alone.
    Outages propagate (the caller's policy decides); a server without ACLs (Redis < 6) or without
    `redis.acl_check_cmd` (< 7.0) reports nothing it cannot see.
    """
    report = AccessReport(await whoami(client, user))
    probe = client.register_script(_probe_source())
    by_slot: dict[int, list[str]] = {}
    for key, _ in needs.keys:
        by_slot.setdefault(key_slot(key.encode()), []).append(key)
    checked = [c for c in needs.commands if c not in SCRIPTING]
    asked = [str(len(checked)), *checked, *needs.channels]
    unasked = True  # commands and channels are asked in the first call that runs (none runs when
    # the user has none of the keys: the report names the keys; the commands are asked once they are fixed)

    async def run(keys: list[str], args: list[str]) -> object:  # an untrusted reply, parsed below
        reply: object = await maybe_await(probe(keys=keys, args=args))
        return reply

    for keys in list(by_slot.values()) or [[]]:
        try:
            reply = await run(keys, asked if unasked else ["0"])
        except NoScriptError:  # never loaded and not loadable here (a replica): nothing to learn
            return report
        except ResponseError as exc:
            if not is_permission_error(exc):
                if "acl_check_cmd" in str(exc) or "unknown command" in str(exc).lower():
                    return report  # Redis < 7.0: no ACL check from scripts
                raise
            command = denied_command(exc)
            if command is not None:  # EVALSHA or SCRIPT LOAD: no script runs for this user
                report.commands = [command]
                return report
            for key in keys:  # which of this slot's keys
                try:
                    await run([key], ["0"])
                except NoPermissionError:
                    pattern = needs.pattern_of(key)
                    if pattern not in report.key_patterns:
                        report.key_patterns.append(pattern)
            continue
        if unasked:  # with a key the user has: a command is checked alone, not its missing key
            unasked = False
            commands, channels = reply_list(reply, "acl_probe.lua", 2)[:2]
            report.commands = [_text(c) for c in reply_list(commands, "acl_probe.lua")]
            report.channels = [_text(c) for c in reply_list(channels, "acl_probe.lua")]
    if "eval" in needs.commands:
        try:
            await maybe_await(client.eval("return 0", 0))
        except ResponseError as exc:
            if not is_permission_error(exc):
                raise
            report.commands.insert(0, "eval")
    return report


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
