"""Browser rendering (scrapy-playwright on Debian's Chromium)."""
