"""Bulk seeding: `dcrawl seed news --file FILE` with 1 million lines, plain and gzip, with and without --dedup.

    .venv/bin/python bench/seed.py --lines 1000000 --json

Generates one file of N lines (plain URLs over 2,000 hosts, some with tracking params; 4 % JSON
lines with meta and priority; 1 % bad lines of every rejection kind; 2 % exact repeats of an
earlier line), writes it plain and gzip, and runs the real command (`python -m distributed_crawler
seed news --file ... --json`, a subprocess, as an operator would) against a private redis-server
started here, emptied before every run. Reports wall time (process start to exit), lines/s, what
was pushed and rejected, and checks the start-URLs list holds exactly what was reported pushed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import ROOT, SEED_KEY, Children, log, start_redis

BAD_LINES = [
    b"ftp://files.example.com/list.txt",
    b"javascript:alert(1)",
    b"\xff\xfe not utf-8",
    b'{"url": "https://example.com/broken"',
    b'{"url": 5}',
    b'{"url": "https://example.com/", "priority": "high"}',
    b'{"url": "https://example.com/", "evil": {"x": 1}}',  # a scalar extra field is form data (scrapy-redis)
    b"https://example.com/with space",
    b"https://",
]


def generate(path: Path, lines: int, seed: int = 1) -> dict[str, int]:
    rng = random.Random(seed)
    counts = {"plain": 0, "json": 0, "bad": 0, "repeat": 0}
    written: list[bytes] = []
    with open(path, "wb") as out:
        for i in range(lines):
            r = rng.random()
            if r < 0.01:
                line = rng.choice(BAD_LINES)
                counts["bad"] += 1
            elif r < 0.03 and written:
                line = rng.choice(written)
                counts["repeat"] += 1
            elif r < 0.07:
                url = f"https://site{rng.randrange(2000)}.example.com/feed/{i}"
                line = json.dumps(
                    {"url": url, "meta": {"source": "bench", "n": i}, "priority": rng.randrange(10)}
                ).encode()
                counts["json"] += 1
            else:
                host = f"news{rng.randrange(2000)}.example.com"
                query = f"?utm_source=newsletter&id={i}" if rng.random() < 0.2 else ""
                line = f"https://{host}/{rng.choice(['world', 'sport', 'tech'])}/2026/article-{i}.html{query}".encode()
                counts["plain"] += 1
            if len(written) < 10000:
                written.append(line)
            out.write(line + b"\n")
    return counts


def run_seed(redis_url: str, path: Path, dedup: bool) -> dict[str, Any]:
    command = [sys.executable, "-m", "distributed_crawler", "seed", "news", "--file", str(path), "--json"]
    if dedup:
        command.append("--dedup")
    env = {**os.environ, "REDIS_URL": redis_url}
    started = time.monotonic()
    proc = subprocess.run(command, capture_output=True, env=env, cwd=ROOT, timeout=1800)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"dcrawl seed failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
    report = json.loads(proc.stdout)
    return {
        "file": path.name,
        "dedup": dedup,
        "wall_seconds": round(wall, 2),
        "lines_per_second_wall": round(report["lines"] / wall),
        "lines_per_second_loop": report["lines_per_second"],
        "lines": report["lines"],
        "pushed": report["pushed"],
        "rejected": report["rejected"],
        "rejected_by_kind": report["rejected_by_kind"],
        "duplicates": report["duplicates"],
        "command": " ".join(["dcrawl", *command[3:]]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    children = Children()
    with tempfile.TemporaryDirectory(prefix="bench-seed-") as tmp:
        work = Path(tmp)
        plain, packed = work / "seeds.txt", work / "seeds.txt.gz"
        log(f"generating {args.lines:,} lines")
        counts = generate(plain, args.lines)
        packed.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=6))
        _, url = start_redis(children, work)
        client = redis.Redis.from_url(url)
        results = []
        for path, dedup in ((plain, False), (packed, False), (packed, True)):
            client.flushall()
            log(f"dcrawl seed --file {path.name}{' --dedup' if dedup else ''}")
            result = run_seed(url, path, dedup)
            stored = client.llen(SEED_KEY)
            if stored != result["pushed"]:
                raise SystemExit(f"{SEED_KEY} holds {stored}, the summary says {result['pushed']} pushed")
            log(
                f"  {result['wall_seconds']} s, {result['lines_per_second_wall']:,} lines/s, pushed {result['pushed']:,}"
            )
            results.append(result)
        children.kill_all()
    summary = {
        "lines": args.lines,
        "generated": counts,
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "runs": results,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for r in results:
            print(
                f"{r['file']:<14} dedup={r['dedup']!s:<5} {r['wall_seconds']:>7.1f} s "
                f"{r['lines_per_second_wall']:>9,} lines/s  pushed {r['pushed']:,}  rejected {r['rejected']:,}  "
                f"duplicates {r['duplicates']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
