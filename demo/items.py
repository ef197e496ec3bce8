"""What the `news` spider stores: one row per story, keyed by canonical URL (docs/news.md)."""

from __future__ import annotations

import scrapy


class PageItem(scrapy.Item):
    url = scrapy.Field()  # canonical: the page's same-site <link rel=canonical>, tracking params removed, query sorted
    title = scrapy.Field()
    text = (
        scrapy.Field()
    )  # main text (EXTRACT_MAIN_TEXT; False: all visible text); "" for a near-duplicate of the same site
    authors = scrapy.Field()  # list of names
    published_at = scrapy.Field()  # ISO 8601 (offset, local date-time or day); else the sitemap/feed entry
    modified_at = scrapy.Field()  # ISO 8601, when the page gives one
    page_type = scrapy.Field()  # "article" | "list" (home, section, tag, archive, search) | "other"
    paywalled = scrapy.Field()  # True / False / None (the page does not say)
    image = scrapy.Field()  # the top image's URL (docs/news.md "Signals")
    section = scrapy.Field()
    tags = scrapy.Field()  # list of tags
    site_name = scrapy.Field()
    lang = scrapy.Field()  # ISO 639-1, detected from the text (docs/news.md "Language")
    description = scrapy.Field()
    duplicate_of = scrapy.Field()  # url of the stored article this one is a near-duplicate of
    fetched_at = scrapy.Field()  # ISO 8601, UTC
    status = scrapy.Field()
    truncated = scrapy.Field()  # True: the page was cut to EXTRACT_MAX_BYTES before extraction (docs/security.md)
    node = scrapy.Field()  # NODE_ID of the worker that fetched it
    content_hash = scrapy.Field()  # digest of `text`, set by RecrawlSpiderMiddleware (docs/recrawl.md)
