"""`dcrawl sources SPIDER import FILE [--no-seed] | export [FILE] | show NAME|DOMAIN | remove NAME|DOMAIN...`

The source registry (docs/sources.md): the file's records are checked whole (one line per bad
record, nothing written while one is bad), written in one transaction, audited, and each new
source seeded as `dcrawl seed SPIDER --site URL` seeds it. Bad input is one line and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from redis.exceptions import ResponseError

from distributed_crawler.addresses import SETTING as ALLOWED_SETTING
from distributed_crawler.addresses import AddressRule
from distributed_crawler.cli.control import BAD_INPUT, user
from distributed_crawler.cli.output import print_json
from distributed_crawler.cli.project import open_control
from distributed_crawler.cli.seed import SeedPusher, site_seed
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.core.control import BadInput
from distributed_crawler.core.crawl_control import CrawlControl
from distributed_crawler.core.registry import SourceTable, table_of
from distributed_crawler.core.source_changes import apply_import, plan_import, remove_sources
from distributed_crawler.core.source_records import (
    RecordError,
    Source,
    file_format,
    load_sources,
    read_records,
    write_records,
)
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.frontier.seedkey import SeedKey
from distributed_crawler.frontier.seeds import SeedError, parse_seed
from distributed_crawler.monitoring.hosts import read_refusals
from distributed_crawler.monitoring.nodes import Skips

VERBS = ("import", "export", "show", "remove")
ERRORS_SHOWN = 50  # bad records printed; the rest are counted


def _bad(message: str) -> int:
    print(f"dcrawl: {message}", file=sys.stderr)
    return BAD_INPUT


def read_registry(control: CrawlControl) -> SourceTable:
    """The registry as the nodes read it; a key of another type is one line with the fix."""
    try:
        return table_of(run_sync(control.sources()))
    except ResponseError as exc:
        raise ValueError(wrong_registry(control, exc)) from None


def wrong_registry(control: CrawlControl, exc: BaseException) -> str:
    registry, version = control.registry_keys()
    return (
        f"cannot use the source registry ({exc}): `redis-cli type '{registry}'` must say hash and "
        f"`redis-cli type '{version}'` string; delete the one that is not ours and import the sources again"
    )


def cmd_registry(args: argparse.Namespace) -> int:
    try:
        if args.action == "import":
            return _import(args)
        settings, client, keys = args.connect(args)
        control = open_control(settings, client, keys)
        registry = read_registry(control)
        if args.action == "export":
            return _export(args, registry)
        if args.action == "show":
            return _show(args, control, registry)
        return _remove(args, control, settings, registry)
    except (BadInput, RecordError) as exc:
        return _bad(str(exc))


def _import(args: argparse.Namespace) -> int:
    if len(args.targets) != 1:
        raise BadInput("import takes one FILE (.csv with a header, .yaml or .jsonl)")
    path = args.targets[0]
    sources, errors = load_sources(read_records(path))
    if errors:
        for line in errors[:ERRORS_SHOWN]:
            print(f"dcrawl: {path} {line}", file=sys.stderr)
        more = f" ({len(errors) - ERRORS_SHOWN} more not shown)" if len(errors) > ERRORS_SHOWN else ""
        return _bad(f"nothing imported: {len(errors)} bad record(s){more}; fix them and import again")
    if not sources:
        raise BadInput(f"{path} has no source: one record a source, with url")
    settings, client, keys = args.connect(args)
    control = open_control(settings, client, keys)
    plan = plan_import(read_registry(control), sources)
    seeds = [] if args.no_seed else _site_seeds(settings, plan.new)  # checked before anything is written
    try:
        kept = apply_import(control, settings, plan, user(args), "cli")
    except ResponseError as exc:
        raise ValueError(wrong_registry(control, exc)) from None
    if seeds:
        SeedPusher(client, SeedKey.from_settings(settings, keys.spider)).push(seeds, [0] * len(seeds))
    seeded = f" (seeded into {keys.start_urls})" if seeds else (" (not seeded: --no-seed)" if plan.new else "")
    print(
        f"imported {len(sources)} source(s) from {path} into {keys.sources}: {len(plan.new)} new{seeded}, "
        f"{len(plan.replaced)} replaced, {len(plan.unchanged)} unchanged; every node applies them within 2 s"
    )
    for site in kept:
        print(
            f"note: {site} keeps its operator's delay (`dcrawl host {keys.spider} {site} show`); its source's rate "
            f"applies once that is removed: dcrawl host {keys.spider} {site} unset --delay"
        )
    return 0


def _site_seeds(settings: Any, sources: list[Source]) -> list[bytes]:
    """`dcrawl seed --site` seeds of new sources, checked as the nodes check them."""
    max_bytes = SettingsReader(settings).int("SEED_MAX_BYTES", min=1)
    addresses = AddressRule.from_value(settings.get(ALLOWED_SETTING))
    seeds = []
    for source in sources:
        try:
            seed = site_seed(source.url)
            parse_seed(seed, max_bytes, addresses)
        except SeedError as exc:
            raise BadInput(f"source {source.name} not seeded, nothing imported: {exc.reason}") from None
        seeds.append(seed.encode("utf-8"))
    return seeds


def _export(args: argparse.Namespace, registry: SourceTable) -> int:
    sources = sorted((s.source for s in registry.sites.values()), key=lambda s: s.name.lower())
    if not args.targets:
        sys.stdout.write(write_records(sources, "jsonl"))
        return 0
    path = args.targets[0]
    Path(path).write_text(write_records(sources, file_format(path)), encoding="utf-8")
    print(f"exported {len(sources)} source(s) to {path}")
    return 0


def _find(registry: SourceTable, wanted: str) -> Source:
    source = registry.by_name(wanted)
    if source is None:
        raise BadInput(f"no source named {wanted} (a name or a site); `dcrawl sources SPIDER export` lists them")
    return source


def _show(args: argparse.Namespace, control: CrawlControl, registry: SourceTable) -> int:
    if len(args.targets) != 1:
        raise BadInput("show takes one NAME or DOMAIN")
    source = _find(registry, args.targets[0])
    refused = refusals_of(control.frontier, registry, source)
    if args.json:
        print_json({"site": source.site, **source.as_record(), "refused": refused})
        return 0
    print(f"{source.name} ({source.site})")
    for name, value in source.as_record().items():
        if name != "name":
            print(f"  {name}: {json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value}")
    words = ", ".join(f"{reason} {n:,}" for reason, n in sorted(refused.items())) or "none"
    print(f"  refused: {words}")
    return 0


def refusals_of(frontier: Any, registry: SourceTable, source: Source) -> dict[str, int]:
    """Requests refused on the source's hosts, by reason (`{spider}:refused`, every shard)."""
    return refusals_by_source(frontier, registry).get(source.name, {})


def refusals_by_source(frontier: Any, registry: SourceTable) -> dict[str, dict[str, int]]:
    """Source name -> {reason: requests refused} over the hosts of each registered source."""
    out: dict[str, dict[str, int]] = {}
    for part in frontier.part_keys():
        for host, reasons in run_sync(read_refusals(frontier.client, part, Skips())).items():
            found = registry.find(host) if registry.sites else None
            if found is not None:
                counts = out.setdefault(found.source.name, {})
                for reason, n in reasons.items():
                    counts[reason] = counts.get(reason, 0) + n
    return out


def _remove(args: argparse.Namespace, control: CrawlControl, settings: Any, registry: SourceTable) -> int:
    if not args.targets:
        raise BadInput("remove takes one or more NAME or DOMAIN")
    sources = list({s.site: s for s in (_find(registry, t) for t in args.targets)}.values())
    try:
        remove_sources(control, settings, sources, user(args), "cli")
    except ResponseError as exc:
        raise ValueError(wrong_registry(control, exc)) from None
    names = ", ".join(s.name for s in sources)
    print(f"removed {len(sources)} source(s): {names}; their pages stay queued (`dcrawl host SPIDER HOST purge`)")
    return 0
