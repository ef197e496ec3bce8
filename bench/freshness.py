"""Freshness: how late the cluster stores a story after it is published, and how soon a source that
stops publishing is flagged.

    .venv/bin/python bench/freshness.py --sources 6 --silent 2 --every 4 --recrawl 3 --duration 60 --json

A local site (tests/site/fresh_site.py) serves M sources, each on its own loopback address,
publishing a story every N s on each; the front pages are revisited every `--recrawl` s
(RECRAWL_RULES), stories never. Halfway through, `--silent` sources stop publishing. Two workers
and a private redis-server run here. Reported:
- publish-to-stored lag p50/p95 of every story: the `time` of its `new` event in `{bench}:events`
  minus its publication time (goal: p95 <= recrawl interval + 10 s);
- per silent source, the seconds from its last story to its `source_silent` alert (goal: every
  silent source flagged), and the alerts raised for sources that kept publishing (goal: none).
`SOURCE_SILENT_MIN_HOURS` is `--silent-after` seconds here (6 hours in production).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import Children, log, start_redis  # noqa: E402
from tests.site.fresh_site import FreshSite  # noqa: E402

SPIDER = "news"


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=6)
    parser.add_argument("--silent", type=int, default=2, help="sources that stop publishing halfway")
    parser.add_argument("--every", type=float, default=4.0, help="seconds between stories of a source")
    parser.add_argument("--recrawl", type=float, default=3.0, help="revisit interval of the front pages (s)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of publishing")
    parser.add_argument("--silent-after", type=float, default=20.0, help="SOURCE_SILENT_MIN_HOURS, in seconds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    children = Children()
    with tempfile.TemporaryDirectory() as tmp, FreshSite(sources=args.sources, stories=1) as site:
        workdir = Path(tmp)
        _, redis_url = start_redis(children, workdir)
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        rules = json.dumps({r"/$": [args.recrawl, args.recrawl]})
        settings = {
            "RECRAWL_RULES": rules,
            "RECRAWL_POLL_SECONDS": "0.2",
            "ALLOWED_PRIVATE_NETWORKS": "127.0.0.0/8",
            "STORE_PAGE_TYPES": "article",
            "NEAR_DUPLICATES": "False",
            "DOMAIN_RATE_LIMIT": "0",
            "DOMAIN_MAX_IN_FLIGHT": "0",
            "SOURCE_SILENT_MIN_HOURS": str(args.silent_after / 3600),
            "SOURCE_CHECK_SECONDS": "1",
            "LOG_LEVEL": "INFO",
        }
        env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
        env.update(
            {
                "SCRAPY_SETTINGS_MODULE": "demo.settings",  # the repo root's default is production's
                "REDIS_URL": redis_url,
                "STORAGE_URL": f"sqlite:///{workdir / 'items.db'}",
                "MAX_IDLE_TIME_BEFORE_CLOSE": "0",
            }
        )
        procs = []
        for node in ("f1", "f2"):
            cmd = [sys.executable, "-m", "scrapy", "crawl", SPIDER]
            for key, value in settings.items():
                cmd += ["-s", f"{key}={value}"]
            with open(workdir / f"{node}.log", "ab") as out:
                procs.append(
                    children.start(cmd, cwd=ROOT, env={**env, "NODE_ID": node}, stdout=out, stderr=subprocess.STDOUT)
                )
        deadline = time.monotonic() + 60
        while not all("Scheduler on" in (workdir / f"{n}.log").read_text(errors="replace") for n in ("f1", "f2")):
            if time.monotonic() > deadline:
                raise SystemExit("workers did not start; logs in " + str(workdir))
            time.sleep(0.1)
        for url in site.urls:
            client.lpush(f"{SPIDER}:start_urls", url + "/")
        log(f"{args.sources} sources publishing every {args.every}s for {args.duration:.0f}s, recrawl {args.recrawl}s")
        site.run_publisher(args.every)
        time.sleep(args.duration / 2)
        silenced: dict[str, float] = {}
        for i in range(args.sources - args.silent, args.sources):
            site.silence(i)
            silenced[site.urls[i].split("//")[1].split(":")[0]] = time.time()
        time.sleep(args.duration / 2)
        # wait for the silent sources' alerts (at most 3 x the silence threshold more)
        wait_until = time.monotonic() + 3 * args.silent_after + 10
        while time.monotonic() < wait_until:
            alerted = {json.loads(a).get("source") for a in client.lrange("{news}:alerts", 0, -1)}
            if set(silenced) <= alerted:
                break
            time.sleep(0.5)
        published = dict(site.published_log)
        stored_at = {}
        for _, fields in client.xrange("{news}:events"):
            if fields.get("event") == "new" and fields["url"] not in stored_at:
                stored_at[fields["url"]] = float(fields["time"])
        settled = {u: p for u, p in published.items() if p < time.time() - args.recrawl - 10}
        lags = [stored_at[u] - p for u, p in settled.items() if u in stored_at]
        missing = [u for u in settled if u not in stored_at]
        alerts = [json.loads(a) for a in client.lrange("{news}:alerts", 0, -1)]
        silent_alerts = [a for a in alerts if a.get("kind") == "source_silent" and a.get("state") == "silent"]
        last_story = {
            host: max((p for u, p in published.items() if f"//{host}:" in u), default=0.0) for host in silenced
        }
        flagged = {
            a["source"]: round(a["time"] - last_story[a["source"]], 1) for a in silent_alerts if a["source"] in silenced
        }
        false_alarms = sorted({a["source"] for a in silent_alerts if a["source"] not in silenced})
        for proc in procs:
            children.stop(proc)
        result: dict[str, Any] = {
            "sources": args.sources,
            "silent_sources": len(silenced),
            "every_seconds": args.every,
            "recrawl_seconds": args.recrawl,
            "silent_after_seconds": args.silent_after,
            "stories": len(settled),
            "stored": len(lags),
            "missing": len(missing),
            "lag_p50_seconds": round(percentile(lags, 0.5) or 0, 2),
            "lag_p95_seconds": round(percentile(lags, 0.95) or 0, 2),
            "lag_goal_seconds": args.recrawl + 10,
            "flagged_after_last_story_seconds": flagged,
            "silent_not_flagged": sorted(set(silenced) - set(flagged)),
            "false_alarms": false_alarms,
        }
        result["goal_met"] = (
            result["lag_p95_seconds"] <= result["lag_goal_seconds"]
            and not result["silent_not_flagged"]
            and not false_alarms
            and not missing
        )
        children.kill_all()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0 if result["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
