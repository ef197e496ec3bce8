"""Redis key names: templates filled one way (distributed_crawler/keyspace.py), and the key table of
docs/architecture.md §4 lists exactly the keys the key owners build (a renamed or new key fails here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from scrapy.settings import Settings

from distributed_crawler.defaults import SettingsReader
from distributed_crawler.downloadermiddlewares.politeness import PolitenessConfig
from distributed_crawler.downloadermiddlewares.robotstxt import cache_key, lock_key
from distributed_crawler.events.feed import EventsConfig
from distributed_crawler.events.sources import SourcesConfig
from distributed_crawler.events.webhook import WebhookConfig
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.seedkey import SeedKey
from distributed_crawler.keyspace import check_template, fill, key
from distributed_crawler.monitoring.nodes import NodeKeys
from distributed_crawler.news.config import NewsConfig
from distributed_crawler.news.counts import applied_key
from distributed_crawler.proxies.pool import ProxyConfig
from distributed_crawler.rendering.config import RenderConfig

ARCHITECTURE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
SPIDER = "news"
# What the table writes for the part a key takes besides the spider.
HOST, NODE, DOMAIN, SOURCE, WRITER = "<host>", "<id>", "<registered domain>", "<source>", "<writer>"
# SpiderKeys fields that are not key names of their own (templates are filled below).
NOT_KEYS = {"spider", "tag", "node_template", "host_queue_template", "host_template"}
NOT_KEYS |= {"host_in_flight_template", "domain_hosts_template"}


def built_keys() -> set[str]:
    """Every key pattern the key owners produce for spider `news` with the defaults."""
    settings = Settings()
    keys = SpiderKeys.from_settings(settings, SPIDER)
    names = {v for f, v in vars(keys).items() if f not in NOT_KEYS}
    names |= {keys.host_queue(HOST), keys.host_list(HOST), keys.host(HOST), keys.host_in_flight(HOST)}
    names.add(keys.domain_hosts(DOMAIN))
    names.add(keys.node(NODE))
    seeds = SeedKey.from_settings(settings, SPIDER)
    names |= {seeds.key, seeds.taken}
    nodes = NodeKeys.from_settings(settings, SPIDER, keys)
    names |= set(nodes.all()) | {nodes.node(NODE)}
    sources = SourcesConfig.from_settings(settings)
    names |= {sources.index_key(SPIDER), sources.key_of(SPIDER, SOURCE), sources.check_lock(SPIDER)}
    names.add(sources.coverage_key_of(SPIDER, SOURCE))
    names.add(EventsConfig.from_settings(settings).stream(SPIDER))
    names.add(fill(WebhookConfig(url="http://sink.example", secret="s").stats_key, SPIDER))
    news = NewsConfig.from_settings(settings)
    names |= {news.key(SPIDER) + ":...", news.skipped_hosts_key(SPIDER), news.robots_skipped_hosts_key(SPIDER)}
    names.add(applied_key(keys.stats, WRITER))
    names.add(fill(RenderConfig.from_settings(settings).auto_key, SPIDER))
    robots = cache_key(SettingsReader(settings).str("ROBOTS_CACHE_KEY"), SPIDER, HOST)
    names |= {robots, lock_key(robots)}
    proxies = ProxyConfig.from_settings(settings)
    names |= {proxies.pool_key, proxies.dead_key}
    politeness = PolitenessConfig.from_settings(settings)
    names |= {politeness.key("<domain>", None), politeness.in_flight_key("<domain>")}
    return names


def table_keys() -> set[str]:
    """The key names in the first column of the §4 table (several per row, comma-separated)."""
    text = ARCHITECTURE.read_text()
    section = text[text.index("## 4. Redis keys") : text.index("## 5.")]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([^`]+)`", line.split(" | ")[0]))
    return names


def test_the_key_table_lists_every_key_the_code_builds_and_no_other() -> None:
    built, documented = built_keys(), table_keys()
    assert not built - documented, f"keys missing from docs/architecture.md §4: {sorted(built - documented)}"
    assert not documented - built, f"keys in docs/architecture.md §4 no code builds: {sorted(documented - built)}"


def test_fill_takes_the_spider_under_both_names_and_extra_parts() -> None:
    assert fill("{%(spider)s}:q:%(host)s", "news~0.3", host="a.com") == "{news~0.3}:q:a.com"
    assert fill("%(name)s:start_urls", "news") == "news:start_urls"  # scrapy-redis's alias


def test_key_reads_the_project_value_else_the_default() -> None:
    assert key(Settings(), "EVENTS_KEY", "news") == "{news}:events"
    assert key(Settings({"EVENTS_KEY": "ev:%(spider)s"}), "EVENTS_KEY", "news") == "ev:news"


def test_a_template_with_an_unknown_part_is_refused_naming_the_setting() -> None:
    check_template("PLAYWRIGHT_AUTO_KEY", "{%(spider)s}:render")
    with pytest.raises(ValueError, match=r"PLAYWRIGHT_AUTO_KEY \('\{%\(spider\)s\}:%\(host\)s'\) must be a key"):
        check_template("PLAYWRIGHT_AUTO_KEY", "{%(spider)s}:%(host)s")
