"""Redis clients built from settings, with the password kept out of every log line.

Where the server is: `REDIS_URL`, else scrapy-redis's `REDIS_HOST` / `REDIS_PORT` / `REDIS_DB`,
plus `REDIS_PARAMS` (credentials, socket options, TLS), with scrapy-redis's precedence (params.py).
Three topologies, one factory (`RedisConfig.async_client()` / `sync_client()`):
- a single server: `REDIS_URL` (`redis://`, `rediss://` TLS, `user:password@` ACL);
- Redis Cluster (`REDIS_CLUSTER`): `REDIS_URL` names one seed node, redis-py's cluster client finds
  the others and routes every key by its hash slot;
- Sentinel (`REDIS_SENTINELS`, `REDIS_SENTINEL_MASTER`): the master's address comes from Sentinel
  and changes on failover; `REDIS_URL` still gives the db, the credentials and TLS.
This module adds the masking, the retry policy and the one-line "unreachable / misconfigured" error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel
from redis._parsers.base import BaseParser
from redis.backoff import ExponentialWithJitterBackoff
from redis.connection import parse_url
from redis.exceptions import (
    ClusterDownError,
    ClusterError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.sentinel import MasterNotFoundError
from scrapy.settings import BaseSettings

from distributed_crawler.connection.cluster_client import AsyncClusterClient
from distributed_crawler.connection.params import client_options, effective_url, redis_params
from distributed_crawler.connection.sentinel_pool import FollowingSentinelPool
from distributed_crawler.connection.tls import tls_hint
from distributed_crawler.connection.types import AsyncPubSub, AsyncRedis, SyncRedis
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.redact import mask_url

logger = logging.getLogger(__name__)


class NoReplicasError(ResponseError):
    """NOREPLICAS: the master takes no writes until `min-replicas-to-write` replicas are connected."""


# redis-py maps reply error codes to exception classes in one table shared by all its parsers;
# without this entry NOREPLICAS is a plain ResponseError, which cannot be told apart from a bug.
BaseParser.EXCEPTION_CLASSES.setdefault("NOREPLICAS", NoReplicasError)

# Errors that mean "Redis is not there right now", as opposed to a bug or a bad script: a server
# down or restarting (LOADING is a ConnectionError), a Sentinel failover in progress (no master
# known yet, or a demoted master answering READONLY), a master waiting for its replicas
# (NOREPLICAS), a Cluster resharding or failing over, a server at `maxmemory` refusing writes
# (OOM: the operator frees memory or raises the limit; waiting keeps the work, dying would not).
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    OSError,
    OutOfMemoryError,
    MasterNotFoundError,
    ReadOnlyError,
    NoReplicasError,
    ClusterDownError,
    ClusterError,
    TryAgainError,
    SlotNotCoveredError,
)
SENTINEL_PORT = 26379


def refused_for_good(exc: ResponseError) -> bool:
    """Redis's answer for good (a key of another type, a script's refusal), not a wait: OOM, READONLY,
    NOREPLICAS, TRYAGAIN and CLUSTERDOWN are ResponseErrors too, and a component's own `except
    ResponseError` that drops what it wrote must let them through to the policy, which waits."""
    return not isinstance(exc, TRANSIENT_ERRORS)


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


class RedisUnavailable(RuntimeError):
    """Redis cannot be reached or is not what the settings say; one line fit for an operator."""


def parse_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ValueError(f"{name} ({value}) must be true or false (1 or 0)")


def parse_sentinels(value: Any) -> tuple[tuple[str, int], ...]:
    """`"h1:26379,h2:26379"`, or a list of `"host:port"` / `(host, port)`; port defaults to 26379."""
    if not value:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    hosts = []
    for item in items:
        if isinstance(item, (tuple, list)) and len(item) == 2:
            host, port = str(item[0]), item[1]
        else:
            text = str(item).strip()
            host, sep, port = text.rpartition(":")
            if not sep or text.endswith("]"):  # no port (an IPv6 address is in brackets)
                host, port = text, SENTINEL_PORT
        try:
            port = int(port)
        except (TypeError, ValueError):
            port = -1
        if not host or not 0 < port < 65536:
            raise ValueError(f"REDIS_SENTINELS ({value}) must be host:port[,host:port...], e.g. 10.0.0.5:26379")
        hosts.append((host.strip("[]"), port))
    return tuple(hosts)


@dataclass(frozen=True)
class RedisConfig:
    """`REDIS_URL` and the topology (`REDIS_CLUSTER`, `REDIS_SENTINELS`; env vars override)."""

    url: str = "redis://127.0.0.1:6379/0"
    socket_timeout: float = 15.0
    cluster: bool = False
    sentinels: tuple[tuple[str, int], ...] = ()
    sentinel_master: str = ""
    options: tuple[tuple[str, Any], ...] = ()  # REDIS_PARAMS our clients take (params.CLIENT_PARAMS)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RedisConfig:
        read = SettingsReader(settings)
        params = redis_params(settings)
        url = effective_url(settings, params)
        scheme = urlsplit(url).scheme
        if scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"REDIS_URL ({mask_url(url)}) must start with redis://, rediss:// or unix://")
        try:
            urlsplit(url).port  # noqa: B018 - parsed for its check
        except ValueError:
            raise ValueError(f"REDIS_URL ({mask_url(url)}) has a bad port: give a number from 1 to 65535") from None
        options = client_options(params)
        timeout = read.float("REDIS_SOCKET_TIMEOUT", above=0, hint="seconds")
        if params.get("socket_timeout") is not None:  # scrapy-redis's way of setting it wins
            try:
                timeout = float(params["socket_timeout"])
            except (TypeError, ValueError):
                timeout = -1.0
            if not timeout > 0:
                raise ValueError(f"REDIS_PARAMS socket_timeout ({params['socket_timeout']}) must be > 0 seconds")
        cluster = read.bool("REDIS_CLUSTER")
        sentinels = parse_sentinels(read.raw("REDIS_SENTINELS"))
        master = read.str("REDIS_SENTINEL_MASTER")
        if cluster and sentinels:
            raise ValueError(
                "REDIS_CLUSTER and REDIS_SENTINELS are both set; a Redis Cluster fails over "
                "by itself: unset REDIS_SENTINELS (or REDIS_CLUSTER)"
            )
        if sentinels and not master:
            raise ValueError(
                "REDIS_SENTINELS is set but REDIS_SENTINEL_MASTER is empty; set it to the "
                "name in the sentinels' `sentinel monitor <name> ...` line"
            )
        if master and not sentinels:
            raise ValueError(
                f"REDIS_SENTINEL_MASTER ({master}) is set but REDIS_SENTINELS is empty; "
                "set REDIS_SENTINELS=host:port[,host:port...]"
            )
        if (cluster or sentinels) and scheme == "unix":
            mode = "REDIS_CLUSTER" if cluster else "REDIS_SENTINELS"
            raise ValueError(f"REDIS_URL ({mask_url(url)}) is a unix socket; {mode} needs redis:// or rediss://")
        if cluster and parse_url(url).get("db", 0) != 0:
            raise ValueError(
                f"REDIS_URL ({mask_url(url)}) selects db {parse_url(url)['db']}; "
                "Redis Cluster has db 0 only: end the URL with /0"
            )
        return cls(
            url=url,
            socket_timeout=timeout,
            cluster=cluster,
            sentinels=sentinels,
            sentinel_master=master,
            options=tuple((k, v) for k, v in options if k != "socket_timeout"),
        )

    @property
    def masked_url(self) -> str:
        """Where the data lives, for log lines: URL (password masked) and topology."""
        if self.cluster:
            return f"{mask_url(self.url)} (cluster)"
        if self.sentinels:
            return f"sentinel master {self.sentinel_master} via {self.sentinel_hosts}"
        return mask_url(self.url)

    @property
    def sentinel_hosts(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in self.sentinels)

    def _client_kwargs(self) -> dict[str, Any]:
        return {
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": min(self.socket_timeout, 5.0),
            "health_check_interval": 30,
            **dict(self.options),
            "decode_responses": False,
        }

    def _sentinel_kwargs(self, retry: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """(kwargs for the sentinels, kwargs for the master): REDIS_URL's db, auth and TLS go to the
        master; the sentinels get the timeouts, TLS and `retry` (one quick retry: a dead sentinel must
        not hold up asking the next one); Sentinel's own password is not REDIS_URL's."""
        url_kwargs = parse_url(self.url)
        for name in ("host", "port", "connection_class"):
            url_kwargs.pop(name, None)
        tls = {k: v for k, v in url_kwargs.items() if k.startswith("ssl")}
        if urlsplit(self.url).scheme == "rediss":
            tls["ssl"] = True
        sentinel = {
            "socket_timeout": min(self.socket_timeout, 5.0),
            "socket_connect_timeout": min(self.socket_timeout, 5.0),
            "retry": retry,
            **tls,
        }
        return sentinel, {**url_kwargs, **tls, **self._client_kwargs()}

    def async_client(self, max_connections: int | None = None, client_name: str | None = None) -> AsyncRedis:
        """Client for the crawl (asyncio reactor): a few quick retries, then callers back off.

        `max_connections` bounds the pool: a command waits for a free connection instead of
        opening one more (the Cluster client: per node). `client_name` shows in `CLIENT LIST`.
        The crawl builds one per node (core.context.RedisContext), not one per component.
        """
        from redis.asyncio.retry import Retry

        retry = Retry(ExponentialWithJitterBackoff(cap=1.0, base=0.05), 3)
        kwargs = self._client_kwargs()
        if client_name:
            kwargs["client_name"] = client_name
        # Waiting for a free connection is bounded like a call; then it counts as an outage.
        pool_wait = self.socket_timeout + 5.0
        if self.cluster:
            if max_connections is not None:
                # redis-py's cluster nodes raise instead of waiting: the client queues commands
                # itself (one more per node for its topology refresh).
                kwargs.update(max_connections=max_connections + 1, max_commands=max_connections)
            return AsyncClusterClient.from_url(self.url, retry=retry, **kwargs)
        if self.sentinels:
            sentinel_retry = Retry(ExponentialWithJitterBackoff(cap=0.2, base=0.05), 1)
            sentinel_kwargs, master_kwargs = self._sentinel_kwargs(sentinel_retry)
            if client_name:
                master_kwargs["client_name"] = client_name
            if max_connections is not None:
                master_kwargs.update(max_connections=max_connections, timeout=pool_wait)
            sentinel = redis.asyncio.sentinel.Sentinel(list(self.sentinels), sentinel_kwargs=sentinel_kwargs)
            master: redis.asyncio.Redis = sentinel.master_for(  # redis-py leaves master_for unannotated
                self.sentinel_master,
                redis_class=redis.asyncio.Redis,
                connection_pool_class=FollowingSentinelPool,
                retry=retry,
                **master_kwargs,
            )
            return master
        if max_connections is not None:
            pool = redis.asyncio.BlockingConnectionPool.from_url(
                self.url, max_connections=max_connections, timeout=pool_wait, retry=retry, **kwargs
            )
            return redis.asyncio.Redis.from_pool(pool)
        return redis.asyncio.Redis.from_url(self.url, retry=retry, **kwargs)

    def sync_client(self) -> SyncRedis:
        """Client for the CLI and tools (a cluster client connects while it is built)."""
        from redis.retry import Retry

        retry = Retry(ExponentialWithJitterBackoff(cap=1.0, base=0.05), 2)
        if self.cluster:
            return redis.cluster.RedisCluster.from_url(self.url, retry=retry, **self._client_kwargs())
        if self.sentinels:
            sentinel_retry = Retry(ExponentialWithJitterBackoff(cap=0.2, base=0.05), 1)
            sentinel_kwargs, master_kwargs = self._sentinel_kwargs(sentinel_retry)
            sentinel = redis.sentinel.Sentinel(list(self.sentinels), sentinel_kwargs=sentinel_kwargs)
            master: redis.Redis = sentinel.master_for(
                self.sentinel_master, redis_class=redis.Redis, retry=retry, **master_kwargs
            )
            return master  # redis-py leaves master_for unannotated
        return redis.Redis.from_url(self.url, retry=retry, **self._client_kwargs())

    def check_reachable(self) -> None:
        """Raise `RedisUnavailable` with one clear line unless the configured topology answers."""
        if self.sentinels:
            self._check_sentinels()
        client = None
        try:
            client = self.sync_client()
            client.ping()
            if isinstance(client, redis.cluster.RedisCluster):
                self._check_cluster_state(client)
            elif not self.sentinels:
                self._check_not_a_cluster_node(client)
        except redis.AuthenticationError as exc:
            raise RedisUnavailable(
                f"Redis at {self.masked_url} refused the credentials ({exc}); fix the user/password in REDIS_URL"
            ) from None
        except NoPermissionError as exc:  # PING itself: the user's rule misses even that
            raise RedisUnavailable(
                f"Redis at {self.masked_url} refused this user's PING ({exc}); give the user the ACL "
                "rule a node needs (docs/security.md#redis-acl-and-tls)"
            ) from None
        except RedisClusterException as exc:
            tls = tls_hint(self.url, exc)
            if tls is not None:
                raise RedisUnavailable(f"TLS connection to Redis Cluster at {self.masked_url} failed: {tls}") from None
            if "not enabled" in str(exc):
                raise RedisUnavailable(
                    f"REDIS_CLUSTER is on but Redis at {mask_url(self.url)} is not a cluster node ({exc}); "
                    "unset REDIS_CLUSTER or point REDIS_URL at a node of the cluster"
                ) from None
            raise RedisUnavailable(
                f"Cannot use Redis Cluster at {self.masked_url} ({type(exc).__name__}: {exc}); "
                "start the cluster or set REDIS_URL to one of its nodes"
            ) from None
        except (redis.RedisError, OSError) as exc:
            tls = tls_hint(self.url, exc)
            if tls is not None:
                raise RedisUnavailable(
                    f"TLS connection to Redis at {self.masked_url} failed ({type(exc).__name__}: {exc}); {tls}"
                ) from None
            hint = (
                f"check the master with `redis-cli -p <sentinel port> sentinel master {self.sentinel_master}`"
                if self.sentinels
                else "start redis-server or set REDIS_URL (env var or setting) to a reachable server"
            )
            raise RedisUnavailable(
                f"Cannot reach Redis at {self.masked_url} ({type(exc).__name__}: {exc}); {hint}"
            ) from None
        finally:
            if client is not None:
                client.close()

    def _check_not_a_cluster_node(self, client: redis.Redis) -> None:
        """A cluster node reached as a single server answers MOVED for most keys: say so now."""
        try:
            enabled = client.info("cluster").get("cluster_enabled")
        except redis.ResponseError:  # INFO not allowed for this ACL user: nothing to learn
            return
        if enabled in (1, "1"):
            raise RedisUnavailable(
                f"Redis at {self.masked_url} is a Redis Cluster node; set REDIS_CLUSTER=1 "
                "(setting, -s REDIS_CLUSTER=1 or env var)"
            )

    def _check_cluster_state(self, client: redis.cluster.RedisCluster) -> None:
        info = client.cluster_info()
        state = info.get("cluster_state") if isinstance(info, dict) else None
        if state not in (None, "ok"):
            raise RedisUnavailable(
                f"Redis Cluster at {self.masked_url} reports cluster_state:{state}; "
                "fix the cluster (`redis-cli --cluster check HOST:PORT`) before starting workers"
            )

    def _check_sentinels(self) -> None:
        """Some sentinel answers, and knows the master by that name and has it up."""
        from redis.retry import Retry

        sentinel_kwargs, _ = self._sentinel_kwargs(Retry(ExponentialWithJitterBackoff(cap=0.2, base=0.05), 1))
        sentinel = redis.sentinel.Sentinel(list(self.sentinels), sentinel_kwargs=sentinel_kwargs)
        try:
            errors: list[str] = []
            monitored: Any = None  # master name -> state (redis-py also types a RESP3 list we never get)
            for client in sentinel.sentinels:
                try:
                    monitored = client.sentinel_masters()
                    break
                except (redis.RedisError, OSError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
            if monitored is None:
                raise RedisUnavailable(
                    f"Cannot reach any Redis Sentinel of REDIS_SENTINELS ({self.sentinel_hosts}) "
                    f"({errors[-1] if errors else 'no sentinel'}); start redis-sentinel or fix REDIS_SENTINELS"
                )
            if self.sentinel_master not in monitored:
                names = ", ".join(sorted(monitored)) or "none"
                raise RedisUnavailable(
                    f"Sentinel ({self.sentinel_hosts}) monitors no master named {self.sentinel_master!r} "
                    f"(it monitors: {names}); fix REDIS_SENTINEL_MASTER"
                )
            try:
                sentinel.discover_master(self.sentinel_master)
            except MasterNotFoundError as exc:
                raise RedisUnavailable(
                    f"Sentinel ({self.sentinel_hosts}) has no healthy master {self.sentinel_master!r} now ({exc}); "
                    "wait for the failover to finish or check `sentinel master "
                    f"{self.sentinel_master}` on a sentinel"
                ) from None
        finally:
            for client in sentinel.sentinels:
                client.close()


async def subscribe(client: AsyncRedis, channel: str) -> AsyncPubSub:
    """A pub/sub subscribed to `channel` on an asyncio client of any topology (close it after use)."""
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        await client.initialize()  # its pub/sub routes by the slot table, empty before the first command
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    try:
        await pubsub.subscribe(channel)
    except BaseException:
        await pubsub.aclose()
        raise
    return pubsub
