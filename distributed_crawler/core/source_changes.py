"""Changes to the source registry: import (new or replaced entries) and remove, audited.

Shared by `dcrawl sources SPIDER import / remove` (cli/source_registry.py). An import is written
in one transaction with the registry's version (core/registry.py: every node re-reads it within
2 s), then each changed entry is one audit entry in `{spider}:audit` (action `source_import` /
`source_remove`, old and new record), so the registry's history is the audit stream's. A source's
`rate` is the domain's override delay (1 / rate seconds, `dcrawl host ... set --delay`), so the
lease applies it as it applies an operator's; marked `delay_from: registry`, so that an
operator's own delay on the site is never overwritten nor removed by an import (the operator's
wins until `dcrawl host SPIDER SITE unset --delay`, which falls back to the source's rate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.core.control import (
    FROM_REGISTRY,
    BadInput,
    HostChange,
    audit_entry,
    decode_override,
    host_action,
)
from distributed_crawler.core.crawl_control import CrawlControl
from distributed_crawler.core.registry import SourceTable
from distributed_crawler.core.source_records import Source
from distributed_crawler.defaults import SettingsReader


@dataclass
class ImportPlan:
    """What an import changes against the registry as it is."""

    new: list[Source] = field(default_factory=list)
    replaced: list[tuple[Source, Source]] = field(default_factory=list)  # (old, new)
    unchanged: list[Source] = field(default_factory=list)

    @property
    def changed(self) -> list[tuple[Source | None, Source]]:
        return [(None, s) for s in self.new] + list(self.replaced)


def plan_import(registry: SourceTable, sources: list[Source]) -> ImportPlan:
    """Sort the checked sources into new / replaced / unchanged; a name already taken by another
    site is refused (BadInput), as `show NAME` must find one source."""
    plan = ImportPlan()
    importing = {s.site for s in sources}
    taken = {
        s.source.name.lower(): site for site, s in registry.sites.items() if site not in importing
    }  # names of the entries this import leaves alone
    for source in sources:
        other = taken.get(source.name.lower())
        if other is not None:
            raise BadInput(f"name {source.name} is already the source of {other}: rename one, or import both")
        old = registry.sites.get(source.site)
        if old is None:
            plan.new.append(source)
        elif old.source == source:
            plan.unchanged.append(source)
        else:
            plan.replaced.append((old.source, source))
    return plan


def apply_import(control: CrawlControl, settings: Any, plan: ImportPlan, by: str, origin: str) -> list[str]:
    """Write the plan; returns the sites whose `rate` was not applied: an operator's delay stands."""
    changed = plan.changed
    if not changed:
        return []
    run_sync(control.write_sources({new.site: new.to_json() for _, new in changed}))
    entries = [
        audit_entry("source_import", new.site, old.as_record() if old else None, new.as_record(), by, origin)
        for old, new in changed
    ]
    maxlen = SettingsReader(settings).int("AUDIT_MAXLEN", min=1)
    for start in range(0, len(entries), 1000):
        run_sync(control.audit_many(entries[start : start + 1000], maxlen))
    kept = []
    for old, new in changed:
        if (old.rate if old else None) != new.rate and not apply_rate(
            control, settings, new.site, new.rate, by, origin
        ):
            kept.append(new.site)
    return kept


def remove_sources(control: CrawlControl, settings: Any, sources: list[Source], by: str, origin: str) -> None:
    if not sources:
        return
    run_sync(control.write_sources({}, [s.site for s in sources]))
    entries = [audit_entry("source_remove", s.site, s.as_record(), None, by, origin) for s in sources]
    run_sync(control.audit_many(entries, SettingsReader(settings).int("AUDIT_MAXLEN", min=1)))
    for s in sources:
        if s.rate is not None:
            apply_rate(control, settings, s.site, None, by, origin)


def apply_rate(control: CrawlControl, settings: Any, site: str, rate: float | None, by: str, origin: str) -> bool:
    """A source's rate as its site's override delay (None: the delay removed); False when an
    operator's own delay on the site stands instead (it wins over the registry's)."""
    old = decode_override(run_sync(control.override(site))) or {}
    if "delay" in old and old.get("delay_from") != FROM_REGISTRY:
        return False
    if rate is None:
        if "delay" in old:
            change = HostChange({"delay_from": FROM_REGISTRY}, cleared=("delay",))
            host_action(control, settings, site, "unset", change, by, origin)
    else:
        change = HostChange({"delay": round(1.0 / rate, 3), "delay_from": FROM_REGISTRY})
        host_action(control, settings, site, "set", change, by, origin)
    return True
