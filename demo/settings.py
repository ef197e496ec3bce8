"""Settings of the demo `news` project: a plain Scrapy project made a node by the add-on.

`distributed_crawler.Addon` sets the scheduler, dupefilter, middlewares, handlers, extensions,
pipeline and every default of distributed_crawler/defaults.py (docs/settings.md); this file only
holds what the demo changes. Env vars REDIS_URL, STORAGE_URL, NODE_ID, ... override.
"""

BOT_NAME = "distributed_crawler"
SPIDER_MODULES = ["demo.spiders"]
NEWSPIDER_MODULE = "demo.spiders"
# `scrapy crawl` with clean exit codes; commands load before add-ons, so a project sets this itself.
COMMANDS_MODULE = "distributed_crawler.commands"

ADDONS = {"distributed_crawler.Addon": 0}

# The demo site (`make demo`) runs on this machine's loopback address, which the private-address
# guard refuses by default (no crawl may reach this host's or its network's services:
# docs/security.md). A real crawl leaves this out.
ALLOWED_PRIVATE_NETWORKS = ["127.0.0.0/8", "::1/128"]

ROBOTSTXT_OBEY = True
CONCURRENT_REQUESTS = 32
# Per host, the cluster-wide defaults apply: DOMAIN_RATE_LIMIT 1 request/s and DOMAIN_MAX_IN_FLIGHT
# 2 for all workers together (docs/retries-and-politeness.md). Scrapy's CONCURRENT_REQUESTS_PER_DOMAIN
# (8) counts per worker only, so raising it would let ten workers hit one site ten times as hard;
# this file used to allow 32 and no longer does. The 32 above spread over many hosts.
DOWNLOAD_TIMEOUT = 30
RETRY_TIMES = 2  # then {spider}:failed (retries wait in {spider}:delayed)
LOG_LEVEL = "INFO"
FEED_EXPORT_ENCODING = "utf-8"
