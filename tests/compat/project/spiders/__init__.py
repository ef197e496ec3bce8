"""The three spiders of scrapy-redis's example-project, pointed at the local test site."""
