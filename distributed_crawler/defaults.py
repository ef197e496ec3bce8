"""Every setting this package adds, with its default, in one place.

Components read them through `SettingsReader` (typed, validated, falling back to these defaults and
to the env overrides) so a project only sets what it changes, with or without the add-on
(`distributed_crawler.Addon`, which also writes them into the settings at "addon" priority).
Precedence: env var (names in ENV_OVERRIDES, when non-empty) > `-s` > project settings > add-on =
DEFAULTS. Key settings take
`%(spider)s`; the braces make every key of one spider share a Redis Cluster hash slot, which Lua
scripts touching several keys need.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

DEFAULTS: dict[str, Any] = {
    # Redis connection (REDIS_URL: env var overrides). "" = scrapy-redis's REDIS_HOST/PORT/DB
    # (falsy = unset, then REDIS_PARAMS, then 127.0.0.1:6379/0): connection/params.py.
    "REDIS_URL": "",
    "REDIS_HOST": "",
    "REDIS_PORT": 0,
    "REDIS_DB": 0,
    "REDIS_PARAMS": {},  # scrapy-redis's client options: password, socket_*, ssl_*, redis_cls (spider.server)
    "REDIS_SOCKET_TIMEOUT": 15.0,
    "REDIS_CLUSTER": False,  # REDIS_URL is one seed node of a Redis Cluster; env var overrides
    "REDIS_SENTINELS": "",  # "host:port,host:port" (or a list): find the master through Sentinel
    "REDIS_SENTINEL_MASTER": "",  # the name in the sentinels' `sentinel monitor <name>` line
    "REDIS_MAX_CONNECTIONS": 3,  # per node, shared by every component (+1 for pub/sub)
    # Keys.
    "REDIS_START_URLS_KEY": "%(spider)s:start_urls",
    "SCHEDULER_QUEUE_KEY": "{%(spider)s}:requests",
    "SCHEDULER_PROCESSING_KEY": "{%(spider)s}:processing",
    "SCHEDULER_DELAYED_KEY": "{%(spider)s}:delayed",
    "SCHEDULER_DUPEFILTER_KEY": "{%(spider)s}:dupefilter",
    "SCHEDULER_FAILED_KEY": "{%(spider)s}:failed",
    "SCHEDULER_SEQUENCE_KEY": "{%(spider)s}:seq",
    # Live control (docs/operations.md): per-host overrides read by the lease, and the audit trail.
    "SCHEDULER_OVERRIDES_KEY": "{%(spider)s}:overrides",  # hash: host or domain -> JSON override
    "AUDIT_KEY": "{%(spider)s}:audit",  # stream of control actions (capped)
    "SCHEDULER_PAUSED_KEY": "{%(spider)s}:paused",  # string: JSON {since, by, drain, source} while paused
    "AUDIT_MAXLEN": 10_000,  # entries kept in the audit stream (XADD MAXLEN ~)
    # The source registry (docs/sources.md): `dcrawl sources SPIDER import FILE`, read by every node.
    "SOURCE_REGISTRY_KEY": "{%(spider)s}:registry",  # hash: site -> the source's JSON (name, tags, scope rules)
    "SOURCE_REGISTRY_VERSION_KEY": "{%(spider)s}:registry:version",  # string: +1 at each change; nodes poll it
    "SCHEDULER_DOORBELL_CHANNEL": "{%(spider)s}:doorbell",  # pub/sub: wakes idle nodes
    "SCHEDULER_HOST_QUEUE_KEY": "{%(spider)s}:q:%(host)s",  # zset + list (this and "/"): one host's pending requests
    "SCHEDULER_READY_KEY": "{%(spider)s}:hosts",  # zset: host -> server time it may be served next
    "SCHEDULER_HOST_KEY": "{%(spider)s}:host:%(host)s",  # hash: iv, cd, bo, until, why, pages, max, cap
    "SCHEDULER_HOST_IN_FLIGHT_KEY": "{%(spider)s}:inflight:%(host)s",  # set: leases of a capped host (host mode)
    "SCHEDULER_OVER_BUDGET_KEY": "{%(spider)s}:hosts:over",  # zset: host -> pending when it went over budget
    "SCHEDULER_PENDING_KEY": "{%(spider)s}:pending",  # string: requests waiting in the queue(s) (lib/queue.lua)
    "SCHEDULER_REFUSED_KEY": "{%(spider)s}:refused",  # hash "<reason> <host>" -> requests refused (bounded)
    "FRONTIER_SHARDS_KEY": "{%(spider)s}:shards",  # string: the FRONTIER_SHARDS the frontier was written with
    "CLUSTER_STATS_KEY": "{%(spider)s}:stats",
    "NODES_KEY": "{%(spider)s}:nodes",
    "NODE_KEY": "{%(spider)s}:node:%(node)s",
    "NODES_LAST_KEY": "{%(spider)s}:nodes:last",  # node id -> last heartbeat fields (JSON)
    "NODES_ALERTED_KEY": "{%(spider)s}:nodes:alerted",
    "HISTORY_KEY": "{%(spider)s}:minutes",  # pages/items/errors per minute, last hour
    "ALERTS_KEY": "{%(spider)s}:alerts",
    "RECRAWL_KEY": "{%(spider)s}:recrawl",  # zset: URL fingerprint -> server time its revisit is due
    "RECRAWL_STATE_KEY": "{%(spider)s}:recrawl:state",  # hash: fingerprint -> interval, digest, validators, request
    # Scheduler.
    "SCHEDULER_PERSIST": True,
    "SCHEDULER_FLUSH_ON_START": False,
    "SCHEDULER_QUEUE_CLASS": "host",  # per-host frontier (fair); priority / fifo / lifo: one queue
    "SCHEDULER_LEASE_SECONDS": 60,
    "FRONTIER_SHARDS": 1,  # frontier shards, each on its own hash tag (frontier/shards.py); 1 = one tag {spider}
    "REQUEST_TTL": 0,  # seconds a pending request may wait before it is dropped at lease; 0 = never
    "SCHEDULER_MAX_DELIVERIES": 5,
    "SCHEDULER_PREFETCH": 0,  # 0 = derived from CONCURRENT_REQUESTS
    "SCHEDULER_POLL_MAX_SECONDS": 1.0,  # fallback poll; the doorbell wakes nodes at once
    "SCHEDULER_FAILED_MAX": 100_000,
    "SCHEDULER_SOLO_KEY": "{%(spider)s}:solo",  # hash: lease -> node, a redelivered request running alone
    "SCHEDULER_DEATHS_KEY": "{%(spider)s}:deaths",  # hash: sha1(payload) -> nodes that died running it alone
    "REQUEST_CLASS_ALLOWLIST": [],
    # Recrawl (docs/recrawl.md).
    "RECRAWL_RULES": {},  # {"regex": seconds} or {"regex": [min, max]}; first match wins; none = never
    "RECRAWL_INTERVAL_FACTOR": 2.0,  # unchanged -> interval x factor (up to max), changed -> / factor (down to min)
    "RECRAWL_PENDING_SECONDS": 3600,  # a moved revisit whose fetch never reports back is sent again after this
    "RECRAWL_MOVE_BATCH": 500,  # due revisits one move puts into the frontier
    "RECRAWL_POLL_SECONDS": 1.0,  # longest wait between two looks at the revisit schedule
    "ARTICLE_REVISITS": [3600, 21600, 86400],  # seconds after an article's first fetch it is fetched again; [] = never
    # Spider.
    "REDIS_START_URLS_BATCH_SIZE": 0,  # 0 = CONCURRENT_REQUESTS
    "REDIS_START_URLS_AS_SET": False,
    "REDIS_START_URLS_AS_ZSET": False,
    "REDIS_ENCODING": "utf-8",  # how seeds are decoded (scrapy-redis's setting; spider.redis_encoding)
    "SEED_MAX_BYTES": 65536,
    "SEED_LEASE_SECONDS": 0.0,  # a taken seed not yet in the frontier goes back after this (0 = SCHEDULER_LEASE_SECONDS)
    "SEED_TAKE_PAUSE": 0.0,  # seconds between taking seeds and making their requests (kill tests)
    "MAX_IDLE_TIME_BEFORE_CLOSE": 0,
    # Dedup (BloomDupeFilter).
    "BLOOM_BACKEND": "auto",  # auto | redisbloom | bitmap
    "BLOOM_CAPACITY": 1_000_000,
    "BLOOM_ERROR_RATE": 0.001,
    "DUPEFILTER_LOCAL_CACHE_SIZE": 50_000,  # fingerprints a node sent lately: its duplicates stop there (0 = off)
    # Fingerprints.
    "FINGERPRINT_DROP_PARAMS": None,  # None = fingerprint.DEFAULT_DROP_PARAMS
    # Node.
    "NODE_ID": "",  # "" = host-pid; env var overrides
    # Monitoring: heartbeat, health alerts, Prometheus, dashboard (docs/monitoring.md).
    "HEARTBEAT_ENABLED": True,
    "NODE_RETENTION_SECONDS": 3600,  # a closed or dead node leaves the node lists after this (0 = never)
    "HEARTBEAT_INTERVAL": 10.0,  # seconds; a node silent for 3 intervals is dead
    "HEARTBEAT_LOG_PROGRESS": True,  # one cluster-wide progress line per interval
    "HEALTH_NO_ITEMS_SECONDS": 300.0,  # alert: work available but no item for this long (0 = off)
    "ALERT_WEBHOOK_URL": "",  # JSON POST of every alert; env var overrides
    "ALERT_WEBHOOK_TIMEOUT": 5.0,
    "ALERTS_MAX": 1000,  # cap of the {spider}:alerts list
    # Change feed (docs/events.md) and source health (docs/monitoring.md "Sources").
    "EVENTS_ENABLED": True,  # write new/changed/removed events of stored rows to EVENTS_KEY
    "EVENTS_KEY": "{%(spider)s}:events",  # stream
    "EVENTS_MAXLEN": 1_000_000,  # approximate cap of the stream (XADD MAXLEN ~); 0 = never trimmed
    "EVENTS_INCLUDE_TEXT": False,  # the row's text in each event
    "EVENTS_BATCH_SECONDS": 0.25,  # an idle storage writer gathers items this long: one events write per batch
    "EVENTS_WEBHOOK_URL": "",  # `dcrawl events SPIDER --webhook` POSTs every event here; env var overrides
    "EVENTS_WEBHOOK_SECRET": "",  # HMAC-SHA256 key of the X-Signature-SHA256 header; env var overrides
    "EVENTS_WEBHOOK_GROUP": "webhook",  # the sink's consumer group
    "EVENTS_WEBHOOK_TIMEOUT": 10.0,  # seconds per POST
    "EVENTS_WEBHOOK_MAX_BACKOFF": 300.0,  # longest pause between tries of one event (s)
    "EVENTS_WEBHOOK_STATS_KEY": "{%(spider)s}:events:webhook",  # hash: delivery stats of the sink
    "SOURCES_KEY": "{%(spider)s}:sources",  # zset: source -> last activity
    "SOURCE_KEY": "{%(spider)s}:source:%(source)s",  # hash: one source's fixed buckets
    "SOURCES_MAX": 100_000,  # sources kept (the least recently active dropped)
    "SOURCE_DAYS": 28,  # days of per-day counts kept
    "SOURCE_SILENT_MIN_HOURS": 6.0,  # a source is never silent sooner than this
    "SOURCE_CHECK_SECONDS": 60.0,  # how often one node checks for silent sources
    # extraction drift (docs/sources.md): a source's share of articles with a date / authors / normal text
    "SOURCE_DRIFT_MIN_ARTICLES": 20,  # new articles a source needs before its extraction is judged
    "SOURCE_DRIFT_DROP": 0.5,  # drift = a recent share below baseline x (1 - this)
    "SOURCE_DRIFT_TEXT_CHARS": 500,  # main text this long or longer counts as of normal length
    # coverage (docs/sources.md): the URLs a source's sitemaps and feeds listed against those stored
    "SOURCE_COVERAGE_KEY": "{%(spider)s}:coverage:%(source)s",  # zset: URL -> state and time (lua/coverage_record.lua)
    "SOURCE_COVERAGE_MIN": 0.9,  # coverage_low when a source stored less than this share of what it listed
    "SOURCE_COVERAGE_WINDOW": 86400.0,  # seconds: listings judged and kept (a day)
    "SOURCE_COVERAGE_GRACE": 3600.0,  # seconds a listed URL may wait for its fetch before the alert counts it
    "SOURCE_COVERAGE_MIN_LISTED": 10,  # listed URLs a source needs in the window before coverage_low can fire
    "SOURCE_COVERAGE_MAX_URLS": 1000,  # URLs kept per source (the oldest dropped beyond it)
    "PROMETHEUS_PORT": 0,  # 0 = off; env var overrides
    "PROMETHEUS_HOST": "127.0.0.1",  # this host only unless the project opens it
    "DASHBOARD_ALLOWED_HOSTS": [],  # Host header names the dashboard answers besides its bind address
    "DASHBOARD_TOKEN": "",  # required by `dcrawl dashboard` when set; env var overrides
    # Rendering: scrapy-playwright on Debian's Chromium (docs/rendering.md).
    "PLAYWRIGHT_URL_PATTERNS": [],  # regexes (or "a,b" with -s); matching requests are rendered
    "PLAYWRIGHT_EXECUTABLE_PATH": "",  # "" = /usr/bin/chromium when it exists; env var overrides
    "PLAYWRIGHT_WAIT_FOR": "load",  # load state (load, domcontentloaded, networkidle) or CSS selector
    "PLAYWRIGHT_RENDER_TIMEOUT": 30.0,  # seconds: navigation + wait + frames, per page
    "PLAYWRIGHT_ABORT_RESOURCE_TYPES": ["image", "media", "font"],  # never downloaded by the browser
    "PLAYWRIGHT_MAX_PAGES": 8,  # open pages per node, all contexts together
    "PLAYWRIGHT_RESTART_AFTER_PAGES": 1000,  # restart the browser to cap its memory (0 = never)
    "PLAYWRIGHT_SETTLE_MS": 500,  # after navigation: quiet window (no request, no DOM change); 0 = off
    "PLAYWRIGHT_SETTLE_MAX_MS": 5000,  # longest wait for that quiet window (then the page is read as is)
    "PLAYWRIGHT_AUTO": False,  # render plain pages that look script-built; learn per host + URL shape
    "PLAYWRIGHT_AUTO_SAMPLES": 3,  # rendered samples of a shape before auto stops rendering it (adds nothing)
    "PLAYWRIGHT_AUTO_KEY": "{%(spider)s}:render:verdicts",  # hash host|shape -> "samples:added"
    "IFRAME_FOLLOW_STATIC": False,  # news spider: fetch same-site <iframe src> as plain requests
    # News spiders (distributed_crawler/spiders/news.py, docs/news.md).
    "EXTRACT_MAIN_TEXT": True,  # item text = the article's main text (trafilatura); False = all visible text
    "EXTRACT_THREADS": 2,  # extraction threads per node, off the reactor thread (0 = on it)
    "EXTRACTION_RULES": {},  # registered domain -> {"text": CSS, "published_at": CSS/XPath, "exclude": [CSS]}
    "NEAR_DUPLICATES": True,  # mark near-duplicate articles (SimHash of the main text) with duplicate_of
    "NEAR_DUPLICATE_DISTANCE": 3,  # most differing bits of 64 that still make a near-duplicate (0-7)
    "NEAR_DUPLICATE_MIN_WORDS": 50,  # shorter texts are not fingerprinted
    "NEAR_DUPLICATE_KEEP_TEXT": False,  # a near-duplicate keeps its text too (else text = "")
    "NEAR_DUPLICATE_KEY": "{%(spider)s}:simhash",  # prefix of the fingerprint index keys
    "NEAR_DUPLICATE_WINDOW": "14d",  # a fingerprint is remembered this long at least, twice at most (0 = forever)
    "STORE_PAGE_TYPES": ["article"],  # page types stored (article, list, other); the others are only crawled for links
    "LANGUAGES": [],  # ISO 639-1 codes of the pages stored (empty = all); the others are only crawled for links
    "LANGUAGE_SKIPPED_KEY": "{%(spider)s}:language:skipped",  # zset host -> pages not stored for their language
    "ROBOTS_META_OBEY": True,  # noindex (meta robots, meta BOT_NAME, X-Robots-Tag): not stored; nofollow: links not followed
    "ROBOTS_META_SKIPPED_KEY": "{%(spider)s}:robots:skipped",  # zset host -> pages not stored for their noindex
    "SITEMAP_SINCE": 0,  # skip sitemap/feed entries older than this: seconds or "2d", "36h" (0 = keep all)
    "SITEMAP_MAX_BYTES": 50 * 1024 * 1024,  # a sitemap or feed larger than this (once gunzipped) is refused
    "SITEMAP_MAX_ENTRIES": 50_000,  # entries read from one sitemap or feed; the rest is skipped
    "SITEMAP_MAX_DEPTH": 3,  # sitemap indexes followed this deep
    # Safety on the hostile web (docs/security.md)
    "ALLOWED_PRIVATE_NETWORKS": [],  # CIDRs a crawl may connect to although not public (list, or "a,b" on -s)
    # Retries through {spider}:delayed and cluster-wide politeness (docs/retries-and-politeness.md).
    "RETRY_BACKOFF_BASE": 1.0,  # seconds before the first retry; doubles each retry (with jitter)
    "RETRY_BACKOFF_MAX": 60.0,  # cap of the backoff and of a site's Retry-After
    # Host mode: answers that block the host for every node (Retry-After, else adaptive backoff with
    # RETRY_BACKOFF_BASE/MAX); any retryable answer with Retry-After blocks it too.
    "HOST_BLOCK_HTTP_CODES": [429, 503],
    # robots.txt fetched once per host for the cluster (ROBOTSTXT_OBEY), cached in Redis.
    "ROBOTS_CACHE_KEY": "{%(spider)s}:robots:%(host)s",  # JSON {status, body, fetched_at}
    "ROBOTS_CACHE_SECONDS": 86400,  # how long a fetched robots.txt is used (2xx, 4xx)
    "ROBOTS_ERROR_CACHE_SECONDS": 60,  # 5xx / unreachable: disallow all this long, then fetch again
    "ROBOTS_LOCK_SECONDS": 30,  # the fetching node's lock; another node takes over after it
    "ROBOTS_WAIT_SECONDS": 1.0,  # longest a host waits for its robots.txt (block lifted once cached)
    "ROBOTS_CRAWL_DELAY_MAX": 30.0,  # a robots.txt Crawl-delay is honoured up to this many seconds
    # Polite by default for the whole cluster (docs/retries-and-politeness.md#politeness); DOWNLOAD_DELAY
    # and CONCURRENT_REQUESTS_PER_DOMAIN keep Scrapy's per-node meaning beside these.
    "DOMAIN_RATE_LIMIT": 1,  # requests/s per host, all nodes together (0 = no limit)
    "DOMAIN_RATE_LIMITS": {},  # {"example.com": 0.5} per-domain overrides (JSON with -s; 0 = no limit)
    "DOMAIN_RATE_LIMIT_PER_PROXY": False,  # one budget per domain x proxy instead of per domain
    "DOMAIN_MAX_PAGES": 0,  # host mode: pages per host across the cluster (0 = no limit), or {"example.com": 500}
    "DOMAIN_MAX_IN_FLIGHT": 2,  # requests in flight at once per host, all nodes together (0 = no cap), or a dict
    "DOMAIN_IN_FLIGHT_KEY": "dc:inflight:%(domain)s",  # single-queue modes: zset of a domain's requests in flight
    "DOMAIN_DELAY_FACTOR": 0.0,  # adaptive delay: interval >= factor x the host's response time (0 = off)
    "DOMAIN_DELAY_MAX": 30.0,  # cap of the adaptive delay, seconds
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
    # Retries on another proxy after a proxy failure (ban, 407, connection refused/reset, timeout through
    # it), apart from RETRY_TIMES: "auto" = the proxies in the pool, dead ones included, at least 3.
    "PROXY_RETRY_TIMES": "auto",
    # Storage pipeline (docs/storage.md).
    "STORAGE_URL": "sqlite:///data/items.db",  # or postgresql://...; env var overrides
    "STORAGE_BATCH_SIZE": 100,  # most items in one commit
    "STORAGE_FLUSH_SECONDS": 1.0,  # longest an item waits while another commit runs
    "STORAGE_RETRY_MAX_SECONDS": 30.0,  # longest backoff between retries of a failed commit
    "STORAGE_CLOSE_RETRY_SECONDS": 60.0,  # failed commits are retried this long once closing
    "ITEM_VERSIONS_KEEP": 0,  # replaced versions of a row kept in item_versions per URL; 0 = all
    # Bounds on what a hostile site can make a worker do (docs/security.md). Scrapy's own settings
    # with news-sized defaults (the project's value wins; 0 turns Scrapy's off), then ours.
    "DOWNLOAD_MAXSIZE": 8 * 1024 * 1024,  # bytes of a response, also once decompressed: over it, dead letter too_large
    "DOWNLOAD_WARNSIZE": 2 * 1024 * 1024,  # bytes: one WARNING per response this large
    "DEPTH_LIMIT": 20,  # links followed from a seed (Heritrix's 20); sitemap and feed entries start at 1
    "MEMUSAGE_ENABLED": True,
    "MEMUSAGE_LIMIT_MB": 1024,  # peak RSS: the node closes cleanly (leases back, each counted) and its supervisor restarts it
    "MEMUSAGE_WARNING_MB": 768,
    "MEMUSAGE_CHECK_INTERVAL_SECONDS": 5.0,
    "RESPONSE_MAX_HEADERS": 200,  # header lines of one response; more: dead letter too_large
    "RESPONSE_MAX_HEADER_BYTES": 64 * 1024,  # status line + headers of one response, bytes
    "EXTRACT_MAX_BYTES": 2 * 1024 * 1024,  # HTML read by extraction, links, SimHash; the rest is cut
    "URL_MAX_SEGMENTS": 16,  # path segments of a URL; more: refused at enqueue (path_segments)
    "URL_MAX_REPEATS": 3,  # a segment or run of segments repeated this often in a row: refused (repeated_segments)
    "DOMAIN_MAX_HOSTS": 100,  # hosts per registered domain, cluster-wide (0 = no limit); more: refused
    "DOMAIN_HOSTS_KEY": "{%(spider)s}:domain:%(domain)s",  # set: the hosts a registered domain was allowed
    "COOKIES_MAX_PER_HOST": 50,  # cookies a jar keeps per cookie domain, the oldest dropped first (0 = no limit)
    "COOKIES_MAX_HOSTS": 1000,  # cookie domains a jar keeps, the least recently set dropped first (0 = no limit)
    # WARC archive of every fetch (docs/warc.md).
    "WARC_DIR": "",  # "" = off; each node writes <node>-<time>-<n>.warc.gz here; env var overrides
    "WARC_MAX_SIZE": 1_000_000_000,  # bytes: a file this large is closed and the next <n> starts
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
    "EVENTS_WEBHOOK_URL",
    "EVENTS_WEBHOOK_SECRET",
    "DASHBOARD_TOKEN",
    "DASHBOARD_ALLOWED_HOSTS",
    "PROMETHEUS_PORT",
    "PLAYWRIGHT_EXECUTABLE_PATH",
    "WARC_DIR",
)


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ENV_OVERRIDES names set (non-empty) in the environment."""
    env = os.environ if environ is None else environ
    return {name: env[name] for name in ENV_OVERRIDES if env.get(name)}


# Builtin names for the annotations of SettingsReader, whose methods shadow them in its class body.
_Str = str
_Int = int
_Float = float
_Bool = bool
_List = list[str]
_Dict = dict[str, Any]


class SettingsReader:
    """Typed reads of our settings: env override, else the setting, else DEFAULTS.

    `read = SettingsReader(settings)`, then `read.int("SCHEDULER_MAX_DELIVERIES", min=1)`. A bad value
    raises ValueError naming the setting, its value and the rule ("NAME (value) must be >= 1"), then
    `hint` (a unit, "(0 = off)" or "; the fix"). Works on Scrapy settings and on plain dicts.
    """

    def __init__(self, settings: Any, environ: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.environ = os.environ if environ is None else environ

    def raw(self, name: _Str) -> Any:  # a setting's value: any type a project or `-s` gives
        if name in ENV_OVERRIDES and self.environ.get(name):
            return self.environ[name]
        value = self.settings.get(name)
        return DEFAULTS.get(name) if value is None else value

    def _number(self, name: _Str) -> Any:  # `raw`'s value, checked by the caller
        """The raw value; a blank string (`-s NAME=`) means the default."""
        value = self.raw(name)
        if isinstance(value, str) and not value.strip():
            return DEFAULTS.get(name)
        return value

    def _fail(self, name: _Str, value: Any, rule: _Str, hint: _Str) -> ValueError:
        return ValueError(f"{name} ({value}) must be {rule}{' ' + hint if hint else ''}")

    def _range(self, name: _Str, value: Any, low: Any, high: Any, hint: _Str, low_open: _Bool) -> None:
        if low is not None and (value <= low if low_open else value < low):
            raise self._fail(name, value, f"{'>' if low_open else '>='} {low}", hint)
        if high is not None and value > high:
            raise self._fail(name, value, f"<= {high}", hint)

    def str(self, name: _Str) -> _Str:
        value = self.raw(name)
        return "" if value is None else str(value).strip()

    def int(self, name: _Str, *, min: Any = None, max: Any = None, above: Any = None, hint: _Str = "") -> _Int:
        value = self._number(name)
        try:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            number = int(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError):
            raise self._fail(name, repr(value), "an integer", hint) from None
        self._range(name, number, min, max, hint, False)
        self._range(name, number, above, None, hint, True)
        return number

    def float(self, name: _Str, *, min: Any = None, max: Any = None, above: Any = None, hint: _Str = "") -> _Float:
        value = self._number(name)
        try:
            if isinstance(value, bool):
                raise ValueError
            number = float(value)
            if math.isnan(number):
                raise ValueError
        except (TypeError, ValueError):
            raise self._fail(name, repr(value), "a number", hint) from None
        self._range(name, number, min, max, hint, False)
        self._range(name, number, above, None, hint, True)
        return number

    def bool(self, name: _Str) -> _Bool:
        value = self.raw(name)
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float):
            return bool(value)
        text = "" if value is None else str(value).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise self._fail(name, value, "true or false (1 or 0)", "")

    def list(self, name: _Str) -> _List:
        """A list setting, or a comma-separated string as `-s NAME=a,b` gives it."""
        value = self.raw(name)
        if value is None or value == "":
            return []
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple | set | frozenset):
            raise self._fail(name, repr(value), "a list or a comma-separated string", "")
        return [str(v).strip() for v in value if str(v).strip()]

    def dict(self, name: _Str) -> _Dict:
        """A dict setting, or a JSON object as `-s NAME='{"a": 1}'` gives it."""
        value = self.raw(name)
        if value is None or value == "":
            return {}
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise self._fail(name, repr(value), "a dict (a JSON object with -s)", "") from None
        if isinstance(value, Mapping):
            return dict(value)
        raise self._fail(name, repr(value), "a dict (a JSON object with -s)", "")

    def choice(self, name: _Str, choices: Any) -> _Str:
        value = self.str(name)
        if value not in choices:
            raise self._fail(name, value, f"one of {', '.join(choices)}", "")
        return value


def set_above_addon(settings: Any, name: str) -> bool:
    """The project (or `-s`) set `name` itself: not only our add-on, which writes every default."""
    if settings.get(name) is None:
        return False
    priority = getattr(settings, "getpriority", None)
    return priority is None or (priority(name) or 0) > 15  # 15 = Scrapy's "addon" priority


def get_setting(settings: Any, name: str) -> Any:  # a setting's value: any type
    """The raw value (env override, else setting, else default); prefer `SettingsReader`."""
    return SettingsReader(settings).raw(name)
