"""Rendered pages per second per node, and node memory while rendering.

    .venv/bin/python bench/render.py --bare          # 500 pages at 1, 4 and 8 concurrent pages
    .venv/bin/python bench/render.py --pages 200 --concurrency 8

For each concurrency C a real node (`scrapy crawl news`, private redis-server, SQLite storage)
renders N JavaScript pages of the local render site (tests/site/render_site.py, `/r/page/<i>`,
seeded through `/many?n=N`) with `CONCURRENT_REQUESTS = PLAYWRIGHT_MAX_PAGES = C`. `--bare` runs
bare Playwright on the same Chromium and pages in its own process, doing per page what the node
does (reused pages, same launch flags, a route handler, goto, content): the ceiling.

* pages/s: N-1 divided by the time between the first and the last page the browser fetched
  (server side; excludes start-up and the browser launch). Wall-clock, so other work on the
  machine lowers it: `load` is the mean 1-minute load average during the run.
* CPU s/page: user+system CPU of every process of the run (Python, Playwright driver, Chromium)
  per page. Other work barely changes it, so it compares runs taken under different load;
  `cores / (CPU s/page)` is the rate the machine could sustain with nothing else running.
* memory: every 0.5 s, RSS and PSS summed over the run's processes (its process tree, since
  Chromium's renderers are forked by its zygote, plus anything carrying its environment marker).
  PSS counts shared pages once, so it is the honest total for a multi-process browser; RSS counts
  them once per process. "After warm-up" = samples between the 100th and the last page; the trend
  is the least-squares slope over those samples.

Comparisons (`--compare`), every side in the same run, at `--concurrency` (8 by default):

    .venv/bin/python bench/render.py --compare settle --ref main --pages 200
    .venv/bin/python bench/render.py --compare auto --pages 200
    .venv/bin/python bench/render.py --compare plain --pages 200

* `settle`: the JavaScript pages with PLAYWRIGHT_URL_PATTERNS, `PLAYWRIGHT_SETTLE_MS=0` (the old
  wait: `load` only) against the default 500 ms window; `--ref REF` adds a side running the node
  of that git ref (a temporary `git worktree`), the "before" of the whole change.
* `auto`: script-built pages (`/a/app/<i>`, an empty root filled by a script) rendered because a
  pattern says so, against PLAYWRIGHT_AUTO finding them by itself (plain fetch, heuristic, verdict,
  then the browser).
* `plain`: static articles (`/a/static/<i>`), PLAYWRIGHT_AUTO off against on: what the heuristic
  costs a crawl that never needs a browser.

Pages/s there counts distinct pages (a page fetched plain and then rendered counts once).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import LOOPBACK_RATES  # noqa: E402
from tests.site.render_site import MANY_KINDS, RenderSite  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- processes ------------------------------------------------------------------------------------
def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def marked_pids(marker: bytes) -> set[int]:
    pids = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        pids.add(int(entry.name))
            except OSError:
                pass
    return pids


def run_pids(root: int, marker: bytes) -> set[int]:
    """The run's processes: the process tree under `root` plus marked ones (re-parented ones)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (fields := _stat(int(entry.name))):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = marked_pids(marker), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(children.get(pid, []))
    return found


def memory_kb(pids: set[int]) -> tuple[int, int]:
    """(RSS, PSS) in kB summed over pids."""
    rss = pss = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            pass
    return rss, pss


def measure(
    args: list[str],
    env: dict[str, str],
    site: RenderSite,
    pages: int,
    log_path: Path,
    prefix: str = "/r/page/",
    cwd: Path = ROOT,
) -> dict[str, Any]:
    """Run one process (and everything it starts) to its end, sampling it every 0.5 s."""
    marker = f"DC_RENDER_BENCH={uuid.uuid4().hex}"
    env = {**env, marker.split("=")[0]: marker.split("=")[1]}
    already = len(site.hit_times(prefix))
    samples: list[tuple[int, int, int]] = []  # (pages fetched so far, rss kB, pss kB)
    loads: list[float] = []
    cpu_ticks: dict[int, int] = {}  # pid -> utime + stime at its last sample
    started = time.monotonic()
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        while proc.poll() is None:
            pids = run_pids(proc.pid, marker.encode())
            for pid in pids:
                if fields := _stat(pid):
                    cpu_ticks[pid] = int(fields[11]) + int(fields[12])
            rss, pss = memory_kb(pids)
            samples.append((len(site.hit_times(prefix)) - already, rss, pss))
            loads.append(os.getloadavg()[0])
            time.sleep(0.5)
            if time.monotonic() - started > 3600:
                proc.kill()
                raise RuntimeError(f"{args[:3]} did not finish within an hour")
    if proc.returncode != 0:
        raise RuntimeError(f"exit code {proc.returncode}; see {log_path}")
    hits = site.hit_paths(prefix)[already:]
    times = [t for t, _ in hits]
    distinct = len({p for _, p in hits})
    warm_samples = [(n, r, p) for n, r, p in samples if min(100, pages // 5) <= n < pages and r]
    return {
        "pages_per_s": round((distinct - 1) / (times[-1] - times[0]), 2) if distinct > 1 else 0.0,
        "cpu_s_per_page": round(sum(cpu_ticks.values()) / CLOCK_TICKS / max(1, distinct), 4),
        "fetches_per_page": round(len(times) / max(1, distinct), 2),
        "load_mean": round(statistics.fmean(loads), 2) if loads else None,
        "wall_s": round(time.monotonic() - started, 1),
        "samples_after_warmup": len(warm_samples),
        "rss_mb": _spread([r for _, r, _ in warm_samples]),
        "pss_mb": _spread([p for _, _, p in warm_samples]),
        "pss_trend_mb_per_100_pages": _slope([(n, p / 1024) for n, _, p in warm_samples]),
        "processes_left": len(marked_pids(marker.encode())),
        "timeline_pages_rss_pss_mb": [
            [n, round(r / 1024), round(p / 1024)] for n, r, p in samples[:: max(1, len(samples) // 40)]
        ],
        "log": str(log_path),
    }


def _slope(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope, in MB per 100 pages: ~0 when memory stays flat."""
    if len(points) < 3 or len({n for n, _ in points}) < 2:
        return None
    mean_n = statistics.fmean(n for n, _ in points)
    mean_m = statistics.fmean(m for _, m in points)
    num = sum((n - mean_n) * (m - mean_m) for n, m in points)
    den = sum((n - mean_n) ** 2 for n, _ in points)
    return round(100 * num / den, 2)


def _spread(kb: list[int]) -> dict[str, float]:
    if not kb:
        return {}
    mb = [k / 1024 for k in kb]
    mean = statistics.fmean(mb)
    return {
        "mean": round(mean, 1),
        "min": round(min(mb), 1),
        "max": round(max(mb), 1),
        "range_pct": round(100 * max(mean - min(mb), max(mb) - mean) / mean, 1),
    }


def _summary(what: str, r: dict[str, Any]) -> None:
    log(
        f"{what}: {r['pages_per_s']} pages/s (load {r['load_mean']}), {r['cpu_s_per_page']} CPU s/page, "
        f"PSS {r['pss_mb']} trend {r['pss_trend_mb_per_100_pages']} MB/100 pages, RSS {r['rss_mb']}"
    )


# -- the two sides --------------------------------------------------------------------------------
class Redis:
    """A private redis-server (bench/harness.py's start_redis) and a client of it."""

    def __init__(self, workdir: Path) -> None:
        import redis

        from bench.harness import Children, start_redis  # here: the bare worker does not import Scrapy

        self.children = Children()
        self.proc, self.url = start_redis(self.children, workdir)
        self.client = redis.Redis.from_url(self.url)

    def stop(self) -> None:
        self.client.close()
        self.children.stop(self.proc)


def run_node(
    site: RenderSite,
    redis_srv: Redis,
    workdir: Path,
    pages: int,
    concurrency: int,
    settings: tuple[str, ...] = ("PLAYWRIGHT_URL_PATTERNS=/r/page/",),
    kind: str = "js",
    label: str = "node",
    cwd: Path = ROOT,
) -> dict[str, Any]:
    redis_srv.client.flushall()
    redis_srv.client.lpush("news:start_urls", f"{site.url}/many?n={pages}&kind={kind}")
    tag = f"{label.replace(' ', '_')}-{concurrency}"
    db = workdir / f"items-{tag}.db"
    env = {
        **os.environ,
        "SCRAPY_SETTINGS_MODULE": "demo.settings",  # the repo root's default is production's
        "REDIS_URL": redis_srv.url,
        "STORAGE_URL": f"sqlite:///{db}",
        "MAX_IDLE_TIME_BEFORE_CLOSE": "2",
        "NODE_ID": f"bench-{tag}",
    }
    if cwd != ROOT:
        env["PYTHONPATH"] = str(cwd)  # that tree's distributed_crawler, not this one's
    args = [sys.executable, "-m", "scrapy", "crawl", "news"]
    for setting in (*LOOPBACK_RATES, *settings):
        args += ["-s", setting]
    args += [
        "-s",
        "ALLOWED_PRIVATE_NETWORKS=127.0.0.0/8",  # the bench site is on loopback (docs/security.md)
        "-s",
        f"CONCURRENT_REQUESTS={concurrency}",
        "-s",
        f"PLAYWRIGHT_MAX_PAGES={concurrency}",
        "-s",
        "LOG_LEVEL=INFO",
        "-s",  # the rendering cost alone, as before article extraction (its cost: bench/news.py)
        "EXTRACT_MAIN_TEXT=False",
        "-s",  # /r/page/N are filler + a token: near-duplicates whose text would not be stored
        "NEAR_DUPLICATES=False",
        "-s",  # every page stored, whatever its type
        "STORE_PAGE_TYPES=article,list,other",
    ]
    prefix = MANY_KINDS[kind]
    result = {
        "side": label,
        "concurrency": concurrency,
        "pages": pages,
        "settings": list(settings),
        **measure(args, env, site, pages, workdir / f"node-{tag}.log", prefix=prefix, cwd=cwd),
    }
    marker = "%harbour council%" if kind == "static" else "%-token%"
    with sqlite3.connect(db) as conn:
        result["stored_with_token"] = conn.execute(
            "SELECT count(*) FROM items WHERE url LIKE ? AND text LIKE ?", (f"%{prefix}%", marker)
        ).fetchone()[0]
    result["render_stats"] = render_stats((workdir / f"node-{tag}.log").read_text(errors="replace"))
    _summary(f"{label}, {concurrency} pages", result)
    return result


def render_stats(log_text: str) -> dict[str, int]:
    """The node's render/... counters from its closing stats dump."""
    return {k: int(v) for k, v in re.findall(r"'(render/[\w/.-]+)': (\d+)", log_text)}


# (label, settings, page kind) per side.
SCENARIOS: dict[str, list[tuple[str, tuple[str, ...], str]]] = {
    "settle": [
        ("settle off (load only)", ("PLAYWRIGHT_URL_PATTERNS=/r/page/", "PLAYWRIGHT_SETTLE_MS=0"), "js"),
        ("settle 500 ms (default)", ("PLAYWRIGHT_URL_PATTERNS=/r/page/",), "js"),
    ],
    "auto": [
        ("patterns", ("PLAYWRIGHT_URL_PATTERNS=/a/app/",), "app"),
        ("PLAYWRIGHT_AUTO", ("PLAYWRIGHT_AUTO=True",), "app"),
    ],
    "plain": [
        ("auto off", (), "static"),
        ("auto on", ("PLAYWRIGHT_AUTO=True",), "static"),
    ],
}


def checkout(ref: str, workdir: Path) -> Path:
    """A temporary worktree of `ref` (removed by `drop_checkout`)."""
    safe = re.sub(r"[^\w.-]", "_", ref)
    tree = workdir / f"ref-{safe}"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref], cwd=ROOT, check=True, capture_output=True)
    return tree


def drop_checkout(tree: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False, capture_output=True)


def compare(opts: argparse.Namespace, site: RenderSite, redis_srv: Redis, workdir: Path) -> list[dict[str, Any]]:
    sides = SCENARIOS[opts.compare]
    results = []
    tree = checkout(opts.ref, workdir) if opts.ref else None
    try:
        for c in opts.concurrency:
            if tree is not None:
                label, settings, kind = sides[0]
                results.append(
                    run_node(site, redis_srv, workdir, opts.pages, c, settings[:1], kind, f"{opts.ref} (before)", tree)
                )
            for label, settings, kind in sides:
                results.append(run_node(site, redis_srv, workdir, opts.pages, c, settings, kind, label))
    finally:
        if tree is not None:
            drop_checkout(tree)
    return results


def run_bare(site: RenderSite, workdir: Path, pages: int, concurrency: int) -> dict[str, Any]:
    args = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--bare-worker",
        site.url,
        "--pages",
        str(pages),
        "--concurrency",
        str(concurrency),
    ]
    result = {
        "concurrency": concurrency,
        "pages": pages,
        **measure(args, dict(os.environ), site, pages, workdir / f"bare-{concurrency}.log"),
    }
    _summary(f"bare Playwright, {concurrency} pages", result)
    return result


async def bare_worker(url: str, pages: int, concurrency: int) -> None:
    from playwright.async_api import async_playwright
    from scrapy.settings import Settings

    from distributed_crawler.rendering.config import RenderConfig

    async with async_playwright() as p:
        browser = await p.chromium.launch(**RenderConfig.from_settings(Settings()).launch_options())
        context = await browser.new_context()
        pool: list[Any] = []
        slots = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with slots:
                page = pool.pop() if pool else await context.new_page()
                await page.route("**", lambda route, request: route.continue_())
                await page.goto(f"{url}/r/page/{i}")
                await page.content()
                await page.unroute("**")
                pool.append(page)

        await asyncio.gather(*(one(i) for i in range(1, pages + 1)))
        await browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=500)
    parser.add_argument("--concurrency", type=int, nargs="+", default=None, help="default 1 4 8 (--compare: 8)")
    parser.add_argument("--compare", choices=sorted(SCENARIOS), help="sides to compare, in one run")
    parser.add_argument("--ref", help="--compare settle: also run the node of this git ref (e.g. main)")
    parser.add_argument("--bare", action="store_true", help="also measure bare Playwright")
    parser.add_argument("--bare-only", action="store_true", help="only bare Playwright")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--bare-worker", metavar="SITE_URL", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.concurrency is None:
        opts.concurrency = [8] if opts.compare else [1, 4, 8]
    if opts.bare_worker:
        asyncio.run(bare_worker(opts.bare_worker, opts.pages, opts.concurrency[0]))
        return
    if not shutil.which("redis-server"):
        sys.exit("redis-server is missing: run `make setup` (or apt-get install redis-server)")
    workdir = Path(tempfile.mkdtemp(prefix="render-bench-"))
    results: dict[str, Any] = {"cpus": os.cpu_count(), "loadavg_before": os.getloadavg(), "node": [], "bare": []}
    if os.getloadavg()[0] > 0.5:
        log(f"warning: load average {os.getloadavg()[0]:.1f} before the run: other work skews the rates")
    site = RenderSite().start()
    redis_srv = Redis(workdir)
    try:
        if opts.compare:
            results["compare"] = compare(opts, site, redis_srv, workdir)
        for c in [] if opts.compare else opts.concurrency:
            if not opts.bare_only:
                results["node"].append(run_node(site, redis_srv, workdir, opts.pages, c))
            if opts.bare or opts.bare_only:
                results["bare"].append(run_bare(site, workdir, opts.pages, c))
    finally:
        redis_srv.stop()
        site.stop()
    results["loadavg_after"] = os.getloadavg()
    print(json.dumps(results, indent=2))
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
