"""Rows and events carry their source: the registry's name and tags, else the registered domain."""

from __future__ import annotations

from distributed_crawler.core.registry import SourceCache, SourceTable
from distributed_crawler.core.source_records import parse_record
from distributed_crawler.events.feed import build_event
from distributed_crawler.storage.changes import NEW, RowChange
from distributed_crawler.storage.labels import attach_labels, attached_labels, label_row
from distributed_crawler.storage.pipeline import item_to_row


def _cache() -> SourceCache:
    cache = SourceCache()
    cache.table = SourceTable(
        [parse_record({"url": "https://www.lemonde.fr/", "name": "Le Monde", "tags": ["fr"]}, "r")]
    )
    return cache


def test_rows_are_labelled_from_the_registry_unless_the_item_names_its_source() -> None:
    crawler = object.__new__(type("Crawler", (), {}))
    assert attached_labels(crawler) is None
    attach_labels(crawler, _cache())
    labels = attached_labels(crawler)
    row = item_to_row({"url": "https://www.lemonde.fr/a"})
    label_row(row, labels)
    assert (row["source"], row["source_tags"]) == ("Le Monde", '["fr"]')
    row = item_to_row({"url": "https://news.bbc.co.uk/a"})
    label_row(row, labels)
    assert (row["source"], row["source_tags"]) == ("bbc.co.uk", None)
    row = item_to_row({"url": "https://www.lemonde.fr/b", "source": "Mine", "source_tags": ["x"]})
    label_row(row, labels)
    assert (row["source"], row["source_tags"]) == ("Mine", '["x"]')
    row = item_to_row({"url": "https://www.lemonde.fr/c"})
    label_row(row, None)  # no scheduler of ours on this crawler: left empty
    assert (row["source"], row["source_tags"]) == (None, None)


def test_events_carry_the_rows_source_and_tags() -> None:
    change = RowChange("https://www.lemonde.fr/a", NEW, 1, None, None)
    row = {"url": change.url, "source": "Le Monde", "source_tags": '["fr"]'}
    event = build_event("new", row, change, include_text=False, canonical=str)
    assert (event["source"], event["source_tags"]) == ("Le Monde", '["fr"]')
    event = build_event("new", {"url": change.url}, change, include_text=False, canonical=str)
    assert (event["source"], event["source_tags"]) == ("lemonde.fr", "")
