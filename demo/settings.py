"""Settings of the demo `news` project. Our own settings and their defaults: defaults.py."""

BOT_NAME = "distributed_crawler"
SPIDER_MODULES = ["demo.spiders"]
NEWSPIDER_MODULE = "demo.spiders"
COMMANDS_MODULE = "distributed_crawler.commands"

# The distributed core: a scrapy-redis project moves over by changing these two lines.
SCHEDULER = "distributed_crawler.core.scheduler.RedisScheduler"
DUPEFILTER_CLASS = "distributed_crawler.dedup.dupefilter.BloomDupeFilter"
REQUEST_FINGERPRINTER_CLASS = "distributed_crawler.dedup.fingerprint.CanonicalFingerprinter"

ITEM_PIPELINES = {"distributed_crawler.storage.pipeline.StoragePipeline": 300}
EXTENSIONS = {
    "distributed_crawler.monitoring.heartbeat.Heartbeat": 500,  # HEARTBEAT_ENABLED, HEARTBEAT_INTERVAL
    "distributed_crawler.monitoring.metrics.PrometheusMetrics": 510,  # off unless PROMETHEUS_PORT is set
}
DOWNLOADER_MIDDLEWARES = {
    # Scrapy 2.19's lets concurrent first requests bypass robots.txt (see middlewares.py).
    "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
    "distributed_crawler.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": 100,
    # Retries wait in {spider}:delayed (backoff, Retry-After) and end in {spider}:failed.
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    "distributed_crawler.downloadermiddlewares.retry.DistributedRetryMiddleware": 550,
    # A healthy proxy of the shared pool per request (PROXY_LIST, PROXY_FILE, dcrawl proxies);
    # before Scrapy's HttpProxyMiddleware (750), which turns proxy credentials into a header.
    "distributed_crawler.downloadermiddlewares.proxy.ProxyPoolMiddleware": 700,
    # Cluster-wide requests/s per domain (DOMAIN_RATE_LIMIT); off unless set.
    "distributed_crawler.downloadermiddlewares.politeness.DomainRateLimitMiddleware": 720,
    # Marks requests for the browser: PLAYWRIGHT_URL_PATTERNS, meta render / dont_render.
    "distributed_crawler.rendering.handler.RenderingMiddleware": 950,
}
# Plain HTTP unless a request is marked for rendering; Chromium starts on the first marked one.
DOWNLOAD_HANDLERS = {
    "http": "distributed_crawler.rendering.handler.RenderingDownloadHandler",
    "https": "distributed_crawler.rendering.handler.RenderingDownloadHandler",
}

ROBOTSTXT_OBEY = True
CONCURRENT_REQUESTS = 32
CONCURRENT_REQUESTS_PER_DOMAIN = 32
DOWNLOAD_TIMEOUT = 30
RETRY_TIMES = 2
TELNETCONSOLE_ENABLED = False
REMOTE_CONTROL_ENABLED = False  # Scrapy 2.19's code-execution HTTP server: not on crawl workers
LOG_LEVEL = "INFO"
FEED_EXPORT_ENCODING = "utf-8"

# See defaults.py for every setting below and its meaning.
REDIS_URL = "redis://127.0.0.1:6379/0"  # env REDIS_URL overrides
STORAGE_URL = "sqlite:///data/items.db"  # env STORAGE_URL overrides
SCHEDULER_PERSIST = True
SCHEDULER_QUEUE_CLASS = "priority"
MAX_IDLE_TIME_BEFORE_CLOSE = 0  # env overrides; 0 = run forever
