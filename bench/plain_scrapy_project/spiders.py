"""`news` on plain Scrapy: the very same `parse` as our side (bench/page_parse.py).

The start URLs are read from Redis `news:start_urls` (polled every 20 ms from `start()` until the
first one arrives, then every seed already there, in batches: bench/wide.py seeds thousands of
hosts), so the harness seeds all sides the same way and the pickup time is comparable; after that
the crawl never touches Redis. The spider stays open (waiting for the seed) until it gets one.
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
SEED_BATCH = 1000


class PlainNewsSpider(Spider):
    name = "news"
    parse = page_parse.parse  # same link following (same host only) and one PageItem per page

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.node_id = os.environ.get("NODE_ID") or f"{socket.gethostname()}-{os.getpid()}"

    async def start(self) -> AsyncIterator[Any]:
        key = self.settings.get("BENCH_SEED_KEY", "news:start_urls")
        client = redis.Redis.from_url(self.settings.get("REDIS_URL"), socket_timeout=5)
        try:
            while True:
                raw = client.lpop(key)
                if raw:
                    break
                await asyncio.sleep(POLL_SECONDS)
            seeds = [raw]
            while more := client.lpop(key, SEED_BATCH):
                seeds.extend(more)
        finally:
            client.close()
        for raw in seeds:
            seed = json.loads(raw)
            yield Request(seed["url"] if isinstance(seed, dict) else str(seed), callback=self.parse)
