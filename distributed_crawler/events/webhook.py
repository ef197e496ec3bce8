"""The webhook sink: `dcrawl events SPIDER --webhook`, a process of its own (deploy/supervisord.conf).

It reads the change feed as the consumer group `EVENTS_WEBHOOK_GROUP` and POSTs each event as
JSON to `EVENTS_WEBHOOK_URL`, signed with `X-Signature-SHA256: <hex HMAC-SHA256 of the body with
EVENTS_WEBHOOK_SECRET>`. An event is acked only after a 2xx; until then it is retried with capped
exponential backoff (in order: the next event waits), and it stays in the stream meanwhile, so
a failing endpoint loses nothing and never slows the crawl (the nodes only XADD). Delivery stats
go to `EVENTS_WEBHOOK_STATS_KEY` (shown by `dcrawl status`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import random
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from distributed_crawler import __version__
from distributed_crawler.connection.policy import Purpose, RedisPolicy, is_transient
from distributed_crawler.connection.types import SyncRedis
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.events.feed import EventsConfig, dumps
from distributed_crawler.events.reading import ensure_group, read_group
from distributed_crawler.keyspace import default, fill
from distributed_crawler.monitoring.alerts import safe_url

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Signature-SHA256"
FIRST_BACKOFF = 1.0


@dataclass(frozen=True)
class WebhookConfig:
    url: str
    secret: str
    group: str = "webhook"
    timeout: float = 10.0
    max_backoff: float = 300.0
    stats_key: str = default("EVENTS_WEBHOOK_STATS_KEY")

    @classmethod
    def from_settings(cls, settings: Any) -> WebhookConfig:
        read = SettingsReader(settings)
        url = read.str("EVENTS_WEBHOOK_URL")
        if not url:
            raise ValueError(
                "EVENTS_WEBHOOK_URL is not set: set it (env or -s) to the endpoint that receives the events"
            )
        if urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"EVENTS_WEBHOOK_URL ({safe_url(url)}) must be an http:// or https:// URL")
        return cls(
            url=url,
            secret=read.str("EVENTS_WEBHOOK_SECRET"),
            group=read.str("EVENTS_WEBHOOK_GROUP") or "webhook",
            timeout=read.float("EVENTS_WEBHOOK_TIMEOUT", above=0, hint="seconds"),
            max_backoff=read.float("EVENTS_WEBHOOK_MAX_BACKOFF", above=0, hint="seconds"),
            stats_key=read.str("EVENTS_WEBHOOK_STATS_KEY"),
        )


def sign(body: bytes, secret: str) -> str:
    """Hex HMAC-SHA256 of *body* with *secret* (what the receiver recomputes and compares)."""
    return hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def verify(body: bytes, secret: str, signature: str) -> bool:
    """The receiver's check (docs/events.md shows the same lines)."""
    return hmac.compare_digest(sign(body, secret), signature)


def post_event(config: WebhookConfig, entry: dict[str, Any]) -> int:
    """POST one event; returns the HTTP status (raises on network errors)."""
    body = dumps(entry).encode("utf-8")
    headers = {"Content-Type": "application/json", "User-Agent": f"distributed_crawler/{__version__}"}
    if config.secret:
        headers[SIGNATURE_HEADER] = sign(body, config.secret)
    request = urllib.request.Request(config.url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=config.timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


class WebhookSink:
    """Delivers one spider's events to the webhook (sync client; one process)."""

    def __init__(
        self, config: WebhookConfig, client: SyncRedis, spider: str, consumer: str, stream: str, policy: RedisPolicy
    ) -> None:
        self.config = config
        self.policy = policy  # WAIT while Redis is away: one log line per outage, events stay in the stream
        self.client = client
        self.spider = spider
        self.consumer = consumer
        self.stream = stream
        self.stats_key = fill(config.stats_key, spider)
        self.stopping = False
        self.post: Callable[[WebhookConfig, dict[str, Any]], int] = post_event

    def deliver(self, entry: dict[str, Any]) -> bool:
        """POST *entry* until a 2xx (True) or a stop (False); counts each failed attempt."""
        delay = FIRST_BACKOFF
        while not self.stopping:
            try:
                status = self.post(self.config, entry)
                error = "" if 200 <= status < 300 else f"HTTP {status}"
            except (TimeoutError, urllib.error.URLError, OSError, ValueError) as exc:
                error = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            if not error:
                return True
            self.client.hincrby(self.stats_key, "failed_attempts", 1)
            self.client.hset(self.stats_key, mapping={"last_error": error[:300], "last_error_at": f"{time.time():.3f}"})
            logger.warning(
                "Webhook %s refused event %s (%s); retrying in %.0fs",
                safe_url(self.config.url),
                entry.get("id"),
                error,
                delay,
            )
            self._sleep(delay * random.uniform(0.8, 1.0))
            delay = min(delay * 2, self.config.max_backoff)
        return False

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < end:
            time.sleep(min(0.2, end - time.monotonic()))

    def write_stats(self) -> None:
        pending = 0
        lag: Any = None
        try:
            pending = int(self.client.xpending(self.stream, self.config.group).get("pending", 0))
            for group in self.client.xinfo_groups(self.stream):
                name = group.get("name")
                if (name.decode() if isinstance(name, bytes) else name) == self.config.group:
                    lag = group.get("lag")
        except Exception as exc:  # noqa: BLE001 - stats are best effort
            logger.debug("Webhook stats unreadable: %r", exc)
        self.client.hset(
            self.stats_key,
            mapping={
                "pending": pending,
                "lag": "" if lag is None else int(lag),
                "consumer": self.consumer,
                "updated_at": f"{time.time():.3f}",
            },
        )

    def run(self) -> int:
        ensure_group(self.client, self.stream, self.config.group)
        logger.info("Webhook sink: %s -> %s (group %s)", self.stream, safe_url(self.config.url), self.config.group)
        last_stats = 0.0
        while not self.stopping:
            try:
                for entry_id, entry in read_group(
                    self.client, self.stream, self.config.group, self.consumer, True, 60.0, lambda: self.stopping
                ):
                    if not self.deliver(entry):
                        break
                    self.client.xack(self.stream, self.config.group, entry_id)
                    self.client.hincrby(self.stats_key, "delivered", 1)
                    self.client.hset(self.stats_key, "last_delivered_at", f"{time.time():.3f}")
                    if time.monotonic() - last_stats > 2:
                        self.write_stats()
                        last_stats = time.monotonic()
                if not self.stopping:
                    self.write_stats()
                    last_stats = time.monotonic()
                self.policy.ok()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self.policy.failed(Purpose.LEASE, exc)
                self._sleep(2.0)
        return 0


def run_webhook_sink(settings: Any, client: SyncRedis, spider: str, consumer: str | None, masked_url: str) -> int:
    """`dcrawl events SPIDER --webhook`: runs until SIGTERM or Ctrl-C."""
    config = WebhookConfig.from_settings(settings)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    stream = EventsConfig.from_settings(settings).stream(spider)
    policy = RedisPolicy(masked_url)
    sink = WebhookSink(config, client, spider, consumer or f"{socket.gethostname()}-webhook", stream, policy)

    def stop(*_: Any) -> None:
        sink.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return sink.run()


def webhook_stats(client: SyncRedis, key: str) -> dict[str, Any] | None:
    """What `dcrawl status` shows of the sink (None: it never ran)."""
    raw = client.hgetall(key)
    if not raw:
        return None
    out: dict[str, Any] = {}
    for name, value in raw.items():
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        name = name.decode() if isinstance(name, bytes) else str(name)
        try:
            out[name] = json.loads(text) if name in ("delivered", "failed_attempts", "pending", "lag") else text
        except ValueError:
            out[name] = None
    return out
