"""Extraction signals one by one, on small pages written for each pattern (docs/news.md "Signals")."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from distributed_crawler.news.dates import parse_date, url_date
from distributed_crawler.news.extract import MAX_FILE_SIZE, extract_article

URL = "https://news.example/2024/05/03/harbour-bridge-reopens-after-repairs"
NOW = datetime(2026, 12, 1, tzinfo=UTC)
STORY = "".join(
    f"<p>Paragraph {i}: the harbour bridge reopened on Friday after eighteen months of repairs, the council said.</p>"
    for i in range(8)
)


def page(head: str = "", body: str = STORY, lang: str = "en") -> str:
    return f"<!DOCTYPE html><html lang='{lang}'><head><title>Bridge</title>{head}</head><body><article>{body}</article></body></html>"


def jsonld(data: Any) -> str:
    return f'<script type="application/ld+json">{json.dumps(data)}</script>'


def extract(html: str, url: str = "https://news.example/story", **kwargs: Any) -> Any:
    return extract_article(html, url, now=NOW, **kwargs)


# -- text ------------------------------------------------------------------------------------------
def test_comment_nodes_inside_a_paragraph_keep_the_paragraph() -> None:
    # React writes <!-- --> between text runs; lxml keeps comment nodes and cut such paragraphs
    body = "".join(
        f"<p>Run {i} of the story<!-- --> continues <!-- -->after the comment node, all of it.</p>" for i in range(8)
    )
    article = extract(page(body=body))
    assert article.main_text and article.signals["text"] == "trafilatura"
    for i in range(8):
        assert f"Run {i} of the story continues after the comment node, all of it." in article.text


def test_paragraph_breaks_are_kept() -> None:
    article = extract(page())
    assert article.text.count("\n") == 7 and article.text.splitlines()[1].startswith("Paragraph 1:")


def test_no_main_text_falls_back_to_the_visible_text_flagged() -> None:
    article = extract("<html><body><footer><p>Home</p> <p>World</p></footer></body></html>")  # all boilerplate
    assert (article.main_text, article.signals["text"], article.text) == (False, "visible", "Home World")


def test_a_page_over_trafilaturas_size_limit_is_cut_and_marked() -> None:
    html = page() + "<!-- " + "x" * MAX_FILE_SIZE + " -->"
    article = extract(html)
    assert article.truncated and "Paragraph 7" in article.text


# -- dates -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-05-03T08:30:00+02:00", "2024-05-03T08:30:00+02:00"),
        ("2024-05-03T08:30:00Z", "2024-05-03T08:30:00+00:00"),
        ("2024-05-03T08:30:00+0200", "2024-05-03T08:30:00+02:00"),
        ("2024-05-03T08:30:00", "2024-05-03T08:30:00"),  # no offset: a local date-time, kept
        ("2024-05-03 08:30", "2024-05-03T08:30:00"),
        ("2024-05-03", "2024-05-03"),  # a day stays a day
        ("2024/05/03", "2024-05-03"),
        ("Fri, 03 May 2024 08:30:00 GMT", "2024-05-03T08:30:00+00:00"),
        ("1994-12-31", None),  # before 1995
        ("2026-12-03", None),  # after now + 1 day
        ("2026-12-01T18:00:00-05:00", "2026-12-01T18:00:00-05:00"),  # within now + 1 day
        ("yesterday", None),
        ("", None),
        (20240503, None),
    ],
)
def test_parse_date(value: object, expected: str | None) -> None:
    assert parse_date(value, NOW) == expected


@pytest.mark.parametrize(
    ("head", "body", "source", "expected"),
    [
        (
            jsonld({"@type": "NewsArticle", "datePublished": "2024-05-03T08:30:00+02:00"}),
            STORY,
            "json-ld",
            "2024-05-03T08:30:00+02:00",
        ),
        (
            jsonld({"@type": "NewsArticle", "datePublished": "2024-05-03T08:30:00"}),
            STORY,
            "json-ld",
            "2024-05-03T08:30:00",
        ),
        (
            jsonld([{"@type": "Organization"}, {"@type": "Article", "datePublished": "2024-05-03"}]),
            STORY,
            "json-ld",
            "2024-05-03",
        ),
        (
            jsonld(
                {
                    "@context": "https://schema.org",
                    "@graph": [
                        {"@type": "WebPage"},
                        {"@type": "BlogPosting", "datePublished": ["2024-05-02", "2024-05-03"]},
                    ],
                }
            ),
            STORY,
            "json-ld",
            "2024-05-02",
        ),
        (
            '<meta property="article:published_time" content="2024-05-03T08:30:00+01:00">',
            STORY,
            "meta",
            "2024-05-03T08:30:00+01:00",
        ),
        (
            '<meta property="article:published_time" content="2024-05-03T08:30:00">',
            STORY,
            "meta",
            "2024-05-03T08:30:00",
        ),
        ('<meta name="parsely-pub-date" content="2024-05-03T06:30:00Z">', STORY, "meta", "2024-05-03T06:30:00+00:00"),
        ('<meta name="sailthru.date" content="2024-05-03 08:30:00">', STORY, "meta", "2024-05-03T08:30:00"),
        ('<meta name="DC.date" content="2024-05-03">', STORY, "meta", "2024-05-03"),
        (
            "",
            '<time itemprop="datePublished" datetime="2024-05-03T08:30:00+02:00">3 May</time>' + STORY,
            "meta",
            "2024-05-03T08:30:00+02:00",
        ),
        (
            "",
            "<header><time datetime='2024-05-03T08:30:00-04:00'>3 May</time></header>" + STORY,
            "time",
            "2024-05-03T08:30:00-04:00",
        ),
        ("", "<header><time datetime='2024-05-03T08:30'>3 May</time></header>" + STORY, "time", "2024-05-03T08:30:00"),
        ("", "<p class='date'>Published 3 May 2024</p>" + STORY, "htmldate", "2024-05-03"),
    ],
)
def test_published_at_from_each_source(head: str, body: str, source: str, expected: str) -> None:
    article = extract(page(head, body))
    assert (article.published_at, article.signals["published_at"]) == (expected, source)


def test_the_best_signal_wins_and_implausible_dates_fall_through() -> None:
    head = jsonld({"@type": "NewsArticle", "datePublished": "2031-01-01"})  # in the future: rejected
    head += '<meta property="article:published_time" content="2024-05-03T08:30:00+02:00">'
    head += '<meta property="article:modified_time" content="2024-05-04T10:00:00+02:00">'
    article = extract(page(head, "<header><time datetime='2020-01-01'>x</time></header>" + STORY))
    assert (article.published_at, article.signals["published_at"]) == ("2024-05-03T08:30:00+02:00", "meta")
    assert (article.modified_at, article.signals["modified_at"]) == ("2024-05-04T10:00:00+02:00", "meta")


def test_modified_at_from_json_ld() -> None:
    head = jsonld({"@type": "NewsArticle", "datePublished": "2024-05-03", "dateModified": "2024-05-05T09:00:00"})
    article = extract(page(head))
    assert (article.modified_at, article.signals["modified_at"]) == ("2024-05-05T09:00:00", "json-ld")
    assert extract(page()).modified_at is None and "modified_at" not in extract(page()).signals


def test_a_date_in_the_url_is_the_last_resort() -> None:
    assert url_date("https://n.example/2024/05/03/slug", NOW) == "2024-05-03"
    assert url_date("https://n.example/news/20240503/slug.html", NOW) == "2024-05-03"
    assert url_date("https://n.example/2024/13/03/slug", NOW) is None
    assert url_date("https://n.example/story?d=2024/05/03", NOW) is None
    article = extract("<html><body></body></html>", URL)  # nothing for trafilatura (nor htmldate) to read
    assert (article.published_at, article.signals["published_at"]) == ("2024-05-03", "url")
