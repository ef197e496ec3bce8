"""EXTRACTION_RULES: per-site selectors that win over generic extraction for a site it fails on.

    EXTRACTION_RULES = {"example.com": {"text": "div.story p", "published_at": "//span[@class='d']/@title",
                                        "exclude": [".related", "aside"]}}

Keys are registered domains (a host takes the rules of its nearest named parent: `amp.example.co.uk`
those of `example.co.uk`); `text` and `exclude` are CSS
selectors, `published_at` a CSS selector or an XPath (starting with `/` or `(`). The setting is read
once at start (news/config.py) and a bad rule (unknown key, wrong type, a selector that does not
compile) stops the start with one line naming it; `-s` takes the same as JSON.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cssselect import SelectorError
from lxml.cssselect import CSSSelector
from lxml.etree import XPath, XPathError

from distributed_crawler.urlhost import url_host

KEYS = ("text", "published_at", "exclude")
HINT = 'e.g. {"example.com": {"text": "article p", "published_at": "//time/@datetime", "exclude": [".ad"]}}'


@dataclass(frozen=True)
class SiteRules:
    """One site's compiled rules (each None / empty when the site's rule leaves the field generic)."""

    text: XPath | None = field(default=None, compare=False)
    published_at: XPath | None = field(default=None, compare=False)
    exclude: tuple[XPath, ...] = field(default=(), compare=False)
    source: Mapping[str, Any] = field(default_factory=dict)  # the rule as written


def _fail(where: str, problem: str) -> ValueError:
    return ValueError(f"EXTRACTION_RULES {where} {problem}; {HINT}")


def _css(where: str, value: Any) -> XPath:
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, f"({value!r}) must be a CSS selector (a non-empty string)")
    try:
        return CSSSelector(value, translator="html")
    except SelectorError as exc:
        raise _fail(where, f"({value!r}) is not a valid CSS selector ({exc})") from None


def _css_or_xpath(where: str, value: Any) -> XPath:
    if isinstance(value, str) and value.strip()[:1] in ("/", "("):
        try:
            return XPath(value)
        except XPathError as exc:
            raise _fail(where, f"({value!r}) is not a valid XPath ({exc})") from None
    return _css(where, value)


def parse_rules(value: Any) -> dict[str, SiteRules]:
    """The setting's value (a dict, or its JSON text from `-s`) -> registered domain -> SiteRules."""
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise _fail(f"({value[:80]!r})", f"is not JSON ({exc})") from None
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(f"({value!r})", "must be a dict of registered domain -> rules")
    rules: dict[str, SiteRules] = {}
    for domain, rule in value.items():
        if not isinstance(domain, str) or not domain.strip() or "/" in domain:
            raise _fail(f"key {domain!r}", "must be a registered domain such as example.com")
        where = f"[{domain!r}]"
        if not isinstance(rule, Mapping):
            raise _fail(where, f"({rule!r}) must be a dict with keys {', '.join(KEYS)}")
        unknown = sorted(str(k) for k in rule if k not in KEYS)
        if unknown:
            raise _fail(where, f"has unknown key(s) {', '.join(unknown)} (known: {', '.join(KEYS)})")
        exclude = rule.get("exclude", [])
        if not isinstance(exclude, list | tuple):
            raise _fail(f"{where}['exclude']", f"({exclude!r}) must be a list of CSS selectors")
        rules[domain.strip().lower().rstrip(".")] = SiteRules(
            text=_css(f"{where}['text']", rule["text"]) if "text" in rule else None,
            published_at=(
                _css_or_xpath(f"{where}['published_at']", rule["published_at"]) if "published_at" in rule else None
            ),
            exclude=tuple(_css(f"{where}['exclude'][{i}]", css) for i, css in enumerate(exclude)),
            source=dict(rule),
        )
    return rules


def rules_for(rules: Mapping[str, SiteRules], url: str) -> SiteRules | None:
    """The rules of the URL's host or of the nearest parent domain named (`www.example.co.uk` takes
    `example.co.uk`'s)."""
    host = url_host(url)
    labels = host.split(".")
    for i in range(len(labels)):
        found = rules.get(".".join(labels[i:]))
        if found is not None:
            return found
    return None


BLOCKS = "p, h1, h2, h3, h4, h5, h6, li, blockquote, pre, td"
_BLOCKS = CSSSelector(BLOCKS, translator="html")


def remove_excluded(root: Any, rules: SiteRules) -> None:
    """Drop the elements the site's `exclude` selectors match (before every other signal reads the tree)."""
    for selector in rules.exclude:
        for element in selector(root):
            if element.getparent() is not None:
                element.drop_tree()


def rule_text(root: Any, rules: SiteRules) -> str:
    """The text of the elements the `text` selector matches: one line per outermost
    paragraph-like block inside them (or per element without any)."""
    if rules.text is None:
        return ""
    lines: list[str] = []
    for element in rules.text(root)[:500]:
        found = _BLOCKS(element)
        inside = set(found)
        blocks = [b for b in found if not any(a in inside for a in b.iterancestors())] or [element]
        lines.extend(" ".join(block.text_content().split()) for block in blocks)
    return unicodedata.normalize("NFC", "\n".join(dict.fromkeys(line for line in lines if line)))


def rule_date_values(root: Any, rules: SiteRules) -> list[str]:
    """What the `published_at` selector matches: attribute or text values, an element's
    `datetime` / `content` attribute, else its text."""
    if rules.published_at is None:
        return []
    values: list[str] = []
    for found in rules.published_at(root)[:10]:
        if isinstance(found, str):
            values.append(str(found))
        elif hasattr(found, "get"):
            values.append(found.get("datetime") or found.get("content") or found.text_content())
    return values
