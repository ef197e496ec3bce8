"""`ADDONS = {"distributed_crawler.Addon": 0}` alone makes a plain Scrapy project a node."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import redis
from scrapy import Spider
from scrapy.utils.test import get_crawler

from distributed_crawler.addon import COMPONENTS, DOWNLOAD_HANDLERS
from distributed_crawler.defaults import DEFAULTS, SettingsReader
from tests.conftest import LOOPBACK_SITE_SETTINGS

ROOT = Path(__file__).resolve().parent.parent
ADDON = {"ADDONS": {"distributed_crawler.Addon": 0}}

SPIDER = """
from distributed_crawler.dedup.fingerprint import canonicalize_url
from distributed_crawler.redis_spider import RedisSpider


class Tiny(RedisSpider):
    name = "tiny"

    def parse(self, response):
        yield {"url": canonicalize_url(response.url), "title": response.css("title::text").get(""), "text": ""}
        yield from response.follow_all(css="a")
"""


def _crawler(monkeypatch: pytest.MonkeyPatch, settings: dict, env: dict[str, str] | None = None):
    for name in ("REDIS_URL", "STORAGE_URL", "NODE_ID", "MAX_IDLE_TIME_BEFORE_CLOSE", "REDIS_CLUSTER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    return get_crawler(Spider, settings)


def test_addon_sets_components_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    # get_crawler sets test download handlers of its own; a real project has none.
    settings = _crawler(monkeypatch, {**ADDON, "DOWNLOAD_HANDLERS": {}}).settings
    assert settings["SCHEDULER"] == "distributed_crawler.core.scheduler.RedisScheduler"
    assert settings["DUPEFILTER_CLASS"] == "distributed_crawler.dedup.dupefilter.BloomDupeFilter"
    assert settings["REQUEST_FINGERPRINTER_CLASS"] == "distributed_crawler.dedup.fingerprint.CanonicalFingerprinter"
    assert settings.getpriority("SCHEDULER") == 15  # "addon"
    for name, components in COMPONENTS.items():
        assert settings.getdict(name) == components
    assert dict(settings.getdict("DOWNLOAD_HANDLERS")) == DOWNLOAD_HANDLERS
    assert not settings.getbool("TELNETCONSOLE_ENABLED") and not settings.getbool("REMOTE_CONTROL_ENABLED")
    assert settings.getint("CONCURRENT_ITEMS") == 8
    for name, value in DEFAULTS.items():
        assert settings.get(name) == value, name


def test_project_settings_beat_the_addon(monkeypatch: pytest.MonkeyPatch) -> None:
    own_retry = "scrapy.downloadermiddlewares.retry.RetryMiddleware"
    project = {
        **ADDON,
        "BLOOM_CAPACITY": 5,
        "SCHEDULER_PERSIST": False,
        "SCHEDULER": "scrapy.core.scheduler.Scheduler",
        "DOWNLOADER_MIDDLEWARES": {own_retry: 551, "distributed_crawler.rendering.handler.RenderingMiddleware": None},
        "EXTENSIONS": {"scrapy.extensions.corestats.CoreStats": 0},
        "DOWNLOAD_HANDLERS": {"https": "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler"},
    }
    settings = _crawler(monkeypatch, project).settings
    assert settings.getint("BLOOM_CAPACITY") == 5 and not settings.getbool("SCHEDULER_PERSIST")
    assert settings["SCHEDULER"] == "scrapy.core.scheduler.Scheduler"
    middlewares = settings.getdict("DOWNLOADER_MIDDLEWARES")
    assert middlewares[own_retry] == 551  # the project's order, not the add-on's None
    assert middlewares["distributed_crawler.rendering.handler.RenderingMiddleware"] is None
    assert middlewares["distributed_crawler.downloadermiddlewares.retry.DistributedRetryMiddleware"] == 550
    extensions = settings.getdict("EXTENSIONS")
    assert extensions["scrapy.extensions.corestats.CoreStats"] == 0
    assert extensions["distributed_crawler.monitoring.heartbeat.Heartbeat"] == 500
    handlers = settings.getdict("DOWNLOAD_HANDLERS")
    assert handlers["https"].endswith("HTTP11DownloadHandler") and handlers["http"] == DOWNLOAD_HANDLERS["http"]


def test_env_override_beats_settings_and_cmdline(monkeypatch: pytest.MonkeyPatch) -> None:
    crawler = _crawler(monkeypatch, ADDON)  # built before the env vars are set
    env = {"REDIS_URL": "redis://env-host:6379/3", "MAX_IDLE_TIME_BEFORE_CLOSE": "2", "NODE_ID": ""}  # "" = unset
    settings = _crawler(monkeypatch, {**ADDON, "REDIS_URL": "redis://project:6379/0", "NODE_ID": "mine"}, env).settings
    assert settings["REDIS_URL"] == "redis://env-host:6379/3"
    assert settings.getpriority("REDIS_URL") == 40  # "cmdline": beats -s given before it
    assert settings.getfloat("MAX_IDLE_TIME_BEFORE_CLOSE") == 2.0
    assert settings["NODE_ID"] == "mine"
    assert crawler.settings["REDIS_URL"] == DEFAULTS["REDIS_URL"]


def test_reader_without_addon_uses_defaults_env_and_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    read = SettingsReader({"BLOOM_CAPACITY": "7", "SCHEDULER_PERSIST": "0"}, environ={"REDIS_URL": "redis://e/1"})
    assert read.int("BLOOM_CAPACITY", min=1) == 7 and read.bool("SCHEDULER_PERSIST") is False
    assert read.float("SCHEDULER_LEASE_SECONDS") == 60 and read.str("REDIS_URL") == "redis://e/1"
    assert read.list("PLAYWRIGHT_ABORT_RESOURCE_TYPES") == ["image", "media", "font"]
    assert SettingsReader({"PROXY_LIST": "http://a:1, http://b:2"}).list("PROXY_LIST") == ["http://a:1", "http://b:2"]
    with pytest.raises(ValueError, match=r"^BLOOM_CAPACITY \(0\) must be >= 1$"):
        SettingsReader({"BLOOM_CAPACITY": 0}).int("BLOOM_CAPACITY", min=1)
    with pytest.raises(ValueError, match=r"^HEARTBEAT_INTERVAL \('x'\) must be a number seconds$"):
        SettingsReader({"HEARTBEAT_INTERVAL": "x"}).float("HEARTBEAT_INTERVAL", above=0, hint="seconds")
    with pytest.raises(ValueError, match=r"SCHEDULER_PERSIST \(maybe\) must be true or false"):
        SettingsReader({"SCHEDULER_PERSIST": "maybe"}).bool("SCHEDULER_PERSIST")


def test_package_import_stays_light() -> None:
    code = "import sys, distributed_crawler; assert 'scrapy' not in sys.modules and 'redis' not in sys.modules; distributed_crawler.Addon"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.slow  # over 5 s
@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_plain_scrapy_project_with_the_addon_is_a_node(site, redis_url: str, tmp_path: Path) -> None:
    project = tmp_path / "plain"
    (project / "plain" / "spiders").mkdir(parents=True)
    (project / "scrapy.cfg").write_text("[settings]\ndefault = plain.settings\n")
    (project / "plain" / "__init__.py").write_text("")
    (project / "plain" / "spiders" / "__init__.py").write_text(textwrap.dedent(SPIDER))
    (project / "plain" / "settings.py").write_text(
        'BOT_NAME = "plain"\nSPIDER_MODULES = ["plain.spiders"]\nADDONS = {"distributed_crawler.Addon": 0}\n'
        'ALLOWED_PRIVATE_NETWORKS = ["127.0.0.0/8"]\n'
    )
    db = tmp_path / "items.db"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SCRAPY_")},  # e.g. another test's project
        "REDIS_URL": redis_url,
        "STORAGE_URL": f"sqlite:///{db}",
        "MAX_IDLE_TIME_BEFORE_CLOSE": "2",
        "NODE_ID": "plain-node",
        "PYTHONPATH": os.pathsep.join(p for p in (str(project), str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    redis.Redis.from_url(redis_url).lpush("tiny:start_urls", site.url + "/")
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "tiny", *(a for s in LOOPBACK_SITE_SETTINGS for a in ("-s", s))],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    log = proc.stderr
    assert proc.returncode == 0, log[-4000:]
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT url, node FROM items").fetchall()
    urls = [url for url, _ in rows]
    assert len(urls) == len(set(urls)), "a page was stored twice"
    assert site.expected_urls() <= set(urls)
    assert redis.Redis.from_url(redis_url).exists("{tiny}:nodes:last"), "no heartbeat: the extensions are off"
    assert redis.Redis.from_url(redis_url).zcard("{tiny}:processing") == 0, "leases left behind"


def test_addon_default_dead_key_follows_the_pool_on_redis_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    from distributed_crawler.proxies.pool import ProxyConfig

    settings = _crawler(monkeypatch, {**ADDON, "REDIS_CLUSTER": True}).settings
    assert ProxyConfig.from_settings(settings).dead_key == "{dc:proxies}:dead"  # not "different slots"
