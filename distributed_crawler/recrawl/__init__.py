"""Keeping a crawl fresh (docs/recrawl.md): revisit rules, the revisit schedule in Redis,
conditional requests, change detection and full recrawls."""
