"""The change feed's Prometheus metrics of one node (monitoring/metrics.py yields them).

| metric | type | labels |
|---|---|---|
| `dcrawl_events_total` | counter | spider, node, event (new, changed, removed) |
| `dcrawl_publish_lag_seconds` | histogram | spider, node: publish-to-first-seen lag of new articles |

No label per source: thousands of sources would be thousands of series (`dcrawl sources` has them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from distributed_crawler.events.feed import CHANGED_EVENT, NEW_EVENT, REMOVED_EVENT, ChangeFeed
from distributed_crawler.events.sources import LAG_EDGES


def feed_metrics(feed: ChangeFeed, spider: str, node: str) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

    events = CounterMetricFamily(
        "dcrawl_events", "Change events this node wrote to the stream", labels=["spider", "node", "event"]
    )
    for kind in (NEW_EVENT, CHANGED_EVENT, REMOVED_EVENT):
        events.add_metric([spider, node, kind], feed.published_by_kind.get(kind, 0))
    yield events
    buckets: list[tuple[str, float]] = []
    seen = 0
    for edge, count in zip((*LAG_EDGES, float("inf")), feed.lag_counts, strict=True):
        seen += count
        buckets.append(("+Inf" if edge == float("inf") else str(edge), seen))
    lag = HistogramMetricFamily(
        "dcrawl_publish_lag_seconds",
        "Publish-to-first-seen lag of new articles stored by this node",
        labels=["spider", "node"],
    )
    lag.add_metric([spider, node], buckets, sum_value=feed.lag_sum)
    yield lag
