"""The local news site plus any number of flaky pages: `/flaky/<name>` answers 503 exactly
`failures` times, then 200 (each page counted on its own). Not linked from anywhere: seed them.

With `failures` equal to RETRY_TIMES a page is stored only if no attempt of it was lost to anything
but the site's own 503s: the check for "a proxy's failure does not spend the page's retries".
"""

from __future__ import annotations

import html
import threading
from urllib.parse import urlsplit

from tests.site.server import NewsSite

PREFIX = "/flaky/"
OK_TEXT = "flaky-page-ok"


class FlakySite(NewsSite):
    def __init__(self, failures: int, **kwargs: int) -> None:
        super().__init__(**kwargs)
        self.failures = failures
        self._answers: dict[str, int] = {}
        self._answers_lock = threading.Lock()

    def flaky_urls(self, names: list[str]) -> list[str]:
        return [f"{self.url}{PREFIX}{name}" for name in names]

    def render(self, raw_path: str) -> tuple[int, str, bytes]:
        path = urlsplit(raw_path).path
        if not path.startswith(PREFIX):
            return super().render(raw_path)
        with self._answers_lock:
            seen = self._answers[path] = self._answers.get(path, 0) + 1
        name = html.escape(path[len(PREFIX) :])
        if seen <= self.failures:
            body = f"<html><head><title>Unavailable</title></head><body><p>{name}: try again</p></body></html>"
            return 503, "text/html; charset=utf-8", body.encode()
        body = (
            f"<html><head><title>Flaky {name}</title></head><body><h1>Flaky {name}</h1>"
            f"<p>{OK_TEXT}: {name} answered after {self.failures} failures.</p></body></html>"
        )
        return 200, "text/html; charset=utf-8", body.encode()
