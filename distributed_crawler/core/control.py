"""Control actions on a running crawl, shared by `dcrawl` (cli/control.py) and the dashboard.

Each action goes through the spider's CrawlControl (core/crawl_control.py: its overrides, its
pause; the frontier's purge script for a purge) and appends one entry to the capped audit stream:
action, target, old and new value, user, time and source (cli / dashboard). Input is checked here, so both faces refuse the same things with the
same one line (`BadInput`).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from distributed_crawler.connection.calls import maybe_await, run_sync
from distributed_crawler.core.crawl_control import CrawlControl
from distributed_crawler.core.source_records import decode_source
from distributed_crawler.core.traps import registered_domain
from distributed_crawler.defaults import SettingsReader

_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST = re.compile(rf"^(?:{_LABEL}\.)*{_LABEL}(?::\d{{1,5}})?$")
_IPV6 = re.compile(r"^\[[0-9a-f:.]+\](?::\d{1,5})?$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
RENDER = ("on", "off", "auto")
HOST_ACTIONS = ("set", "unset", "block", "unblock", "purge")
OVERRIDE_FIELDS = ("delay", "concurrency", "max_pages", "render")  # what `set` sets and `unset` clears
FOREVER = 10 * 365 * 86400  # a block without --for: until unblocked
META_FIELDS = ("scope", "by", "at", "source", "delay_from")
# `delay_from` of an override whose delay is a registered source's `rate` (core/source_changes.py):
# an operator's own delay has none, and wins over the registry's (docs/sources.md "Rate").
FROM_REGISTRY = "registry"


class BadInput(ValueError):
    """A refused argument: one line (exit code 2 in the CLI, 400 in the dashboard)."""


def parse_duration(raw: str) -> float:
    """`90s`, `15m`, `2h`, `1d` (or plain seconds) -> seconds."""
    match = _DURATION.match(str(raw).strip().lower())
    if not match or float(match.group(1)) <= 0:
        raise BadInput(f"duration ({raw}) must be a number with s, m, h or d, e.g. 90s, 15m, 2h, 1d")
    return float(match.group(1)) * UNITS[match.group(2)]


def parse_host(raw: str) -> tuple[str, str]:
    """(host, scope): a lowercased host[:port], scope "domain" when it is a registered domain itself
    (the override then applies to every subdomain), else "host"."""
    host = str(raw).strip().lower().rstrip(".")
    if not host or len(host) > 300 or "://" in host or not (_HOST.match(host) or _IPV6.match(host)):
        raise BadInput(f"host ({raw}) must be a host name like news.example.com or a domain like example.com")
    if host.startswith("[") or ":" in host or host.replace(".", "").isdigit():
        return host, "host"
    return host, "domain" if "." in host and registered_domain(host) == host else "host"


@dataclass(frozen=True)
class HostChange:
    """What `set` / `unset` / `block` change, checked."""

    values: dict[str, Any] = field(default_factory=dict)  # delay, concurrency, max_pages, render
    seconds: float | None = None  # block: how long (None = until unblocked)
    reason: str = ""
    cleared: tuple[str, ...] = ()  # unset: the fields to remove; () = every override of the host, a block too

    @classmethod
    def of(
        cls,
        action: str,
        delay: Any = None,
        concurrency: Any = None,
        max_pages: Any = None,
        render: Any = None,
        duration: Any = None,
        reason: Any = None,
    ) -> HostChange:
        if action not in HOST_ACTIONS:
            raise BadInput(f"action ({action}) must be one of {', '.join(HOST_ACTIONS)}")
        values: dict[str, Any] = {}
        if action == "unset":  # a flag given (any value, or none) names a field to remove
            given = {"delay": delay, "concurrency": concurrency, "max_pages": max_pages, "render": render}
            return cls(cleared=tuple(k for k in OVERRIDE_FIELDS if given[k] not in (None, False)))
        if action == "set":
            for name, value in (("--delay", delay), ("--concurrency", concurrency), ("--max-pages", max_pages)):
                if value is True:  # the flag without a value (it takes none for unset)
                    raise BadInput(f"set {name} needs a value")
            if render is True:
                raise BadInput("set --render needs a value: on, off or auto")
            if delay not in (None, ""):
                d = _number(delay, "--delay")
                if not d >= 0 or d > 86400:
                    raise BadInput(f"--delay ({delay}) must be between 0 and 86400 seconds between two requests")
                values["delay"] = d
            if concurrency not in (None, ""):
                c = _whole(concurrency, "--concurrency")
                if c < 1:
                    raise BadInput(f"--concurrency ({concurrency}) must be >= 1 request in flight")
                values["concurrency"] = c
            if max_pages not in (None, ""):
                m = _whole(max_pages, "--max-pages")
                if m < 0:
                    raise BadInput(f"--max-pages ({max_pages}) must be >= 0")
                values["max_pages"] = m
            if render not in (None, ""):
                if render not in RENDER:
                    raise BadInput(f"--render ({render}) must be on, off or auto")
                values["render"] = render
            if not values:
                raise BadInput("set needs at least one of --delay, --concurrency, --max-pages, --render")
        seconds = parse_duration(duration) if action == "block" and duration not in (None, "") else None
        return cls(values, seconds, str(reason or "")[:200])


def _number(raw: Any, name: str) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise BadInput(f"{name} ({raw}) must be a number") from None


def _whole(raw: Any, name: str) -> int:
    if isinstance(raw, bool) or not str(raw).strip().lstrip("-").isdigit():
        raise BadInput(f"{name} ({raw}) must be a whole number")
    return int(raw)


def decode_override(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        value = None
    return value if isinstance(value, dict) else {"garbage": True}


def audit_entry(action: str, target: str, old: Any, new: Any, by: str, source: str) -> dict[str, str]:
    """The fields of one audit entry (action, target, old and new value, user, time, source)."""
    return {
        "action": action,
        "target": target,
        "old": json.dumps(old, sort_keys=True),
        "new": json.dumps(new, sort_keys=True),
        "by": by,
        "time": f"{time.time():.3f}",
        "source": source,
    }


def record(
    control: CrawlControl, settings: Any, action: str, target: str, old: Any, new: Any, by: str, source: str
) -> None:
    """One audit entry (action, target, old and new value, user, time, source)."""
    fields = audit_entry(action, target, old, new, by, source)
    run_sync(control.audit(fields, SettingsReader(settings).int("AUDIT_MAXLEN", min=1)))


def host_action(
    control: CrawlControl, settings: Any, raw_host: str, action: str, change: HostChange, by: str, source: str
) -> tuple[str, dict[str, Any] | None, int | None]:
    """Apply set / block / unblock / purge to a host or domain: (host, the override now, purged count)."""
    host, scope = parse_host(raw_host)
    old = decode_override(run_sync(control.override(host)))
    if action == "purge":
        cap = SettingsReader(settings).int("SCHEDULER_FAILED_MAX", min=1)
        dead = bool(change.values.get("dead_letter"))
        dropped = run_sync(control.frontier.purge(host, scope, dead, cap, f"{source}:{by}", time.time()))
        record(control, settings, "purge", host, None, {"dropped": dropped, "dead_letter": dead}, by, source)
        return host, old, dropped
    new = {k: v for k, v in (old or {}).items() if k != "garbage"}
    if action == "set":
        new.update(change.values)
        if "delay" in change.values and change.values.get("delay_from") != FROM_REGISTRY:
            new.pop("delay_from", None)  # the operator's delay now
    elif action == "block":
        new["until"] = round(time.time() + (change.seconds or FOREVER), 3)
        new["reason"] = change.reason or "blocked by an operator"
    elif action == "unset":
        for key in change.cleared or [k for k in new if k not in META_FIELDS]:
            new.pop(key, None)
        if not change.cleared:
            new.pop("reason", None)
        if "delay" not in new:
            new.pop("delay_from", None)
            if scope == "domain" and change.values.get("delay_from") != FROM_REGISTRY:
                new.update(registry_delay(control, host))  # back to the source's rate, if it has one
    elif action == "unblock":
        new.pop("until", None)
        new.pop("reason", None)
    if any(k not in META_FIELDS for k in new):
        new.update({"scope": scope, "by": by, "at": round(time.time(), 3), "source": source})
        run_sync(control.write_override(host, json.dumps(new, sort_keys=True)))
        now: dict[str, Any] | None = new
    else:
        run_sync(control.write_override(host, None))
        now = None
    if action in ("unset", "unblock") and old and any(k in old for k in ("until", "delay")):
        run_sync(
            control.frontier.make_due(host, scope)
        )  # else it sleeps until the lifted block or delay would have ended
    record(control, settings, action, host, old, now, by, source)
    return host, now, None


def registry_delay(control: CrawlControl, site: str) -> dict[str, Any]:
    """The override delay a registered source's `rate` gives its site ({} when it has none)."""
    source = decode_source(run_sync(control.source(site)))
    if source is None or source.rate is None:
        return {}
    return {"delay": round(1.0 / source.rate, 3), "delay_from": FROM_REGISTRY}


def pause_action(
    control: CrawlControl, settings: Any, action: str, drain: bool, by: str, source: str
) -> dict[str, Any] | None:
    """pause / resume one spider; returns the pause state before."""
    old = run_sync(control.pause_state())
    if action == "pause":
        run_sync(control.pause(by, drain, source, time.time()))
        new = run_sync(control.pause_state())
    elif action == "resume":
        run_sync(control.resume())
        new = None
    else:
        raise BadInput(f"action ({action}) must be pause or resume")
    record(control, settings, action, control.spider, old, new, by, source)
    return old


def known_host(control: CrawlControl, host: str) -> bool:
    """Whether the frontier has any state of the host (an override of an unknown one gets a note)."""
    frontier = control.frontier
    hosts = frontier.host_control()
    if hosts is None:
        return True
    queue = frontier.host_queue_key(host)
    return bool(
        run_sync(maybe_await(frontier.client.exists(hosts.host_state_key(host), queue, queue + "/")))
    )  # "/": its list


def audit_words(action: str, raw: str) -> str:
    """An audit entry's old or new value (JSON) in words: `delay 3, blocked until ...`, `paused by
    alice (drain)`, `running`, `12 pending dropped`; what cannot be read is shown as it is."""
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return str(raw)[:200]
    if value is None:
        return "running" if action in ("pause", "resume") else "none"
    if not isinstance(value, dict):
        return str(value)[:200]
    if "dropped" in value:
        return f"{value['dropped']} pending dropped" + (" (dead-lettered)" if value.get("dead_letter") else "")
    if "since" in value:
        return f"paused by {value.get('by', '?')}" + (" (drain)" if value.get("drain") else "")
    if "url" in value and "name" in value:  # a registered source (dcrawl sources SPIDER import)
        return f"source {value['name']} ({value['url']})"
    return describe(value)


def describe(o: dict[str, Any] | None) -> str:
    if not o:
        return "none"
    parts = [f"{k} {o[k]}" for k in ("delay", "concurrency", "max_pages", "render") if k in o]
    if "delay" in o and o.get("delay_from") == FROM_REGISTRY:
        parts[0] += " (its source's rate)"
    if "until" in o:
        try:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(o["until"])))
        except (TypeError, ValueError, OverflowError, OSError):
            when = "?"
        parts.append(f"blocked until {when} ({o.get('reason', '')})")
    return ", ".join(parts) or "none"
