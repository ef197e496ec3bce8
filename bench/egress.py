"""What the browser's egress proxy (rendering/egress.py) costs a node: the same JavaScript pages of
the local render site (tests/site/render_site.py, `/r/page/<i>`) loaded by one Chromium with 4
pages at a time, directly and through the proxy, alternating in one run (docs/security.md).

    .venv/bin/python bench/egress.py --pages 60 --rounds 2

Reports pages/s (wall clock: other work on the machine lowers both sides alike) and the CPU time
of this Python process per page (where the proxy runs, as it would in the node's event loop;
Chromium's own CPU is not counted). The proxy allows 127.0.0.0/8 here (the site is on loopback).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from pathlib import Path

from playwright.async_api import async_playwright

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from distributed_crawler.addresses import AddressRule  # noqa: E402
from distributed_crawler.rendering.config import DEFAULT_CHROMIUM  # noqa: E402
from tests.site.render_site import RenderSite  # noqa: E402

PARALLEL = 4


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run(url: str, through_proxy: bool, pages: int) -> tuple[float, float]:
    """(pages/s, CPU ms per page of this process) for one side."""
    from distributed_crawler.rendering.egress import EgressProxy

    proxy = EgressProxy(AddressRule.from_value("127.0.0.0/8"), lambda url, why: None)
    options: dict = {"executable_path": DEFAULT_CHROMIUM, "args": ["--no-sandbox"]}
    if through_proxy:
        await proxy.start()
        options["proxy"] = {"server": proxy.server}
    try:
        async with async_playwright() as p:
            browser = await p.chromium.launch(**options)
            tabs = [await browser.new_page() for _ in range(PARALLEL)]
            started, cpu = time.monotonic(), _cpu()
            for first in range(1, pages + 1, PARALLEL):
                await asyncio.gather(
                    *(tab.goto(f"{url}/r/page/{first + k}", wait_until="load") for k, tab in enumerate(tabs))
                )
            elapsed, spent = time.monotonic() - started, _cpu() - cpu
            await browser.close()
    finally:
        await proxy.close()
    return pages / elapsed, spent / pages * 1000


async def main(pages: int, rounds: int) -> None:
    with RenderSite() as site:
        for _ in range(rounds):
            for label, through in (("direct", False), ("egress proxy", True)):
                rate, cpu_ms = await run(site.url, through, pages)
                print(f"{label:>12}: {rate:5.1f} pages/s, {cpu_ms:4.1f} ms CPU/page in the node's process", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main(args.pages, args.rounds))
