"""Test item pipeline that opens slowly (as real ones that connect to a database can), so a
scheduler task that dies at once does so while the engine is still opening the spider."""

from __future__ import annotations

import asyncio


class SlowOpen:
    async def open_spider(self, spider) -> None:
        await asyncio.sleep(2)

    def process_item(self, item, spider):
        return item
