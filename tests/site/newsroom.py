"""A local news site whose pages use the patterns real newsrooms use, for the page-type tests.

One threaded HTTP host on 127.0.0.1 (port 0): a home page, sections (`/world/`, `/wirtschaft/`),
tag pages (`/tag/...`), an about page, and articles in English and German (enough real-looking
text for language detection). Articles carry schema.org JSON-LD in an `@graph` (WebPage,
NewsArticle, Person), dates without a UTC offset (`datePublished` a local date-time or a plain
date, `dateModified` where the story was updated); one is paywalled (`isAccessibleForFree: false`
and a `hasPart` WebPageElement whose `cssSelector` names the locked part), one declares itself
free. Two articles are linked from a tag page only, so storing them proves the tag page was crawled
for its links although it is not stored. `hits(path)` counts requests per path.
"""

from __future__ import annotations

import html
import json
import threading
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from tests.site.local import LoopbackServer

SITE_NAME = "Riverside Courier"


@dataclass(frozen=True)
class Story:
    path: str
    lang: str
    title: str
    authors: tuple[str, ...]
    published: str  # as the page writes it (no offset)
    modified: str | None
    paragraphs: tuple[str, ...]
    section: str
    tags: tuple[str, ...]
    free: bool | None = None  # isAccessibleForFree as declared; None = not declared
    locked: tuple[str, ...] = ()  # paragraphs inside the paywalled part


STORIES: tuple[Story, ...] = (
    Story(
        "/world/2026/12/01/river-flood-defences.html",
        "en",
        "City council approves new river flood defences",
        ("Margaret Ellison",),
        "2026-12-01T09:30:00",
        "2026-12-02T08:15:00",
        (
            "The city council voted on Tuesday evening to spend twelve million pounds on new flood defences "
            "along the eastern bank of the river, after two winters in which the water reached the doors of "
            "the old market hall.",
            "Engineers from the regional water authority told councillors that the existing walls were built "
            "in the nineteen sixties and were never meant to hold back the volume of water the river now "
            "carries after a week of heavy rain.",
            "Residents of the streets behind the market, many of whom spent last January clearing mud out of "
            "their kitchens, filled the public gallery and applauded when the result of the vote was read out.",
            "Work on the first section of the wall is expected to begin in the spring, and the council has "
            "promised that the footpath along the river will stay open for walkers and cyclists throughout.",
        ),
        "world",
        ("climate", "local-politics"),
        free=True,
    ),
    Story(
        "/world/2026/12/01/library-reopens.html",
        "en",
        "Central library reopens after a two-year renovation",
        ("Thomas Okafor", "Priya Raman"),
        "2026-12-01",
        None,
        (
            "The central library opened its doors again on Monday morning, two years after a leaking roof "
            "forced the building to close and sent its collection of rare maps into temporary storage.",
            "Visitors queued around the corner before the doors opened, and the librarians handed out coffee "
            "and biscuits while children raced each other up the newly restored spiral staircase.",
            "The renovation added a reading room on the top floor with a view across the rooftops to the "
            "cathedral, as well as a workshop where volunteers will teach older residents to use computers.",
            "The head librarian said that the number of people who signed up for a library card on the first "
            "day was higher than in any full month before the building closed.",
        ),
        "world",
        ("culture",),
    ),
    Story(
        "/world/2026/11/30/tram-line-extension.html",
        "en",
        "Tram line extension to reach the university campus by next autumn",
        ("Margaret Ellison",),
        "2026-11-30T17:05:00",
        None,
        (
            "Passengers will be able to ride the tram all the way to the university campus from next autumn, "
            "the transport authority announced, after the final stretch of track was laid across the old "
            "railway bridge.",
            "Students have complained for years that the buses from the station are slow and crowded, and the "
            "university says that almost half of its staff currently drive to work because of the poor service.",
            "The extension adds four stops, including one beside the hospital, and the trams will run every "
            "eight minutes during the day and every quarter of an hour in the late evening.",
            "Shopkeepers along the route, who suffered from months of road closures, hope that the new stops "
            "will bring more customers to a part of town that many visitors have never seen.",
        ),
        "world",
        ("transport", "climate"),
        free=None,
    ),
    Story(
        "/world/2026/11/29/harbour-investigation.html",
        "en",
        "Investigation: who owns the empty warehouses on the harbour?",
        ("Daniel Whitfield",),
        "2026-11-29T06:00:00",
        "2026-11-30T12:40:00",
        (
            "For more than a decade the row of brick warehouses on the north side of the harbour has stood "
            "empty, its windows boarded up and its loading doors chained shut, while the city argued about "
            "what should happen to the land.",
            "Over three months our reporters followed the ownership of the buildings through a chain of "
            "companies registered in four different countries, none of which has ever filed an account.",
        ),
        "world",
        ("local-politics",),
        free=False,
        locked=(
            "The trail ends at a holding company whose only listed director is a retired accountant who told "
            "us that he had never heard of the warehouses and had signed the papers as a favour to a friend.",
            "Council records show that the same holding company has twice objected to plans to turn the "
            "warehouses into homes, each time arguing that the harbour might one day be needed for industry.",
        ),
    ),
    Story(
        "/wirtschaft/2026/12/01/baeckerei-genossenschaft.html",
        "de",
        "Bäckerei wird zur Genossenschaft: Kunden kaufen ihren Laden",
        ("Anna Schmidt",),
        "2026-12-01T07:45:00",
        "2026-12-01T15:20:00",
        (
            "Die älteste Bäckerei der Altstadt gehört seit dieser Woche ihren Kundinnen und Kunden. Mehr als "
            "dreihundert Menschen haben Anteile gezeichnet, nachdem der Inhaber angekündigt hatte, dass er "
            "keinen Nachfolger gefunden habe.",
            "Der Bäckermeister wird weiterhin jeden Morgen um drei Uhr in der Backstube stehen, aber über die "
            "Preise und die Öffnungszeiten entscheidet künftig eine Versammlung der Mitglieder.",
            "Viele der neuen Eigentümer kaufen dort seit Jahrzehnten ihre Brötchen und wollten nicht zusehen, "
            "wie aus dem Laden mit dem alten Holztresen eine weitere Filiale einer großen Kette wird.",
            "Die Genossenschaft plant, im kommenden Jahr zwei Auszubildende einzustellen und samstags einen "
            "kleinen Markt vor der Tür zu veranstalten, auf dem Bauern aus der Umgebung verkaufen können.",
        ),
        "wirtschaft",
        ("handwerk",),
    ),
    Story(
        "/wirtschaft/2026/11/30/hafen-logistik.html",
        "de",
        "Neues Logistikzentrum am Hafen soll vierhundert Arbeitsplätze schaffen",
        ("Jonas Becker", "Leonie Wagner"),
        "2026-11-30T11:00:00",
        None,
        (
            "Auf dem Gelände der früheren Werft am Südhafen entsteht bis zum übernächsten Jahr ein großes "
            "Logistikzentrum. Das Unternehmen rechnet damit, dort rund vierhundert Menschen zu beschäftigen.",
            "Die Stadtverwaltung begrüßt die Ansiedlung, weil das Grundstück seit der Schließung der Werft "
            "brachliegt und die Stadt jedes Jahr viel Geld für die Sicherung der alten Hallen ausgibt.",
            "Anwohner im benachbarten Viertel befürchten dagegen mehr Lastwagen auf den engen Straßen und "
            "fordern eine direkte Zufahrt von der Autobahn, bevor der Betrieb aufgenommen wird.",
            "Der Bürgermeister versprach, dass die neue Zufahrt gleichzeitig mit dem Logistikzentrum fertig "
            "werden solle, und kündigte eine Bürgerversammlung für den kommenden Monat an.",
        ),
        "wirtschaft",
        ("hafen",),
    ),
    Story(
        "/wirtschaft/2026/11/28/stadtwerke-solar.html",
        "de",
        "Stadtwerke bauen Solaranlagen auf den Dächern der Schulen",
        ("Anna Schmidt",),
        "2026-11-28",
        None,
        (
            "Die Stadtwerke wollen in den nächsten drei Jahren auf den Dächern aller städtischen Schulen "
            "Solaranlagen errichten. Der Strom soll zuerst in den Schulen selbst verbraucht werden.",
            "An sonnigen Tagen, an denen die Anlagen mehr Strom erzeugen, als die Gebäude benötigen, wird der "
            "Überschuss in das Netz eingespeist und kommt den umliegenden Haushalten zugute.",
            "Lehrerinnen und Lehrer sollen die Anlagen auch im Unterricht nutzen: Auf einem Bildschirm im "
            "Eingangsbereich können die Schülerinnen und Schüler jederzeit sehen, wie viel Energie gerade "
            "erzeugt wird.",
            "Für das Projekt haben die Stadtwerke Fördermittel des Landes beantragt, die nach Angaben der "
            "Geschäftsführung etwa ein Drittel der Kosten decken würden.",
        ),
        "wirtschaft",
        ("energie", "hafen"),
    ),
)

SECTIONS = {"world": ("World", "en"), "wirtschaft": ("Wirtschaft", "de")}
TAG_ONLY = {STORIES[2].path, STORIES[6].path}  # linked from their tag pages only


def _jsonld(story: Story, base: str) -> str:
    url = base + story.path
    article: dict[str, Any] = {
        "@type": "NewsArticle",
        "@id": url + "#article",
        "headline": story.title,
        "inLanguage": story.lang,
        "datePublished": story.published,
        "author": [{"@id": f"{base}/people/{a.lower().replace(' ', '-')}"} for a in story.authors],
        "publisher": {"@type": "NewsMediaOrganization", "name": SITE_NAME},
        "mainEntityOfPage": {"@id": url},
        "articleSection": SECTIONS[story.section][0],
    }
    if story.modified:
        article["dateModified"] = story.modified
    if story.free is not None:
        article["isAccessibleForFree"] = story.free
    if story.locked:
        article["hasPart"] = {"@type": "WebPageElement", "isAccessibleForFree": False, "cssSelector": ".paywall"}
    people = [
        {"@type": "Person", "@id": f"{base}/people/{a.lower().replace(' ', '-')}", "name": a} for a in story.authors
    ]
    graph = {
        "@context": "https://schema.org",
        "@graph": [{"@type": "WebPage", "@id": url, "url": url, "name": story.title}, article, *people],
    }
    return json.dumps(graph, ensure_ascii=False)


def _page(title: str, lang: str, head: str, body: str) -> bytes:
    nav = (
        " ".join(f'<a href="/{key}/">{html.escape(name)}</a>' for key, (name, _) in SECTIONS.items())
        + ' <a href="/about">About us</a>'
    )
    return (
        f'<!DOCTYPE html><html lang="{lang}"><head><meta charset="utf-8"><title>{html.escape(title)} | {SITE_NAME}</title>'
        f"{head}</head><body><header><a href='/'>{SITE_NAME}</a><nav>{nav}</nav></header>"
        f"{body}<footer>© 2026 {SITE_NAME}. All rights reserved. <a href='/about'>Contact</a></footer></body></html>"
    ).encode()


def _teasers(stories: list[Story]) -> str:
    items = []
    for s in stories:
        items.append(
            f'<li class="teaser"><h3><a href="{s.path}">{html.escape(s.title)}</a></h3>'
            f'<p>{html.escape(s.paragraphs[0][:90])}…</p><a class="more" href="{s.path}">Read more</a> '
            + " ".join(f'<a class="tag" href="/tag/{t}">#{t}</a>' for t in s.tags)
            + "</li>"
        )
    return "<ul class='stream'>" + "".join(items) + "</ul>"


def _list_page(title: str, lang: str, stories: list[Story], base: str, path: str) -> bytes:
    head = (
        '<meta property="og:type" content="website">'
        '<script type="application/ld+json">'
        + json.dumps({"@context": "https://schema.org", "@type": "CollectionPage", "name": title, "url": base + path})
        + "</script>"
    )
    return _page(title, lang, head, f"<main><h1>{html.escape(title)}</h1>{_teasers(stories)}</main>")


def _article_page(story: Story, base: str) -> bytes:
    head = (
        '<meta property="og:type" content="article">'
        f'<link rel="canonical" href="{base}{story.path}">'
        f'<script type="application/ld+json">{_jsonld(story, base)}</script>'
    )
    byline = " and ".join(story.authors)
    paragraphs = "".join(f"<p>{html.escape(p)}</p>" for p in story.paragraphs)
    if story.locked:
        paragraphs += '<div class="paywall">' + "".join(f"<p>{html.escape(p)}</p>" for p in story.locked) + "</div>"
    tags = " ".join(f'<a rel="tag" href="/tag/{t}">{t}</a>' for t in story.tags)
    body = (
        f"<main><article><h1>{html.escape(story.title)}</h1>"
        f'<p class="byline">By {html.escape(byline)}</p>{paragraphs}'
        f'<p class="tags">{tags}</p></article>'
        f'<aside><h2>More news</h2><a href="/{story.section}/">{SECTIONS[story.section][0]}</a></aside></main>'
    )
    return _page(story.title, story.lang, head, body)


ABOUT = (
    "<main><h1>About us</h1><p>The Riverside Courier has reported on the city since 1898.</p>"
    "<p>Write to the newsroom at newsroom@riverside.example or call us on weekdays.</p></main>"
)


class Newsroom:
    """The site (module docstring); a context manager that serves it on 127.0.0.1."""

    def __init__(self) -> None:
        self.url = ""
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()
        self._hits: Counter[str] = Counter()

    # -- what a correct crawler stores --------------------------------------------------------
    def story_url(self, story: Story) -> str:
        return self.url + story.path

    @property
    def list_paths(self) -> list[str]:
        tags = sorted({t for s in STORIES for t in s.tags})
        return ["/", *(f"/{key}/" for key in SECTIONS), *(f"/tag/{t}" for t in tags)]

    def hits(self, path: str) -> int:
        with self._lock:
            return self._hits[path]

    # -- pages ---------------------------------------------------------------------------------
    def render(self, path: str) -> tuple[int, bytes]:
        base = self.url
        if path == "/robots.txt":
            return 200, b"User-agent: *\nDisallow:\n"
        if path == "/":
            front = [s for s in STORIES if s.path not in TAG_ONLY]
            return 200, _list_page("Latest news", "en", front, base, path)
        if path == "/about":
            return 200, _page("About us", "en", '<meta property="og:type" content="website">', ABOUT)
        for key, (name, lang) in SECTIONS.items():
            if path == f"/{key}/":
                stories = [s for s in STORIES if s.section == key and s.path not in TAG_ONLY]
                return 200, _list_page(name, lang, stories, base, path)
        if path.startswith("/tag/"):
            tag = path.removeprefix("/tag/")
            stories = [s for s in STORIES if tag in s.tags]
            if stories:
                return 200, _list_page(f"Tag: {tag}", stories[0].lang, stories, base, path)
        for story in STORIES:
            if path == story.path:
                return 200, _article_page(story, base)
        return 404, b"<html><body>Not found</body></html>"

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> Newsroom:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30

            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                with site._lock:
                    site._hits[path] += 1
                status, body = site.render(path)
                ctype = "text/plain" if path == "/robots.txt" else "text/html; charset=utf-8"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = LoopbackServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
