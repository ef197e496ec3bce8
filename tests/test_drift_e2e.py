"""Extraction drift end to end: 2 real workers follow 2 loopback sources that keep publishing; one
changes its template mid-crawl (its new stories carry no date). Checked: one `extraction_drift`
alert, for that source and the `date` field only; none for the other source, nor for a field that
did not change. Relies on LOOPBACK_SITE (private addresses allowed), DOMAIN_RATE_LIMIT=0 and
NEAR_DUPLICATES=False (the test stories are alike), SOURCE_DRIFT_MIN_ARTICLES lifted to 5 and
SOURCE_CHECK_SECONDS to 0.5 s so a few seconds of stories make the case.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.conftest import Workers, dcrawl, wait_for
from tests.site.fresh_site import FreshSite
from tests.test_events_e2e import sqlite_rows

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

SETTINGS = (
    'RECRAWL_RULES={"/$": 1}',  # front pages revisited every second: new stories found at once
    "RECRAWL_POLL_SECONDS=0.2",
    "STORE_PAGE_TYPES=article",
    "DOMAIN_RATE_LIMIT=0",
    "DOMAIN_MAX_IN_FLIGHT=0",
    "NEAR_DUPLICATES=False",
    "SOURCE_DRIFT_MIN_ARTICLES=5",
    "SOURCE_CHECK_SECONDS=0.5",
    "LOG_LEVEL=INFO",
)


@pytest.fixture
def cluster(tmp_path: Path, redis_url: str) -> Iterator[Workers]:
    workers = Workers(
        tmp_path,
        {
            "REDIS_URL": redis_url,
            "STORAGE_URL": f"sqlite:///{tmp_path / 'items.db'}",
            "MAX_IDLE_TIME_BEFORE_CLOSE": "0",
        },
    )
    yield workers
    workers.stop_all()


def test_a_template_change_alerts_drift_for_that_source_only(
    cluster: Workers, tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    db = tmp_path / "items.db"

    def alerts() -> list[dict[str, Any]]:
        return [json.loads(a) for a in redis_client.lrange("{news}:alerts", 0, -1)]

    def drift() -> list[dict[str, Any]]:
        return [a for a in alerts() if a["kind"] == "extraction_drift"]

    with FreshSite(sources=2, stories=1) as site:
        cluster.start("a", *SETTINGS)
        cluster.start("b", *SETTINGS)
        cluster.wait_ready("a", "b")
        for url in site.urls:
            redis_client.lpush("news:start_urls", url + "/")
        site.run_publisher(0.3)

        def per_source() -> list[int]:
            rows = sqlite_rows(db)
            return [sum(u.startswith(url) for u in rows) for url in site.urls]

        wait_for("10 dated stories of each source", lambda: min(per_source()) >= 10, 90, cluster)
        assert drift() == []  # dated stories: no drift
        site.restyle(0)
        wait_for("the extraction_drift alert", drift, 90, cluster)
        stored_after = per_source()[1]
        wait_for("more stories of the other source", lambda: per_source()[1] >= stored_after + 8, 60, cluster)
        time.sleep(2)  # several more checks (every 0.5 s): still the one alert
        changed = site.urls[0].split("//")[1].split(":")[0]
        assert [(a["source"], a["field"], a["state"]) for a in drift()] == [(changed, "date", "drift")]
        listed = json.loads(dcrawl(redis_url, "sources", "news", "--json").stdout)
        states = {s["source"]: s["drift"] for s in listed["sources"]}
        assert states == {changed: ["date"], site.urls[1].split("//")[1].split(":")[0]: []}
