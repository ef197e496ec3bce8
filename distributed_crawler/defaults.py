"""Every setting this package adds, with its default, in one place.

Components read them through `get_setting` so a project only sets what it changes. Key settings take
`%(spider)s`; the braces make every key of one spider share a Redis Cluster hash slot, which Lua
scripts touching several keys need.
"""

from __future__ import annotations

import os
from typing import Any

from scrapy.settings import BaseSettings

DEFAULTS: dict[str, Any] = {
    # Redis connection (REDIS_URL: env var overrides).
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "REDIS_SOCKET_TIMEOUT": 15.0,
    "REDIS_CLUSTER": False,  # REDIS_URL is one seed node of a Redis Cluster; env var overrides
    "REDIS_SENTINELS": "",  # "host:port,host:port" (or a list): find the master through Sentinel
    "REDIS_SENTINEL_MASTER": "",  # the name in the sentinels' `sentinel monitor <name>` line
    # Keys.
    "REDIS_START_URLS_KEY": "%(spider)s:start_urls",
    "SCHEDULER_QUEUE_KEY": "{%(spider)s}:requests",
    "SCHEDULER_PROCESSING_KEY": "{%(spider)s}:processing",
    "SCHEDULER_DELAYED_KEY": "{%(spider)s}:delayed",
    "SCHEDULER_DUPEFILTER_KEY": "{%(spider)s}:dupefilter",
    "SCHEDULER_FAILED_KEY": "{%(spider)s}:failed",
    "SCHEDULER_SEQUENCE_KEY": "{%(spider)s}:seq",
    "SCHEDULER_DOORBELL_CHANNEL": "{%(spider)s}:doorbell",  # pub/sub: wakes idle nodes
    "CLUSTER_STATS_KEY": "{%(spider)s}:stats",
    "NODES_KEY": "{%(spider)s}:nodes",
    "NODE_KEY": "{%(spider)s}:node:%(node)s",
    "NODES_LAST_KEY": "{%(spider)s}:nodes:last",  # node id -> last heartbeat fields (JSON)
    "NODES_ALERTED_KEY": "{%(spider)s}:nodes:alerted",
    "HISTORY_KEY": "{%(spider)s}:minutes",  # pages/items/errors per minute, last hour
    "ALERTS_KEY": "{%(spider)s}:alerts",
    # Scheduler.
    "SCHEDULER_PERSIST": True,
    "SCHEDULER_FLUSH_ON_START": False,
    "SCHEDULER_QUEUE_CLASS": "priority",
    "SCHEDULER_LEASE_SECONDS": 60,
    "SCHEDULER_MAX_DELIVERIES": 5,
    "SCHEDULER_PREFETCH": 0,  # 0 = derived from CONCURRENT_REQUESTS
    "SCHEDULER_POLL_MAX_SECONDS": 1.0,  # fallback poll; the doorbell wakes nodes at once
    "SCHEDULER_FAILED_MAX": 100_000,
    "REQUEST_CLASS_ALLOWLIST": [],
    # Spider.
    "REDIS_START_URLS_BATCH_SIZE": 0,  # 0 = CONCURRENT_REQUESTS
    "REDIS_START_URLS_AS_SET": False,
    "REDIS_START_URLS_AS_ZSET": False,
    "SEED_MAX_BYTES": 65536,
    "MAX_IDLE_TIME_BEFORE_CLOSE": 0,
    # Dedup (BloomDupeFilter).
    "BLOOM_BACKEND": "auto",  # auto | redisbloom | bitmap
    "BLOOM_CAPACITY": 1_000_000,
    "BLOOM_ERROR_RATE": 0.001,
    # Fingerprints.
    "FINGERPRINT_DROP_PARAMS": None,  # None = fingerprint.DEFAULT_DROP_PARAMS
    # Node.
    "NODE_ID": "",  # "" = host-pid; env var overrides
    # Monitoring: heartbeat, health alerts, Prometheus, dashboard (docs/monitoring.md).
    "HEARTBEAT_ENABLED": True,
    "HEARTBEAT_INTERVAL": 10.0,  # seconds; a node silent for 3 intervals is dead
    "HEARTBEAT_LOG_PROGRESS": True,  # one cluster-wide progress line per interval
    "HEALTH_NO_ITEMS_SECONDS": 300.0,  # alert: work available but no item for this long (0 = off)
    "ALERT_WEBHOOK_URL": "",  # JSON POST of every alert; env var overrides
    "ALERT_WEBHOOK_TIMEOUT": 5.0,
    "ALERTS_MAX": 1000,  # cap of the {spider}:alerts list
    "PROMETHEUS_PORT": 0,  # 0 = off; env var overrides
    "PROMETHEUS_HOST": "0.0.0.0",
    "DASHBOARD_TOKEN": "",  # required by `dcrawl dashboard` when set; env var overrides
    # Rendering: scrapy-playwright on Debian's Chromium (docs/rendering.md).
    "PLAYWRIGHT_URL_PATTERNS": [],  # regexes (or "a,b" with -s); matching requests are rendered
    "PLAYWRIGHT_EXECUTABLE_PATH": "",  # "" = /usr/bin/chromium when it exists; env var overrides
    "PLAYWRIGHT_WAIT_FOR": "load",  # load state (load, domcontentloaded, networkidle) or CSS selector
    "PLAYWRIGHT_RENDER_TIMEOUT": 30.0,  # seconds: navigation + wait + frames, per page
    "PLAYWRIGHT_ABORT_RESOURCE_TYPES": ["image", "media", "font"],  # never downloaded by the browser
    "PLAYWRIGHT_MAX_PAGES": 8,  # open pages per node, all contexts together
    "PLAYWRIGHT_RESTART_AFTER_PAGES": 1000,  # restart the browser to cap its memory (0 = never)
    "IFRAME_FOLLOW_STATIC": False,  # news spider: fetch same-site <iframe src> as plain requests
    # Retries through {spider}:delayed and cluster-wide politeness (docs/retries-and-politeness.md).
    "RETRY_BACKOFF_BASE": 1.0,  # seconds before the first retry; doubles each retry (with jitter)
    "RETRY_BACKOFF_MAX": 60.0,  # cap of the backoff and of a site's Retry-After
    "DOMAIN_RATE_LIMIT": 0,  # requests/s per domain, all nodes together (0 = off)
    "DOMAIN_RATE_LIMITS": {},  # {"example.com": 0.5} per-domain overrides (JSON with -s; 0 = no limit)
    "DOMAIN_RATE_LIMIT_PER_PROXY": False,  # one budget per domain x proxy instead of per domain
    "DOMAIN_RATE_KEY": "dc:rate:%(domain)s",  # one key per domain (single-key script: Cluster-safe)
    # Shared proxy pool (docs/proxies.md). Under REDIS_CLUSTER an unset dead key is {dc:proxies}:dead.
    "PROXY_ENABLED": "auto",  # auto = on when PROXY_LIST/PROXY_FILE is set or the pool has proxies
    "PROXY_LIST": [],  # proxy URLs (or "a,b" with -s), loaded into the pool at start
    "PROXY_FILE": "",  # one proxy URL a line, # comments
    "PROXY_POOL_KEY": "dc:proxies",  # zset: proxy -> health score
    "PROXY_DEAD_KEY": "dc:proxies:dead",  # hash: evicted proxy -> JSON {error, since, score}
    "PROXY_BAN_STATUSES": [403, 429],  # responses that count as a ban of the proxy
    "PROXY_BAN_BODY_REGEX": "",  # a body matching it counts as a ban ("" = off)
    "PROXY_MIN_SCORE": 0,  # below it a proxy is evicted (start 10, +1 a success up to 20, -3 a failure)
    "PROXY_REVIVE_SECONDS": 600,  # a dead proxy gets another chance after this (0 = never)
    "PROXY_EMPTY_POLICY": "wait",  # pool empty: wait (hold requests) or direct (no proxy)
    "PROXY_STICKY_DOMAINS": False,  # a node keeps one proxy per domain while it stays healthy
}

ENV_OVERRIDES = (
    "REDIS_URL",
    "REDIS_CLUSTER",
    "REDIS_SENTINELS",
    "REDIS_SENTINEL_MASTER",
    "STORAGE_URL",
    "NODE_ID",
    "MAX_IDLE_TIME_BEFORE_CLOSE",
    "ALERT_WEBHOOK_URL",
    "DASHBOARD_TOKEN",
    "PROMETHEUS_PORT",
    "PLAYWRIGHT_EXECUTABLE_PATH",
)


def get_setting(settings: BaseSettings, name: str) -> Any:
    """The env var (for the names in ENV_OVERRIDES), else the project setting, else our default."""
    if name in ENV_OVERRIDES and os.environ.get(name):
        return os.environ[name]
    value = settings.get(name)
    return DEFAULTS.get(name) if value is None else value
