"""scrapy-redis's example settings, moved over: the add-on instead of SCHEDULER/DUPEFILTER_CLASS,
REDIS_HOST/REDIS_PORT kept (the test picks the port: COMPAT_REDIS_PORT)."""

import os

SPIDER_MODULES = ["tests.compat.project.spiders"]
NEWSPIDER_MODULE = "tests.compat.project.spiders"
COMMANDS_MODULE = "distributed_crawler.commands"

USER_AGENT = "scrapy-redis (+https://github.com/rolando/scrapy-redis)"

ADDONS = {"distributed_crawler.Addon": 0}
SCHEDULER_PERSIST = True

REDIS_HOST = "127.0.0.1"
REDIS_PORT = int(os.environ.get("COMPAT_REDIS_PORT", "6379"))

ITEM_PIPELINES = {"tests.compat.project.pipelines.ExamplePipeline": 300}

# The test site runs on loopback, which the private-address guard refuses by default (docs/security.md).
ALLOWED_PRIVATE_NETWORKS = ["127.0.0.0/8", "::1/128"]

ROBOTSTXT_OBEY = True
LOG_LEVEL = "INFO"
CONCURRENT_REQUESTS = 8
