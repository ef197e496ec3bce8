"""A source registry end to end: 2 real workers crawl 3 loopback sources, 2 of them registered.

Source 0 ("Alpha", tags national + daily, FR) denies stories 1 and 3; source 1 ("Beta", tag local,
DE) allows story 2 only; source 2 is not registered. Checked: the denied and not-allowed stories are
never fetched and are counted per source with their reason (`dcrawl sources news show`); rows and
events carry the source's name and tags (an unregistered source: its address, no tags);
`dcrawl sources --tag / --country` keep the matching sources. Relies on LOOPBACK_SITE (private
addresses allowed), DOMAIN_RATE_LIMIT=0 and STORE_PAGE_TYPES=article (home pages are not stored).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import redis

from distributed_crawler.events.feed import parse_entry
from tests.conftest import Workers, dcrawl, wait_for
from tests.site.fresh_site import FreshSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

SETTINGS = (
    "STORE_PAGE_TYPES=article",
    "DOMAIN_RATE_LIMIT=0",  # lifted: 3 loopback sources, no politeness needed to check scope
    "DOMAIN_MAX_IN_FLIGHT=0",
    "NEAR_DUPLICATES=False",  # the stories of the test site are alike
    "LOG_LEVEL=INFO",
)


def rows(db: Path) -> dict[str, tuple[str, str | None]]:
    if not db.exists():
        return {}
    try:
        with sqlite3.connect(db) as conn:
            return {u: (s, t) for u, s, t in conn.execute("SELECT url, source, source_tags FROM items")}
    except sqlite3.OperationalError:
        return {}


def test_registry_scope_and_source_columns(
    workers: Workers, tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    db = tmp_path / "items.db"
    with FreshSite(sources=3, stories=4) as site:
        alpha, beta, gamma = site.urls
        registry = tmp_path / "outlets.jsonl"
        records = [
            {
                "url": alpha + "/",
                "name": "Alpha",
                "country": "FR",
                "tags": ["national", "daily"],
                "deny": [r"/story/[13]$"],
            },
            {"url": beta + "/", "name": "Beta", "country": "DE", "tags": ["local"], "allow": [r"/story/2$"]},
        ]
        registry.write_text("".join(json.dumps(r) + "\n" for r in records))
        imported = dcrawl(redis_url, "sources", "news", "import", str(registry), "--no-seed")
        assert imported.returncode == 0, imported.stderr
        workers.start("a", *SETTINGS)
        workers.start("b", *SETTINGS)
        workers.wait_ready("a", "b")
        for url in site.urls:
            redis_client.lpush("news:start_urls", url + "/")
        expected = {f"{alpha}/story/2", f"{alpha}/story/4", f"{beta}/story/2"} | {
            f"{gamma}/story/{n}" for n in range(1, 5)
        }
        wait_for("the stories in scope", lambda: set(rows(db)) >= expected, 90, workers)
        workers.wait_all(60)  # idle close: nothing else was in the queue
        stored = rows(db)
        assert set(stored) == expected  # denied and not-allowed stories never stored (nor fetched: below)
        gamma_host = gamma.split("//")[1].split(":")[0]
        assert stored[f"{alpha}/story/2"] == ("Alpha", '["national", "daily"]')
        assert stored[f"{beta}/story/2"] == ("Beta", '["local"]')
        assert stored[f"{gamma}/story/1"] == (gamma_host, None)
        events = {e["url"]: e for e in (parse_entry(i, f) for i, f in redis_client.xrange("{news}:events"))}
        assert set(events) == expected
        assert (events[f"{alpha}/story/4"]["source"], events[f"{alpha}/story/4"]["source_tags"]) == (
            "Alpha",
            '["national", "daily"]',
        )
        assert (events[f"{gamma}/story/3"]["source"], events[f"{gamma}/story/3"]["source_tags"]) == (gamma_host, "")
        # refused at enqueue: never queued, so never fetched; dead-lettered once with the reason
        failed = {(f["url"], f["reason"]) for f in map(json.loads, redis_client.lrange("{news}:failed", 0, -1))}
        assert failed == {
            (f"{alpha}/story/1", "source_deny"),
            (f"{alpha}/story/3", "source_deny"),
            *((f"{beta}/story/{n}", "source_allow") for n in (1, 3, 4)),
        }
        shown = json.loads(dcrawl(redis_url, "sources", "news", "show", "Alpha", "--json").stdout)
        assert shown["refused"] == {"source_deny": 2}
        shown = json.loads(dcrawl(redis_url, "sources", "news", "show", "beta", "--json").stdout)
        assert shown["refused"] == {"source_allow": 3}  # stories 1, 3, 4
        tagged = json.loads(dcrawl(redis_url, "sources", "news", "--tag", "national", "--json").stdout)
        assert [(s["source"], s["country"], s["tags"], s["refused"]) for s in tagged["sources"]] == [
            ("Alpha", "FR", ["national", "daily"], {"source_deny": 2})
        ]
        german = json.loads(dcrawl(redis_url, "sources", "news", "--country", "de", "--json").stdout)
        assert [s["source"] for s in german["sources"]] == ["Beta"]
        every = json.loads(dcrawl(redis_url, "sources", "news", "--json").stdout)
        assert {s["source"] for s in every["sources"]} == {"Alpha", "Beta", gamma_host}
