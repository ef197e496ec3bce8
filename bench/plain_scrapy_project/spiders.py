"""`news` on plain Scrapy: the very same `parse` as our side (bench/page_parse.py).

The start URL is read from Redis `news:start_urls` (polled every 20 ms from `start()`), so the
harness seeds all sides the same way and the pickup time is comparable; after that the crawl
never touches Redis. The spider stays open (waiting for the seed) until it gets one.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

import redis
from scrapy import Request, Spider

from bench import page_parse

POLL_SECONDS = 0.02


class PlainNewsSpider(Spider):
    name = "news"
    parse = page_parse.parse  # same link following (same host only) and one PageItem per page

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.node_id = os.environ.get("NODE_ID") or f"{socket.gethostname()}-{os.getpid()}"

    async def start(self) -> AsyncIterator[Any]:
        client = redis.Redis.from_url(self.settings.get("REDIS_URL"), socket_timeout=5)
        try:
            while True:
                raw = client.lpop(self.settings.get("BENCH_SEED_KEY", "news:start_urls"))
                if raw:
                    break
                await asyncio.sleep(POLL_SECONDS)
        finally:
            client.close()
        seed = json.loads(raw)
        yield Request(seed["url"] if isinstance(seed, dict) else str(seed), callback=self.parse)
