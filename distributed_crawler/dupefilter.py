"""Public path kept for existing projects (README); the code lives in `distributed_crawler.dedup.dupefilter`."""

from distributed_crawler.dedup.dupefilter import BloomDupeFilter

__all__ = ["BloomDupeFilter"]
