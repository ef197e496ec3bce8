"""`poison`: a news spider whose callback kills its own process on one URL (a poison request)."""

from __future__ import annotations

import os
import signal
from typing import Any
from urllib.parse import urlsplit

from demo.spiders.news import NewsSpider


class PoisonSpider(NewsSpider):
    name = "poison"
    poison_path = "/article/7"

    async def parse(self, response: Any, **kwargs: Any) -> Any:
        if urlsplit(response.url).path == self.poison_path:
            os.kill(os.getpid(), signal.SIGKILL)
        async for output in super().parse(response, **kwargs):
            yield output
