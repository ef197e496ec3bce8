"""The scheduler with leases, and what it needs from Scrapy's engine."""
