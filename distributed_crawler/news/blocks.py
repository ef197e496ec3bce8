"""The page's largest block of prose, measured apart from its menus and link lists.

Institutional CMSs (ministries, cantons, federations) wrap a press release in hundreds of menu
links, so the whole page's link density says "list" of a story. What tells them apart is where
the text sits: a story's paragraphs stand side by side in one element; a list's blurbs sit one per
teaser, each in its own element between links. `block_chars` is the size of the largest such
block: the prose paragraphs (`<p>`, or text runs between `<br>`s) that share one parent element,
their links left out, nothing inside `<nav>`, `<footer>`, `<aside>` or a form.
"""

from __future__ import annotations

from lxml import etree
from lxml.html import HtmlElement

from distributed_crawler.news.page_types import SENTENCE_END, text_size

PARAGRAPH = 80  # characters of a run that can be a story's paragraph (a menu label, a byline is shorter)
MAX_ELEMENTS = 20_000  # elements walked: a page with more is cut there (a catalogue, not one story)
# not <header>: a CMS may render a story's parts as section headers, or the whole page inside one
_SKIP = frozenset(
    {"script", "style", "noscript", "template", "a", "nav", "footer", "aside", "form", "select", "button"}
)
_NON_LINK_TEXT = etree.XPath(
    ".//text()[not(ancestor::a or ancestor::script or ancestor::style or ancestor::noscript or ancestor::template)]",
    smart_strings=False,
)


def block_chars(root: HtmlElement) -> int:
    """Characters (`text_size`) in the page's largest block of prose paragraphs (module docstring):
    each run of PARAGRAPH or more that ends a sentence counts for the element that holds it."""
    body = root.find("body")
    blocks: dict[HtmlElement, int] = {}
    stack = [body if body is not None else root]
    walked = 0
    while stack and walked < MAX_ELEMENTS:
        element = stack.pop()
        walked += 1
        if element.tag == "p":
            parent = element.getparent()
            if parent is not None:
                _add(blocks, parent, " ".join(_NON_LINK_TEXT(element)))
            continue  # the paragraph is one run: what is inside it is not a block of its own
        runs = [element.text or ""] + [child.tail or "" for child in element if child.tag != "a"]
        _add(blocks, element, " ".join(runs))
        stack.extend(child for child in element if isinstance(child.tag, str) and child.tag not in _SKIP)
    return max(blocks.values(), default=0)


def _add(blocks: dict[HtmlElement, int], holder: HtmlElement, text: str) -> None:
    run = " ".join(text.split())
    size = text_size(run)
    if size >= PARAGRAPH and SENTENCE_END.search(run):
        blocks[holder] = blocks.get(holder, 0) + size
