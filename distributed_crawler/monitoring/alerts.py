"""Health alerts: an ERROR log line, an entry in `{spider}:alerts`, and a JSON POST to a webhook.

The POST runs in a worker thread with a timeout and is never awaited by the heartbeat: a slow or
dead webhook costs a warning in the log, never a stalled crawl.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from redis.exceptions import ResponseError
from scrapy.settings import BaseSettings

from distributed_crawler import __version__
from distributed_crawler.connection.policy import Purpose, RedisPolicy
from distributed_crawler.connection.types import AsyncRedis
from distributed_crawler.connection.untrusted import OnceLog, is_wrong_type, wrong_type_message
from distributed_crawler.defaults import SettingsReader

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AlertConfig:
    webhook_url: str = ""
    webhook_timeout: float = 5.0
    max_entries: int = 1000

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> AlertConfig:
        read = SettingsReader(settings)
        url = read.str("ALERT_WEBHOOK_URL")
        if url and urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"ALERT_WEBHOOK_URL ({safe_url(url)}) must be an http:// or https:// URL")
        timeout = read.float("ALERT_WEBHOOK_TIMEOUT", above=0, hint="seconds")
        return cls(url, timeout, read.int("ALERTS_MAX", min=1))


def safe_url(url: str) -> str:
    """Scheme and host only: webhook paths and queries often carry a secret."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}/..." if parts.scheme else "(not a URL)"


def post_json(url: str, payload: dict[str, Any], timeout: float) -> int:
    """POST `payload` as JSON; returns the HTTP status (raises on network errors and HTTP >= 400)."""
    request = urllib.request.Request(
        url,
        data=json.dumps(payload, ensure_ascii=False).encode("utf-8"),
        headers={"Content-Type": "application/json", "User-Agent": f"distributed_crawler/{__version__}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status


class Alerter:
    """Raises alerts for one spider (asyncio client; call from the reactor's loop)."""

    def __init__(
        self, config: AlertConfig, client: AsyncRedis, key: str, spider: str, reporter: str, policy: RedisPolicy
    ) -> None:
        self.config = config
        self.policy = policy
        self.client = client
        self.key = key
        self.spider = spider
        self.reporter = reporter
        self._posts: set[asyncio.Task] = set()
        self._bad_data = OnceLog(logger)

    async def alert(self, kind: str, node: str, message: str, now: float, **details: Any) -> dict[str, Any]:
        entry = {
            "time": round(now, 3),
            "kind": kind,
            "spider": self.spider,
            "node": node,
            "reporter": self.reporter,
            "message": message,
            **details,
        }
        logger.error("Health alert (%s) for node %s of %s: %s", kind, node, self.spider, message)

        async def record() -> bool:
            pipe = self.client.pipeline(transaction=True)
            pipe.lpush(self.key, json.dumps(entry, ensure_ascii=False))
            pipe.ltrim(self.key, 0, self.config.max_entries - 1)
            await pipe.execute()
            return True

        if not await self.policy.run(Purpose.STATS, record, default=False, on_error=self._refused):
            logger.warning("Alert not recorded in %s (Redis unreachable or refusing it); it is in this log", self.key)
        if self.config.webhook_url:
            task = asyncio.ensure_future(self._post(entry))
            self._posts.add(task)
            task.add_done_callback(self._posts.discard)
        return entry

    async def _refused(self, exc: BaseException) -> None:
        """The alerts key holds another type (or Redis refuses the write): the alert is still logged."""
        if not isinstance(exc, ResponseError):
            raise exc
        if is_wrong_type(exc):
            self._bad_data.skipped(
                "wrong_type",
                "Alert not recorded: %s",
                wrong_type_message(self.key, "other type", "list"),
                level=logging.ERROR,
            )
        else:
            self._bad_data.skipped("response_error", "Alert not recorded in %s: %s", self.key, exc)

    async def _post(self, entry: dict[str, Any]) -> None:
        url = self.config.webhook_url
        try:
            await asyncio.to_thread(post_json, url, entry, self.config.webhook_timeout)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            logger.warning(
                "Alert webhook POST to %s failed (%s: %s); the alert is in %s",
                safe_url(url),
                type(exc).__name__,
                getattr(exc, "reason", exc),
                self.key,
            )

    async def close(self) -> None:
        """Give webhook POSTs still running a bounded time to finish (they time out anyway)."""
        if self._posts:
            await asyncio.wait(list(self._posts), timeout=self.config.webhook_timeout + 1)
