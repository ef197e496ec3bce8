"""url_host: one name per host, whatever the spelling (lower case, trailing dot, IDNA)."""

from __future__ import annotations

import pytest
from scrapy import Request

from distributed_crawler.core.source_records import site_of as registry_site
from distributed_crawler.downloadermiddlewares.retry import slot_of_request
from distributed_crawler.frontier.config import FrontierConfig, slot_of
from distributed_crawler.news.canonical import site_of as canonical_site
from distributed_crawler.urlhost import normalize_host, url_host


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://Example.COM/a", "example.com"),
        ("https://example.com./a", "example.com"),  # the fully qualified spelling
        ("https://example.com../a", "example.com"),
        ("http://EXAMPLE.com.:8080/a", "example.com"),  # port dropped, dot stripped
        ("https://user:pw@example.com/a", "example.com"),
        ("https://bücher.de/a", "xn--bcher-kva.de"),  # IDNA, as Scrapy's request URL has it
        ("https://BÜCHER.de./a", "xn--bcher-kva.de"),
        ("https://xn--bcher-kva.de/a", "xn--bcher-kva.de"),
        ("http://[::1]:8080/a", "::1"),
        ("http://[2001:DB8::1]/", "2001:db8::1"),
        ("http://127.0.0.1/", "127.0.0.1"),
        ("http://[::1/", ""),  # unclosed bracket: no host, not an exception
        ("data:text/plain,hi", ""),
        ("/relative/path", ""),
        ("", ""),
    ],
)
def test_url_host(url: str, host: str) -> None:
    assert url_host(url) == host


def test_a_name_the_idna_codec_refuses_stays_as_written() -> None:
    long_label = "ü" + "a" * 70  # over 63 characters: IDNA refuses it, w3lib keeps it
    assert normalize_host(f"{long_label}.de.") == f"{long_label}.de"


def test_every_spelling_of_one_host_is_one_name() -> None:
    spellings = ["http://Bücher.DE./", "https://xn--bcher-kva.de:443/x", "http://user@BÜCHER.de/"]
    assert {url_host(u) for u in spellings} == {"xn--bcher-kva.de"}


def test_the_frontier_and_the_retry_middleware_name_one_politeness_slot() -> None:
    # they disagreed on the trailing dot: a retry blocked another slot than the one leased
    url = "https://Example.COM.:8443/a"
    assert slot_of(url, FrontierConfig()) == slot_of_request(Request(url)) == "example.com:8443"


def test_canonical_sites_and_registry_sites_name_one_host() -> None:
    assert canonical_site("https://amp.Bücher.de./x") == "xn--bcher-kva.de"
    assert registry_site("https://www.BÜCHER.de./") == "xn--bcher-kva.de"
