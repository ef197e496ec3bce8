"""Public path kept for existing projects (README); the code lives in `distributed_crawler.core.scheduler`."""

from distributed_crawler.core.scheduler import RedisScheduler

__all__ = ["RedisScheduler"]
