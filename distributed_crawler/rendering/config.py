"""Rendering settings, read once into RenderConfig, and the errors a render raises.

RenderConfig also makes the per-request decisions: `should_render` (PLAYWRIGHT_URL_PATTERNS, meta
`render` / `dont_render`), the wait condition and the timeout of one request.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import DownloadFailedError, DownloadTimeoutError
from scrapy.http.request import NO_CALLBACK

from distributed_crawler.defaults import SettingsReader
from distributed_crawler.keyspace import check_template, default
from distributed_crawler.meta import (
    DONT_RENDER_META,
    PLAYWRIGHT_META,
    RENDER_META,
    RENDER_SETTLE_MS_META,
    RENDER_TIMEOUT_META,
    RENDER_WAIT_FOR_META,
)

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

DEFAULT_CHROMIUM = "/usr/bin/chromium"
# Headless flags for a closed network: no update checks, no sync, no GPU, no QUIC probing.
CHROMIUM_ARGS = (
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm
)
LOAD_STATES = frozenset({"load", "domcontentloaded", "networkidle", "commit"})
RESOURCE_TYPES = frozenset(
    {
        "document",
        "stylesheet",
        "image",
        "media",
        "font",
        "script",
        "texttrack",
        "xhr",
        "fetch",
        "eventsource",
        "websocket",
        "manifest",
        "other",
    }
)
# The crawler attribute holding the node's one RenderingDownloadHandler (http and https share it;
# PLAYWRIGHT_AUTO's middleware renders through it).
SHARED_HANDLER_ATTR = "_dc_rendering_handler"
# Time kept back from PLAYWRIGHT_RENDER_TIMEOUT for reading the frames after settling (at most).
FRAMES_RESERVE_SECONDS = 2.0
INSTALL_HINT = "install it with `apt-get install chromium` or set PLAYWRIGHT_EXECUTABLE_PATH"


class RenderError(DownloadFailedError):
    """A page marked for rendering could not be rendered (retried like a failed download)."""


class RenderTimeoutError(DownloadTimeoutError):
    """A render did not finish within PLAYWRIGHT_RENDER_TIMEOUT (retried like a timeout)."""


class BrowserUnavailableError(RenderError):
    """No browser on this node: pages marked for rendering cannot be fetched here."""


class RenderInterruptedError(RenderError):
    """The node is stopping and its browser went away mid-render (a stop signal sent to the whole
    process group or cgroup reaches the Playwright driver too). RenderingMiddleware puts the request
    back in the queue without counting a retry."""


@dataclass(frozen=True)
class RenderConfig:
    url_patterns: tuple[re.Pattern[str], ...] = ()
    executable_path: str | None = None
    unavailable_reason: str | None = None  # set when no local browser can be launched
    remote_browser: bool = False
    wait_for: str = "load"
    render_timeout: float = 30.0
    abort_resource_types: frozenset[str] = frozenset({"image", "media", "font"})
    max_pages: int = 8
    restart_after_pages: int = 1000
    extra_launch_options: dict[str, Any] = field(default_factory=dict)
    settle_ms: int = 500
    settle_max_ms: int = 5000
    auto: bool = False
    auto_samples: int = 3
    auto_key: str = default("PLAYWRIGHT_AUTO_KEY")

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RenderConfig:
        read = SettingsReader(settings)
        patterns = []
        for raw in read.list("PLAYWRIGHT_URL_PATTERNS"):
            try:
                patterns.append(re.compile(raw))
            except re.error as exc:
                raise ValueError(
                    f"PLAYWRIGHT_URL_PATTERNS: {raw!r} is not a valid regular expression ({exc}); "
                    "on the command line separate patterns with commas, in settings.py use a list"
                ) from None
        wait_for = read.str("PLAYWRIGHT_WAIT_FOR")
        if not wait_for:
            raise ValueError(
                "PLAYWRIGHT_WAIT_FOR is empty: use a load state (load, domcontentloaded, networkidle) or a CSS selector"
            )
        timeout = read.float("PLAYWRIGHT_RENDER_TIMEOUT", above=0, hint="seconds")
        abort = frozenset(t.lower() for t in read.list("PLAYWRIGHT_ABORT_RESOURCE_TYPES"))
        unknown = sorted(abort - RESOURCE_TYPES)
        if unknown:
            raise ValueError(
                f"PLAYWRIGHT_ABORT_RESOURCE_TYPES ({', '.join(unknown)}) must be Playwright resource "
                f"types: {', '.join(sorted(RESOURCE_TYPES - {'document'}))}"
            )
        if "document" in abort:
            raise ValueError("PLAYWRIGHT_ABORT_RESOURCE_TYPES must not contain 'document': no page would load")
        max_pages = read.int("PLAYWRIGHT_MAX_PAGES", min=1)
        restart = read.int("PLAYWRIGHT_RESTART_AFTER_PAGES", min=0, hint="(0 = never)")

        settle_ms = read.int("PLAYWRIGHT_SETTLE_MS", min=0, hint="milliseconds (0 = do not wait)")
        settle_max_ms = read.int("PLAYWRIGHT_SETTLE_MAX_MS", min=0, hint="milliseconds")
        if settle_ms and settle_max_ms < settle_ms:
            raise ValueError(
                f"PLAYWRIGHT_SETTLE_MAX_MS ({settle_max_ms}) must be at least PLAYWRIGHT_SETTLE_MS ({settle_ms}): "
                "no page could ever settle; raise it (5000) or set PLAYWRIGHT_SETTLE_MS=0"
            )
        auto = read.bool("PLAYWRIGHT_AUTO")
        auto_samples = read.int("PLAYWRIGHT_AUTO_SAMPLES", min=1, hint="pages")
        auto_key = read.str("PLAYWRIGHT_AUTO_KEY")
        check_template("PLAYWRIGHT_AUTO_KEY", auto_key)

        launch = dict(settings.getdict("PLAYWRIGHT_LAUNCH_OPTIONS") or {})
        remote = bool(settings.get("PLAYWRIGHT_CDP_URL") or settings.get("PLAYWRIGHT_CONNECT_URL"))
        chosen = read.str("PLAYWRIGHT_EXECUTABLE_PATH")
        path: str | None
        reason = None
        if chosen:
            path = chosen
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                reason = f"PLAYWRIGHT_EXECUTABLE_PATH ({path}) is not an executable file; {INSTALL_HINT}"
        elif launch.get("executable_path"):
            path = str(launch["executable_path"])
            if not os.path.isfile(path):
                reason = f"PLAYWRIGHT_LAUNCH_OPTIONS executable_path ({path}) does not exist; {INSTALL_HINT}"
        elif os.path.isfile(DEFAULT_CHROMIUM):
            path = DEFAULT_CHROMIUM
        else:
            path = None
            reason = f"no Chromium at {DEFAULT_CHROMIUM} and PLAYWRIGHT_EXECUTABLE_PATH is not set; {INSTALL_HINT}"
        if remote:
            reason = None  # PLAYWRIGHT_CDP_URL / PLAYWRIGHT_CONNECT_URL: the browser runs elsewhere
        return cls(
            url_patterns=tuple(patterns),
            executable_path=path,
            unavailable_reason=reason,
            remote_browser=remote,
            wait_for=wait_for,
            render_timeout=timeout,
            abort_resource_types=abort,
            max_pages=max_pages,
            restart_after_pages=restart,
            extra_launch_options=launch,
            settle_ms=settle_ms,
            settle_max_ms=settle_max_ms,
            auto=auto,
            auto_samples=auto_samples,
            auto_key=auto_key,
        )

    # -- decisions ------------------------------------------------------------------------
    def should_render(self, request: Request) -> bool:
        return bool(self.explicit_decision(request))

    def explicit_decision(self, request: Request) -> bool | None:
        """True / False when the request says (meta, PLAYWRIGHT_URL_PATTERNS, an internal download),
        None when nothing does: then PLAYWRIGHT_AUTO may decide after the plain download."""
        meta = request.meta
        if meta.get(DONT_RENDER_META):
            return False
        if meta.get(RENDER_META) or meta.get(PLAYWRIGHT_META):
            return True
        if request.callback is NO_CALLBACK:  # robots.txt and other internal downloads
            return False
        if any(p.search(request.url) for p in self.url_patterns):
            return True
        if RENDER_META in meta or PLAYWRIGHT_META in meta:  # render: False, playwright: False
            return False
        return None

    def settle_of(self, request: Request) -> tuple[float, float]:
        """(quiet window, longest wait) in seconds; meta `render_settle_ms` overrides the window."""
        value = request.meta.get(RENDER_SETTLE_MS_META)
        quiet_ms = self.settle_ms if value is None else _non_negative_ms(value, self.settle_ms)
        return quiet_ms / 1000, max(self.settle_max_ms, 2 * quiet_ms) / 1000

    def wait_for_of(self, request: Request) -> str:
        return str(request.meta.get(RENDER_WAIT_FOR_META) or self.wait_for)

    def timeout_of(self, request: Request) -> float:
        value = request.meta.get(RENDER_TIMEOUT_META)
        return float(value) if value else self.render_timeout

    def launch_options(self) -> dict[str, Any]:
        """Options for `chromium.launch`: ours, then PLAYWRIGHT_LAUNCH_OPTIONS (its args appended)."""
        # The browser outlives Ctrl-C and hangups, so Scrapy's graceful stop can finish its renders.
        options: dict[str, Any] = {"headless": True, "handle_sigint": False, "handle_sighup": False}
        options.update({k: v for k, v in self.extra_launch_options.items() if k != "args"})
        if self.executable_path:
            options["executable_path"] = self.executable_path
        args = list(CHROMIUM_ARGS)
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium refuses to start its sandbox as root (warned at launch)
        options["args"] = args + [a for a in self.extra_launch_options.get("args") or [] if a not in args]
        return options


_warned_no_sandbox = False


def warn_no_sandbox() -> None:
    """Once per process: a renderer exploit on a root node without a sandbox owns the machine."""
    global _warned_no_sandbox
    if not _warned_no_sandbox:
        _warned_no_sandbox = True
        logger.warning(
            "Running as root: Chromium starts with --no-sandbox (it refuses its sandbox as root), so a page "
            "that exploits the renderer runs as root; run workers as a non-root user (deploy/, docs/security.md)"
        )


def _non_negative_ms(value: Any, default: int) -> int:
    """A meta value from a spider or a seed: a number of milliseconds, else the default."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return max(0, min(number, 600_000))


def is_load_state(wait_for: str) -> bool:
    return wait_for in LOAD_STATES


def first_line(exc: Any) -> str:
    """The first line of an error's message (Playwright's run to many lines)."""
    text = str(getattr(exc, "message", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
