"""End to end: `dcrawl seed --site URL --since --until` backfills one month of a site whose
sitemap index spans three (tests/site/archive_site.py), and nothing outside it.

Relies on the loopback-site settings of conftest (ALLOWED_PRIVATE_NETWORKS, no rate limits,
STORE_PAGE_TYPES with every type). The seed is the one `dcrawl seed` builds (cli/seed.py site_seed),
pushed directly: the CLI refuses loopback seeds unless the project allows them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from distributed_crawler.cli.seed import site_seed
from distributed_crawler.news.backfill import window_from_args
from tests.conftest import Workers, stored_rows
from tests.site.archive_site import FEED_ONLY, LATE_AUGUST, ArchiveSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]


def test_a_backfill_takes_the_window_and_nothing_outside_it(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    with ArchiveSite() as site:
        redis_client.lpush("news:start_urls", site_seed(site.url + "/", window_from_args("2026-09-01", "2026-09-30")))
        workers.start("a")
        codes = workers.wait_all(120)  # MAX_IDLE_TIME_BEFORE_CLOSE=2 (conftest): closes when done
        assert codes == {"a": 0}, workers.log("a")[-3000:]
        fetched = site.fetched()
    september = [*site.stories("09"), FEED_ONLY]
    stories = {p for p in fetched if p.startswith("/2026/")}
    assert stories == set(september), sorted(stories)  # in the window: sitemap and feed entries, once each
    assert all(fetched.count(p) == 1 for p in september)
    # outside it: other months' sitemaps never read, an August story in September's sitemap, the
    # feed's October story, an undated page, the home page's and the stories' own links
    assert "/sitemap-2026-08.xml" not in fetched and "/sitemap-2026-10.xml" not in fetched
    assert LATE_AUGUST not in fetched and "/about" not in fetched
    assert {"/robots.txt", "/sitemap_index.xml", "/sitemap-2026-09.xml", "/sitemap-pages.xml", "/feed.xml"} <= set(
        fetched
    )
    assert redis_client.zcard("{news}:recrawl") == 0  # a backfill's stories are not revisited (ARTICLE_REVISITS)
    rows = stored_rows(tmp_path / "items.db")
    assert {u.removeprefix(site.url) for u in rows} == set(september)  # the home page is not stored either
