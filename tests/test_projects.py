"""The repo root's projects: `scrapy crawl news` runs production's (the library's defaults), the demo
and the tests select the demo's; `make demo` touches only what it made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.addon import with_addon
from distributed_crawler.defaults import DEFAULTS
from tests.conftest import ROOT, RedisServer
from tests.site.server import NewsSite


def project_env(**extra: str) -> dict[str, str]:
    """This environment without the suite's project choice: what an operator's shell has."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("SCRAPY_")}, **extra}


def settings_of(module: str) -> Settings:
    settings = Settings()
    settings.setmodule(module, priority="project")
    return with_addon(settings)


@pytest.mark.parametrize("module", ["production.settings", "acme.settings"])
def test_the_production_project_and_the_template_keep_every_safe_default(
    module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "deploy" / "project-template"))  # docs/deploy.md's own project
    settings = settings_of(module)
    for name in ("ALLOWED_PRIVATE_NETWORKS", "STORE_PAGE_TYPES", "DOMAIN_RATE_LIMIT", "DOMAIN_MAX_IN_FLIGHT"):
        assert settings[name] == DEFAULTS[name], f"{module} lifts {name}"
    assert settings.getbool("ROBOTSTXT_OBEY")
    assert settings["COMMANDS_MODULE"] == "distributed_crawler.commands"


def test_the_demo_is_the_project_that_lifts_the_loopback_guard() -> None:
    assert settings_of("demo.settings").getlist("ALLOWED_PRIVATE_NETWORKS")


def test_scrapy_cfg_defaults_to_production_and_names_the_demo() -> None:
    code = "from scrapy.utils.project import get_project_settings as g; print(g()['SPIDER_MODULES'])"
    for project, expected in ((None, "production.spiders"), ("demo", "demo.spiders")):
        env = project_env(**({"SCRAPY_PROJECT": project} if project else {}))
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
        )
        assert expected in out.stdout, (project, out.stdout, out.stderr)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_scrapy_crawl_news_from_the_repo_root_refuses_a_loopback_site(redis_url: str, tmp_path: Path) -> None:
    """As README and deploy/ run it: the loopback seed is dead-lettered `private_address`, nothing stored."""
    client = redis.Redis.from_url(redis_url)
    with NewsSite(articles=3, per_page=3) as site:
        client.lpush("news:start_urls", site.url + "/")
        proc = subprocess.run(
            [sys.executable, "-m", "scrapy", "crawl", "news"],
            cwd=ROOT,
            env=project_env(
                REDIS_URL=redis_url,
                STORAGE_URL=f"sqlite:///{tmp_path / 'items.db'}",
                MAX_IDLE_TIME_BEFORE_CLOSE="2",
                NODE_ID="prod",
            ),
            capture_output=True,
            text=True,
            timeout=100,
        )
        fetched = site.requested_paths()
    assert proc.returncode == 0, proc.stderr[-3000:]
    reasons = [json.loads(e)["reason"] for e in client.lrange("{news}:failed", 0, -1)]
    assert reasons == ["private_address"], (reasons, proc.stderr[-3000:])
    assert fetched == [], "a production node fetched a loopback address"


def snapshot(client: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key of a server with its serialized value (type, content and TTL-free payload)."""
    return {key: client.dump(key) for key in client.scan_iter(count=1000)}


def run_demo(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "demo.run", "--articles", "10", "--run-dir", str(tmp_path / "run")]
        + ["--db", str(tmp_path / "demo.db"), *args],
        cwd=ROOT,
        env=env or project_env(),
        capture_output=True,
        text=True,
        timeout=200,
    )


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_demo_leaves_another_news_crawl_as_it_was(tmp_path: Path) -> None:
    busy = RedisServer(tmp_path).start()
    try:
        client = redis.Redis.from_url(busy.url)
        client.lpush("news:start_urls", "https://example.com/")
        client.hset("{news}:overrides", "127.0.0.1", json.dumps({"block": True, "reason": "theirs"}))
        client.zadd("{news}:processing", {"a lease": 1})
        client.zadd("dc:proxies", {"http://proxy.example:3128": 10})
        before = snapshot(client)

        # REDIS_URL is production's variable: the demo runs on its own server and never reads it
        own = run_demo(tmp_path, env=project_env(REDIS_URL=busy.url))
        assert own.returncode == 0, own.stdout[-3000:] + own.stderr[-3000:]
        assert "the demo's own redis-server" in own.stdout
        assert snapshot(client) == before

        # told to use that server: refused, with the reason, nothing touched
        refused = run_demo(tmp_path, "--redis-url", busy.url)
        assert refused.returncode == 1
        assert "holds a `news` crawl the demo did not make (3 keys" in refused.stderr, refused.stderr
        assert snapshot(client) == before

        # an empty database of that server: the demo runs; a leftover override of its own last run
        # there is reset (and listed) and cannot break the next run
        empty = busy.url[: -len("/0")] + "/1"
        first = run_demo(tmp_path, "--redis-url", empty)
        assert first.returncode == 0, first.stdout[-3000:]
        mine = redis.Redis.from_url(empty)
        mine.hset("{news}:overrides", "127.0.0.1", json.dumps({"block": True}))
        second = run_demo(tmp_path, "--redis-url", empty)
        assert second.returncode == 0, second.stdout[-3000:]
        assert "resetting the demo's last run" in second.stdout and "  {news}:overrides\n" in second.stdout
        assert snapshot(client) == before
    finally:
        busy.stop()
