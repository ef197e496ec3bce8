"""The scheduler's settings, read and checked once (SCHEDULER_*, REQUEST_TTL, DOMAIN_MAX_HOSTS)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from distributed_crawler.core.traps import DomainHosts
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.frontier.codec import allowed_classes
from distributed_crawler.frontier.factory import mode_class

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.settings import BaseSettings

    from distributed_crawler.connection.types import AnyRedis
    from distributed_crawler.frontier.enqueue import Dedup


@dataclass(frozen=True)
class SchedulerConfig:
    queue_class: str = "host"  # SCHEDULER_QUEUE_CLASS: picks the Frontier (frontier/base.py)
    persist: bool = True
    flush_on_start: bool = False
    lease_seconds: float = 60.0
    max_deliveries: int = 5
    prefetch: int = 16
    poll_max_seconds: float = 1.0
    failed_max: int = 100_000
    allowed_classes: tuple[str, ...] = ()
    recent_fingerprints: int = 50_000
    domain_max_hosts: int = 100  # DOMAIN_MAX_HOSTS (core/traps.py; 0 = no limit)
    request_ttl: int = 0  # REQUEST_TTL seconds (0 = requests never expire)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> SchedulerConfig:
        read = SettingsReader(settings)
        raw_queue = read.str("SCHEDULER_QUEUE_CLASS")
        frontier_cls, _ = mode_class(raw_queue)
        frontier_cls.options_from_settings(settings)  # a bad frontier setting fails at start
        prefetch = read.int("SCHEDULER_PREFETCH", min=0, hint="(0 = automatic)") or max(
            1, settings.getint("CONCURRENT_REQUESTS", 16)
        )
        return cls(
            queue_class=raw_queue,
            persist=read.bool("SCHEDULER_PERSIST"),
            flush_on_start=read.bool("SCHEDULER_FLUSH_ON_START"),
            lease_seconds=read.float("SCHEDULER_LEASE_SECONDS", min=2),
            max_deliveries=read.int("SCHEDULER_MAX_DELIVERIES", min=1),
            prefetch=prefetch,
            poll_max_seconds=read.float("SCHEDULER_POLL_MAX_SECONDS", above=0),
            failed_max=read.int("SCHEDULER_FAILED_MAX", min=0),
            allowed_classes=allowed_classes(settings),
            recent_fingerprints=read.int("DUPEFILTER_LOCAL_CACHE_SIZE", min=0),
            domain_max_hosts=DomainHosts.max_hosts_from_settings(settings),
            request_ttl=read.int("REQUEST_TTL", min=0, hint="(seconds; 0 = never)"),
        )

    @property
    def renew_interval(self) -> float:
        """Renew well before expiry: a third of the lease, at most every 10 s."""
        return max(0.5, min(10.0, self.lease_seconds / 3))


class RedisDupefilter(Protocol):
    """What the scheduler drives of DUPEFILTER_CLASS (dedup/dupefilter.py RedisDupeFilter has it)."""

    key: str

    def fingerprint_hex(self, request: Request) -> str: ...
    async def open_dedup(self, client: AnyRedis) -> Dedup: ...
    async def open_dedup_at(self, client: AnyRedis, key: str) -> Dedup: ...
    def close(self, reason: str = "") -> None: ...


def redis_dupefilter(dupefilter: Any, settings: BaseSettings) -> RedisDupefilter:
    """The DUPEFILTER_CLASS instance, if it is one the scheduler can drive (else a one-line error)."""
    for attr in ("open_dedup", "fingerprint_hex"):
        if not hasattr(dupefilter, attr):
            raise ValueError(
                f"DUPEFILTER_CLASS ({settings['DUPEFILTER_CLASS']}) is not a Redis dupefilter; "
                "use distributed_crawler.dedup.dupefilter.BloomDupeFilter"
            )
    return dupefilter
