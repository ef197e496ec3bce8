"""The backfill window (news/backfill.py) and `dcrawl seed --site --since --until` (cli/seed.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from distributed_crawler.cli.seed import site_seed
from distributed_crawler.news.backfill import WindowError, period_of, window_from_args, window_from_meta

SEPTEMBER = window_from_args("2026-09-01", "2026-09-30")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_the_window_takes_whole_days_and_nothing_undated() -> None:
    assert SEPTEMBER.contains(at("2026-09-01T00:00:00")) and SEPTEMBER.contains(at("2026-09-30T23:59:59"))
    assert not SEPTEMBER.contains(at("2026-08-31T23:59:59")) and not SEPTEMBER.contains(at("2026-10-01T00:00:00"))
    assert not SEPTEMBER.contains(None)
    assert SEPTEMBER.contains(datetime(2026, 9, 5))  # a naive date is UTC
    now = datetime(2026, 12, 6, tzinfo=UTC)
    assert window_from_args("2026-11-01", None, now=now).until == now  # --until defaults to now
    with pytest.raises(WindowError, match="before --since"):
        window_from_args("2026-09-30", "2026-09-01")
    with pytest.raises(WindowError, match="not a date"):
        window_from_args("last month", None)
    with pytest.raises(WindowError, match="needs --since"):
        window_from_args(None, "2026-09-01")


@pytest.mark.parametrize(
    ("url", "period"),
    [
        ("https://x.test/sitemap-2026-09.xml", ("2026-09-01", "2026-09-30")),
        ("https://x.test/sitemap-202609.xml", ("2026-09-01", "2026-09-30")),
        ("https://x.test/2026/09/14/sitemap.xml", ("2026-09-14", "2026-09-14")),
        ("https://x.test/sitemap.xml?yyyy=2026&mm=9", ("2026-09-01", "2026-09-30")),
        ("https://x.test/sitemap-2025.xml", ("2025-01-01", "2025-12-31")),
        ("https://x.test/sitemap-posts.xml", None),
        ("https://news2026.test/sitemap.xml", None),  # the host is no period
        ("https://x.test/sitemap-2026-02-30.xml", None),  # not a day
    ],
)
def test_periods_named_in_sitemap_urls(url: str, period: tuple[str, str] | None) -> None:
    found = period_of(url)
    assert (None if found is None else (found[0].date().isoformat(), found[1].date().isoformat())) == period


def test_an_index_entry_is_skipped_only_when_it_cannot_list_the_window() -> None:
    assert not SEPTEMBER.may_list("https://x.test/sitemap-2026-08.xml", None)
    assert not SEPTEMBER.may_list("https://x.test/sitemap-2026-10.xml", at("2026-10-31T00:00:00"))
    assert not SEPTEMBER.may_list("https://x.test/sitemap-posts.xml", at("2026-08-15T00:00:00"))  # untouched since
    assert SEPTEMBER.may_list("https://x.test/sitemap-posts.xml", at("2026-11-15T00:00:00"))  # may hold September
    assert SEPTEMBER.may_list("https://x.test/sitemap-posts.xml", None)


def test_the_seed_carries_the_window_and_garbage_windows_are_ignored() -> None:
    seed = json.loads(site_seed("https://x.test", SEPTEMBER))
    assert seed["callback"] == "parse_site" and seed["url"] == "https://x.test/"
    assert window_from_meta(seed["meta"]["backfill"]) == SEPTEMBER
    assert "meta" not in json.loads(site_seed("https://x.test"))
    for garbage in (
        None,
        "2026",
        {"since": 1},
        {"since": "x", "until": "y"},
        {"since": "2026-10-01", "until": "2026-09-01"},
    ):
        assert window_from_meta(garbage) is None


def test_since_without_site_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from distributed_crawler.cli.main import main

    assert main(["seed", "news", "https://x.test/", "--since", "2026-09-01"]) != 0
    assert "--since and --until backfill a site: give --site URL" in capsys.readouterr().err
    assert main(["seed", "news", "--site", "https://x.test/", "--since", "2026-09-31"]) != 0
    assert "not a date" in capsys.readouterr().err
