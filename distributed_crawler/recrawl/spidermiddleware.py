"""`RecrawlSpiderMiddleware`: change detection for 2xx responses of revisitable URLs.

Items pass through untouched but for `content_hash` (the digest of their `text`, storage/digest.py),
set when the item has such a field. Once the callback's output is exhausted, which is before the
request is acked, the response is recorded, in the script that acks its lease (lua/recrawl_ack.lua,
no round trip of its own): its digest (the items' texts, or the body when no
item had a `text`) against the stored one decides the next interval (lua/recrawl_record.lua).
A first fetch no rule covers whose items include an article (`page_type` "article") enters the
schedule on ARTICLE_REVISITS.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter, is_item
from scrapy import Request

from distributed_crawler.meta import RECRAWL_TICKET_META
from distributed_crawler.recrawl.node import RecrawlNode
from distributed_crawler.recrawl.schedule import clean_header
from distributed_crawler.storage.digest import body_digest, content_digest

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)
ARTICLE = "article"  # the page type news/page_types.py gives a story


def stamp_content_hash(item: Any) -> str | None:
    """Set the item's `content_hash` from its `text` (when it has both fields); returns the text."""
    adapter = ItemAdapter(item)
    text = adapter.get("text")
    if not isinstance(text, str) or not text.strip():
        return None
    # an item class without the field (scrapy.Item, dataclass...): the storage computes it from `text`
    if adapter.get("content_hash") is None and (isinstance(item, dict) or "content_hash" in adapter.field_names()):
        adapter["content_hash"] = content_digest(text)
    return text


class RecrawlSpiderMiddleware:
    def __init__(self, node: RecrawlNode) -> None:
        self.node = node

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RecrawlSpiderMiddleware:
        return cls(RecrawlNode.of(crawler))

    async def process_spider_output(self, response: Response, result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        request = response.request
        ok = request is not None and 200 <= response.status < 300
        ticket = request.meta.get(RECRAWL_TICKET_META) if ok and request is not None else None
        texts: list[str] = []
        article = False
        async for output in result:
            # a page's links: is_item (~5 us, it asks every adapter) would say no to each of them
            if not isinstance(output, Request) and is_item(output):
                text = stamp_content_hash(output)
                if text is not None:
                    texts.append(text)
                article = article or ItemAdapter(output).get("page_type") == ARTICLE
            yield output
        if ticket is None and article and ok and request is not None:
            ticket = self.node.article_ticket(request)
        if ticket is None or request is None:
            return
        digest = content_digest("\n".join(texts)) if texts else body_digest(response.body)
        await self.node.record_at_ack(
            request,
            ticket,
            "body",
            digest=digest,
            etag=clean_header(response.headers.get(b"ETag")),
            last_modified=clean_header(response.headers.get(b"Last-Modified")),
        )
