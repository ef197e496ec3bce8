"""Redis key names of one spider, resolved once from settings (docs/architecture.md §4)."""

from __future__ import annotations

from dataclasses import dataclass

from scrapy.settings import BaseSettings

from distributed_crawler.defaults import SettingsReader


@dataclass(frozen=True)
class SpiderKeys:
    spider: str
    start_urls: str
    requests: str
    processing: str
    delayed: str
    dupefilter: str
    failed: str
    seq: str
    stats: str
    nodes: str
    node_template: str
    doorbell: str  # pub/sub channel, not a key: "work was pushed"

    @classmethod
    def from_settings(cls, settings: BaseSettings, spider: str) -> SpiderKeys:
        read = SettingsReader(settings)

        def key(name: str) -> str:
            return read.str(name) % {"spider": spider, "name": spider}

        return cls(
            spider=spider,
            start_urls=key("REDIS_START_URLS_KEY"),
            requests=key("SCHEDULER_QUEUE_KEY"),
            processing=key("SCHEDULER_PROCESSING_KEY"),
            delayed=key("SCHEDULER_DELAYED_KEY"),
            dupefilter=key("SCHEDULER_DUPEFILTER_KEY"),
            failed=key("SCHEDULER_FAILED_KEY"),
            seq=key("SCHEDULER_SEQUENCE_KEY"),
            stats=key("CLUSTER_STATS_KEY"),
            nodes=key("NODES_KEY"),
            node_template=read.str("NODE_KEY"),
            doorbell=key("SCHEDULER_DOORBELL_CHANNEL"),
        )

    def node(self, node_id: str) -> str:
        return self.node_template % {"spider": self.spider, "name": self.spider, "node": node_id}

    def crawl_state(self) -> list[str]:
        """Keys that make up one crawl's state (what a flush deletes; seeds are kept)."""
        return [self.requests, self.processing, self.delayed, self.dupefilter, self.seq]
