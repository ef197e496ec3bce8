"""Public path kept for existing projects (README); the code lives in `distributed_crawler.storage.pipeline`."""

from distributed_crawler.storage.pipeline import StoragePipeline

__all__ = ["StoragePipeline"]
