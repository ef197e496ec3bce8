"""A double Ctrl-C gives the node's leases back at once (core/shutdown.py) and shows it `closed`,
never `dead`: no `dead_node` alert from the nodes still alive."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.conftest import Workers, dcrawl, wait_for
from tests.site.server import NewsSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

INTERVAL = 1  # HEARTBEAT_INTERVAL: a node missing 3 beats (3 s) would show dead


def nodes(redis_url: str) -> dict[str, dict[str, Any]]:
    proc = dcrawl(redis_url, "status", "news", "--json")
    assert proc.returncode == 0, proc.stderr
    return {n["id"]: n for n in json.loads(proc.stdout)["nodes"]}


@pytest.mark.timeout(120)
def test_a_double_ctrl_c_shows_the_node_closed_and_raises_no_alert(
    workers: Workers, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    # a slow site: the stopped node is mid-download on several pages when the second Ctrl-C comes
    with NewsSite(articles=60, per_page=20, delay=4.0) as site:
        workers.env["MAX_IDLE_TIME_BEFORE_CLOSE"] = "0"  # the watcher stays until the test stops it
        beat = f"HEARTBEAT_INTERVAL={INTERVAL}"
        workers.start("watcher", beat, "CONCURRENT_REQUESTS=1")
        stopped = workers.start("stopped", beat, "CONCURRENT_REQUESTS=8")
        workers.wait_ready("watcher", "stopped")
        redis_client.lpush("news:start_urls", site.url + "/")
        wait_for(
            "the node to hold leases", lambda: nodes(redis_url).get("stopped", {}).get("leases", 0) >= 4, 60, workers
        )

        stopped.send_signal(signal.SIGINT)
        wait_for(
            "the node to start draining", lambda: "shutting down gracefully" in workers.log("stopped"), 10, workers
        )
        stopped.send_signal(signal.SIGINT)
        stopped.wait(30)

        # its hash expires after 3 intervals + 1 s; then the watcher beats twice more (it would
        # alert a dead node on each beat)
        wait_for("the node hash to expire", lambda: not redis_client.exists("{news}:node:stopped"), 15, workers)
        seen = nodes(redis_url)["watcher"]["last_seen"]
        wait_for(
            "two more beats of the watcher",
            lambda: nodes(redis_url)["watcher"]["last_seen"] >= seen + 2 * INTERVAL,
            15,
            workers,
        )
        node = nodes(redis_url)["stopped"]
        alerts = [json.loads(a) for a in redis_client.lrange("{news}:alerts", 0, -1)]
    assert node["state"] == "closed" and not node["alive"], node
    assert node["leases"] == 0
    assert node["report"]["reason"] == "shutdown_forced"
    assert not [a for a in alerts if a["kind"] == "dead_node"], alerts
    assert "forcing unclean shutdown" in workers.log("stopped")
