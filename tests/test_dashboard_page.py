"""The dashboard of a real crawl, in headless Chromium: the token page is a login form, a paused
crawl is a banner with `paused` nodes and no ETA, the chart has a legend, the control inputs are
labelled, the audit is in words, and "stored" is one number. DASHBOARD_SCREENSHOT=docs/dashboard.png
also saves the page (how docs/dashboard.png is made)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.monitoring.dashboard import DashboardServer
from distributed_crawler.rendering.config import CHROMIUM_ARGS
from tests.conftest import Workers, dcrawl, stored_rows, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"


@pytest.mark.timeout(180)
def test_the_dashboard_of_a_paused_crawl_in_chromium(
    site, workers: Workers, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run `make test`, which installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    workers.env["MAX_IDLE_TIME_BEFORE_CLOSE"] = "0"  # paused nodes stay up (stopped by the fixture)
    for n in ("node-1", "node-2"):
        workers.start(n, "CONCURRENT_REQUESTS=4", "HEARTBEAT_INTERVAL=1")
    workers.wait_ready("node-1", "node-2")
    redis_client.lpush("news:start_urls", site.url + "/")
    db = tmp_path / "items.db"
    wait_for("40 pages stored", lambda: len(stored_rows(db)) >= 40, 90, workers)
    assert dcrawl(redis_url, "host", "news", "127.0.0.1", "set", "--delay", "0.2", "--by", "ops").returncode == 0
    assert dcrawl(redis_url, "pause", "news", "--by", "ops").returncode == 0
    server = DashboardServer(("127.0.0.1", 0), Settings({"REDIS_URL": redis_url}), "news", "s3cret")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(server.url)
                page.wait_for_selector('form[data-login="1"]', timeout=15_000)  # not a JSON error
                page.get_by_label("Token").fill("s3cret")
                page.click('button[type="submit"]')
                page.wait_for_selector('[data-pause-banner="1"]', timeout=20_000)
                assert "PAUSED since" in page.inner_text('[data-pause-banner="1"]')
                # every live node says paused once its heartbeat is read; the ETA card says paused
                page.wait_for_function(
                    "() => [...document.querySelectorAll('tr.node td.state')].length === 2 && "
                    "[...document.querySelectorAll('tr.node td.state')].every(td => td.textContent === 'paused')",
                    timeout=20_000,
                )
                assert page.inner_text('[data-card="eta"] .v') == "paused"
                assert "pages fetched per minute" in page.inner_text('[data-legend="1"]')
                stored = int(page.inner_text('[data-card="stored"] .v').replace(",", ""))
                by_type = sum(
                    int(page.inner_text(f'[data-card="page-type-{t}"] .v').replace(",", ""))
                    for t in ("article", "list", "other")
                    if page.locator(f'[data-card="page-type-{t}"]').count()
                )
                assert stored == by_type > 0  # one "stored"
                for label in ("host or domain", "delay (s)", "in flight", "max pages", "block for"):
                    assert page.get_by_label(label).count() == 1, label
                page.wait_for_selector("[data-audit] tbody tr", timeout=10_000)
                audit = page.inner_text("[data-audit]")
                assert "none -> delay 0.2" in audit and "running -> paused by ops" in audit and '{"' not in audit
                shot = os.environ.get("DASHBOARD_SCREENSHOT")
                page.screenshot(path=shot or str(tmp_path / "dashboard.png"), full_page=True)
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()
        redis_client.delete("{news}:paused")
