"""`dcrawl seed SPIDER URL... | --site URL | --file FILE|-`: validate seeds as the nodes do, push them in batches.

`--site URL` seeds a whole site for a news spider: `{"url": home page, "callback": "parse_site"}`;
the node that takes it discovers the site's sitemaps and feeds (spiders/news.py). With `--since DATE
[--until DATE]` it is a backfill: the seed carries the window (`meta["backfill"]`, news/backfill.py)
and only the stories the sitemaps and feeds date in it are fetched.

Every line goes through `parse_seed`, the function the nodes run on what they pop, so a line that
is pushed is a line a node accepts (only a JSON seed's `callback` name is checked on the node,
which knows the spider). Valid lines are pushed unchanged (their line ending removed) to the
start-URLs key as the spider reads it: a list (RPUSH), or a set / zset with
`REDIS_START_URLS_AS_SET` / `_AS_ZSET` (ZADD, score = the seed's priority).

`--dedup` skips a seed whose request the cluster has already seen: its fingerprint (method,
canonical URL, body: what the node's dupefilter computes for the seed's request) is looked up with
enqueue.lua's "check" action, and the fingerprints of the pushed seeds are added to the filter
right after their push, so later lines of the same file and a rerun skip them too.

Interrupting (Ctrl-C, SIGINT) finishes the batch being pushed, prints the summary and the last line
done; `--skip N` (or `--from-line N+1`) resumes after it. See docs/operations.md "Seed".
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import sys
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

from redis.exceptions import ResponseError

from distributed_crawler.addresses import SETTING as ALLOWED_SETTING
from distributed_crawler.addresses import AddressRule
from distributed_crawler.cli.known import unknown_spider
from distributed_crawler.cli.project import (
    CliError,
    connect,
    open_control,
    open_dupefilter,
    open_enqueuer,
)
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.types import SyncRedis
from distributed_crawler.connection.untrusted import text, wrong_type_message
from distributed_crawler.core.registry import table_of
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.seedkey import SeedKey
from distributed_crawler.frontier.seeds import SeedError, parse_seed
from distributed_crawler.meta import BACKFILL_META
from distributed_crawler.news.backfill import Window, WindowError, window_from_args

GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_BATCH = 5000
EXAMPLES = 3  # first examples kept per rejection kind
EXAMPLE_CHARS = 120
EXIT_INTERRUPTED = 130


class StopReading(Exception):
    """Ctrl-C while waiting for input: nothing of the current line was processed."""


@dataclass
class SeedReport:
    key: str
    kind: str  # list / set / zset
    start_line: int = 1
    line: int = 0  # every line up to this one is done: pushed, rejected, skipped or blank
    pushed: int = 0
    blank: int = 0
    duplicates: int = 0
    dedup: bool = False
    rejected: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seconds: float = 0.0
    interrupted: bool = False
    uncertain: int = 0  # lines after `line` that may have been pushed too (a second Ctrl-C mid-push)
    error: str = ""

    def reject(self, line: int, raw: bytes, exc: SeedError) -> None:
        self.rejected[exc.kind] += 1
        examples = self.examples.setdefault(exc.kind, [])
        if len(examples) < EXAMPLES:
            shown = raw[:EXAMPLE_CHARS].decode("utf-8", "replace") + ("..." if len(raw) > EXAMPLE_CHARS else "")
            examples.append({"line": line, "reason": exc.reason, "seed": shown})

    @property
    def lines(self) -> int:
        return max(0, self.line - self.start_line + 1)

    def as_json(self) -> dict[str, Any]:
        rate = self.lines / self.seconds if self.seconds > 0 else None
        return {
            "key": self.key,
            "type": self.kind,
            "pushed": self.pushed,
            "rejected": sum(self.rejected.values()),
            "rejected_by_kind": dict(sorted(self.rejected.items())),
            "examples": self.examples,
            "duplicates": self.duplicates if self.dedup else None,
            "blank": self.blank,
            "first_line": self.start_line,
            "last_line": self.line,
            "lines": self.lines,
            "seconds": round(self.seconds, 3),
            "lines_per_second": round(rate) if rate else None,
            "interrupted": self.interrupted,
            "uncertain": self.uncertain,
            "error": self.error or None,
        }

    def render(self, source: str, resume: str) -> str:
        rate = self.lines / self.seconds if self.seconds > 0 else 0
        out = [
            f"pushed {self.pushed:,} seeds to {self.key} ({self.kind}) from lines {self.start_line:,}-{self.line:,} "
            f"of {source} in {self.seconds:.1f} s ({rate:,.0f} lines/s)"
        ]
        rejected = sum(self.rejected.values())
        out.append(f"rejected {rejected:,}" + (":" if rejected else ""))
        for kind, n in self.rejected.most_common():
            out.append(f"  {kind}: {n:,}")
            for e in self.examples.get(kind, []):
                out.append(f"    line {e['line']:,}: {e['reason']}: {e['seed']!r}")
        if self.dedup:
            out.append(f"skipped {self.duplicates:,} duplicates (already seen by the cluster or earlier in the file)")
        if self.blank:
            out.append(f"skipped {self.blank:,} blank lines")
        if self.error:
            out.append(f"stopped: {self.error}")
        if self.interrupted or self.error:
            done = f"lines up to {self.line:,} are done, none after"
            if self.uncertain:
                done += f" (lines {self.line + 1:,}-{self.line + self.uncertain:,} may have been pushed too)"
            out.append(f"{'interrupted' if self.interrupted else 'not finished'}: {done}; resume with: {resume}")
        return "\n".join(out)


class SeedPusher:
    """Pushes raw seed lines to the seed key the way the spider takes them, a batch a round trip."""

    def __init__(self, client: SyncRedis, seed_key: SeedKey) -> None:
        self.client, self.seed_key = client, seed_key
        self.key, self.kind = seed_key.key, seed_key.kind

    def push(self, members: list[bytes], priorities: list[int]) -> None:
        pipe = self.client.pipeline(transaction=False)
        self.seed_key.push(pipe, members, priorities)
        try:
            pipe.execute()
        except ResponseError as exc:
            actual = text(self.client.type(self.key)) or "none"
            if actual not in (self.kind, "none"):
                raise SeedPushError(wrong_type_message(self.key, actual, self.kind)) from None
            raise SeedPushError(f"Redis refused the push to {self.key} ({str(exc)[:200]})") from None


class SeedPushError(Exception):
    """The push of a batch failed (wrong key type, Redis out of memory): one line, the run stops."""


class SeedDedup:
    """`--dedup`: drops seeds the cluster has seen (filter "check"), adds pushed ones (filter "add")."""

    def __init__(self, dupefilter: Any, enqueuer: Any) -> None:
        self.dupefilter, self.enqueuer = dupefilter, enqueuer
        self._urls: dict[str, str] = {}  # fingerprint -> URL until added (what routes it to its shard)

    def fingerprint(self, seed: Any) -> str:
        """The fingerprint of the request the node makes of this seed (method, URL and body are what count)."""
        try:
            request = seed.to_request()
        except Exception as exc:  # noqa: BLE001 - the node rejects the seed the same way
            raise SeedError("bad_request", f"not a valid request ({type(exc).__name__}: {str(exc)[:200]})") from None
        fingerprint = str(self.dupefilter.fingerprint_hex(request))
        self._urls[fingerprint] = request.url
        return fingerprint

    def new(self, fingerprints: list[str]) -> list[int]:
        urls = [self._urls.get(fp, "") for fp in fingerprints]
        return list(run_sync(self.enqueuer.run("check", [(fp, False, "") for fp in fingerprints], (), urls)))

    def add(self, fingerprints: list[str]) -> None:
        urls = [self._urls.pop(fp, "") for fp in fingerprints]
        run_sync(self.enqueuer.run("add", [(fp, False, "") for fp in fingerprints], (), urls))


class SeedLoader:
    """Reads lines, validates each with `parse_seed`, pushes the valid ones in batches."""

    def __init__(
        self,
        pusher: SeedPusher,
        max_bytes: int,
        batch: int = DEFAULT_BATCH,
        dedup: SeedDedup | None = None,
        progress: Any = None,
        addresses: AddressRule | None = None,
    ) -> None:
        self.pusher = pusher
        self.addresses = addresses
        self.max_bytes = max_bytes
        self.batch = batch
        self.dedup = dedup
        self.progress = progress  # callable(report) or None
        self.report = SeedReport(pusher.key, pusher.kind, dedup=dedup is not None)
        self._pending: list[tuple[int, bytes, Any]] = []  # (line, raw, Seed)
        self._in_read = False
        self._stopping = False
        self._pushing = 0  # lines in the batch being pushed (for a second Ctrl-C)
        self._processed = 0  # the last line read and validated (pushed once the pending batch is)

    # -- Ctrl-C ------------------------------------------------------------------------------
    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self._stopping:  # the second Ctrl-C: stop now
            raise KeyboardInterrupt
        self._stopping = True
        if self._in_read:  # blocked on input (a slow pipe): nothing of a line is half done
            raise StopReading

    def run(self, stream: IO[bytes], skip: int = 0) -> SeedReport:
        report = self.report
        report.start_line, report.line = skip + 1, skip
        started = time.monotonic()
        try:
            previous = signal.signal(signal.SIGINT, self._on_sigint)
        except ValueError:  # not the main thread: Ctrl-C raises KeyboardInterrupt as usual
            previous = None
        try:
            self._read(stream, skip)
            self._flush()
        except (StopReading, KeyboardInterrupt):
            report.interrupted = True
            if self._pushing:  # a second Ctrl-C during a push: that batch may or may not be in Redis
                report.uncertain = self._pushing
            else:
                self._flush_quietly()
        except (EOFError, OSError, zlib.error) as exc:  # a truncated or corrupt gzip stream, a read error
            report.error = f"cannot read line {self._processed + 1:,} ({type(exc).__name__}: {str(exc)[:200]})"
            self._flush_quietly()
        except SeedPushError as exc:
            report.error = str(exc)
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            report.seconds = time.monotonic() - started
        report.interrupted = report.interrupted or self._stopping
        return report

    def _flush_quietly(self) -> None:
        try:
            self._flush()
        except SeedPushError as exc:
            self.report.error = str(exc)
        except KeyboardInterrupt:
            self.report.interrupted = True
            self.report.uncertain = self._pushing

    # -- the loop ----------------------------------------------------------------------------
    def _read(self, stream: IO[bytes], skip: int) -> None:
        report, pending, max_bytes, batch = self.report, self._pending, self.max_bytes, self.batch
        limit = max_bytes + 2  # the largest accepted seed and its \r\n
        readline = stream.readline
        lineno = 0
        while True:
            self._in_read = True
            line = readline(limit)
            self._in_read = False
            if not line:
                break
            lineno += 1
            if line[-1:] == b"\n":
                raw = line[:-2] if line[-2:] == b"\r\n" else line[:-1]
            elif len(line) == limit:  # longer than any seed: count it without keeping it
                size = len(line) + self._skip_rest(readline, limit)
                if lineno > skip:
                    why = f"line of {size} bytes is more than SEED_MAX_BYTES ({max_bytes})"
                    report.reject(lineno, line, SeedError("too_large", why))
                self._processed = lineno
                continue
            else:
                raw = line  # the last line, without a line ending
            if lineno <= skip:
                self._processed = lineno
                continue
            if not raw or raw.isspace():
                report.blank += 1
            else:
                try:
                    pending.append((lineno, raw, parse_seed(raw, max_bytes, self.addresses)))
                except SeedError as exc:
                    report.reject(lineno, raw, exc)
                except Exception as exc:  # noqa: BLE001 - as the node's _seed_request: a seed never stops us
                    report.reject(lineno, raw, SeedError("bad_request", f"not a valid seed ({type(exc).__name__})"))
            self._processed = lineno
            if len(pending) >= batch:
                self._flush()
            if self._stopping:
                raise StopReading
            if self.progress is not None and not lineno & 0x1FFF:
                self.progress(report, lineno)

    def _skip_rest(self, readline: Any, limit: int) -> int:
        size = 0
        while True:
            chunk = readline(limit)
            size += len(chunk)
            if not chunk or chunk[-1:] == b"\n":
                return size

    def _flush(self) -> None:
        """Push the pending batch; then every line up to the last one processed is done."""
        pending, report = self._pending, self.report
        last = self._processed
        if not pending:
            report.line = max(report.line, last)
            return
        entries = pending
        fingerprints: list[str] = []
        if self.dedup is not None:
            entries, fingerprints = self._dedup(pending)
        self._pushing = last - report.line
        if entries:
            self.pusher.push([raw for _, raw, _ in entries], [seed.priority for _, _, seed in entries])
            if fingerprints:
                assert self.dedup is not None
                self.dedup.add(fingerprints)
        self._pushing = 0
        report.pushed += len(entries)
        report.line = max(report.line, last)
        pending.clear()
        if self.progress is not None:
            self.progress(report, last)

    def _dedup(self, pending: list[tuple[int, bytes, Any]]) -> tuple[list[tuple[int, bytes, Any]], list[str]]:
        assert self.dedup is not None
        report = self.report
        kept: list[tuple[int, bytes, Any]] = []
        fps: list[str] = []
        first: set[str] = set()
        for entry in pending:
            lineno, raw, seed = entry
            try:
                fp = self.dedup.fingerprint(seed)
            except SeedError as exc:
                report.reject(lineno, raw, exc)
                continue
            if fp in first:  # the same page twice in this batch
                report.duplicates += 1
                continue
            first.add(fp)
            kept.append(entry)
            fps.append(fp)
        new = self.dedup.new(fps) if fps else []
        entries = [e for e, is_new in zip(kept, new) if is_new]
        report.duplicates += len(kept) - len(entries)
        return entries, [fp for fp, is_new in zip(fps, new) if is_new]


def open_seed_file(path: str) -> tuple[Any, Any, int | None]:
    """(line stream, raw stream for the position, size or None); gzip found by its magic bytes."""
    if path == "-":
        raw: Any = sys.stdin.buffer
        size = None
    else:
        try:
            raw = open(path, "rb")  # closed by the caller
        except OSError as exc:
            raise SeedFileError(
                f"cannot read {path}: {exc.strerror or exc}; give an existing file or - for stdin"
            ) from None
        size = os.fstat(raw.fileno()).st_size
    if hasattr(raw, "peek") and raw.peek(2)[:2] == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw, size
    return raw, raw, size


class SeedFileError(Exception):
    """The seed file cannot be opened: one line."""


def make_progress(raw: Any, size: int | None) -> tuple[Any, Any]:
    """A rich progress bar on stdout (bytes of the file read, lines, rate); (progress, update)."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns: list[Any] = [TextColumn("[bold]seeding")]
    if size:
        columns += [BarColumn(), DownloadColumn(), TimeRemainingColumn()]
    columns += [
        TextColumn("{task.fields[lines]:,} lines, {task.fields[pushed]:,} pushed, {task.fields[rate]:,.0f}/s"),
        TimeElapsedColumn(),
    ]
    progress = Progress(*columns, transient=True)
    task = progress.add_task("seed", total=size, lines=0, pushed=0, rate=0.0)
    started = time.monotonic()

    def update(report: SeedReport, lineno: int) -> None:
        try:
            done = raw.tell() if size else None
        except (OSError, ValueError):
            done = None
        elapsed = time.monotonic() - started
        lines = lineno - report.start_line + 1
        progress.update(
            task, completed=done, lines=lines, pushed=report.pushed, rate=lines / elapsed if elapsed else 0.0
        )

    return progress, update


def add_parser(command: Any) -> None:
    """Register `dcrawl seed` with cli/main.py's `command(name, func, help)` helper."""
    p = command("seed", cmd_seed, "push start URLs (plain or JSON) from the command line or a file")
    p.add_argument("spider")
    p.add_argument("urls", nargs="*", help="seeds: URLs or JSON objects (or use --file)")
    p.add_argument("--file", help="one seed a line, plain URL or JSON; gzip accepted; - = stdin")
    p.add_argument(
        "--site",
        action="append",
        default=[],
        metavar="URL",
        help="a whole site (repeatable): a node reads its home page's feed links and its robots.txt "
        "sitemaps (else /sitemap.xml); for spiders built on distributed_crawler.spiders.news.NewsSpider; "
        "a name or domain without http(s):// is a source of the registry (dcrawl sources SPIDER import)",
    )
    p.add_argument(
        "--since",
        metavar="DATE",
        help="with --site: a backfill of the stories the sitemaps and feeds date from DATE (YYYY-MM-DD or ISO time)",
    )
    p.add_argument("--until", metavar="DATE", help="with --since: the window's last day (default: now)")
    p.add_argument("--new", action="store_true", help="a new crawl: no warning that the spider has none on this Redis")
    p.add_argument("--dedup", action="store_true", help="skip seeds already seen by the cluster or earlier in the file")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--skip", type=int, default=0, metavar="N", help="skip the first N lines (resume after line N)")
    where.add_argument("--from-line", type=int, metavar="N", help="start at line N (= --skip N-1)")
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH, help=f"seeds a round trip (default {DEFAULT_BATCH})")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def _resume_command(args: argparse.Namespace, line: int) -> str:
    parts = ["dcrawl seed", args.spider, "--file", args.file, f"--skip {line}"]
    if args.dedup:
        parts.append("--dedup")
    return " ".join(parts)


SITE_CALLBACK = "parse_site"  # spiders/news.py NewsSpider.parse_site


def site_seed(url: str, window: Window | None = None) -> str:
    """The seed of `--site URL`: the site's home page, read by the spider's `parse_site` (with the
    backfill window of `--since` / `--until`)."""
    try:
        parts = urlsplit(url.strip())
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise SeedError("bad_url", f"--site {url[:80]!r} is not an http(s) URL with a host (e.g. https://example.com)")
    home = urlunsplit((parts.scheme, parts.netloc, parts.path or "/", parts.query, ""))
    seed: dict[str, Any] = {"url": home, "callback": SITE_CALLBACK}
    if window is not None:
        seed["meta"] = {BACKFILL_META: window.as_meta()}
    return json.dumps(seed, separators=(",", ":"))


def warn_new_crawl(missing: str | None) -> None:
    """A typo in the spider's name would start a crawl no node runs: said, and seeded all the same."""
    if missing:
        print(f"dcrawl: warning: {missing}; seeding a new crawl (--new: no warning)", file=sys.stderr)


def registered_sites(sites: list[str], settings: Any, client: SyncRedis, keys: SpiderKeys) -> list[str]:
    """`--site NAME`: a source of the registry by its name or domain (docs/sources.md) -> its URL, so
    a registered outlet is backfilled by name; a URL stays as given."""
    if all("://" in site for site in sites):
        return sites
    registry = table_of(run_sync(open_control(settings, client, keys).sources()))
    resolved = []
    for site in sites:
        source = None if "://" in site else registry.by_name(site)
        if "://" not in site and source is None:
            raise CliError(f"not seeded: no source named {site!r} in the registry (a name, a domain, or a site URL)")
        resolved.append(site if source is None else source.url)
    return resolved


def cmd_seed(args: argparse.Namespace) -> int:
    if args.file is not None and (args.urls or args.site):
        raise CliError("give seeds as arguments (URLs, --site) or --file FILE, not both")
    if args.file is None and not args.urls and not args.site:
        raise CliError("no seeds: give URLs, --site URL, or --file FILE (- for stdin)")
    window = None
    if args.since or args.until:
        if not args.site:
            raise CliError("--since and --until backfill a site: give --site URL")
        try:
            window = window_from_args(args.since, args.until)
        except WindowError as exc:
            raise CliError(f"not seeded: {exc}") from None
    try:
        for url in args.site:  # a bad site URL is said before Redis is asked anything
            if "://" in url:
                site_seed(url, window)
    except SeedError as exc:
        raise CliError(f"not seeded: {exc.reason}") from None
    skip = args.skip if args.from_line is None else args.from_line - 1
    if skip < 0 or args.batch < 1:
        raise CliError("--skip must be >= 0, --from-line >= 1 and --batch >= 1")
    settings, client, keys = connect(args)
    args.site = registered_sites(args.site, settings, client, keys)
    try:
        args.urls = [*args.urls, *(site_seed(url, window) for url in args.site)]
    except SeedError as exc:
        raise CliError(f"not seeded: {exc.reason}") from None
    missing = (
        None if args.new else unknown_spider(client, settings, keys, RedisConfig.from_settings(settings).masked_url)
    )
    read = SettingsReader(settings)
    max_bytes = read.int("SEED_MAX_BYTES", min=1)
    addresses = AddressRule.from_value(settings.get(ALLOWED_SETTING))  # the nodes' rule (docs/security.md)
    pusher = SeedPusher(client, SeedKey.from_settings(settings, args.spider))  # AS_SET and AS_ZSET: one line
    if args.file is None:  # seeds on the command line: all valid or none pushed
        seeds = []
        for seed in args.urls:
            try:
                seeds.append(parse_seed(seed, max_bytes, addresses))
            except SeedError as exc:
                raise CliError(f"not seeded: {seed[:80]!r}: {exc.reason}") from None
        warn_new_crawl(missing)
        try:
            pusher.push([s.encode("utf-8") for s in args.urls], [s.priority for s in seeds])
        except SeedPushError as exc:
            raise CliError(str(exc)) from None
        print(f"seeded {len(args.urls)} into {keys.start_urls}")
        for url in args.site:
            print(
                f"site {url}: a node reads its home page's feed links and the Sitemap: lines of its robots.txt "
                f"(else /sitemap.xml); `dcrawl failed {args.spider}` lists sitemaps or feeds it could not read"
            )
            if window is not None:
                print(
                    f"backfill {window.since.isoformat()} .. {window.until.isoformat()}: only the stories its "
                    "sitemaps and feeds date in that window (undated ones are left out)"
                )
        return 0
    dedup = None
    if args.dedup:
        df, _ = open_dupefilter(settings, client, keys)
        dedup = SeedDedup(df, open_enqueuer(settings, client, keys, df))
    try:
        stream, raw, size = open_seed_file(args.file)
    except SeedFileError as exc:
        raise CliError(str(exc)) from None
    warn_new_crawl(missing)
    progress = None
    update = None
    if sys.stdout.isatty() and not args.json:
        progress, update = make_progress(raw, size)
    loader = SeedLoader(pusher, max_bytes, args.batch, dedup, update, addresses)
    try:
        if progress is not None:
            with progress:
                report = loader.run(stream, skip)
        else:
            report = loader.run(stream, skip)
    finally:
        if args.file != "-":
            raw.close()
    if args.json:
        print(json.dumps(report.as_json(), ensure_ascii=False))
    else:
        print(report.render("stdin" if args.file == "-" else args.file, _resume_command(args, report.line)))
    if report.error:
        return 1
    return EXIT_INTERRUPTED if report.interrupted else 0
