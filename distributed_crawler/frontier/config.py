"""The per-host frontier's configuration ("host" queue type, docs/frontier.md).

`slot_of(url, config)` names the politeness unit of a request, once for every component: the
closest `DOMAIN_RATE_LIMITS` domain of its host, else its lowercased host (plus `:port` when the
URL gives a non-default one, as Scrapy's download slots do). Each slot has its own queue in Redis,
an interval (1 / rate, 0 = none) enforced at pop time on server time, an optional page budget
(`DOMAIN_MAX_PAGES`) and an optional cap on its leases held at once across the cluster
(`DOMAIN_MAX_IN_FLIGHT`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from distributed_crawler.defaults import SettingsReader
from distributed_crawler.urlhost import normalize_host

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
HOST_KEY_SETTINGS = ("SCHEDULER_HOST_QUEUE_KEY", "SCHEDULER_HOST_KEY", "SCHEDULER_HOST_IN_FLIGHT_KEY")


def closest(host: str, table: dict[str, Any]) -> str | None:
    """The closest domain of `host` (itself or a parent) that is a key of `table`, or None."""
    labels = host.lower().rstrip(".").split(".")
    for i in range(len(labels)):
        domain = ".".join(labels[i:])
        if domain in table:
            return domain
    return None


def _rate(name: str, value: Any) -> float:
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} ({value!r}) must be a number of requests per second (0 = no limit)") from None
    if not rate >= 0 or rate == float("inf"):
        raise ValueError(f"{name} ({value!r}) must be a finite number >= 0 of requests per second (0 = no limit)")
    return rate


def _count(name: str, value: Any, unit: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().lstrip("-").isdigit():
        raise ValueError(f"{name} ({value!r}) must be a whole number of {unit} per host (0 = no limit)")
    count = int(value)
    if count < 0:
        raise ValueError(f"{name} ({count}) must be >= 0 {unit} per host (0 = no limit)")
    return count


def _mapping(name: str, raw: Any, example: str) -> dict[str, Any] | None:
    """A dict setting (a JSON object with -s), or None when it is not one."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise ValueError(f"{name} ({raw!r}) is not valid JSON; e.g. -s '{name}={example}'") from None
    return dict(raw) if isinstance(raw, dict) else None


@dataclass(frozen=True)
class FrontierConfig:
    rate: float = 0.0  # DOMAIN_RATE_LIMIT: requests per second per slot, 0 = no limit
    rates: dict[str, float] = field(default_factory=dict)  # DOMAIN_RATE_LIMITS: domain -> rate (0 = none)
    max_pages: int = 0  # DOMAIN_MAX_PAGES as an int: pages per host, 0 = no limit
    max_pages_by_domain: dict[str, int] = field(default_factory=dict)  # DOMAIN_MAX_PAGES as a dict
    per_proxy: bool = False  # DOMAIN_RATE_LIMIT_PER_PROXY: the middleware keeps the rates, not the pop
    max_in_flight: int = 0  # DOMAIN_MAX_IN_FLIGHT as an int: leases held at once per host, 0 = no cap
    max_in_flight_by_domain: dict[str, int] = field(default_factory=dict)  # DOMAIN_MAX_IN_FLIGHT as a dict

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> FrontierConfig:
        """Read and check the settings; a bad value raises ValueError with the fix in one line."""
        read = SettingsReader(settings)
        rate = _rate("DOMAIN_RATE_LIMIT", read.raw("DOMAIN_RATE_LIMIT") or 0)
        raw = read.raw("DOMAIN_RATE_LIMITS") or {}
        table = _mapping("DOMAIN_RATE_LIMITS", raw, '{"example.com": 0.5}')
        if table is None:
            raise ValueError(
                f"DOMAIN_RATE_LIMITS ({raw!r}) must be a dict of domain -> requests per second, "
                """e.g. -s 'DOMAIN_RATE_LIMITS={"example.com": 0.5}'"""
            )
        rates = {str(d).lower().strip("."): _rate(f"DOMAIN_RATE_LIMITS[{d!r}]", r) for d, r in table.items()}
        max_pages, by_domain = per_host_count(read.raw("DOMAIN_MAX_PAGES"), "DOMAIN_MAX_PAGES", "pages", 500)
        in_flight, in_flight_by_domain = per_host_count(
            read.raw("DOMAIN_MAX_IN_FLIGHT"), "DOMAIN_MAX_IN_FLIGHT", "requests in flight", 2
        )
        for name in HOST_KEY_SETTINGS:
            template = read.str(name)
            if not template.endswith("%(host)s") or "%(spider)s" not in template:
                raise ValueError(
                    f"{name} ({template}) must contain %(spider)s and end with %(host)s, e.g. {{%(spider)s}}:q:%(host)s"
                )
        return cls(
            rate, rates, max_pages, by_domain, read.bool("DOMAIN_RATE_LIMIT_PER_PROXY"), in_flight, in_flight_by_domain
        )

    def limit_for(self, host: str) -> tuple[str, float]:
        """(budget name, requests per second) of a host: the closest DOMAIN_RATE_LIMITS domain, else the host."""
        host = host.lower().rstrip(".")
        domain = closest(host, self.rates)
        if domain is not None:
            return domain, self.rates[domain]
        return host, self.rate

    def interval(self, slot: str) -> float:
        """Seconds between two requests of a slot, enforced by the pop (0 = none; per proxy: the middleware's)."""
        if self.per_proxy:
            return 0.0
        _, rate = self.limit_for(_host(slot))
        return 1.0 / rate if rate > 0 else 0.0

    def budget(self, slot: str) -> int:
        """Pages a slot may get across the cluster, -1 = no limit (the host hash's `max`)."""
        return _lookup(_host(slot), self.max_pages, self.max_pages_by_domain)

    def in_flight_cap(self, slot: str) -> int:
        """Leases of a slot the whole cluster may hold at once, -1 = no cap (the host hash's `cap`)."""
        return _lookup(_host(slot), self.max_in_flight, self.max_in_flight_by_domain)

    def limits(self, slot: str) -> tuple[float, int, int]:
        """(interval, budget, in-flight cap) of a slot: what enqueue.lua writes to its host hash."""
        return self.interval(slot), self.budget(slot), self.in_flight_cap(slot)


def _lookup(host: str, default: int, by_domain: dict[str, int]) -> int:
    """A per-host count: the closest domain's of a dict setting (else none), or the int setting; -1 = none."""
    if by_domain:
        domain = closest(host, by_domain)
        count = by_domain[domain] if domain is not None else 0
    else:
        count = default
    return count if count > 0 else -1


def per_host_count(raw: Any, name: str, unit: str, example: int) -> tuple[int, dict[str, int]]:
    """An int-or-dict setting of a count per host: (the int, {} ) or (0, {domain: count})."""
    raw = 0 if raw is None or raw == "" else raw
    try:
        table = _mapping(name, raw, "") if isinstance(raw, (str, dict)) else None
        if table is None:
            return _count(name, raw, unit), {}
    except ValueError:
        raise ValueError(
            f"{name} ({raw!r}) must be a number of {unit} per host (0 = no limit) or a dict "
            f"""of domain -> {unit}, e.g. -s '{name}={{"example.com": {example}}}'"""
        ) from None
    return 0, {str(d).lower().strip("."): _count(f"{name}[{d!r}]", n, unit) for d, n in table.items()}


def _host(slot: str) -> str:
    """The host of a slot: without its ":port" (IPv6 hosts with a port are bracketed)."""
    if slot.startswith("["):
        return slot[1:].split("]", 1)[0]
    head, sep, tail = slot.partition(":")
    return head if sep and tail.isdigit() else slot


def slot_of(url: str, config: FrontierConfig) -> str:
    """The politeness unit of a URL: closest DOMAIN_RATE_LIMITS domain, else host[:non-default port].

    "" for a URL without a host (data:, file:, garbage): those share one slot.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # a port that is not a number
        return ""
    host = normalize_host(host)
    if not host:
        return ""
    domain = closest(host, config.rates)
    if domain is not None:
        return domain
    if port is not None and port != DEFAULT_PORTS.get(parts.scheme.lower()):
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return host
