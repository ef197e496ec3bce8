"""The test news site (tests/site/server.py) in its own process, plus a control endpoint.

Why a wrapper: the site must run in a separate process (its HTTP threads would otherwise fight the
harness for one GIL), yet the benchmarks need its exact hit counts (to count pages fetched twice)
and its expected URL set. `GET /__bench__/state` returns both as JSON; control requests are not
counted. Run: `python bench/site.py --articles 5000` prints `READY <url>` and serves until SIGTERM.
`--sites N --bind 127.0.0.2` serves N sites in this one process, one on each loopback address from
127.0.0.2 on (never 0.0.0.0), and prints `READY <url1> <url2> ...` (bench/frontier.py).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import ipaddress  # noqa: E402

from tests.site.server import FLAKY_FAILURES, NewsSite, _Handler, _Server  # noqa: E402

CONTROL = "/__bench__/state"


class BenchSite(NewsSite):
    """NewsSite that counts hits per raw path with first/last hit times and answers CONTROL."""

    def __init__(self, *args: object, bind: str = "127.0.0.1", flaky: bool = True, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.bind = bind
        if not flaky:  # /flaky answers 200 at once (many-site benches: no retry tail per site)
            self._flaky_count = FLAKY_FAILURES
        self._counts: Counter[str] = Counter()
        self._first_hit: float | None = None  # wall clock (time.time), comparable across processes
        self._last_hit: float | None = None

    def _record(self, path: str) -> None:
        if path.startswith("/__bench__/"):
            return
        now = time.time()
        with self._lock:
            self._counts[path] += 1
            if path != "/robots.txt":
                self._first_hit = self._first_hit or now
                self._last_hit = now

    def start(self) -> str:
        """Like NewsSite.start, on `bind` (a loopback address) instead of 127.0.0.1."""
        if not ipaddress.ip_address(self.bind).is_loopback:
            raise ValueError(f"--bind ({self.bind}) must be a loopback address (127.x.y.z)")
        if self.bind == "127.0.0.1":
            return super().start()
        server = _Server((self.bind, 0), _Handler)
        server.site = self  # type: ignore[attr-defined]
        self._server = server
        self.url = f"http://{self.bind}:{server.server_address[1]}"
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name=f"BenchSite-{self.url}", daemon=True
        )
        self._thread.start()
        return self.url

    def state(self) -> dict[str, object]:
        with self._lock:
            counts = dict(self._counts)
            first, last = self._first_hit, self._last_hit
        return {
            "url": self.url,
            "articles": self.articles,
            "per_page": self.per_page,
            "flaky_failures": FLAKY_FAILURES,
            "hits": counts,
            "first_hit": first,
            "last_hit": last,
            "expected": sorted(self.expected_urls()),
        }

    def render(self, raw_path: str) -> tuple[int, str, bytes]:
        if raw_path == CONTROL:
            return 200, "application/json", json.dumps(self.state()).encode()
        return super().render(raw_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--articles", type=int, default=5000)
    parser.add_argument("--per-page", type=int, default=20)
    parser.add_argument("--bind", default="127.0.0.1", help="loopback address of the (first) site")
    parser.add_argument("--sites", type=int, default=1, help="sites, one per address from --bind on")
    parser.add_argument("--no-flaky", action="store_true", help="/flaky answers 200 at once")
    args = parser.parse_args(argv)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    first = ipaddress.ip_address(args.bind)
    sites = [
        BenchSite(articles=args.articles, per_page=args.per_page, bind=str(first + i), flaky=not args.no_flaky)
        for i in range(args.sites)
    ]
    try:
        urls = [site.start() for site in sites]
        print(f"READY {' '.join(urls)}", flush=True)
        while not stop.wait(0.2):
            pass
    finally:
        for site in sites:
            site.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
