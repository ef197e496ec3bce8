"""Replay speed: WARC records re-extracted into a database per second, against extraction alone.

    .venv/bin/python bench/replay.py --pages 400 --json

Writes a WARC of `--pages` article pages (gzip on the wire, as a crawl archives them: ~6 KB of text
each, distinct words per page), then times, in this process: (a) the news spider's extraction
alone on the same bodies (`extract_page`), (b) `dcrawl replay` into an empty SQLite database
(near-duplicate check off: no Redis), (c) the same replay again (every record known: the
idempotent pass). 20 pages are extracted first, untimed (imports and caches). The machine is
shared: read the figures as a ratio.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import tempfile
import time
from io import BytesIO
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scrapy import Request
from scrapy.http import HtmlResponse
from scrapy.settings import Settings
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from distributed_crawler.cli.main import parse_args
from distributed_crawler.news.config import NewsConfig
from distributed_crawler.spiders.news import extract_page

WORDS = (
    "council harbour railway bakery museum library stadium orchard bridge clinic market ferry school theatre river "
    "tunnel garden airport factory vineyard festival archive hospital canal quarry tower observatory brewery"
).split()


def page(n: int) -> bytes:
    rng = random.Random(n)
    paragraphs = "".join(
        "<p>" + " ".join(rng.choice(WORDS) for _ in range(60)).capitalize() + ".</p>" for _ in range(14)
    )
    return (
        f"<!doctype html><html lang='en'><head><title>Story {n}</title><meta property='og:type' content='article'>"
        f"</head><body><nav><a href='/'>Home</a></nav><article><h1>Story {n}</h1>{paragraphs}</article>"
        "<footer>Example News</footer></body></html>"
    ).encode()


def write_warc(path: Path, pages: int) -> list[tuple[str, bytes]]:
    bodies = [(f"https://news.example/2026/11/story-{n}", page(n)) for n in range(pages)]
    with open(path, "wb") as out:
        writer = WARCWriter(out, gzip=True)
        for url, body in bodies:
            http = StatusAndHeaders(
                "200 OK", [("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "gzip")], "HTTP/1.1"
            )
            record = writer.create_warc_record(url, "response", payload=BytesIO(gzip.compress(body)), http_headers=http)
            writer.write_record(record)
    return bodies


def replay(warc: Path, db: str) -> tuple[float, dict]:
    args = parse_args(["replay", "news", str(warc), "--to", db, "--json", "-s", "NEAR_DUPLICATES=False"])
    started = time.perf_counter()
    out = sys.stdout
    sys.stdout = BytesIOText()
    try:
        args.func(args)
        printed = sys.stdout.getvalue()
    finally:
        sys.stdout = out
    return time.perf_counter() - started, json.loads(printed)


class BytesIOText:
    """A stdout that keeps what the command prints."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def getvalue(self) -> str:
        return "".join(self.parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=400)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        warc = Path(tmp) / "bench.warc.gz"
        bodies = write_warc(warc, args.pages)
        news = NewsConfig.from_settings(Settings())
        for url, body in bodies[:20]:  # warm-up (imports, lxml and trafilatura caches): not timed
            extract_page(news, HtmlResponse(url, body=body, request=Request(url)))
        started = time.perf_counter()
        for url, body in bodies:
            extract_page(news, HtmlResponse(url, body=body, request=Request(url)))
        alone = time.perf_counter() - started
        db = f"sqlite:///{Path(tmp) / 'items.db'}"
        first, counts = replay(warc, db)
        again, counts_again = replay(warc, db)
    result = {
        "pages": args.pages,
        "extraction_alone_per_s": round(args.pages / alone, 1),
        "replay_per_s": round(args.pages / first, 1),
        "replay_again_per_s": round(args.pages / again, 1),
        "replay_share_of_extraction": round(alone / first, 2),
        "first": counts,
        "again": counts_again,
    }
    print(json.dumps(result, indent=2) if args.json else result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
