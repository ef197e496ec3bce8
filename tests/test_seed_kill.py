"""No seed lost (docs/delivery.md): a node killed -9 holding seeds it took but had not enqueued;
another node puts them back once their lease is over and crawls every one."""

from __future__ import annotations

import time

import pytest
import redis

from tests.conftest import Workers
from tests.site.server import NewsSite

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SEEDS = 20
LEASE = ["SEED_LEASE_SECONDS=3"]


@pytest.mark.timeout(150)
def test_seeds_of_a_node_killed_after_taking_them_are_crawled_by_another(
    workers: Workers, redis_client: redis.Redis
) -> None:
    with NewsSite(articles=SEEDS, per_page=10, delay=0.0) as site:
        # unlinked from the site (the query), so only the seeds themselves lead to these fetches
        paths = [f"/article/{i}?seed={i}" for i in range(1, SEEDS + 1)]
        redis_client.rpush("news:start_urls", *(site.url + p for p in paths))
        workers.start("n1", *LEASE, "SEED_TAKE_PAUSE=120", "REDIS_START_URLS_BATCH_SIZE=100", "DEPTH_LIMIT=1")
        deadline = time.monotonic() + 60
        while redis_client.zcard("{news:start_urls}:taken") < SEEDS:
            if time.monotonic() > deadline or workers.procs["n1"].poll() is not None:
                pytest.fail(f"n1 did not take the seeds; log:\n{workers.log('n1')[-3000:]}")
            time.sleep(0.05)
        assert redis_client.llen("news:start_urls") == 0
        workers.kill9("n1")
        assert not [p for p in site.requested_paths() if "seed=" in p]
        workers.start("n2", *LEASE, "DEPTH_LIMIT=1")
        codes = workers.wait_all(120)
        assert codes["n2"] == 0, workers.log("n2")[-3000:]
        requested = set(site.requested_paths())
        assert [p for p in paths if p not in requested] == [], workers.log("n2")[-3000:]
        assert redis_client.exists("{news:start_urls}:taken", "news:start_urls") == 0
        assert f"Put back {SEEDS} seeds" in workers.log("n2")
        assert "Traceback" not in workers.log("n2")
