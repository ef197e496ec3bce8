"""Benchmarks of the crash-safe scheduler against scrapy-redis (run by hand, not by pytest).

`bench/e2e.py` (throughput and Redis round trips) and `bench/kill9.py` (pages lost and fetched twice
after `kill -9` of a worker); figures and how to reproduce them: docs/benchmarks.md.
"""
