"""A worker is quiet by default: components left off say so once at INFO, the root/no-sandbox
WARNING only when a browser starts, and Scrapy's memory line at DEBUG unless near the limit."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
import redis

from distributed_crawler.internals import MEMUSAGE_LOGGER, MEMUSAGE_PEAK_MESSAGE
from distributed_crawler.monitoring.memory_log import MemoryLineLevel, install, near_limit_mib
from tests.conftest import Workers


def test_the_memory_line_is_debug_far_from_the_limit_and_info_near_it(caplog: pytest.LogCaptureFixture) -> None:
    assert near_limit_mib(768, 1024) == 768 and near_limit_mib(0, 1000) == 900 and near_limit_mib(0, 0) == math.inf
    line = install(768)
    log = logging.getLogger(MEMUSAGE_LOGGER)
    try:
        with caplog.at_level(logging.DEBUG, logger=MEMUSAGE_LOGGER):
            log.info(MEMUSAGE_PEAK_MESSAGE, {"virtualsize": 150})
            log.info(MEMUSAGE_PEAK_MESSAGE, {"virtualsize": 800})
            log.info("Memory usage exceeded %(memusage)dMiB. Shutting down Scrapy...", {"memusage": 1024})
        assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
            ("DEBUG", "Peak memory usage is 150MiB"),
            ("INFO", "Peak memory usage is 800MiB"),
            ("INFO", "Memory usage exceeded 1024MiB. Shutting down Scrapy..."),  # other lines untouched
        ]
        assert install(500) is not line and [type(f) for f in log.filters].count(MemoryLineLevel) == 1
    finally:
        for f in [f for f in log.filters if isinstance(f, MemoryLineLevel)]:
            log.removeFilter(f)


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_a_worker_that_renders_nothing_logs_no_warning(site, workers: Workers, redis_client: redis.Redis) -> None:
    """MEMUSAGE_CHECK_INTERVAL_SECONDS lowered so the memory line would show within the crawl."""
    redis_client.lpush("news:start_urls", site.url + "/")
    workers.start("quiet", "MEMUSAGE_CHECK_INTERVAL_SECONDS=0.5")
    assert workers.wait_all(100) == {"quiet": 0}
    log = workers.log("quiet")
    assert "Scheduler on" in log and "item_scraped_count" in log
    assert " WARNING: " not in log, [line for line in log.splitlines() if " WARNING: " in line]
    assert log.count("Prometheus metrics off (PROMETHEUS_PORT is not set)") == 1
    assert log.count("WARC archive off (WARC_DIR is empty)") == 1
    assert "Running as root" not in log and "Peak memory usage" not in log
    assert Path(workers.tmp_path / "items.db").exists()
