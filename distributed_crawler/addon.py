"""`ADDONS = {"distributed_crawler.Addon": 0}`: one line makes a Scrapy project a node.

The add-on sets our scheduler, dupefilter, fingerprinter, middlewares, download handlers,
extensions and storage pipeline, and every default of defaults.py, all at "addon" priority: a
setting of the project (or `-s`) wins. Components a project lists itself keep its order; a
component it disables (`None`) stays disabled. The env overrides (defaults.ENV_OVERRIDES, e.g.
REDIS_URL, STORAGE_URL, NODE_ID) are written at "cmdline" priority, after `-s`: as everywhere in
this package, the env var wins. `COMMANDS_MODULE` is not set: Scrapy loads commands before add-ons.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from distributed_crawler.defaults import DEFAULTS, env_overrides

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

S = TypeVar("S", bound="BaseSettings")

#: Plain settings the add-on sets (at "addon" priority).
SETTINGS: dict[str, Any] = {
    "SCHEDULER": "distributed_crawler.core.scheduler.RedisScheduler",
    "DUPEFILTER_CLASS": "distributed_crawler.dedup.dupefilter.BloomDupeFilter",
    "REQUEST_FINGERPRINTER_CLASS": "distributed_crawler.dedup.fingerprint.CanonicalFingerprinter",
    "TELNETCONSOLE_ENABLED": False,  # no console on crawl workers
    "REMOTE_CONTROL_ENABLED": False,  # Scrapy 2.19's code-execution HTTP server: not on crawl workers
    # Scrapy's 100 starts 100 asyncio tasks for each response's output (a page yields ~20 links and
    # one item): 8 keeps the item pipeline busy at a fraction of the task churn (docs/benchmarks.md).
    "CONCURRENT_ITEMS": 8,
}

#: Component priority dicts: path -> order (None disables one of Scrapy's).
COMPONENTS: dict[str, dict[str, int | None]] = {
    "DOWNLOADER_MIDDLEWARES": {
        # Scrapy 2.19's lets concurrent first requests bypass robots.txt (see robotstxt.py).
        "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
        "distributed_crawler.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": 100,
        # Retries wait in {spider}:delayed (backoff, Retry-After) and end in {spider}:failed.
        "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
        "distributed_crawler.downloadermiddlewares.retry.DistributedRetryMiddleware": 550,
        # Before Scrapy's HttpProxyMiddleware (750), which turns proxy credentials into a header.
        "distributed_crawler.downloadermiddlewares.proxy.ProxyPoolMiddleware": 700,
        "distributed_crawler.downloadermiddlewares.adaptive_delay.AdaptiveDelayMiddleware": 715,
        "distributed_crawler.downloadermiddlewares.politeness.DomainRateLimitMiddleware": 720,
        # Decides once which requests render (meta["playwright"]): before the proxy pool (700), which reads it.
        "distributed_crawler.rendering.handler.RenderingMiddleware": 650,
        # Off unless PLAYWRIGHT_AUTO. Reads plain pages once decoded (HttpCompression 590) and redirected
        # (Redirect 600), renders the script-built ones before Retry (550) sees them.
        "distributed_crawler.rendering.auto_render.AutoRenderMiddleware": 570,
        # Off unless WARC_DIR. Last before the handler: records the request as sent and the response as
        # received (before HttpCompression 590 decodes it, Redirect 600 / Retry 550 replace it).
        "distributed_crawler.downloadermiddlewares.warc.WarcMiddleware": 950,
        # Cookies kept per host and hosts per jar bounded (COOKIES_MAX_PER_HOST, COOKIES_MAX_HOSTS).
        "scrapy.downloadermiddlewares.cookies.CookiesMiddleware": None,
        "distributed_crawler.downloadermiddlewares.cookies.BoundedCookiesMiddleware": 700,
        # Scrapy's decompression with its size refusals turned into dead letters (too_large), header caps.
        "scrapy.downloadermiddlewares.httpcompression.HttpCompressionMiddleware": None,
        "distributed_crawler.downloadermiddlewares.sizecap.SizeCapMiddleware": 590,
        # Conditional requests for revisitable URLs; a 304 stops here (no parse, no storage write).
        "distributed_crawler.recrawl.middleware.RecrawlMiddleware": 580,
        # A revisit of a stored page answered 404/410: a `removed` change event (off with EVENTS_ENABLED).
        "distributed_crawler.events.middleware.RemovedPageMiddleware": 585,
    },
    # Change detection of revisitable pages (digest of the items' text) and `content_hash` on items.
    "SPIDER_MIDDLEWARES": {
        "distributed_crawler.recrawl.spidermiddleware.RecrawlSpiderMiddleware": 100,
        # Marks items of redelivered requests: their events are published even when unchanged.
        "distributed_crawler.events.middleware.RedeliveredItemsMiddleware": 110,
    },
    "EXTENSIONS": {
        "distributed_crawler.monitoring.heartbeat.Heartbeat": 500,
        "distributed_crawler.monitoring.memory_log.QuietMemoryLog": 505,  # Scrapy's memory line at DEBUG
        "distributed_crawler.monitoring.metrics.PrometheusMetrics": 510,  # off unless PROMETHEUS_PORT
        "distributed_crawler.recrawl.mover.RecrawlMover": 520,  # due revisits into the frontier
        "distributed_crawler.events.extension.ChangeFeedExtension": 530,  # change feed, source health
    },
    "ITEM_PIPELINES": {"distributed_crawler.storage.pipeline.StoragePipeline": 300},
}

#: Download handlers per scheme (plain HTTP unless a request is marked for rendering). Scrapy's
#: file, s3 and ftp handlers are off (a link or a queue entry must not read the node's disk or
#: reach other stores): a project that lists one of these schemes keeps its own.
DOWNLOAD_HANDLERS: dict[str, str | None] = {
    "http": "distributed_crawler.rendering.handler.RenderingDownloadHandler",
    "https": "distributed_crawler.rendering.handler.RenderingDownloadHandler",
    "file": None,
    "s3": None,
    "ftp": None,
}


def _load(path: str) -> object:
    from scrapy.utils.misc import load_object

    return load_object(path)


def _listed(components: dict[Any, Any], path: str) -> bool:
    """The project lists the component already (as its path, another path to it, or the class)."""
    if path in components:
        return True
    if not components:
        return False
    cls = _load(path)
    for key in components:
        try:
            if key == cls or (isinstance(key, str) and _load(key) is cls):
                return True
        except (ImportError, NameError, ValueError):
            continue
    return False


class Addon:
    """The Scrapy add-on: `ADDONS = {"distributed_crawler.Addon": 0}`."""

    def update_settings(self, settings: Any) -> None:
        for name, value in {**DEFAULTS, **SETTINGS}.items():
            settings.set(name, value, "addon")
        for name, components in COMPONENTS.items():
            current = settings.getdict(name)
            project = dict(current)
            changed = False
            for path, order in components.items():
                if _listed(project, path):
                    continue  # the project's own order (or None) wins
                current[path] = order
                changed = True
            if changed:
                settings.set(name, current, settings.getpriority(name) or 0)
        handlers = settings.getdict("DOWNLOAD_HANDLERS")
        missing = {scheme: path for scheme, path in DOWNLOAD_HANDLERS.items() if scheme not in handlers}
        if missing:
            settings.set("DOWNLOAD_HANDLERS", {**handlers, **missing}, settings.getpriority("DOWNLOAD_HANDLERS") or 0)
        for name, value in env_overrides().items():
            settings.set(name, value, "cmdline")
        from distributed_crawler.core.guard import install

        install()  # the private-address guard on every plain download (docs/security.md)


def with_addon(settings: S) -> S:
    """Project settings as a crawl will see them: a copy with our add-on applied when ADDONS lists it.

    Scrapy applies add-ons inside the crawler; the crawl preflight and `dcrawl` read the project
    settings before (or without) one, so they apply it themselves.
    """
    if not any(
        path is Addon or (isinstance(path, str) and _load(path) is Addon) for path in settings.getdict("ADDONS")
    ):
        return settings
    settings = settings.copy()
    Addon().update_settings(settings)
    return settings
