"""The source registry's file formats and checks (core/source_records.py), its table and scope
rules (core/registry.py), and what an import changes (core/source_changes.py): pure logic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scrapy import Request

from distributed_crawler.core.control import BadInput
from distributed_crawler.core.registry import SourceCache, SourceTable, source_scope_check, table_of
from distributed_crawler.core.source_changes import plan_import
from distributed_crawler.core.source_records import (
    RecordError,
    load_sources,
    parse_record,
    read_records,
    write_records,
)
from distributed_crawler.meta import NEWS_SITE_META

LE_MONDE = {
    "url": "https://www.lemonde.fr/",
    "name": "Le Monde",
    "country": "FR",
    "language": "fr",
    "tags": ["national", "daily"],
    "deny": ["/video/", "/live/"],
    "subdomains": ["regionale"],
    "max_depth": 3,
    "rate": 2,
    "recrawl": {"/$": 600},
    "extraction": {"text": "article p"},
}
CSV = (
    "url,name,country,language,tags,allow,deny,subdomains,max_depth,rate,recrawl,extraction\n"
    'https://www.lemonde.fr/,Le Monde,fr,FR,national;daily,,/video/;/live/,regionale,3,2,"{""/$"": 600}",'
    '"{""text"": ""article p""}"\n'
    "https://example.com/,,,,,/news/,,,,,,\n"
)
YAML = """
- url: https://www.lemonde.fr/
  name: Le Monde
  country: FR
  language: fr
  tags: [national, daily]
  deny: [/video/, /live/]
  subdomains: [regionale]
  max_depth: 3
  rate: 2
  recrawl: {"/$": 600}
  extraction: {text: article p}
- url: https://example.com/
  allow: [/news/]
"""


def _load(tmp_path: Path, name: str, text: str) -> tuple[list, list[str]]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load_sources(read_records(str(path)))


@pytest.mark.parametrize(
    "name, text",
    [
        ("outlets.csv", CSV),
        ("outlets.yaml", YAML),
        (
            "outlets.jsonl",
            json.dumps(LE_MONDE) + "\n" + json.dumps({"url": "https://example.com/", "allow": ["/news/"]}),
        ),
    ],
)
def test_each_format_reads_the_same_sources(tmp_path: Path, name: str, text: str) -> None:
    sources, errors = _load(tmp_path, name, text)
    assert errors == []
    monde, example = sources
    assert (monde.site, monde.name, monde.country, monde.language) == ("lemonde.fr", "Le Monde", "FR", "fr")
    assert monde.tags == ("national", "daily") and monde.deny == ("/video/", "/live/")
    assert monde.subdomains == ("regionale.lemonde.fr",) and monde.max_depth == 3 and monde.rate == 2.0
    assert monde.recrawl == {"/$": 600} and monde.extraction == {"text": "article p"}
    assert (example.site, example.name, example.allow, example.tags) == ("example.com", "example.com", ("/news/",), ())


@pytest.mark.parametrize("fmt", ["csv", "yaml", "jsonl"])
def test_export_reads_back_as_the_same_sources(tmp_path: Path, fmt: str) -> None:
    sources, _ = _load(tmp_path, "in.yaml", YAML)
    again, errors = _load(tmp_path, f"out.{fmt}", write_records(sources, fmt))
    assert errors == [] and again == sources


@pytest.mark.parametrize(
    "record, message",
    [
        ({"name": "x"}, "url is required"),
        ({"url": "ftp://x.com/"}, "url ('ftp://x.com/') must be an http(s) URL"),
        ({"url": "https://x.com/", "colour": "red"}, "unknown field(s) colour"),
        ({"url": "https://x.com/", "name": "a\nb"}, "name ('a\\nb'...) must be one line"),
        ({"url": "https://x.com/", "country": "France"}, "country ('France') must be a two-letter ISO 3166 code"),
        ({"url": "https://x.com/", "language": "french"}, "language ('french') must be an ISO 639 code"),
        ({"url": "https://x.com/", "tags": {"a": 1}}, "tags ({'a': 1}) must be a list"),
        ({"url": "https://x.com/", "tags": ["x"] * 101}, "tags has 101 items; at most 100"),
        ({"url": "https://x.com/", "allow": ["("]}, "allow ('(') is not a regex"),
        ({"url": "https://x.com/", "deny": [""]}, "deny ('') must be a regex over the URL"),
        ({"url": "https://x.com/", "subdomains": ["a b"]}, "subdomains ('a b') must be a host of x.com"),
        ({"url": "https://x.com/", "max_depth": "-1"}, "max_depth ('-1') must be a whole number >= 0"),
        ({"url": "https://x.com/", "max_depth": True}, "max_depth (True) must be a whole number"),
        ({"url": "https://x.com/", "rate": 0}, "rate (0) must be requests per second, > 0"),
        ({"url": "https://x.com/", "rate": "fast"}, "rate ('fast') must be requests per second"),
        ({"url": "https://x.com/", "recrawl": "{"}, "recrawl ('{') is not JSON"),
        ({"url": "https://x.com/", "recrawl": [1]}, "recrawl ([1]) must be an object"),
        ({"url": "https://x.com/", "recrawl": {"/": [5, 1]}}, "recrawl['/'] ([5, 1]) must be seconds or [min"),
        ({"url": "https://x.com/", "recrawl": {"(": 60}}, "recrawl pattern ('(') is not a regex"),
        ({"url": "https://x.com/", "extraction": {"title": "h1"}}, "extraction has unknown key(s) title (known: text"),
        (
            {"url": "https://x.com/", "extraction": {"text": "p[["}},
            "extraction['text'] ('p[[') is not a valid CSS selector",
        ),
    ],
)
def test_each_bad_field_is_one_line_naming_the_record(record: dict, message: str) -> None:
    with pytest.raises(RecordError) as caught:
        parse_record(record, "line 7")
    assert str(caught.value).startswith("line 7: ") and message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_every_bad_record_is_reported_and_none_kept(tmp_path: Path) -> None:
    lines = [
        json.dumps({"url": "https://a.com/"}),
        "not json",
        json.dumps(["https://b.com/"]),
        json.dumps({"url": "https://www.a.com/"}),  # the same site as line 1
        json.dumps({"url": "https://c.com/", "name": "A.COM"}),  # the same name as line 1, in another case
        json.dumps({"url": "https://d.com/", "rate": -1}),
    ]
    sources, errors = _load(tmp_path, "s.jsonl", "\n".join(lines) + "\n")
    assert [e.split(":")[0] for e in errors] == ["line 2", "line 3", "line 4", "line 5", "line 6"]
    assert "site a.com is also line 1" in errors[2] and "name a.com is also line 1" in errors[3]
    assert [s.site for s in sources] == ["a.com"]  # the caller writes nothing while errors is not empty


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("s.txt", "x", "unknown format; name it .csv (with a header), .yaml or .jsonl"),
        ("s.csv", "name,country\nx,FR\n", "the first line must be a header naming the columns, with url"),
        ("s.yaml", "url: [", "not YAML"),
        ("s.yaml", "url: https://x.com/", "must be a YAML list of sources"),
    ],
)
def test_a_file_that_cannot_be_read_is_one_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RecordError) as caught:
        load_sources(read_records(str(path)))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_csv_row_longer_than_its_header_is_a_bad_record(tmp_path: Path) -> None:
    _, errors = _load(tmp_path, "s.csv", "url,name\nhttps://a.com/,A,extra\n")
    assert errors == ["line 2: more cells than the header has columns"]


def _table(*records: dict) -> SourceTable:
    return SourceTable(parse_record(r, f"record {i}") for i, r in enumerate(records, 1))


def test_a_host_finds_its_closest_source_and_rows_get_its_name_and_tags() -> None:
    table = _table(LE_MONDE, {"url": "https://regionale.lemonde.fr/", "name": "Le Monde régions", "tags": ["local"]})
    assert table.find("www.lemonde.fr").source.name == "Le Monde"
    assert table.find("regionale.lemonde.fr").source.name == "Le Monde régions"
    assert table.find("x.regionale.lemonde.fr").source.name == "Le Monde régions"
    assert table.find("lemonde.com") is None
    assert table.label("https://www.lemonde.fr/a") == ("Le Monde", '["national", "daily"]')
    assert table.label("https://news.other.co.uk/a") == ("other.co.uk", None)  # not registered: its domain
    assert table.by_name("le monde").site == "lemonde.fr" and table.by_name("www.lemonde.fr").site == "lemonde.fr"
    assert table.by_name("nobody") is None


def _refused(table: SourceTable, url: str, depth: int = 1, listing: bool = False) -> str | None:
    cache = SourceCache()
    cache.table = table
    meta = {"depth": depth, **({NEWS_SITE_META: "https://www.lemonde.fr/"} if listing else {})}
    refusal = source_scope_check(cache)(Request(url, meta=meta))
    return refusal.reason if refusal else None


def test_scope_deny_allow_depth_and_subdomains() -> None:
    table = _table(LE_MONDE, {"url": "https://example.com/", "allow": ["/news/"], "deny": ["/news/live"]})
    assert _refused(table, "https://www.lemonde.fr/politique/a.html") is None
    assert _refused(table, "https://www.lemonde.fr/video/a.html") == "source_deny"
    assert _refused(table, "https://www.lemonde.fr/video/feed.xml", listing=True) == "source_deny"  # deny wins
    assert _refused(table, "https://www.lemonde.fr/a.html", depth=4) == "source_depth"
    assert _refused(table, "https://regionale.lemonde.fr/a.html") is None
    assert _refused(table, "https://jeux.lemonde.fr/a.html") == "source_subdomain"
    assert _refused(table, "https://example.com/news/a.html") is None
    assert _refused(table, "https://example.com/about.html") == "source_allow"
    assert _refused(table, "https://example.com/news/live.html") == "source_deny"
    for always in ("https://example.com/", "https://example.com/robots.txt"):
        assert _refused(table, always) is None, always
    assert _refused(table, "https://example.com/sitemap.xml", listing=True) is None
    assert _refused(table, "https://elsewhere.org/anything") is None  # not registered: no scope
    assert _refused(SourceTable(), "https://example.com/about.html") is None


def test_registry_read_from_redis_skips_entries_that_are_not_sources() -> None:
    good = parse_record(LE_MONDE, "r").to_json()
    table = table_of({b"lemonde.fr": good, b"x": b"not json", b"y": json.dumps({"url": "ftp://x"}), b"z": b"[1]"})
    assert list(table.sites) == ["lemonde.fr"]


def test_an_import_sorts_new_replaced_unchanged_and_refuses_a_taken_name() -> None:
    registry = _table(LE_MONDE, {"url": "https://example.com/", "name": "Example"})
    same = parse_record(LE_MONDE, "r")
    changed = parse_record({"url": "https://example.com/", "name": "Example", "tags": ["x"]}, "r")
    new = parse_record({"url": "https://new.org/"}, "r")
    plan = plan_import(registry, [same, changed, new])
    assert plan.unchanged == [same] and [n for _, n in plan.replaced] == [changed] and plan.new == [new]
    with pytest.raises(BadInput, match="name example is already the source of example.com"):
        plan_import(registry, [parse_record({"url": "https://other.org/", "name": "example"}, "r")])
    # the same name moving with its site in one import is no conflict
    moved = parse_record({"url": "https://example.com/", "name": "Le Monde"}, "r")
    renamed = parse_record({**LE_MONDE, "name": "Le Monde (FR)"}, "r")
    assert len(plan_import(registry, [moved, renamed]).replaced) == 2


def test_a_sources_recrawl_rules_come_before_recrawl_rules_and_meta_before_both() -> None:
    from scrapy.utils.test import get_crawler

    from distributed_crawler.connection.policy import RedisPolicy
    from distributed_crawler.recrawl.node import RecrawlNode
    from distributed_crawler.recrawl.rules import RecrawlConfig

    crawler = get_crawler()
    node = RecrawlNode(crawler, RecrawlConfig.from_settings({"RECRAWL_RULES": {"/": 3600}}), RedisPolicy("redis://x"))
    source = {"url": "https://www.lemonde.fr/", "recrawl": {"/live/": [60, 120], "/archive/": 0}}
    SourceCache.of(crawler).table = _table(source)

    def interval(url: str, **meta: object) -> object:
        revisit = node.revisit_for(Request(url, meta=meta))
        return None if revisit is None else revisit.interval

    assert interval("https://www.lemonde.fr/live/a") == (60.0, 120.0)
    assert interval("https://www.lemonde.fr/archive/a") is None  # 0: never revisited
    assert interval("https://www.lemonde.fr/other") == (3600.0, 3600.0)  # no rule of its own
    assert interval("https://elsewhere.org/live/a") == (3600.0, 3600.0)
    assert interval("https://www.lemonde.fr/live/a", recrawl=30) == (30.0, 30.0)
    # an article its source says never to revisit does not get ARTICLE_REVISITS' plan either
    assert node.article_ticket(Request("https://www.lemonde.fr/archive/a")) is None
    assert node.article_ticket(Request("https://www.lemonde.fr/other")) is not None


def test_a_sources_extraction_rule_is_used_for_its_pages_only() -> None:
    from distributed_crawler.news.extract import extract_article
    from distributed_crawler.news.rules import parse_rules

    page = (
        "<html><head><title>T</title></head><body><div class='x'><p>{}</p></div>"
        "<article><p>{}</p></article></body></html>"
    ).format("Wanted text of the story, " * 20, "Other text " * 40)
    table = _table({"url": "https://www.lemonde.fr/", "extraction": {"text": "article p"}})
    setting = parse_rules({"elsewhere.org": {"text": "div.x p"}})
    rules = table.extraction_rules("https://www.lemonde.fr/a", setting)
    assert set(rules) == {"elsewhere.org", "lemonde.fr"}
    assert extract_article(page, "https://www.lemonde.fr/a", rules=rules).text.startswith("Other text")
    assert extract_article(page, "https://www.lemonde.fr/a", rules=setting).text.startswith("Wanted text")
    assert table.extraction_rules("https://other.org/a", setting) is setting


def test_a_node_parses_only_the_entries_that_changed() -> None:
    a = parse_record(LE_MONDE, "r").to_json()
    b = parse_record({"url": "https://example.com/", "tags": ["x"]}, "r").to_json()
    first = table_of({"lemonde.fr": a, "example.com": b})
    b2 = parse_record({"url": "https://example.com/", "tags": ["y"]}, "r").to_json()
    second = table_of({"lemonde.fr": a, "example.com": b2}, first)
    assert second.sites["lemonde.fr"] is first.sites["lemonde.fr"]  # unchanged: kept, not parsed again
    assert second.sites["example.com"].source.tags == ("y",)
    assert list(table_of({"example.com": b2}, second).sites) == ["example.com"]  # removed: gone
