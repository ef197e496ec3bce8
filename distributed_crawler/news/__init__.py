"""News crawling: article extraction, canonical links, near-duplicates, sitemaps and feeds (docs/news.md)."""
