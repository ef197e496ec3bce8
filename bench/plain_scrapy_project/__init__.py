"""Plain Scrapy baseline for bench/e2e.py: one process, Scrapy's memory scheduler, same spider and pipeline."""
