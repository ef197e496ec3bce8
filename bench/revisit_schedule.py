"""The revisit schedule's size over simulated months: ARTICLE_REVISITS (ends) against a rule (never ends).

    .venv/bin/python bench/revisit_schedule.py --months 3 --per-hour 10 --json

Against one private redis-server, with the nodes' own scripts (recrawl_record.lua, recrawl_move.lua):
every simulated hour `--per-hour` new articles are fetched for the first time and every due URL is
moved into the frontier and recorded as fetched; one fetch in `--lose-every` never reports back
(a dead-lettered request, a node that died before recording). Time is simulated: between two hours a
small script moves every stored time one hour into the past (the zset's due times, the states'
first fetch and end), which is what the server clock would have done; nothing is timed, every
figure is a count and comes out the same on every run.

Two schedules side by side, on two spiders of one server:
- `plan`: articles on ARTICLE_REVISITS (default [3600, 21600, 86400]) and 10 section pages on a rule
  `[600, 3600]` that never ends;
- `rule`: the same articles on a rule `[3600, 86400]` (how articles were revisited before: they never
  leave) and the same sections.
Printed per simulated month: URLs in the schedule (zset entries and states), fetches made.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scrapy.settings import Settings

from bench.harness import log, private_redis
from distributed_crawler.connection.batch import Batch
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.recrawl.schedule import RecrawlKeys, RevisitSchedule, recorded_from

HOUR = 3600.0
SECTIONS = 10
SECTION_RULE = (600.0, 3600.0)
ARTICLE_RULE = (3600.0, 86400.0)

# The simulated clock: every stored time one step into the past (KEYS schedule, state; ARGV seconds).
SHIFT = """
local dt = tonumber(ARGV[1])
local due = redis.call("ZRANGE", KEYS[1], 0, -1, "WITHSCORES")
for i = 1, #due, 2 do redis.call("ZADD", KEYS[1], tonumber(due[i + 1]) - dt, due[i]) end
local states = redis.call("HGETALL", KEYS[2])
for i = 1, #states, 2 do
  local value = states[i + 1]
  local nl = string.find(value, "\\n", 1, true)
  local iv, born, step, ends = string.match(string.sub(value, 1, nl - 1), "^([^;]+);([^;]+);([^;]+);([^;]+)$")
  if iv then
    local moved_ends = tonumber(ends)
    if moved_ends > 0 then moved_ends = moved_ends - dt end
    local timing = string.format("%s;%.3f;%s;%.3f", iv, tonumber(born) - dt, step, moved_ends)
    redis.call("HSET", KEYS[2], states[i], timing .. string.sub(value, nl))
  end
end
return #due / 2
"""


def member(url: str) -> str:
    return make_member(json.dumps({"v": 1, "url": url, "slot": "news.example", "again": 1}, separators=(",", ":")), 0)


class Simulation:
    """One spider's schedule on the shared server, fed hour by hour."""

    def __init__(self, client: redis.Redis, spider: str, articles_on_plan: bool, plan: tuple[float, ...]) -> None:
        settings = Settings()
        self.client = client
        self.keys = RecrawlKeys.from_settings(settings, spider)
        self.spider_keys = SpiderKeys.from_settings(settings, spider)
        self.schedule = RevisitSchedule(client, frontier_for_mode(client, self.spider_keys, "host"))
        self.shift = client.register_script(SHIFT)
        self.articles_on_plan = articles_on_plan
        self.plan = plan
        self.fetches = 0
        self.article_fetches = 0
        self.ended = 0
        self.published = 0
        self.revisit: dict[str, tuple[tuple[float, float], tuple[float, ...] | None]] = {}

    def fetch(self, batch: list[tuple[str, str]], lose_every: int) -> None:
        """One fetch of each (fingerprint, URL or "" = the stored request), recorded as the nodes do
        (pipelined), but for the lost ones."""
        calls = Batch(self.client)
        for fp, url in batch:
            self.fetches += 1
            self.article_fetches += fp.startswith("a")
            if self.fetches % lose_every == 0:
                continue
            interval, plan = self.revisit[fp]
            digest = fp  # the page never changes: an adaptive interval grows to its max
            m = member(url) if url else ""
            record = self.schedule.revisit_record(fp, interval, 2.0, "body", digest=digest, member=m, plan=plan)
            calls.script(*self.schedule.write_call(record))
        self.ended += sum(recorded_from(reply).ended for reply in run_sync(calls.execute()))

    def hour(self, per_hour: int, lose_every: int) -> None:
        first: list[tuple[str, str]] = []
        if not self.revisit:  # the sections, first fetched at the start
            for s in range(SECTIONS):
                self.revisit[f"s{s}"] = (SECTION_RULE, None)
                first.append((f"s{s}", f"https://news.example/section/{s}"))
        for _ in range(per_hour):
            self.published += 1
            fp = f"a{self.published}"
            if self.articles_on_plan:
                self.revisit[fp] = ((self.plan[0], self.plan[0]), self.plan)
            else:
                self.revisit[fp] = (ARTICLE_RULE, None)
            first.append((fp, f"https://news.example/story/{self.published}"))
        self.fetch(first, lose_every)
        self.shift(keys=[self.keys.schedule, self.keys.state], args=[HOUR])
        due = [fp.decode() for fp in self.client.zrangebyscore(self.keys.schedule, "-inf", self.now())]
        while run_sync(self.schedule.move_due(500, HOUR)).moved >= 500:
            pass
        self.client.delete(*self.client.keys(f"{{{self.spider_keys.spider}}}:q:*"), self.spider_keys.ready)
        pipe = self.client.pipeline(transaction=False)
        for fp in due:
            pipe.hexists(self.keys.state, fp)
        alive = [fp for fp, there in zip(due, pipe.execute()) if there]  # not removed by the move (ended)
        self.fetch([(fp, "") for fp in alive], lose_every)

    def now(self) -> float:
        seconds, micros = self.client.time()
        return seconds + micros / 1e6

    def size(self) -> dict[str, int]:
        return {
            "scheduled": int(self.client.zcard(self.keys.schedule)),
            "states": int(self.client.hlen(self.keys.state)),
            "fetches": self.fetches,
            "article_fetches": self.article_fetches,
            "articles": self.published,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--months", type=int, default=3)
    parser.add_argument("--per-hour", type=int, default=10, help="new articles per simulated hour")
    parser.add_argument("--lose-every", type=int, default=100, help="one fetch in N never reports back")
    parser.add_argument("--plan", default="3600,21600,86400", help="ARTICLE_REVISITS, seconds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    plan = tuple(float(s) for s in args.plan.split(","))
    months: list[dict] = []
    with private_redis() as client:
        ending = Simulation(client, "plan", True, plan)
        endless = Simulation(client, "rule", False, plan)
        for month in range(1, args.months + 1):
            for _ in range(30 * 24):
                ending.hour(args.per_hour, args.lose_every)
                endless.hour(args.per_hour, args.lose_every)
            months.append({"month": month, "plan": ending.size(), "rule": endless.size()})
            log(f"month {month}: {months[-1]}")
    per_day = args.per_hour * 24
    result = {
        "per_hour": args.per_hour,
        "lose_every": args.lose_every,
        "article_revisits": list(plan),
        "sections": SECTIONS,
        "months": months,
        "article_fetches_per_article": {
            name: round(months[-1][name]["article_fetches"] / max(1, months[-1][name]["articles"]), 3)
            for name in ("plan", "rule")
        },
        "steady_state_bound": SECTIONS + per_day * (plan[-1] / 86400 + 2 * HOUR / 86400) + args.per_hour,
    }
    print(json.dumps(result, indent=2) if args.json else result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
