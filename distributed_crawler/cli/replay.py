"""`dcrawl replay SPIDER WARC_FILE... [--dry-run] [--json] [--to STORAGE_URL]`: re-extract archived pages.

Every `response` record of the WARC files (docs/warc.md: what WARC_DIR holds) whose status is 200
and whose body is HTML goes through the news spider's own extraction, page type, robots meta,
STORE_PAGE_TYPES / LANGUAGES and near-duplicate verdict (cli/extract.py `report`, read-only on the
cluster's index) and the storage's row mapping (storage/pipeline.py `item_to_row`), then into the
database as the crawl stores it: an upsert per URL, a new version in item_versions only when the
text really changed. Never a fetch. Records are replayed in file order, so the archived fetches of
one page rebuild its versions. A record whose text is one of the URL's older stored versions is
skipped (`known`): a replay run twice changes nothing, while a changed extraction rule (a text the
URL never had) makes new versions. `fetched_at` is the record's WARC-Date. `--dry-run` writes
nothing and compares each record with the database as it is: new, changed or unchanged.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from scrapy import Request
from scrapy.http import HtmlResponse

from distributed_crawler.addon import with_addon
from distributed_crawler.cli.extract import command_settings, index_reader, report
from distributed_crawler.cli.output import print_json
from distributed_crawler.dedup.fingerprint import CanonicalFingerprinter, FingerprintConfig
from distributed_crawler.news.config import NewsConfig
from distributed_crawler.redact import mask_url
from distributed_crawler.storage.backends import StorageBackend, StorageError, open_storage
from distributed_crawler.storage.digest import content_digest
from distributed_crawler.storage.pipeline import StorageConfig, item_to_row

# (url, status, headers, body, WARC-Date); headers, body and date are None for a record not replayed
ArchivedPage = tuple[str, int, dict[str, str] | None, bytes | None, str | None]

BATCH = 100
NODE = "replay"  # the `node` column of replayed rows


def check_warc(path: str) -> None:
    """A WARC file (gzip members or plain) starts with "WARC/"; warcio would read anything else as
    broken records with a warning each."""
    with open(path, "rb") as stream:
        head = stream.read(2)
    if head == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as unzipped:
                head = unzipped.read(5)
        except (OSError, EOFError):
            head = b""
    else:
        with open(path, "rb") as stream:
            head = stream.read(5)
    if head != b"WARC/":
        raise ValueError(
            f"{path} is not a WARC file (it does not start with a WARC record); nothing from it was replayed"
        )


def archived_pages(path: str) -> Iterator[ArchivedPage]:
    """(url, status, headers, body, WARC-Date) of each HTML response record of a WARC file."""
    from warcio.archiveiterator import ArchiveIterator

    check_warc(path)
    with open(path, "rb") as stream:
        for record in ArchiveIterator(stream):
            if record.rec_type != "response" or record.http_headers is None:
                continue
            status = int(record.http_headers.get_statuscode() or 0)
            kind = (record.http_headers.get_header("Content-Type") or "").lower()
            url = record.rec_headers.get_header("WARC-Target-URI") or ""
            if status != 200 or "html" not in kind or not url.startswith(("http://", "https://")):
                yield url, status, None, None, None
                continue
            body = record.content_stream().read()  # transfer and content encodings undone
            headers = {
                k: v
                for k, v in record.http_headers.headers
                if k.lower() not in ("content-encoding", "transfer-encoding")
            }
            yield url, status, headers, body, record.rec_headers.get_header("WARC-Date")


class Replay:
    """Counts, and the rows waiting for their upsert (one row per URL per batch: versions in order)."""

    def __init__(self, backend: StorageBackend, dry_run: bool) -> None:
        self.backend = backend
        self.dry_run = dry_run
        self.counts = {"records": 0, "html": 0, "not_stored": 0, "new": 0, "changed": 0, "unchanged": 0, "known": 0}
        self._rows: dict[str, dict[str, Any]] = {}

    def add(self, row: dict[str, Any]) -> None:
        if row["url"] in self._rows:  # its previous record first: versions in file order
            self.flush()
        versions = self.backend.versions(row["url"])  # the older ones, then the current row
        digest = row["content_hash"] or (content_digest(row["text"]) if row["text"] else None)
        current = versions[-1]["content_hash"] if versions else None
        if versions and digest != current and digest in {v["content_hash"] for v in versions[:-1]}:
            self.counts["known"] += 1  # history already stored
            return
        if self.dry_run:
            self.counts["new" if not versions else "changed" if digest != current else "unchanged"] += 1
            return
        if len(self._rows) >= BATCH:
            self.flush()
        self._rows[row["url"]] = row

    def flush(self) -> None:
        if self._rows:
            for change in self.backend.upsert_changes(list(self._rows.values())):
                self.counts[change.change] += 1
            self._rows.clear()


def warc_time(value: str | None) -> str | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.astimezone(UTC).isoformat()


def cmd_replay(args: argparse.Namespace) -> int:
    settings = command_settings(args)
    node = with_addon(settings)
    news = NewsConfig.from_settings(node)
    fingerprinter = CanonicalFingerprinter(FingerprintConfig.from_settings(node))
    target = args.target or StorageConfig.from_settings(node).url
    near_duplicate = index_reader(node, news, args.spider) if news.near_duplicates else None
    try:
        backend = open_storage(target)
    except StorageError as exc:
        raise ValueError(f"{exc} (or pass --to STORAGE_URL)") from None
    replay = Replay(backend, args.dry_run)
    progress = sys.stderr.isatty() and not args.json
    try:
        for path in args.files:
            try:
                for url, _status, headers, body, date in archived_pages(path):
                    replay.counts["records"] += 1
                    if body is None:
                        continue
                    replay.counts["html"] += 1
                    response = HtmlResponse(url, status=200, headers=headers, body=body, request=Request(url))
                    result = report(news, response, fingerprinter, "warc", near_duplicate, node.get("BOT_NAME"))
                    if not result["stored"]:
                        replay.counts["not_stored"] += 1
                        continue
                    item = {
                        **result["fields"],
                        "fetched_at": warc_time(date),
                        "status": 200,
                        "node": NODE,
                        "truncated": result["truncated"],
                    }
                    replay.add(item_to_row(item))
                    if progress and replay.counts["html"] % 100 == 0:
                        print(f"\r{path}: {replay.counts['html']:,} pages", end="", file=sys.stderr)
            except OSError as exc:
                raise ValueError(f"cannot read {path}: {exc.strerror or exc}; nothing after it was replayed") from None
            except Exception as exc:  # warcio: not a WARC, or cut short
                if exc.__class__.__module__.startswith("warcio") or isinstance(exc, EOFError):
                    raise ValueError(
                        f"{path} is not a readable WARC file ({exc}); nothing after it was replayed"
                    ) from None
                raise
        replay.flush()
    except ValueError:
        replay.flush()  # the files before the bad one are replayed whole
        raise
    except StorageError as exc:
        raise ValueError(str(exc)) from None
    finally:
        backend.close()
    if progress:
        print(file=sys.stderr)
    summary = {"spider": args.spider, "storage": mask_url(target), "dry_run": args.dry_run, **replay.counts}
    if args.json:
        print_json(summary)
    else:
        would = "would be " if args.dry_run else ""
        c = replay.counts
        print(
            f"replayed {c['records']:,} records ({c['html']:,} HTML pages) into {mask_url(target)}: "
            f"{would}{c['new']:,} new, {c['changed']:,} changed, {c['unchanged']:,} unchanged, "
            f"{c['known']:,} older versions already stored; "
            f"{c['not_stored']:,} not stored (STORE_PAGE_TYPES, LANGUAGES, noindex)"
        )
    return 0


def add_parser(command: Any) -> None:
    p = command("replay", cmd_replay, "re-extract archived pages (WARC files) into the database, never a fetch")
    p.add_argument("spider")
    p.add_argument("files", nargs="+", metavar="WARC_FILE", help="WARC files (.warc.gz) as WARC_DIR holds them")
    p.add_argument("--dry-run", action="store_true", help="write nothing: say what would be new, changed, unchanged")
    p.add_argument("--to", dest="target", help="the STORAGE_URL to write (default: the project's)")
    p.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    p.add_argument("-s", "--set", action="append", metavar="NAME=VALUE", help="a setting, as with scrapy crawl -s")
