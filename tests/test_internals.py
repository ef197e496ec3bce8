"""distributed_crawler/internals.py still matches the installed Scrapy and scrapy-playwright.

Fast (no crawl, no browser). A failure names what changed: re-check internals.py then.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import subprocess
import sys

import pytest
from scrapy import Request
from scrapy_playwright.handler import Config, ScrapyPlaywrightDownloadHandler

from distributed_crawler import internals
from distributed_crawler.rendering.handler import RenderingDownloadHandler

RECHECK = "re-check distributed_crawler/internals.py"


def _load(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _params(func: object) -> tuple[str, ...]:
    return tuple(inspect.signature(func).parameters)  # type: ignore[arg-type]


def test_versions_are_the_checked_ones() -> None:
    scrapy = importlib.metadata.version("scrapy")
    playwright = importlib.metadata.version("scrapy-playwright")
    assert scrapy == internals.CHECKED_SCRAPY, (
        f"Scrapy {scrapy} installed, internals.py was checked against {internals.CHECKED_SCRAPY}: {RECHECK}"
    )
    assert playwright == internals.CHECKED_SCRAPY_PLAYWRIGHT, (
        f"scrapy-playwright {playwright} installed, internals.py was checked against "
        f"{internals.CHECKED_SCRAPY_PLAYWRIGHT}: {RECHECK}"
    )


@pytest.mark.parametrize(("owner", "name", "params"), internals.SCRAPY_CONTRACT, ids=lambda v: str(v))
def test_scrapy_internals_exist(owner: str, name: str, params: tuple[str, ...] | None) -> None:
    version = importlib.metadata.version("scrapy")
    cls = _load(owner)
    # Instance attributes are set in __init__ (or open_spider): look for them in its source.
    found = hasattr(cls, name) or any(
        f"self.{name}" in inspect.getsource(m) for _, m in inspect.getmembers(cls, inspect.isfunction)
    )
    assert found, f"Scrapy {version} changed {owner}.{name} (gone): {RECHECK}"
    if params is not None:
        got = _params(getattr(cls, name))
        assert got == params, f"Scrapy {version} changed {owner}.{name}{got} (expected {params}): {RECHECK}"


@pytest.mark.parametrize("name", sorted(internals.PLAYWRIGHT_OVERRIDES))
def test_overridden_scrapy_playwright_methods_exist(name: str) -> None:
    version = importlib.metadata.version("scrapy-playwright")
    expected = internals.PLAYWRIGHT_OVERRIDES[name]
    theirs = getattr(ScrapyPlaywrightDownloadHandler, name, None)
    assert theirs is not None, f"scrapy-playwright {version} changed {name} (gone): {RECHECK}"
    assert _params(theirs) == expected, (
        f"scrapy-playwright {version} changed {name}{_params(theirs)} (expected {expected}): {RECHECK}"
    )
    is_async = name not in internals.PLAYWRIGHT_SYNC_OVERRIDES
    assert inspect.iscoroutinefunction(theirs) is is_async, (
        f"scrapy-playwright {version} changed {name} (async: {not is_async} -> {is_async}): {RECHECK}"
    )
    ours = RenderingDownloadHandler.__dict__.get(name)
    assert ours is not None, (
        f"RenderingDownloadHandler no longer overrides {name}: update internals.PLAYWRIGHT_OVERRIDES"
    )
    assert inspect.iscoroutinefunction(ours) is is_async


def test_the_handler_overrides_only_the_listed_private_methods() -> None:
    ours = {
        n
        for n, v in RenderingDownloadHandler.__dict__.items()
        if callable(v) and n.startswith("_") and not n.startswith("__")
    }
    overridden = {n for n in ours if hasattr(ScrapyPlaywrightDownloadHandler, n)}
    assert overridden == set(internals.PLAYWRIGHT_OVERRIDES), "list every override in internals.PLAYWRIGHT_OVERRIDES"
    assert RenderingDownloadHandler.OVERRIDES == tuple(internals.PLAYWRIGHT_OVERRIDES)


@pytest.mark.parametrize("name", sorted(internals.PLAYWRIGHT_CALLED))
def test_called_scrapy_playwright_methods_exist(name: str) -> None:
    version = importlib.metadata.version("scrapy-playwright")
    theirs = getattr(ScrapyPlaywrightDownloadHandler, name, None)
    assert theirs is not None, f"scrapy-playwright {version} changed {name} (gone): {RECHECK}"
    assert _params(theirs) == internals.PLAYWRIGHT_CALLED[name], (
        f"scrapy-playwright {version} changed {name}{_params(theirs)}: {RECHECK}"
    )


def test_scrapy_playwright_attributes_and_config_fields_exist() -> None:
    version = importlib.metadata.version("scrapy-playwright")
    source = inspect.getsource(ScrapyPlaywrightDownloadHandler)
    for name in internals.PLAYWRIGHT_ATTRIBUTES:
        assert f"self.{name}" in source, f"scrapy-playwright {version} changed the attribute {name}: {RECHECK}"
    fields = set(inspect.signature(Config).parameters)
    for name in internals.PLAYWRIGHT_CONFIG_FIELDS:
        assert name in fields, f"scrapy-playwright {version} changed Config.{name}: {RECHECK}"


class _Closing:
    closing = object()


class _Open:
    closing = None


class _Engine:
    def __init__(self, slot: object, scraper_slot: object) -> None:
        self._slot = slot
        self.scraper = type("S", (), {"slot": scraper_slot})()


class _Crawler:
    def __init__(self, crawling: bool, engine: object | None) -> None:
        self.crawling = crawling
        self.engine = engine


def test_node_stopping_and_spider_closing() -> None:
    assert not internals.node_stopping(_Crawler(True, None))
    assert internals.node_stopping(_Crawler(False, None))  # Crawler.stop() cleared `crawling`
    assert not internals.spider_closing(_Crawler(False, None))
    assert not internals.node_stopping(_Crawler(True, _Engine(_Open(), _Open())))
    assert internals.node_stopping(_Crawler(True, _Engine(_Closing(), _Open())))
    assert internals.spider_closing(_Crawler(True, _Engine(None, _Closing())))
    assert internals.downloads_in_flight(_Crawler(True, None)) == 0


def test_the_startup_heap_is_frozen_once_per_process() -> None:
    """In a child process: freezing pytest's own heap would pin every later test's objects."""
    code = (
        "import gc\n"
        "from distributed_crawler.core.heap import freeze_startup_heap\n"
        "frozen = freeze_startup_heap()\n"
        "junk = [[] for _ in range(1000)]\n"
        "assert frozen > 1000 and freeze_startup_heap() == frozen == gc.get_freeze_count(), frozen\n"
        "print(frozen)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_http11_agents_are_built_by_the_hook() -> None:
    """guard_http11_agents: Scrapy's _ScrapyAgent asks the hook first, and keeps its own agent on None."""
    from scrapy.core.downloader.handlers.http11 import _BindAddressAgent, _ScrapyAgent
    from scrapy.utils.test import get_crawler

    from distributed_crawler.core.guard import guarded_agent

    seen: list[tuple] = []
    marker = object()

    def hook(crawler, request, timeout, context_factory, bind_address, pool):  # type: ignore[no-untyped-def]
        seen.append((crawler, request.url, timeout, context_factory, bind_address, pool))
        return marker if "hooked" in request.url else None

    from twisted.web.client import BrowserLikePolicyForHTTPS

    crawler = get_crawler()
    policy = BrowserLikePolicyForHTTPS()
    agent = _ScrapyAgent(contextFactory=policy, bindAddress=None, pool=None, crawler=crawler)
    try:
        internals.guard_http11_agents(hook)
        assert agent._get_agent(Request("http://hooked.test/"), 7) is marker
        assert isinstance(agent._get_agent(Request("http://plain.test/"), 7), _BindAddressAgent)
        assert seen[0] == (crawler, "http://hooked.test/", 7, policy, None, None)
    finally:
        internals.guard_http11_agents(guarded_agent)  # what the add-on installs


def test_scrapy_still_logs_the_memory_line_we_lower() -> None:
    from scrapy.extensions import memusage

    assert memusage.logger.name == internals.MEMUSAGE_LOGGER
    assert f'"{internals.MEMUSAGE_PEAK_MESSAGE}"' in inspect.getsource(memusage), RECHECK
