"""`news` on scrapy-redis: the very same `parse` as our side (bench/page_parse.py)."""

from __future__ import annotations

import os
import socket
from typing import Any

from scrapy_redis.spiders import RedisSpider

from bench import page_parse


class ScrapyRedisNewsSpider(RedisSpider):
    name = "news"
    parse = page_parse.parse  # same link following (same host only) and one PageItem per page

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.node_id = os.environ.get("NODE_ID") or f"{socket.gethostname()}-{os.getpid()}"
