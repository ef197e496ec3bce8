"""A team's crawler project: the add-on makes it a node; every setting not here keeps the library's
default (docs/settings.md): private addresses refused, articles only, polite per host.

Add your own below (e.g. LANGUAGES, PROXY_LIST, STORAGE_URL); per node, the environment overrides
REDIS_URL, STORAGE_URL, NODE_ID, ...
"""

BOT_NAME = "acme"
SPIDER_MODULES = ["acme.spiders"]
NEWSPIDER_MODULE = "acme.spiders"
# `scrapy crawl` with clean exit codes; commands load before add-ons, so a project sets this itself.
COMMANDS_MODULE = "distributed_crawler.commands"

ADDONS = {"distributed_crawler.Addon": 0}

ROBOTSTXT_OBEY = True  # Scrapy's own default is False; a polite crawler obeys
LOG_LEVEL = "INFO"
