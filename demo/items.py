"""What the `news` spider stores: one row per story, keyed by canonical URL (docs/news.md)."""

from __future__ import annotations

import scrapy


class PageItem(scrapy.Item):
    url = scrapy.Field()  # canonical: the page's same-site <link rel=canonical>, tracking params removed, query sorted
    title = scrapy.Field()
    text = scrapy.Field()  # main text (EXTRACT_MAIN_TEXT; False: all visible text); "" for a near-duplicate
    authors = scrapy.Field()  # list of names
    published_at = scrapy.Field()  # ISO 8601 (offset, local date-time or date), else its sitemap/feed entry's
    modified_at = scrapy.Field()  # ISO 8601, when the page says it was updated
    lang = scrapy.Field()  # ISO 639-1 language of the text, e.g. "en"
    description = scrapy.Field()
    page_type = scrapy.Field()  # "article" | "list" (home, section, tag, archive, search) | "other"
    paywalled = scrapy.Field()  # True / False as the page declares it (schema.org), None = it does not say
    duplicate_of = scrapy.Field()  # url of the stored article this one is a near-duplicate of
    fetched_at = scrapy.Field()  # ISO 8601, UTC
    status = scrapy.Field()
    node = scrapy.Field()  # NODE_ID of the worker that fetched it
    content_hash = scrapy.Field()  # digest of `text`, set by RecrawlSpiderMiddleware (docs/recrawl.md)
