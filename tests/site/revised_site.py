"""A local news site whose stories are edited after they are first read (the life of a story).

`/` links to `/story/<n>` for n in 1..stories. Each story is a dated news article (JSON-LD
NewsArticle, og:type article). The site edits a story each time it serves it in full: the k-th
full answer of a story is its revision k (0 = as published): revision 1 appends a paragraph and a
correction notice, revision 2 also changes the headline; from revision 2 on each adds a paragraph.
Every page sends an `ETag` (a digest of its body); a matching `If-None-Match` gets `304`. Every
request is logged with its status, so a test counts fetches per story.

Standard library only.
"""

from __future__ import annotations

import hashlib
import html
import json
import random
import re
import threading
from http.server import BaseHTTPRequestHandler

from tests.site.local import LocalSite, send

_STORY = re.compile(r"^/story/([1-9][0-9]{0,5})$")
WORDS = (
    "council harbour railway bakery museum library stadium orchard bridge clinic market ferry school "
    "theatre river tunnel garden airport factory vineyard festival archive hospital canal quarry tower "
    "observatory brewery cathedral lighthouse reservoir highway gallery pier laboratory monastery"
).split()
CORRECTION = "Correction: an earlier version of this story misstated the number of new routes."


class RevisedNewsSite(LocalSite):
    def __init__(self, stories: int = 3) -> None:
        self.stories = stories
        self._lock = threading.Lock()
        self._served: dict[int, int] = {}  # story -> full answers so far (= its next revision)
        self._log: list[tuple[str, int]] = []
        self.url = ""

    def story_paths(self) -> list[str]:
        return [f"/story/{n}" for n in range(1, self.stories + 1)]

    def hits(self, path: str, status: int | None = None) -> int:
        with self._lock:
            return sum(1 for p, s in self._log if p == path and (status is None or s == status))

    @staticmethod
    def story(n: int, revision: int) -> tuple[str, str]:
        """(headline, body paragraphs HTML) of story n at `revision`."""
        title = f"Night buses reach the north, story {n}" + (", council confirms" if revision >= 2 else "")
        rng = random.Random(n)  # each story its own words: stories are not near-duplicates of each other
        paragraphs = [" ".join(rng.choice(WORDS) for _ in range(18)).capitalize() + "." for _ in range(4)]
        if revision >= 1:
            paragraphs.append("The first buses on the new routes will run from the first of next month.")
            paragraphs.append(CORRECTION)
        paragraphs += [
            f"Update {k}: the council published the timetable for route {k}." for k in range(2, revision + 1)
        ]
        return title, "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)

    def page(self, path: str, full: bool) -> bytes | None:
        if path == "/":
            links = "".join(f'<li><a href="{p}">Story</a></li>' for p in self.story_paths())
            return (
                f"<!doctype html><html><head><title>Front</title></head><body><ul>{links}</ul></body></html>".encode()
            )
        match = _STORY.match(path)
        if not match or not 1 <= int(match.group(1)) <= self.stories:
            return None
        n = int(match.group(1))
        with self._lock:
            revision = self._served.get(n, 0)
            if full:
                self._served[n] = revision + 1
        title, body = self.story(n, revision)
        ld = json.dumps(
            {
                "@context": "https://schema.org",
                "@type": "NewsArticle",
                "headline": title,
                "datePublished": "2026-12-01T08:00:00Z",
                "author": {"@type": "Person", "name": "Ada Reporter"},
            }
        )
        return (
            "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><meta property='og:type' content='article'>"
            f"<script type='application/ld+json'>{ld}</script></head>"
            f"<body><article><h1>{html.escape(title)}</h1>{body}</article></body></html>"
        ).encode()

    def respond(self, path: str, if_none_match: str | None) -> tuple[int, bytes, list[tuple[str, str]]]:
        if path == "/robots.txt":
            return 200, b"User-agent: *\nAllow: /\n", [("Content-Type", "text/plain")]
        preview = self.page(path, full=False)
        if preview is None:
            return 404, b"not found", [("Content-Type", "text/plain")]
        etag = '"' + hashlib.sha1(preview).hexdigest()[:16] + '"'
        if if_none_match is not None and etag in [t.strip() for t in if_none_match.split(",")]:
            return 304, b"", [("ETag", etag)]
        body = self.page(path, full=True) or b""
        return 200, body, [("Content-Type", "text/html; charset=utf-8"), ("ETag", etag)]

    def start(self) -> str:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0].split("#", 1)[0]
                status, body, headers = site.respond(path, self.headers.get("If-None-Match"))
                with site._lock:
                    site._log.append((path, status))
                send(self, status, body, headers)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.url = self.serve(Handler)
        return self.url
