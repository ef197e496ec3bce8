"""Redis clients built from settings, with the password kept out of every log line.

`redis://`, `rediss://` (TLS) and `user:password@` (ACL) are all handled by redis-py's URL parser;
this module adds the masking, the retry policy and the one-line "unreachable" error.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from scrapy.settings import BaseSettings

from distributed_crawler.defaults import get_setting

logger = logging.getLogger(__name__)

# Errors that mean "Redis is not there right now", as opposed to a bug or a bad script.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError, OSError)


class RedisUnavailable(RuntimeError):
    """Redis cannot be reached; the message is one line fit for an operator."""


def mask_url(url: str) -> str:
    """`redis://user:secret@host` -> `redis://user:***@host`; other URLs unchanged."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


@dataclass(frozen=True)
class RedisConfig:
    """`REDIS_URL` (env var overrides) and the socket timeout."""

    url: str = "redis://127.0.0.1:6379/0"
    socket_timeout: float = 15.0

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RedisConfig:
        url = str(get_setting(settings, "REDIS_URL"))
        if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
            raise ValueError(
                f"REDIS_URL ({mask_url(url)}) must start with redis://, rediss:// or unix://"
            )
        timeout = float(get_setting(settings, "REDIS_SOCKET_TIMEOUT"))
        if timeout <= 0:
            raise ValueError(f"REDIS_SOCKET_TIMEOUT ({timeout}) must be > 0")
        return cls(url=url, socket_timeout=timeout)

    @property
    def masked_url(self) -> str:
        return mask_url(self.url)

    def _client_kwargs(self) -> dict:
        return {
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": min(self.socket_timeout, 5.0),
            "health_check_interval": 30,
            "decode_responses": False,
        }

    def async_client(self) -> redis.asyncio.Redis:
        """Client for the crawl (asyncio reactor): a few quick retries, then callers back off."""
        from redis.asyncio.retry import Retry

        return redis.asyncio.Redis.from_url(
            self.url,
            retry=Retry(ExponentialWithJitterBackoff(cap=1.0, base=0.05), 3),
            **self._client_kwargs(),
        )

    def sync_client(self) -> redis.Redis:
        """Client for the CLI and tools."""
        from redis.retry import Retry

        return redis.Redis.from_url(
            self.url,
            retry=Retry(ExponentialWithJitterBackoff(cap=1.0, base=0.05), 2),
            **self._client_kwargs(),
        )

    def check_reachable(self) -> None:
        """Raise `RedisUnavailable` with one clear line when Redis does not answer PING."""
        client = self.sync_client()
        try:
            client.ping()
        except redis.AuthenticationError as exc:
            raise RedisUnavailable(
                f"Redis at {self.masked_url} refused the credentials ({exc}); "
                "fix the user/password in REDIS_URL"
            ) from None
        except (redis.RedisError, OSError) as exc:
            raise RedisUnavailable(
                f"Cannot reach Redis at {self.masked_url} ({type(exc).__name__}: {exc}); "
                "start redis-server or set REDIS_URL (env var or setting) to a reachable server"
            ) from None
        finally:
            client.close()


class OutageLog:
    """Logs a Redis outage once when it starts and once when it ends, not once per call."""

    def __init__(self, what: str, masked_url: str) -> None:
        self.what = what
        self.masked_url = masked_url
        self.since: float | None = None

    def failed(self, exc: BaseException) -> None:
        if self.since is None:
            self.since = time.monotonic()
            logger.warning(
                "Redis at %s unreachable during %s (%s: %s); retrying with backoff",
                self.masked_url, self.what, type(exc).__name__, exc,
            )

    def ok(self) -> None:
        if self.since is not None:
            logger.warning(
                "Redis at %s reachable again after %.1fs (%s)",
                self.masked_url, time.monotonic() - self.since, self.what,
            )
            self.since = None
