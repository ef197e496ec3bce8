"""How `dcrawl`'s read commands print: indented JSON with --json, else a rich table."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from typing import Any

from rich.table import Table


def print_json(data: Any) -> None:
    """The --json output: indented, non-ASCII text kept as it is."""
    print(json.dumps(data, indent=2, ensure_ascii=False))


def listing_table(title: str, columns: Iterable[str], right: Collection[str] = ()) -> Table:
    """A table with these columns: the *right* ones (numbers, durations) align right, the others
    left; a value too long for its column wraps (nothing is cut off)."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right" if col in right else "left", overflow="fold")
    return table
