"""Redis key names of one spider, resolved once from settings (docs/architecture.md §4)."""

from __future__ import annotations

from dataclasses import dataclass

from scrapy.settings import BaseSettings

from distributed_crawler.defaults import DEFAULTS, SettingsReader
from distributed_crawler.keyspace import fill


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
    # Host mode (docs/frontier.md); "" = the default of defaults.py for this spider.
    ready: str = ""  # zset host -> server time it may be served next
    over_budget: str = ""  # zset host -> pending when it went over budget
    host_queue_template: str = ""  # %(host)s: one host's pending requests (zset; its list: + "/")
    host_template: str = ""  # %(host)s: one host's state (hash)
    host_in_flight_template: str = ""  # %(host)s: the leases of a host with an in-flight cap (set)
    refused: str = ""  # hash "<reason> <host>" -> requests refused (core/admission.py, bounded)
    domain_hosts_template: str = ""  # %(domain)s: the hosts a registered domain was allowed (set, DOMAIN_MAX_HOSTS)
    solo: str = ""  # hash lease -> node: redelivered requests running alone (quarantine), reclaim.lua
    deaths: str = ""  # hash sha1(payload) -> deaths of a node that ran it alone (killed_worker)
    pending: str = ""  # string: requests waiting in the queue(s), kept by the Lua scripts (lib/queue.lua)
    shards: str = ""  # string: the FRONTIER_SHARDS this crawl's frontier was written with (base tag)
    tag: str = ""  # the hash tag of the frontier keys ("" = the spider: one shard, today's layout)
    overrides: str = ""  # hash: host or registered domain -> the operator's override (JSON), read by the lease
    audit: str = ""  # stream: control actions (dcrawl host / pause / resume), capped (spider's tag)
    paused: str = ""  # string: the crawl's pause (dcrawl pause), JSON {since, by, drain, source}
    recrawl: str = ""  # zset fingerprint -> due time: the revisit schedule of this shard's hosts (docs/recrawl.md)
    recrawl_state: str = ""  # hash fingerprint -> revisit state (interval, digest, validators, request)
    sources: str = ""  # hash: site -> registered source (JSON), docs/sources.md (spider's tag)
    sources_version: str = ""  # string: moved by each change of `sources`, polled by the nodes

    def __post_init__(self) -> None:
        for name, setting, template in (
            ("ready", "SCHEDULER_READY_KEY", False),
            ("over_budget", "SCHEDULER_OVER_BUDGET_KEY", False),
            ("host_queue_template", "SCHEDULER_HOST_QUEUE_KEY", True),
            ("host_template", "SCHEDULER_HOST_KEY", True),
            ("host_in_flight_template", "SCHEDULER_HOST_IN_FLIGHT_KEY", True),
            ("refused", "SCHEDULER_REFUSED_KEY", False),
            ("domain_hosts_template", "DOMAIN_HOSTS_KEY", True),
            ("solo", "SCHEDULER_SOLO_KEY", False),
            ("deaths", "SCHEDULER_DEATHS_KEY", False),
            ("pending", "SCHEDULER_PENDING_KEY", False),
            ("shards", "FRONTIER_SHARDS_KEY", False),
            ("overrides", "SCHEDULER_OVERRIDES_KEY", False),
            ("audit", "AUDIT_KEY", False),
            ("paused", "SCHEDULER_PAUSED_KEY", False),
            ("recrawl", "RECRAWL_KEY", False),
            ("recrawl_state", "RECRAWL_STATE_KEY", False),
            ("sources", "SOURCE_REGISTRY_KEY", False),
            ("sources_version", "SOURCE_REGISTRY_VERSION_KEY", False),
        ):
            if not getattr(self, name):
                default = DEFAULTS[setting]
                object.__setattr__(self, name, default if template else fill(default, self.tag or self.spider))

    @classmethod
    def from_settings(cls, settings: BaseSettings, spider: str, tag: str = "") -> SpiderKeys:
        """The keys of `spider`; with `tag` (a shard's, frontier/shards.py) the frontier's keys carry that
        hash tag while seeds, dead letters' home, nodes, stats and the doorbell keep the spider's."""
        read = SettingsReader(settings)

        def base(name: str) -> str:
            return fill(read.str(name), spider)

        def key(name: str) -> str:
            return fill(read.str(name), tag or spider)

        return cls(
            spider=spider,
            start_urls=base("REDIS_START_URLS_KEY"),
            requests=key("SCHEDULER_QUEUE_KEY"),
            processing=key("SCHEDULER_PROCESSING_KEY"),
            delayed=key("SCHEDULER_DELAYED_KEY"),
            dupefilter=key("SCHEDULER_DUPEFILTER_KEY"),
            failed=key("SCHEDULER_FAILED_KEY"),
            seq=key("SCHEDULER_SEQUENCE_KEY"),
            stats=base("CLUSTER_STATS_KEY"),
            nodes=base("NODES_KEY"),
            node_template=read.str("NODE_KEY"),
            doorbell=base("SCHEDULER_DOORBELL_CHANNEL"),
            ready=key("SCHEDULER_READY_KEY"),
            over_budget=key("SCHEDULER_OVER_BUDGET_KEY"),
            host_queue_template=read.str("SCHEDULER_HOST_QUEUE_KEY"),
            host_template=read.str("SCHEDULER_HOST_KEY"),
            host_in_flight_template=read.str("SCHEDULER_HOST_IN_FLIGHT_KEY"),
            refused=key("SCHEDULER_REFUSED_KEY"),
            domain_hosts_template=read.str("DOMAIN_HOSTS_KEY"),
            solo=key("SCHEDULER_SOLO_KEY"),
            deaths=key("SCHEDULER_DEATHS_KEY"),
            pending=key("SCHEDULER_PENDING_KEY"),
            shards=base("FRONTIER_SHARDS_KEY"),
            tag=tag,
            overrides=key("SCHEDULER_OVERRIDES_KEY"),
            audit=base("AUDIT_KEY"),
            paused=base("SCHEDULER_PAUSED_KEY"),
            recrawl=key("RECRAWL_KEY"),
            recrawl_state=key("RECRAWL_STATE_KEY"),
            sources=base("SOURCE_REGISTRY_KEY"),
            sources_version=base("SOURCE_REGISTRY_VERSION_KEY"),
        )

    def node(self, node_id: str) -> str:
        return fill(self.node_template, self.spider, node=node_id)

    def host_queue(self, host: str) -> str:
        """One host's queue key (host mode); Lua derives the same name from `host_queue_template`."""
        return fill(self.host_queue_template, self.tag or self.spider, host=host)

    def host_list(self, host: str) -> str:
        """One host's list (host mode): its requests of priority 0 in arrival order, beside its
        queue zset (lua/lib/host.lua host_list: the queue key and "/", which no host holds)."""
        return self.host_queue(host) + "/"

    def host(self, host: str) -> str:
        """One host's state hash (host mode)."""
        return fill(self.host_template, self.tag or self.spider, host=host)

    def host_in_flight(self, host: str) -> str:
        """The leases of a host with an in-flight cap (host mode, host_pop.lua)."""
        return fill(self.host_in_flight_template, self.tag or self.spider, host=host)

    def domain_hosts(self, domain: str) -> str:
        """The set of hosts a registered domain was allowed (core/traps.py, lua/domain_hosts.lua), on
        this layout's tag (a shard's: the domain's shard, frontier/sharded.py)."""
        return fill(self.domain_hosts_template, self.tag or self.spider, domain=domain)

    def crawl_state(self) -> list[str]:
        """Keys that make up one crawl's state (what a flush deletes; seeds are kept)."""
        return [self.requests, self.processing, self.delayed, self.dupefilter, self.seq, self.pending]
