"""News building blocks without a crawl: extraction, canonical links, sitemaps, feeds, settings."""

from __future__ import annotations

import gzip
import json

import pytest
from scrapy.http import HtmlResponse

from distributed_crawler.cli.seed import site_seed
from distributed_crawler.frontier.seeds import SeedError, parse_seed
from distributed_crawler.news.canonical import canonical_link, same_site, site_of
from distributed_crawler.news.config import NewsConfig, parse_duration
from distributed_crawler.news.documents import DocumentError, feed_links, parse_feed, parse_sitemap, sniff
from distributed_crawler.news.extract import extract_article, page_basics
from distributed_crawler.news.nearduplicate import blocks, distance, fingerprint, without_title
from tests.site.news_portal import BOILERPLATE, NewsPortal

BASE = "http://news.example"


@pytest.fixture(scope="module")
def portal() -> NewsPortal:
    """The test publisher's pages, rendered without serving them."""
    site = NewsPortal()
    site.publisher_url, site.wire_url = BASE, "http://wire.example"
    return site


# -- extraction ------------------------------------------------------------------------------------
def test_main_text_keeps_the_body_and_drops_the_boilerplate(portal: NewsPortal) -> None:
    story = portal.stories[3]
    _, _, body = portal.render_publisher(story.path)
    article = extract_article(body.decode(), BASE + story.path)
    assert article.main_text
    for sentence in story.sentences:
        assert sentence in article.text
    assert not [marker for marker in BOILERPLATE if marker in article.text]
    assert "Accept all cookies" not in article.text and "About us" not in article.text
    assert article.title == story.title  # the headline without " | Harbour Herald"
    assert article.authors == (story.author,)
    assert article.published_at == story.published.isoformat()
    assert article.lang == "en"
    assert article.description == story.description


def test_visible_text_is_behind_the_setting(portal: NewsPortal) -> None:
    _, _, body = portal.render_publisher(portal.stories[3].path)
    basics = page_basics(body.decode(), BASE + portal.stories[3].path)
    assert "Footer-copyright-marker" in basics.text and portal.stories[3].sentences[0] in basics.text
    assert (basics.title, basics.main_text, basics.lang, basics.page_type) == (None, False, "en", "article")
    assert page_basics(body.decode(), BASE + "/about").page_type == "other"


def test_a_page_without_main_text_keeps_its_visible_text() -> None:
    article = extract_article("<html><body><p>flaky-ok: third time lucky.</p></body></html>", BASE)
    assert "flaky-ok" in article.text
    assert extract_article("<html><body><p>x</p></body></html>", BASE).text == "x"


@pytest.mark.parametrize("page", ["", "\x00\x01\x02", "<", "<?xml version='1.0' encoding='utf-8'?><html lang='?'/>"])
def test_garbage_pages_extract_to_little_never_raise(page: str) -> None:
    article = extract_article(page, BASE)
    assert article.lang is None and article.authors == ()


def test_xhtml_with_an_encoding_declaration_is_read() -> None:
    page = "<?xml version='1.0' encoding='utf-8'?><html xmlns='http://www.w3.org/1999/xhtml' lang='de'>"
    page += "<body><article><p>" + "Ein langer Satz über die Brücke am Hafen. " * 20 + "</p></article></body></html>"
    article = extract_article(page, BASE)
    assert "Brücke am Hafen" in article.text and article.lang == "de"


# -- canonical links --------------------------------------------------------------------------------
def _page(url: str, head: str) -> HtmlResponse:
    return HtmlResponse(url, body=f"<html><head>{head}</head><body></body></html>".encode())


def test_same_site_canonical_links_are_followed_other_sites_ignored() -> None:
    assert (
        canonical_link(_page(f"{BASE}/story?id=1", '<link rel="canonical" href="/2026/12/s">')) == f"{BASE}/2026/12/s"
    )
    amp = _page("https://amp.example.co.uk/a", '<link rel="amphtml canonical" href="https://www.example.co.uk/a">')
    assert canonical_link(amp) == "https://www.example.co.uk/a"
    assert canonical_link(_page(f"{BASE}/s", '<link rel="canonical" href="https://other.example/s">')) is None
    assert canonical_link(_page("http://127.0.0.2:8/s", '<link rel="canonical" href="http://127.0.0.1:8/s">')) is None
    assert canonical_link(_page(f"{BASE}/s", '<link rel="canonical" href="javascript:alert(1)">')) is None
    assert canonical_link(_page(f"{BASE}/s", '<link rel="canonical" href="http://[bad">')) is None
    assert canonical_link(_page(f"{BASE}/s", '<link rel="stylesheet" href="/x.css">')) is None


def test_sites_are_registered_domains_or_exact_addresses() -> None:
    assert site_of("https://amp.news.bbc.co.uk/x") == "bbc.co.uk"
    assert same_site("http://127.0.0.1:80/a", "http://127.0.0.1:8080/b")
    assert not same_site("http://127.0.0.1/a", "http://127.0.0.2/a")
    assert same_site("http://localhost:1/", "http://localhost:2/") and not same_site("http:///x", "http:///x")


# -- sitemaps and feeds -------------------------------------------------------------------------------
def test_google_news_sitemap_and_gzipped_index(portal: NewsPortal) -> None:
    _, _, body = portal.render_publisher("/news-sitemap.xml")
    doc = parse_sitemap(body, BASE + "/news-sitemap.xml", 10**6, 100)
    assert doc.kind == "urlset" and not doc.truncated
    assert [(e.url, e.date, e.title) for e in doc.entries] == [
        (portal.url(i), portal.stories[i].published, portal.stories[i].title) for i in (2, 6)
    ]
    assert all(e.story for e in doc.entries)  # <news:news> entries list stories (page type "listed")
    _, _, index = portal.render_publisher("/sitemap_index.xml.gz")
    assert index[:2] == b"\x1f\x8b" and sniff(index) == "sitemap"
    doc = parse_sitemap(index, BASE + "/sitemap_index.xml.gz", 10**6, 100)
    assert doc.kind == "sitemapindex"
    assert [e.url for e in doc.entries][:2] == [BASE + "/sitemaps/recent.xml", BASE + "/sitemaps/archive.xml"]


def test_sitemap_entry_cap_and_bad_locs() -> None:
    entries = "".join(f"<url><loc>/a/{i}</loc><lastmod>garbage</lastmod></url>" for i in range(10))
    entries += "<url><loc>mailto:x@y</loc></url><url><lastmod>2026-01-01</lastmod></url>"
    body = f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'.encode()
    doc = parse_sitemap(body, BASE + "/s.xml", 10**6, 4)
    assert [e.url for e in doc.entries] == [f"{BASE}/a/{i}" for i in range(4)] and doc.truncated
    assert all(e.date is None for e in doc.entries)
    assert not any(e.story for e in doc.entries)  # a plain urlset lists sections and home pages too
    assert len(parse_sitemap(body, BASE, 10**6, 100).entries) == 10


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"<urlset><url><loc>http://x/</loc>", "malformed XML"),
        (b"not xml at all", "malformed XML"),
        (b"<html><body>a page</body></html>", "not a sitemap"),
        (gzip.compress(b"<urlset>" + b" " * 200_000 + b"</urlset>"), "zip bomb"),
        (b"<urlset>" + b" " * 200_000 + b"</urlset>", "larger than"),
        (b"\x1f\x8b\x08garbage", "broken gzip"),
    ],
)
def test_bad_sitemaps_raise_one_line(body: bytes, why: str) -> None:
    with pytest.raises(DocumentError, match=why) as info:
        parse_sitemap(body, BASE, 100_000, 10)
    assert "\n" not in str(info.value)


def test_entities_are_never_expanded() -> None:
    body = b"""<?xml version="1.0"?><!DOCTYPE u [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;">
    <!ENTITY ext SYSTEM "file:///etc/passwd">]><urlset><url><loc>http://x/&b;&ext;</loc></url></urlset>"""
    doc = parse_sitemap(body, BASE, 10**6, 10)
    assert all("aaaa" not in e.url and "root" not in e.url for e in doc.entries)


def test_rss_and_atom_feeds(portal: NewsPortal) -> None:
    _, ctype, rss = portal.render_publisher("/feed.rss")
    doc = parse_feed(rss, BASE + "/feed.rss", 10**6, 10, ctype)
    assert [(e.url, e.date, e.title) for e in doc.entries] == [
        (portal.url(3), portal.stories[3].published, portal.stories[3].title)
    ]
    assert doc.warning == "" and sniff(rss) == "feed" and doc.entries[0].story
    _, ctype, atom = portal.render_publisher("/feed.atom")
    doc = parse_feed(atom, BASE + "/feed.atom", 10**6, 10, ctype)
    assert [(e.url, e.date) for e in doc.entries] == [(portal.url(4), portal.stories[4].published)]  # relative href
    rdf = b"""<?xml version="1.0"?><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"
      xmlns="http://purl.org/rss/1.0/"><channel rdf:about="x"><title>T</title></channel>
      <item rdf:about="http://news.example/r"><title>R</title><link>http://news.example/r</link></item></rdf:RDF>"""
    assert [e.url for e in parse_feed(rdf, BASE, 10**6, 10).entries] == [BASE + "/r"]


def test_garbage_and_badly_encoded_feeds(portal: NewsPortal) -> None:
    _, _, broken = portal.render_publisher("/broken-feed.xml")
    with pytest.raises(DocumentError, match="not an RSS or Atom feed"):
        parse_feed(broken, BASE, 10**6, 10)
    with pytest.raises(DocumentError, match="not an RSS or Atom feed"):
        parse_feed(b"<html><body><p>hello</p></body></html>", BASE, 10**6, 10, "text/html")
    latin = '<?xml version="1.0" encoding="utf-8"?><rss version="2.0"><channel><item><title>Caf\xe9</title>'
    latin += "<link>http://news.example/cafe</link></item></channel></rss>"
    doc = parse_feed(latin.encode("latin-1"), BASE, 10**6, 10)
    assert [e.url for e in doc.entries] == [BASE + "/cafe"] and "encoding" in doc.warning.lower()


def test_feed_links_of_a_home_page(portal: NewsPortal) -> None:
    _, _, home = portal.render_publisher("/")
    response = HtmlResponse(BASE + "/", body=home)
    assert feed_links(response.selector.root, BASE + "/") == [
        BASE + "/feed.rss",
        BASE + "/feed.atom",
        BASE + "/broken-feed.xml",
        BASE + "/gone-feed.xml",
    ]


def test_sniff_looks_at_the_first_element_only() -> None:
    assert sniff(b"<!DOCTYPE html><html><head><!-- <rss> --></head>") == ""
    assert sniff(b"\xef\xbb\xbf<?xml version='1.0'?>\n<!-- c --><sitemapindex>") == "sitemap"
    assert sniff(b"\x1f\x8bnot gzip") == "" and sniff(b"") == ""


# -- near-duplicate fingerprints ----------------------------------------------------------------------
def test_syndicated_copy_fingerprints_alike_other_stories_do_not(portal: NewsPortal) -> None:
    def fp(body: bytes, url: str) -> int:
        article = extract_article(body.decode(), url)
        value = fingerprint(without_title(article.text, article.title), 50)
        assert value is not None
        return value

    original = fp(portal.render_publisher(portal.stories[2].path)[2], BASE)
    copy = fp(portal.render_wire("/wire/story-2")[2], "http://wire.example/wire/story-2")
    assert distance(original, copy) <= 3
    others = [fp(portal.render_publisher(portal.stories[i].path)[2], BASE) for i in (1, 3, 4, 5)]
    assert min(distance(original, other) for other in others) > 10
    assert fingerprint("too short to compare", 50) is None


@pytest.mark.parametrize("d", range(8))
def test_blocks_cover_64_bits(d: int) -> None:
    value = 0xDEADBEEF_01234567
    parts = blocks(value, d)
    assert len(parts) == d + 1
    widths = [64 // (d + 1) + (1 if i < 64 % (d + 1) else 0) for i in range(d + 1)]
    rebuilt = 0
    for (_, v), w in zip(parts, widths):
        rebuilt = (rebuilt << w) | v
    assert rebuilt == value


# -- settings and seeds ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "seconds"), [(0, 0), ("0", 0), ("2d", 172800), ("36h", 129600), ("90m", 5400), ("1w", 604800), (60, 60)]
)
def test_sitemap_since(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["two days", "-1", "2y", True, -5])
def test_bad_sitemap_since_names_the_setting(value: object) -> None:
    with pytest.raises(ValueError, match=r"SITEMAP_SINCE .* (duration|>= 0)"):
        parse_duration(value)


def test_news_config_checks_its_settings() -> None:
    config = NewsConfig.from_settings({"SITEMAP_SINCE": "2d", "EXTRACT_THREADS": 0})
    assert config.sitemap_since == 172800 and config.extract_threads == 0 and config.key("news") == "{news}:simhash"
    with pytest.raises(ValueError, match=r"NEAR_DUPLICATE_DISTANCE \(9\) must be <= 7"):
        NewsConfig.from_settings({"NEAR_DUPLICATE_DISTANCE": 9})
    assert config.near_duplicate_window == 14 * 86400  # the default, "14d"
    assert NewsConfig.from_settings({"NEAR_DUPLICATE_WINDOW": 0}).near_duplicate_window == 0
    with pytest.raises(ValueError, match=r"NEAR_DUPLICATE_WINDOW \('a fortnight'\) must be seconds or a duration"):
        NewsConfig.from_settings({"NEAR_DUPLICATE_WINDOW": "a fortnight"})


def test_site_seed_names_parse_site() -> None:
    seed = site_seed("https://example.com")
    assert json.loads(seed) == {"url": "https://example.com/", "callback": "parse_site"}
    assert parse_seed(seed, 65536).callback == "parse_site"
    for bad in ("example.com", "ftp://example.com", "https://", "http://[x"):
        with pytest.raises(SeedError):
            site_seed(bad)
