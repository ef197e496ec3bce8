from __future__ import annotations

import pytest
from scrapy import Request
from scrapy.settings import Settings

from distributed_crawler.dedup.fingerprint import (
    CANONICAL_CACHE,
    CanonicalFingerprinter,
    FingerprintConfig,
    canonicalize_url,
)


@pytest.mark.parametrize(
    ("url", "canonical"),
    [
        ("HTTP://Example.COM/a", "http://example.com/a"),
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("http://example.com:8080/a", "http://example.com:8080/a"),
        ("http://example.com/a#frag", "http://example.com/a"),
        ("http://example.com/a?b=2&a=1", "http://example.com/a?a=1&b=2"),
        ("http://example.com/a?utm_source=x&utm_medium=y&id=3", "http://example.com/a?id=3"),
        ("http://example.com/a?UTM_Campaign=x&id=3", "http://example.com/a?id=3"),
        ("http://example.com/a?gclid=1&fbclid=2&msclkid=3", "http://example.com/a"),
        ("http://example.com", "http://example.com/"),
        ("http://example.com/a?q=a%20b", "http://example.com/a?q=a+b"),
        ("http://example.com/A/B", "http://example.com/A/B"),  # paths are case-sensitive
        ("http://example.com/a?x=&y=1", "http://example.com/a?x=&y=1"),
        ("http://[::1]:8080/a?b=1#c", "http://[::1]:8080/a?b=1"),
    ],
)
def test_canonicalize_url(url: str, canonical: str) -> None:
    assert canonicalize_url(url) == canonical


def test_same_page_same_fingerprint() -> None:
    fp = CanonicalFingerprinter()
    a = fp.fingerprint(Request("http://Example.com:80/list?page=2&sort=new#top"))
    b = fp.fingerprint(Request("http://example.com/list?sort=new&page=2&utm_source=feed"))
    assert a == b


def test_method_and_body_matter() -> None:
    fp = CanonicalFingerprinter()
    get = fp.fingerprint(Request("http://example.com/a"))
    post = fp.fingerprint(Request("http://example.com/a", method="POST"))
    post_body = fp.fingerprint(Request("http://example.com/a", method="POST", body=b"x=1"))
    assert len({get, post, post_body}) == 3


def test_drop_params_setting_with_wildcards() -> None:
    config = FingerprintConfig.from_settings(Settings({"FINGERPRINT_DROP_PARAMS": "session*,ref"}))
    fp = CanonicalFingerprinter(config)
    assert fp.canonical_url("http://e.com/?sessionid=1&ref=2&id=3&utm_source=x") == "http://e.com/?id=3&utm_source=x"


def test_remembered_canonical_urls_are_bounded_and_follow_the_drop_setting() -> None:
    """A site of endless distinct URLs does not grow the cache; two fingerprinters with different
    FINGERPRINT_DROP_PARAMS never answer from each other's memory."""
    fp = CanonicalFingerprinter()
    for n in range(CANONICAL_CACHE + 500):
        assert fp.canonical_url(f"http://e.com/p/{n}?utm_source=x") == f"http://e.com/p/{n}"
    assert fp._canonical.cache_info().currsize == CANONICAL_CACHE
    assert (
        fp.canonical_url("http://E.com/a?ref=1#x") == fp.canonical_url("http://e.com/a?ref=1") == "http://e.com/a?ref=1"
    )
    keeps_ref = fp.canonical_url("http://e.com/?ref=2&id=3")
    drops_ref = CanonicalFingerprinter(FingerprintConfig.from_settings(Settings({"FINGERPRINT_DROP_PARAMS": "ref"})))
    assert (keeps_ref, drops_ref.canonical_url("http://e.com/?ref=2&id=3")) == (
        "http://e.com/?id=3&ref=2",
        "http://e.com/?id=3",
    )
