from __future__ import annotations

import json

import pytest

from distributed_crawler.frontier.seeds import Seed, SeedError, parse_seed

MAX = 65536


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"http://example.com/", Seed(url="http://example.com/")),
        (b"  https://example.com/a?b=1 \n", Seed(url="https://example.com/a?b=1")),
        (
            json.dumps(
                {
                    "url": "http://e.com/",
                    "meta": {"k": 1},
                    "priority": 5,
                    "callback": "parse",
                    "method": "post",
                    "headers": {"X": "1"},
                    "body": "a=1",
                }
            ).encode(),
            Seed(
                url="http://e.com/",
                meta={"k": 1},
                priority=5,
                callback="parse",
                method="POST",
                headers={"X": "1"},
                body="a=1",
            ),
        ),
    ],
)
def test_good_seeds(raw: bytes, expected: Seed) -> None:
    assert parse_seed(raw, MAX) == expected


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (b"example.com", "bad_scheme"),
        (b"file:///etc/passwd", "bad_scheme"),
        (b"javascript:alert(1)", "bad_scheme"),
        (b"ftp://example.com/", "bad_scheme"),
        (b"http://", "not_a_url"),
        (b"http://exa mple.com/", "not_a_url"),
        (b"", "not_a_url"),
        (b"http://example.com:99999/", "not_a_url"),
        (b"{broken json", "bad_json"),
        (b'{"url": 42}', "bad_url"),
        (b'{"meta": {}}', "bad_url"),
        (b'{"url": "http://e.com/", "meta": [1]}', "bad_meta"),
        (b'{"url": "http://e.com/", "meta": "x"}', "bad_meta"),
        (b'{"url": "http://e.com/", "priority": "high"}', "bad_priority"),
        (b'{"url": "http://e.com/", "priority": true}', "bad_priority"),
        (b'{"url": "http://e.com/", "evil": {"x": 1}}', "unknown_field"),
        (b'{"url": "file:///etc/passwd"}', "bad_scheme"),
        (b'{"url": "http://e.com/", "headers": {"X": 1}}', "bad_headers"),
        (b"http://e.com/" + b"a" * 100_000, "too_large"),
        (b"\xff\xfe\x00", "not_utf8"),
        (b"\x80\x04\x95pickle", "not_utf8"),
    ],
)
def test_bad_seeds_are_rejected_with_a_kind(raw: bytes, kind: str) -> None:
    with pytest.raises(SeedError) as info:
        parse_seed(raw, MAX)
    assert info.value.kind == kind
    assert info.value.reason
