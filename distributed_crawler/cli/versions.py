"""`dcrawl versions SPIDER URL [--json] [--from STORAGE_URL]`: every stored version of a page (docs/storage.md).

Reads the database only (the spider's STORAGE_URL, or `--from`): the versions a revisit replaced
(table item_versions), oldest first, then the current row of `items`. The URL is looked up as given,
then in its canonical form (how the rows are keyed: fragment and tracking parameters removed).
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from distributed_crawler.cli.output import listing_table, print_json
from distributed_crawler.cli.project import project_settings
from distributed_crawler.dedup.fingerprint import CanonicalFingerprinter, FingerprintConfig
from distributed_crawler.redact import mask_url
from distributed_crawler.storage.backends import StorageError, open_storage
from distributed_crawler.storage.pipeline import StorageConfig

PREVIEW_CHARS = 80


def read_versions(source: str, url: str, canonical: str) -> tuple[str, list[dict[str, Any]]]:
    """(the URL found, its versions) from the database at `source`."""
    try:
        backend = open_storage(source)
    except StorageError as exc:
        raise ValueError(f"{exc} (or pass --from STORAGE_URL)") from None
    try:
        for candidate in dict.fromkeys((url, canonical)):
            found = backend.versions(candidate)
            if found:
                return candidate, found
        return url, []
    except StorageError as exc:
        raise ValueError(str(exc)) from None
    finally:
        backend.close()


def preview(text: Any) -> str:
    line = " ".join(str(text or "").split())
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"


def cmd_versions(args: argparse.Namespace) -> int:
    settings = project_settings(args)
    source = args.source or StorageConfig.from_settings(settings).url
    canonical = CanonicalFingerprinter(FingerprintConfig.from_settings(settings)).canonical_url(args.url)
    url, found = read_versions(source, args.url, canonical)
    if args.json:
        print_json({"spider": args.spider, "url": url, "storage": mask_url(source), "versions": found})
        return 0 if found else 1
    if not found:
        print(f"{args.url} is not stored in {mask_url(source)} (check the URL, or pass --from STORAGE_URL)")
        return 1
    title = f"{url}: {len(found)} version{'s' if len(found) != 1 else ''} ({mask_url(source)})"
    table = listing_table(
        title, ("version", "fetched", "replaced", "chars", "title", "text"), right=("version", "chars")
    )
    for v in found:
        table.add_row(
            str(v["version"]),
            str(v["fetched_at"] or ""),
            str(v["replaced_at"] or "current"),
            f"{len(v['text'] or ''):,}",
            preview(v["title"]),
            preview(v["text"]),
        )
    Console(width=200).print(table)
    return 0


def add_parser(command: Any) -> None:
    """Register `versions` with cli/main.py's `command(...)` helper."""
    p = command("versions", cmd_versions, "every stored version of a page, oldest first", json_flag=True)
    p.add_argument("spider")
    p.add_argument("url")
    p.add_argument("--from", dest="source", help="the STORAGE_URL to read (default: the project's)")
