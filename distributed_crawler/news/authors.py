"""Author names of a story: people from JSON-LD, meta tags and the byline, normalized.

JSON-LD says whether an author is a Person or an Organization; organisations (a newsroom, a wire
service) go to `Article.author_organizations`, never into `authors`. A byline is text: "By Jane
Doe and John Roe, Staff Writers | 3 May 2024" gives two names; prefixes, roles, dates, e-mail
addresses and URLs are removed, and duplicates are dropped case-insensitively.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from distributed_crawler.news.jsonld import text_values, types

MAX_AUTHORS = 20
MAX_NAME = 100
_SPLIT = re.compile(r"\s*(?:[,;|/&]|\band\b|\bund\b|\bet\b|\by\b|\be\b)\s*", re.IGNORECASE)
_PREFIX = re.compile(
    r"^(?:(?:written|posted|reported|photos?|text|words)\s+)?(?:by|von|par|por|di|door|av)\b[:\s]*", re.I
)
_ROLE = re.compile(
    r"\b(?:senior|chief|deputy|associate|contributing|special|political|foreign|staff|guest|freelance)?\s*"
    r"(?:writers?|reporters?|correspondents?|editors?|columnists?|contributors?|journalists?|"
    r"redakteur(?:in)?|redaktion|autor(?:in)?|photographers?|producers?|analysts?)\b",
    re.IGNORECASE,
)
_NOISE = re.compile(
    r"\S+@\S+|https?://\S+|www\.\S+|@\w+|\d{1,4}[./-]\d{1,2}[./-]\d{1,4}|\d{1,2}:\d{2}|"
    r"\b(?:updated|published|last|modified|on)\b.*$",
    re.IGNORECASE,
)
_BAD = re.compile(r"\d|^(?:admin|administrator|staff|editor|unknown|anonymous|redaktion|team)$", re.IGNORECASE)


def normalize(raw: Iterable[str]) -> tuple[str, ...]:
    """Clean person names from raw author strings (bylines, meta contents), first seen first."""
    names: dict[str, str] = {}
    for value in raw:
        for part in _SPLIT.split(_NOISE.sub(" ", value)):
            name = _ROLE.sub(" ", _PREFIX.sub("", part.strip()))
            name = " ".join(name.strip(" .,:;-–—()[]'\"").split())
            if 2 <= len(name) <= MAX_NAME and len(name.split()) <= 6 and not _BAD.search(name):
                names.setdefault(name.casefold(), name)
        if len(names) >= MAX_AUTHORS:
            break
    return tuple(names.values())[:MAX_AUTHORS]


def jsonld_authors(article: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """(people, organisations) named by the article node's `author` (and `creator`)."""
    people: list[str] = []
    organisations: list[str] = []
    if article is None:
        return people, organisations
    for key in ("author", "creator"):
        value = article.get(key)
        for item in (value if isinstance(value, list) else [value])[:MAX_AUTHORS]:
            if isinstance(item, str):
                people.append(item)
            elif isinstance(item, dict):
                kinds = types(item)
                names = text_values(item.get("name"))
                if kinds & {"organization", "newsmediaorganization", "corporation"}:
                    organisations.extend(names)
                else:
                    people.extend(names)
        if people or organisations:
            break
    return people, organisations
