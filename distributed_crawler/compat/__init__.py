"""What a scrapy-redis project expects beyond our own components (docs/migrating-from-scrapy-redis.md)."""
