"""scrapy-redis's example pipeline: stamps every item (a datetime, which our storage ignores)."""

from datetime import UTC, datetime


class ExamplePipeline:
    def process_item(self, item, spider):
        item["crawled"] = datetime.now(UTC)
        item["spider"] = spider.name
        return item
