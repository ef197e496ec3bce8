"""The project `scrapy crawl news` runs from the repo root (scrapy.cfg `default`), as README and
deploy/supervisord.conf run it: the library's defaults and nothing lifted.

`distributed_crawler.Addon` sets every component and every default of distributed_crawler/defaults.py
(docs/settings.md): no fetch reaches a private address, articles only, one request a second and two
in flight per host for the whole cluster. The demo (`make demo`, `SCRAPY_PROJECT=demo`) and the
tests select demo/settings.py instead. A team's own project looks like this one (docs/deploy.md).
Env vars REDIS_URL, STORAGE_URL, NODE_ID, ... override.
"""

BOT_NAME = "news"
SPIDER_MODULES = ["production.spiders"]
NEWSPIDER_MODULE = "production.spiders"
# `scrapy crawl` with clean exit codes; commands load before add-ons, so a project sets this itself.
COMMANDS_MODULE = "distributed_crawler.commands"

ADDONS = {"distributed_crawler.Addon": 0}

ROBOTSTXT_OBEY = True  # Scrapy's own default is False; a polite crawler obeys
LOG_LEVEL = "INFO"
