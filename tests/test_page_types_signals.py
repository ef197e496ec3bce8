"""Page-type signals for stories on link-heavy pages: the largest block of prose (news/blocks.py),
a short news item under a story's URL, a topic or date URL overruled by a page that calls itself a
story, search paths with a query; on small pages written for each case (docs/news.md "Page types
from the page")."""

from __future__ import annotations

from datetime import UTC, datetime

import lxml.html
import pytest

from distributed_crawler.news.blocks import block_chars
from distributed_crawler.news.extract import extract_article
from distributed_crawler.news.page_types import text_size, url_kind

NOW = datetime(2026, 12, 1, tzinfo=UTC)
SENTENCE = "The agency measured the radon levels in four hundred homes during the winter. "  # 78 characters
PARAGRAPH = SENTENCE * 2  # 156 characters, two sentences: prose
MENU = "".join(
    f"<li><a href='/service/topic-{i}'>Service topic number {i} for citizens and companies</a></li>" for i in range(60)
)
WEBSITE = '<meta property="og:type" content="website">'


def block(body: str) -> int:
    return block_chars(lxml.html.fromstring(f"<html><body>{body}</body></html>"))


@pytest.mark.parametrize(
    ("body", "chars"),
    [
        (f"<div><p>{PARAGRAPH}</p><p>{PARAGRAPH}</p><p>{PARAGRAPH}</p></div>", 3 * 155),  # side by side
        ("".join(f"<div class='teaser'><p>{PARAGRAPH}</p></div>" for _ in range(3)), 155),  # one per teaser
        (f"<div>{PARAGRAPH}<br>{PARAGRAPH}<br><b>x</b>{PARAGRAPH}</div>", 3 * 155 + 2),  # runs between <br>s
        (f"<div><p>{PARAGRAPH}<a href='/x'>{PARAGRAPH}</a></p></div>", 155),  # link text left out
        (f"<nav><p>{PARAGRAPH}</p><p>{PARAGRAPH}</p></nav><div><p>{PARAGRAPH}</p></div>", 155),  # menus
        (f"<footer><div>{PARAGRAPH}</div></footer>", 0),
        (f"<header><div><p>{PARAGRAPH}</p><p>{PARAGRAPH}</p></div></header>", 2 * 155),  # a CMS's page in a header
        (f"<article><header><p>{PARAGRAPH}</p></header></article>", 155),  # a section's header
        ("<div>" + "<p>Opening hours of the office on weekdays and on Saturday morning</p>" * 5 + "</div>", 0),
        ("<div>" + "<p>Too short. To count.</p>" * 20 + "</div>", 0),  # runs under 80 characters
    ],
)
def test_block_chars_is_the_largest_block_of_prose_paragraphs(body: str, chars: int) -> None:
    assert block(body) == chars


CMS_URL = "https://www.agency.example/SharedDocs/Pressemitteilungen/DE/2022/001.html"  # no story id, date or slug


def cms_page(content: str) -> str:
    """An institutional CMS: menus of links around the content, og:type=website, no date anywhere."""
    return (
        f"<html><head><title>Press release</title>{WEBSITE}</head><body>"
        f"<header><ul>{MENU}</ul></header><div class='layout'><ul class='sidebar'>{MENU}</ul>"
        f"<main>{content}</main></div><footer><ul>{MENU}</ul></footer></body></html>"
    )


RELEASE = (
    "<h1>Radon levels in homes</h1><div class='text'>"
    + "".join(f"<p>Part {i}. {PARAGRAPH}</p>" for i in range(6))  # distinct: the extractor drops repeats
    + "</div>"
)
TEASER_LIST = "".join(
    f"<div class='teaser'><h2><a href='/press/{i}'>Press release {i}</a></h2><p>Part {i}. {PARAGRAPH}</p></div>"
    for i in range(6)
)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (RELEASE, "article"),  # one block of prose inside the menus: a story, however many links
        (TEASER_LIST, "list"),  # as much prose, one blurb per teaser: a list
    ],
)
def test_a_story_on_a_link_heavy_cms_page_is_told_from_a_list_by_its_block(content: str, expected: str) -> None:
    article = extract_article(cms_page(content), CMS_URL, now=NOW)
    assert article.main_text
    assert (article.page_type, article.signals["page_type"]) == (expected, "text")


ESSAY = "<article>" + "".join(f"<p>Chapter {i}. {PARAGRAPH}</p>" for i in range(12)) + "</article>"  # one long
PUBLISHED = '<meta property="article:published_time" content="2022-01-25T08:00:00+01:00">'
OG_ARTICLE = '<meta property="og:type" content="article">'
PROFILE = "<div>" + f"<p>{PARAGRAPH}</p>" * 4 + "</div>"
TEASERS = "".join(
    f"<article><h2><a href='/s/{i}'>Story {i}</a></h2><p>A teaser of story {i}.</p></article>" for i in range(6)
)


@pytest.mark.parametrize(
    ("url", "head", "body", "expected"),
    [
        (
            "https://party.example/themen/vice-president-elected",
            OG_ARTICLE + PUBLISHED,
            PROFILE,
            ("article", "og-type"),
        ),
        (
            "https://party.example/tag/harbour",
            '<script type="application/ld+json">{"@type": "NewsArticle"}</script>',
            PROFILE,
            ("article", "json-ld-type"),
        ),
        ("https://party.example/themen/vice-president-elected", OG_ARTICLE + PUBLISHED, TEASERS, ("list", "url")),
        ("https://party.example/themen/vice-president-elected", OG_ARTICLE, PROFILE, ("list", "url")),  # no date
        ("https://party.example/themen/vice-president-elected", PUBLISHED, PROFILE, ("list", "url")),  # no og:type
        ("https://party.example/", OG_ARTICLE + PUBLISHED, PROFILE, ("list", "url")),  # the home page never yields
        ("https://party.example/news/", OG_ARTICLE + PUBLISHED, PROFILE, ("list", "url")),  # nor a section hub
        ("https://science.example/1927", OG_ARTICLE + PUBLISHED, PROFILE, ("article", "og-type")),  # post number
        ("https://science.example/2024/05/", OG_ARTICLE + PUBLISHED, TEASERS, ("list", "url")),  # a month's teasers
        ("https://science.example/2024", WEBSITE, PROFILE, ("list", "url")),  # says nothing of a story
        ("https://state.example/themen/land-und-leute/homo-brandenburgensis", "", ESSAY, ("article", "text")),
        ("https://state.example/themen/land-und-leute", "", ESSAY + TEASERS, ("list", "url")),  # teasers too
    ],
)
def test_a_topic_or_date_url_yields_to_a_page_that_calls_itself_a_story(
    url: str, head: str, body: str, expected: tuple[str, str]
) -> None:
    html = f"<html><head><title>Topic</title>{head}</head><body>{body}</body></html>"
    article = extract_article(html, url, now=NOW)
    assert (article.page_type, article.signals["page_type"]) == expected


def test_a_story_whose_parts_are_section_headers_is_one_block() -> None:
    """A CMS that renders a story's text inside the `<header>` of a section (an embed's consent box
    after it), in menus of links, is still a story: the block is read inside headers too."""
    story = (
        "<section><article><header><h3>Athletes fit for the games</h3><div class='rich'>"
        + "".join(f"<p>Part {i}. {PARAGRAPH}</p>" for i in range(6))
        + "</div></header></article></section>"
    )
    consent = "<section><div>To protect your data we did not load this embed. Agree to load it.</div></section>"
    article = extract_article(cms_page(story + consent), CMS_URL, now=NOW)
    assert (article.page_type, article.signals["page_type"]) == ("article", "text")


@pytest.mark.parametrize(("text", "size"), [("abc", 3), ("日本語", 9), ("한국어", 6), ("Tokyo 東京", 12)])
def test_text_size_counts_an_ideograph_as_three_latin_characters(text: str, size: int) -> None:
    assert text_size(text) == size


JAPANESE_STORY = (
    "<h1>ツリー表示のライブラリ</h1><div class='text'>"
    + "".join(
        f"<p>第{i}段落。"
        + "このライブラリはデータの木構造を画面に分かりやすく表示するために作られたもので、" * 2
        + "とても便利です。</p>"
        for i in range(5)
    )
    + "</div>"
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://blog.example.jp/archives/2019/04/treeviz.html", "article"),  # a dated story URL
        (CMS_URL, "article"),  # no story URL: its one block of prose, at its size
    ],
)
def test_a_japanese_story_is_judged_at_its_size(url: str, expected: str) -> None:
    """Paragraphs of ~90 ideographs (a long paragraph in Japanese, 60 % of PROSE_LINE in characters)
    in a page of menus: sized as Latin text they are prose, and the page a story."""
    article = extract_article(cms_page(JAPANESE_STORY), url, now=NOW)
    assert (article.page_type, article.signals["page_type"]) == (expected, "text")


NEWS_ITEM = (
    "<h1>Burglary at the clinic</h1><div class='text'><p>The home care team of the Amizade district reported"
    " this morning that two of its five cars had been broken into overnight, and the police are looking"
    " for witnesses who saw anyone near the car park; the team's visits go on as planned today.</p>"
    "<p>Anyone who saw something can call the district office, which stays open until six tonight for"
    " the calls, and the police station, which has opened a case on the break-ins of the night.</p></div>"
)
ONE_PARAGRAPH = NEWS_ITEM.split("<p>Anyone")[0] + "</div>"


@pytest.mark.parametrize(
    ("url", "body", "expected"),
    [
        ("https://town.example/news/home-care-team-reports-burglary-of-two-cars", NEWS_ITEM, "article"),  # a slug
        ("https://town.example/news/items/a-short-item-of-one-paragraph.html", ONE_PARAGRAPH, "article"),
        (CMS_URL, NEWS_ITEM, "list"),  # the same page under a URL that names no story: links outweigh it
    ],
)
def test_a_short_news_item_on_a_link_heavy_page_is_kept_under_a_story_url(url: str, body: str, expected: str) -> None:
    """A news item of a paragraph or two (one sentence each, as wire copy is) in a page of menus:
    mixed evidence, and a story's URL tips it to a story."""
    article = extract_article(cms_page(body), url, now=NOW)
    assert (article.page_type, article.signals["page_type"]) == (expected, "text")


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("https://blog.example/search?updated-max=2016-03-18T11:07:00-05:00&max-results=10", "list"),
        ("https://blog.example/search/label/news?max-results=10", "list"),
        ("https://blog.example/research-shows-what-we-knew?ref=home", None),  # not a search path
    ],
)
def test_a_search_path_is_a_list_whatever_its_query(url: str, kind: str | None) -> None:
    assert url_kind(url) == kind


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("https://news.example/?s=bridge", "list"),  # WordPress's search
        ("https://news.example/world/?q=bridge&sort=date", "list"),
        ("https://writer.substack.com/p/the-2-minute-20-second-video-that?s=r", None),  # a share link
        ("https://news.example/news/harbour-bridge-reopens-after-repairs?q=1", None),
        ("https://news.example/story/1234567?s=09", None),
    ],
)
def test_a_search_parameter_on_a_story_url_leaves_it_to_the_page(url: str, kind: str | None) -> None:
    """Sites add `?s=r`, `?q=` to the links people share; only a URL that names no story is a search."""
    assert url_kind(url) == kind
