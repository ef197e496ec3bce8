"""Coverage end to end: 2 real workers crawl a registry of 2 loopback sources from their sitemaps.

"Good" lists 12 stories, all stored (its home page links them, so most are fetched before the
sitemap lists them). "Bad" lists 6 stories, 2 pages answering 500, 2 answering 404, 2 galleries
(not articles) and 1 page its robots.txt disallows. Checked: `dcrawl sources --json` gives Bad
13 listed, 6 stored, 7 missing with the right reason for each URL, Good 12 of 12; `--coverage`
prints the missing URLs; `coverage_low` fires for Bad only, once. Relies on LOOPBACK_SITE
(private addresses allowed, no politeness delay), STORE_PAGE_TYPES=article (galleries are not
stored), NEAR_DUPLICATES=False (the stories are alike); SOURCE_COVERAGE_GRACE lowered to 10 s (a
listed URL not fetched counts as missing for the alert after 10 s, not an hour) and
SOURCE_CHECK_SECONDS to 0.5 s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.conftest import Workers, dcrawl, wait_for
from tests.site.coverage_site import CoverageSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

SETTINGS = (
    "STORE_PAGE_TYPES=article",
    "NEAR_DUPLICATES=False",
    "SOURCE_COVERAGE_GRACE=10",
    "SOURCE_CHECK_SECONDS=0.5",
    "RETRY_TIMES=1",  # a 500 is retried once: the test does not wait for a longer backoff
    "LOG_LEVEL=INFO",
)


def test_coverage_shows_what_a_sitemap_listed_and_why_pages_are_missing(
    workers: Workers, tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    good = CoverageSite("127.0.0.40", stories=12)
    bad = CoverageSite("127.0.0.41", stories=6, broken=2, gone=2, galleries=2, private=1)
    with good, bad:
        registry = tmp_path / "outlets.csv"
        registry.write_text(f"url,name,country,tags\n{good.url}/,Good,FR,national\n{bad.url}/,Bad,DE,local\n")
        imported = dcrawl(redis_url, "sources", "news", "import", str(registry))  # seeds both sites
        assert imported.returncode == 0, imported.stderr
        workers.start("a", *SETTINGS)
        workers.start("b", *SETTINGS)
        workers.wait_ready("a", "b")

        def sources() -> dict[str, dict[str, Any]]:
            shown = dcrawl(redis_url, "sources", "news", "--json", "--missing", "20")
            assert shown.returncode == 0, shown.stderr
            return {s["source"]: s for s in json.loads(shown.stdout)["sources"]}

        def settled() -> dict[str, dict[str, Any]] | None:
            rows = sources()
            done = all(
                name in rows and rows[name]["listed"] == n and rows[name]["missing_by_reason"]["not_fetched"] == 0
                for name, n in (("Good", 12), ("Bad", 13))
            )
            return rows if done and rows["Good"]["stored"] == 12 else None

        rows = wait_for("every listed URL fetched", settled, 120, workers)

        def alerts() -> list[dict[str, Any]]:
            return [
                a for a in map(json.loads, redis_client.lrange("{news}:alerts", 0, -1)) if a["kind"] == "coverage_low"
            ]

        low = wait_for("the coverage_low alert", alerts, 60, workers)
        text = dcrawl(redis_url, "sources", "news", "--coverage")
        assert text.returncode == 0, text.stderr
        status = json.loads(dcrawl(redis_url, "status", "news", "--json").stdout)
    bad_row, good_row = rows["Bad"], rows["Good"]
    assert (good_row["listed"], good_row["stored"], good_row["missing"], good_row["coverage"]) == (12, 12, 0, 1.0)
    assert (bad_row["listed"], bad_row["stored"], bad_row["missing"]) == (13, 6, 7)
    assert bad_row["missing_by_reason"] == {
        "not_fetched": 0,
        "failed": 4,
        "refused": 1,
        "skipped": 0,
        "not_article": 2,
        "near_duplicate": 0,
    }
    reasons = {m["url"]: m["reason"] for m in bad_row["missing_urls"]}
    assert reasons == {
        **dict.fromkeys(bad.urls("broken") + bad.urls("gone"), "failed"),
        **dict.fromkeys(bad.urls("gallery"), "not_article"),
        **dict.fromkeys(bad.urls("private"), "refused"),
    }
    # raised as soon as the judged URLs showed it (how many were judged then depends on the pace)
    assert [(a["source"], a["state"]) for a in low] == [("Bad", "low")]
    assert low[0]["stored"] < 0.9 * low[0]["listed"] and low[0]["missing"]["failed"] >= 1
    assert low[0]["stored"] + sum(low[0]["missing"].values()) == low[0]["listed"]
    assert not good_row["coverage_low"]
    panel = {s["source"]: s["coverage_low"] for s in status["events"]["top_sources"]}  # the dashboard's
    assert panel == {"Bad": True, "Good": False}
    out = " ".join(text.stdout.split())
    assert f"failed {bad.urls('broken')[0]}" in out and f"not an article {bad.urls('gallery')[0]}" in out
    assert "Bad: 7 missing" in out
