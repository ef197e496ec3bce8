"""The dashboard's control in headless Chromium: with DASHBOARD_TOKEN the buttons pause, resume,
set and purge (with a confirmation) and the audit list shows them; a POST without the token, with
the token only in the query, or with another Host is refused; without a token the page is
read-only and says how to enable control."""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.monitoring.dashboard import DashboardServer
from distributed_crawler.rendering.config import CHROMIUM_ARGS
from tests.test_frontier_lua import push

pytestmark = [pytest.mark.e2e]

CHROMIUM = "/usr/bin/chromium"


def _serve(redis_url: str, token: str) -> tuple[DashboardServer, threading.Thread]:
    server = DashboardServer(("127.0.0.1", 0), Settings({"REDIS_URL": redis_url}), "news", token)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


@pytest.fixture
def dashboard(redis_url: str) -> Iterator[DashboardServer]:
    server, _ = _serve(redis_url, "s3cret")
    yield server
    server.shutdown()
    server.server_close()


def _post(url: str, body: dict, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_posts_without_the_token_in_the_header_or_with_another_host_are_refused(
    dashboard: DashboardServer, redis_client: redis.Redis, redis_url: str
) -> None:
    url = dashboard.url + "api/control/news"
    pause = {"action": "pause"}
    assert _post(url, pause, {}) == 401
    assert _post(url + "?token=s3cret", pause, {}) == 401  # the query never carries control
    assert _post(url, pause, {"Authorization": "Bearer wrong"}) == 401
    assert _post(url, pause, {"Authorization": "Bearer s3cret", "Host": "evil.example"}) == 421
    assert redis_client.get("{news}:paused") is None
    assert _post(url, {"action": "set", "host": "a b"}, {"Authorization": "Bearer s3cret"}) == 400
    assert _post(url, pause, {"Authorization": "Bearer s3cret"}) == 200
    assert json.loads(redis_client.get("{news}:paused"))["source"] == "dashboard"
    read_only, _ = _serve(redis_url, "")
    try:
        assert _post(read_only.url + "api/control/news", pause, {}) == 403
    finally:
        read_only.shutdown()
        read_only.server_close()


@pytest.mark.slow  # over 5 s
@pytest.mark.timeout(90)
def test_buttons_work_in_chromium_with_the_token(
    dashboard: DashboardServer, redis_client: redis.Redis, redis_url: str
) -> None:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run `make test`, which installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    keys = SpiderKeys.from_settings(Settings(), "news")
    frontier = frontier_for_mode(redis_client, keys, "host")

    def pending(host: str) -> int:  # its queue zset and its list
        return int(redis_client.zcard(keys.host_queue(host))) + int(redis_client.llen(keys.host_list(host)))

    push(frontier, [(f"http://old.example.org/{i}", "old.example.org") for i in range(3)], interval=0.0)
    read_only, _ = _serve(redis_url, "")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
            try:
                page = browser.new_page()

                def answered(action: str) -> None:  # this action's answer, not the one before it, is shown
                    page.wait_for_function(
                        "(a) => document.querySelector('[data-control-result]').textContent.includes(a)",
                        arg=f'"action":"{action}"',
                    )

                page.goto(read_only.url)
                page.wait_for_selector('[data-read-only="1"]', timeout=15_000)
                assert "DASHBOARD_TOKEN" in page.inner_text('[data-read-only="1"]')
                assert page.locator('button[data-action="pause"]').count() == 0

                page.goto(dashboard.url + "?token=s3cret")
                page.wait_for_selector('button[data-action="pause"]', timeout=15_000)
                page.click('button[data-action="pause"]')
                answered("pause")
                assert redis_client.get("{news}:paused") is not None
                page.wait_for_selector('[data-paused="1"]', timeout=10_000)  # the next refresh shows it
                page.click('button[data-action="resume"]')
                answered("resume")
                assert redis_client.get("{news}:paused") is None

                # every input is found by its label (what a screen reader says, what a user reads)
                page.get_by_label("host or domain").fill("old.example.org")
                page.get_by_label("delay (s)").fill("3")
                page.get_by_label("in flight").fill("2")
                # a refresh (every 2 s) keeps what is typed, where the caret is, and the last answer
                page.get_by_label("delay (s)").focus()
                updated = page.inner_text("#updated")
                page.wait_for_function("(u) => document.getElementById('updated').textContent !== u", arg=updated)
                assert page.get_by_label("host or domain").input_value() == "old.example.org"
                assert page.evaluate("() => document.activeElement.name") == "delay"
                assert '"action":"resume"' in page.inner_text("[data-control-result]")
                page.click('button[data-action="set"]')
                answered("set")
                override = json.loads(redis_client.hget("{news}:overrides", "old.example.org"))
                assert override["delay"] == 3 and override["concurrency"] == 2

                page.once("dialog", lambda dialog: dialog.accept())  # unset asks first too
                page.click('button[data-action="unset"]')
                answered("unset")
                assert redis_client.hget("{news}:overrides", "old.example.org") is None

                page.once("dialog", lambda dialog: dialog.dismiss())  # purge asks first: "no" does nothing
                page.click('button[data-action="purge"]')
                page.wait_for_timeout(300)
                assert pending("old.example.org") == 3
                page.once("dialog", lambda dialog: dialog.accept())
                page.click('button[data-action="purge"]')
                answered("purge")
                assert pending("old.example.org") == 0

                page.wait_for_function(
                    "() => document.querySelectorAll('[data-audit] tbody tr').length >= 5", timeout=10_000
                )
                audit = page.inner_text("[data-audit]")
                assert "purge" in audit and "unset" in audit and "dashboard" in audit
            finally:
                browser.close()
    finally:
        read_only.shutdown()
        read_only.server_close()
