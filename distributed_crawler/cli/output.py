"""How `dcrawl`'s read commands print: indented JSON with --json, else a rich table."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table


def print_json(data: Any) -> None:
    """The --json output: indented, non-ASCII text kept as it is."""
    print(json.dumps(data, indent=2, ensure_ascii=False))


class ListingTable(Table):
    """A table that fits the terminal without cutting a number: each right-aligned column (figures,
    durations) is at least as wide as its widest cell and its header's longest word (the header
    wraps between words); the text columns give way, wrapped (80 columns: `205` is never `20`)."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for column in self.columns:
            if column.justify == "right":
                words = str(column.header).split() or [""]
                widest = max([cell_len(str(cell)) for cell in column.cells] + [cell_len(w) for w in words])
                column.min_width = max(column.min_width or 0, widest)
        yield from super().__rich_console__(console, options)


def listing_table(title: str, columns: Iterable[str], right: Collection[str] = ()) -> Table:
    """A table with these columns: the *right* ones (numbers, durations) align right and are never
    cut (ListingTable), the others left; a value too long for its column wraps (nothing is cut off)."""
    table = ListingTable(title=title)
    for col in columns:
        table.add_column(col, justify="right" if col in right else "left", overflow="fold")
    return table
