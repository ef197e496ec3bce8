"""Which source a stored row belongs to: its `source` and `source_tags` columns (docs/sources.md).

The source registry is the node's (core/registry.py, refreshed by the control watch); the storage
pipeline only asks it, through the labeller the scheduler attaches to the crawler here, so storage
never imports the core. An item that names its own `source` keeps it.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol


class SourceLabels(Protocol):
    def label(self, url: str) -> tuple[str, str | None]:
        """(source name, source tags as a JSON array or None) of a URL."""


_LABELS: weakref.WeakKeyDictionary[Any, SourceLabels] = weakref.WeakKeyDictionary()


def attach_labels(crawler: Any, labels: SourceLabels) -> None:
    _LABELS[crawler] = labels


def attached_labels(crawler: Any) -> SourceLabels | None:
    return None if crawler is None else _LABELS.get(crawler)


def label_row(row: dict[str, Any], labels: SourceLabels | None) -> None:
    """Fill the row's `source` and `source_tags` from the registry unless the item gave a source."""
    if labels is None or row.get("source"):
        return
    row["source"], row["source_tags"] = labels.label(row["url"])
