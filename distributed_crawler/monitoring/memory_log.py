"""Scrapy's memory line ("Peak memory usage is N MiB", at INFO every MEMUSAGE_CHECK_INTERVAL_SECONDS)
at DEBUG while the node is far from its limit: a worker's log says what changed, and the memory is
in `dcrawl status` (RSS) and the heartbeat. From MEMUSAGE_WARNING_MB on (else 90% of
MEMUSAGE_LIMIT_MB) the line stays INFO: then it is news."""

from __future__ import annotations

import logging
import math
from typing import Any

from distributed_crawler.internals import MEMUSAGE_LOGGER, MEMUSAGE_PEAK_MESSAGE


class MemoryLineLevel(logging.Filter):
    """Lowers the memory line below `near_mib` to DEBUG (the handlers' level then drops it)."""

    def __init__(self, near_mib: float) -> None:
        super().__init__()
        self.near_mib = near_mib

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == MEMUSAGE_PEAK_MESSAGE and record.levelno == logging.INFO:
            mib = record.args.get("virtualsize") if isinstance(record.args, dict) else None
            if not isinstance(mib, int | float) or mib < self.near_mib:
                record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def near_limit_mib(warning_mb: int, limit_mb: int) -> float:
    """Where the memory line is news again: the warning level, else 90% of the limit, else never."""
    if warning_mb > 0:
        return float(warning_mb)
    return 0.9 * limit_mb if limit_mb > 0 else math.inf


def install(near_mib: float) -> MemoryLineLevel:
    """One filter on Scrapy's memusage logger per process (a later crawler's thresholds replace it)."""
    log = logging.getLogger(MEMUSAGE_LOGGER)
    for old in [f for f in log.filters if isinstance(f, MemoryLineLevel)]:
        log.removeFilter(old)
    line = MemoryLineLevel(near_mib)
    log.addFilter(line)
    return line


class QuietMemoryLog:
    """Extension: installs the filter with this node's MEMUSAGE_WARNING_MB / MEMUSAGE_LIMIT_MB."""

    def __init__(self, line: MemoryLineLevel) -> None:
        self.line = line

    @classmethod
    def from_crawler(cls, crawler: Any) -> QuietMemoryLog:
        settings = crawler.settings
        near = near_limit_mib(settings.getint("MEMUSAGE_WARNING_MB"), settings.getint("MEMUSAGE_LIMIT_MB"))
        return cls(install(near))
