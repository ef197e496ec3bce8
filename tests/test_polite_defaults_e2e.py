"""Polite by default: a new user's project (the add-on and a NewsSpider subclass, nothing else) with
three workers on one site never sends it two requests closer than DOMAIN_RATE_LIMIT's interval
(1 s) nor more than DOMAIN_MAX_IN_FLIGHT (2) at once, measured where it matters: at the site."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import redis

from tests.conftest import ROOT
from tests.site.server import NewsSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SPIDER = """
from distributed_crawler.spiders.news import NewsSpider


class Mine(NewsSpider):
    name = "mine"
"""

SETTINGS = """
BOT_NAME = "mine"
SPIDER_MODULES = ["mine.spiders"]
ADDONS = {"distributed_crawler.Addon": 0}
ALLOWED_PRIVATE_NETWORKS = ["127.0.0.0/8"]  # the test site is on loopback (docs/security.md)
"""


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    (project / "mine" / "spiders").mkdir(parents=True)
    (project / "scrapy.cfg").write_text("[settings]\ndefault = mine.settings\n")
    (project / "mine" / "__init__.py").write_text("")
    (project / "mine" / "spiders" / "__init__.py").write_text(textwrap.dedent(SPIDER))
    (project / "mine" / "settings.py").write_text(textwrap.dedent(SETTINGS))
    return project


@pytest.mark.timeout(120)
def test_three_workers_of_a_new_project_are_polite_to_one_site(redis_url: str, tmp_path: Path) -> None:
    project = _project(tmp_path)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SCRAPY_", "DOMAIN_"))},
        "REDIS_URL": redis_url,
        "STORAGE_URL": f"sqlite:///{tmp_path / 'items.db'}",
        "MAX_IDLE_TIME_BEFORE_CLOSE": "3",
        "PYTHONPATH": os.pathsep.join(p for p in (str(project), str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    # articles answer slowly (2.5 s) so that, at one request a second, a third would be in flight
    # if the cap did not hold
    with NewsSite(articles=6, per_page=3, delay=2.5) as site:
        procs = []
        for node in ("a", "b", "c"):
            log = open(tmp_path / f"{node}.log", "wb")
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "scrapy", "crawl", "mine"],
                    cwd=project,
                    env={**env, "NODE_ID": node},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            log.close()
        redis.Redis.from_url(redis_url).lpush("mine:start_urls", site.url + "/")
        deadline = time.monotonic() + 100
        for proc in procs:
            try:
                proc.wait(max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for p in procs:
                    p.kill()
                pytest.fail("workers did not finish: " + (tmp_path / "a.log").read_text()[-3000:])
        arrivals = sorted(t for t, _ in site.request_log())
        paths = site.requested_paths()
        max_active = site.max_active
    assert [p.returncode for p in procs] == [0, 0, 0], (tmp_path / "a.log").read_text()[-3000:]
    assert len(arrivals) >= 8, paths  # front page, lists, articles, robots.txt
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert min(gaps) >= 1.0 - 0.010, f"two requests {min(gaps):.3f} s apart: {paths}"
    assert 1 <= max_active <= 2, f"{max_active} requests in flight at once"
