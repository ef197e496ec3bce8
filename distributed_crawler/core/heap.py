"""Keep the cyclic garbage collector off the heap a node builds before it crawls.

A full collection walks every tracked object. A node's startup heap (Scrapy, Twisted, lxml,
trafilatura, Playwright's client, settings, compiled patterns) is hundreds of thousands of
objects that live as long as the process, so every full collection of a long crawl paid to walk
them again (profiled with `py-spy --native`: `gc_collect_main` was 16% of a worker's samples).
`gc.freeze()` moves them to the permanent generation: collections then walk only what the crawl
allocates. The cost: a reference cycle among frozen objects is never collected (they were meant
to live anyway; objects freed by reference counting still are).
"""

from __future__ import annotations

import gc

_frozen = False


def freeze_startup_heap() -> int:
    """Collect what is garbage now, then freeze the rest, once per process (a worker runs one crawl;
    a process that opens many crawlers, such as a test run, must not pin each one's objects).
    Returns how many objects are frozen."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()
    return gc.get_freeze_count()
