"""Markdown tables from the JSON of bench/e2e.py and bench/kill9.py (for docs/benchmarks.md).

Why: the figures in the docs should be copied from a run, not retyped.
Usage: .venv/bin/python bench/report.py e2e.json [kill9.json ...]
"""

from __future__ import annotations

import json
import sys
from typing import Any


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{value:.0f}"
    return str(value)


def table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def e2e(report: dict[str, Any]) -> str:
    rows = []
    for r in report["runs"]:
        rows.append(
            [
                r["side"],
                r["run"],
                f"{r['pages_stored']}/{r['pages_expected']}",
                r["seconds"],
                r["pages_per_s"],
                r["pickup_seconds"],
                r["pages_per_s_from_first_fetch"],
                r["round_trips_per_page"],
                r["redis_commands_per_page"],
                round(r["evalsha"] / r["pages_stored"], 3) if r["pages_stored"] else None,
                r["redis_server_cpu_us_per_page"],
                r["worker_cpu_ms_per_page"],
                r["worker_seconds_blocked_in_sync_redis_calls"],
                r.get("other_programs_cpu_fraction_of_all_cores"),
                r["fetch"]["duplicate_fetches"],
            ]
        )
    out = [
        table(
            [
                "side",
                "run",
                "pages",
                "s (seed→last page)",
                "pages/s",
                "pickup s",
                "pages/s from 1st fetch",
                "round trips/page",
                "commands/page",
                "EVALSHA/page",
                "redis-server CPU µs/page",
                "worker CPU ms/page",
                "s blocked in sync Redis calls",
                "other programs' CPU share",
                "dup fetches",
            ],
            rows,
        )
    ]
    s = report["summary"]
    med = []
    for side in ("ours", "scrapy-redis"):
        m = s[side]
        med.append(
            [
                side,
                m["median_pages_per_s"],
                m["median_pages_per_s_from_first_fetch"],
                m["median_round_trips_per_page"],
                m["median_round_trips_per_dequeued_request"],
                m["median_redis_commands_per_page"],
                m.get("median_redis_server_cpu_us_per_page"),
            ]
        )
    ratio = s["ratio_ours_over_scrapy_redis"]
    med.append(
        [
            "ours / scrapy-redis",
            ratio["pages_per_s"],
            ratio["pages_per_s_from_first_fetch"],
            ratio["round_trips_per_page"],
            None,
            None,
            None,
        ]
    )
    out.append(
        table(
            [
                "median",
                "pages/s",
                "pages/s from 1st fetch",
                "round trips/page",
                "round trips/scheduled request",
                "commands/page",
                "redis-server CPU µs/page",
            ],
            med,
        )
    )
    pairwise = ratio.get("pages_per_s_pairwise")
    if pairwise is None:  # reports written before pairwise ratios existed
        pairwise = [
            round(a["pages_per_s"] / b["pages_per_s"], 3)
            for a in report["runs"]
            if a["side"] == "ours"
            for b in report["runs"]
            if b["side"] == "scrapy-redis" and b["run"] == a["run"] and a["pages_per_s"] and b["pages_per_s"]
        ]
    if pairwise:
        out.append(
            "pages/s ratio ours/scrapy-redis per pair of back-to-back runs: "
            + ", ".join(fmt(x) for x in pairwise)
            + f" (median {fmt(sorted(pairwise)[len(pairwise) // 2] if len(pairwise) % 2 else sum(sorted(pairwise)[len(pairwise) // 2 - 1 : len(pairwise) // 2 + 1]) / 2, 3)})"
        )
    for side in ("ours", "scrapy-redis"):
        runs = [r for r in report["runs"] if r["side"] == side and r["pages_stored"]]
        if runs:
            r = runs[0]
            top = ", ".join(f"{k} {v}" for k, v in list(r["commandstats"].items())[:12])
            out.append(f"`INFO commandstats` delta, {side} run {r['run']} ({r['pages_stored']} pages): {top}")
    return "\n\n".join(out)


def kill9(report: dict[str, Any]) -> str:
    rows = []
    for r in report["runs"]:
        rows.append(
            [
                r["side"],
                r["run"],
                r["killed"],
                r["stored_at_kill"],
                f"{r['pages_stored']}/{r['pages_expected']}",
                r["pages_lost"],
                r["duplicate_fetches"],
                r["reclaimed_leases_logged"],
                r["survivor_stats"].get("scheduler/quarantined"),
                r["seconds_kill_to_last_page"],
                r["seconds_seed_to_last_page"],
            ]
        )
    return table(
        [
            "side",
            "run",
            "killed",
            "stored at kill",
            "stored",
            "pages lost",
            "duplicate fetches",
            "leases reclaimed",
            "quarantined",
            "s kill→last page",
            "s seed→last page",
        ],
        rows,
    )


def main(argv: list[str]) -> int:
    for path in argv:
        with open(path) as f:
            report = json.load(f)
        code = report.get("code_at_start", {})
        print(
            f"<!-- {path}: {report['benchmark']}, code {code.get('tree')} {code.get('commit')}, "
            f"load {report.get('loadavg_1m_before_after')}, {report.get('duration_s')} s -->"
        )
        print(e2e(report) if report["benchmark"] == "e2e" else kill9(report))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
