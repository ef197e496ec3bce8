"""Extraction quality on real pages with ground truth, next to trafilatura / htmldate run directly on
the same HTML in the same run (docs/benchmarks.md "Extraction quality").

The pages are other people's content and are not in the repository: pass the directories of
trafilatura's tests (`evaldata.json`, `cache/`, `eval/`) and htmldate's tests (`eval_default.json`,
`eval_mediacloud_2020.json`, `cache/`, `eval/`, `test_set/`), e.g. extracted from their git
repositories with `git archive`:

    .venv/bin/python -m bench.extraction /tmp/realpages/traf/tests /tmp/realpages/htmldate

Scores:
- text: trafilatura's own method (evaldata.json: snippets that must / must not appear in the
  text): precision, recall, F1 of `Article.text` and of `trafilatura.extract` in each
  configuration (--configs) and of the parse the project used before (`lxml.html.fromstring`,
  comment nodes kept), whitespace-normalized substring matching;
- dates: on htmldate's pages with a known publication day, the share with a date and the share
  correct to the day, for `Article.published_at` and for htmldate's `find_date` (original date);
- page type and language: accuracy on bench/page_labels.json (hand-labelled pages of these sets);
  language also as agreement with a declared `<html lang>` on the text set;
- cost: CPU ms per page of `extract_article` and of trafilatura's `bare_extraction` with its
  metadata (the like-for-like cost: trafilatura's text plus its title, author, date).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
import unicodedata
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import htmldate
import lxml.etree
import lxml.html
import trafilatura

from distributed_crawler.news.extract import TRAFILATURA_OPTIONS, extract_article

LABELS = Path(__file__).with_name("page_labels.json")
BASE = {"include_comments": False, "include_tables": True, "include_formatting": False}  # trafilatura's eval
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "favor_precision": {"favor_precision": True},
    "favor_recall": {"favor_recall": True},
    "no tables": {"include_tables": False},
    "with comments": {"include_comments": True},
    "deduplicate": {"deduplicate": True},
    "fast": {"fast": True},
}
SAME_LANGUAGE = {"nb": "no", "nn": "no"}
BEFORE = "before: lxml.html.fromstring"  # the plain lxml parse trafilatura is compared with (comments kept)


def _before(html: bytes, url: str) -> str | None:
    try:
        tree = lxml.html.fromstring(html)
    except (ValueError, lxml.etree.ParserError):
        return None
    doc = trafilatura.bare_extraction(tree, url=url, **BASE)
    return unicodedata.normalize("NFC", doc.text) if doc is not None and doc.text else None


def norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


class Matrix:
    def __init__(self) -> None:
        self.tp = self.fp = self.fn = self.tn = 0

    def add(self, item: dict[str, Any], text: str | None) -> None:
        found = norm(text or "")
        tp = sum(1 for w in item["with"] if norm(w) in found)
        fp = sum(1 for w in item["without"] if norm(w) in found)
        self.tp, self.fn = self.tp + tp, self.fn + len(item["with"]) - tp
        self.fp, self.tn = self.fp + fp, self.tn + len(item["without"]) - fp

    def scores(self) -> dict[str, float]:
        precision = self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0
        recall = self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0
        f1 = 2 * self.tp / (2 * self.tp + self.fp + self.fn) if self.tp else 0.0
        return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4)}


class Corpus:
    """One ground-truth file: url -> {"file": ..., ground truth}, pages looked up in its folders."""

    def __init__(self, root: Path, index: str, folders: tuple[str, ...]) -> None:
        self.root, self.folders = root, folders
        self.items: dict[str, dict[str, Any]] = json.loads((root / index).read_text(encoding="utf-8"))

    def html(self, url: str) -> bytes | None:
        name = self.items[url]["file"]
        for folder in self.folders:
            path = self.root / folder / name
            if path.is_file():
                return path.read_bytes()
        return None


def corpora(paths: list[Path]) -> dict[str, Corpus]:
    found: dict[str, Corpus] = {}
    for root in paths:
        if (root / "evaldata.json").is_file():
            found["trafilatura"] = Corpus(root, "evaldata.json", ("cache", "eval"))
        if (root / "eval_default.json").is_file():
            found["htmldate"] = Corpus(root, "eval_default.json", ("cache", "eval"))
        if (root / "eval_mediacloud_2020.json").is_file():
            found["mediacloud"] = Corpus(root, "eval_mediacloud_2020.json", ("test_set",))
    return found


def cpu_ms(func: Callable[[], Any]) -> tuple[Any, float]:
    start = time.process_time()
    result = func()
    return result, (time.process_time() - start) * 1000


def _article(html: bytes, url: str) -> Any:
    return extract_article(html, url if url.startswith("http") else "")


def text_scores(corpus: Corpus, configs: list[str], limit: int) -> dict[str, Any]:
    ours, theirs = Matrix(), {name: Matrix() for name in configs}
    cost: dict[str, list[float]] = {"extract_article": [], "trafilatura bare_extraction + metadata": []}
    lang_agree = lang_declared = 0
    for url in list(corpus.items)[:limit] if limit else corpus.items:
        item, html = corpus.items[url], corpus.html(url)
        if html is None:
            continue
        article, ms = cpu_ms(partial(_article, html, url))
        cost["extract_article"].append(ms)
        ours.add(item, article.text)
        options = {**BASE, **TRAFILATURA_OPTIONS}
        _, ms = cpu_ms(partial(trafilatura.bare_extraction, html, url=url, with_metadata=True, **options))
        cost["trafilatura bare_extraction + metadata"].append(ms)
        for name in configs:
            if name == BEFORE:
                theirs[name].add(item, _before(html, url))
            else:
                theirs[name].add(item, trafilatura.extract(html, url=url, **{**BASE, **CONFIGS[name]}))
        declared = _declared(html)
        if declared and article.lang:
            lang_declared += 1
            lang_agree += SAME_LANGUAGE.get(declared, declared) == SAME_LANGUAGE.get(article.lang, article.lang)
    return {
        "pages": len(cost["extract_article"]),
        "extract_article": ours.scores(),
        "trafilatura.extract": {name: m.scores() for name, m in theirs.items()},
        "ms per page (mean CPU)": {name: round(statistics.fmean(v), 1) for name, v in cost.items() if v},
        "lang agrees with <html lang> (pages declaring one)": f"{lang_agree}/{lang_declared}",
    }


def _declared(html: bytes) -> str | None:
    root = trafilatura.utils.load_html(html)
    value = root.get("lang") if root is not None else None
    return value.split("-")[0].split("_")[0].strip().lower() or None if value else None


def date_scores(sets: list[Corpus], limit: int) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    signals: Counter[str] = Counter()
    for corpus in sets:
        for url in list(corpus.items)[:limit] if limit else corpus.items:
            truth = corpus.items[url].get("date")
            html = corpus.html(url)
            if not isinstance(truth, str) or not re.fullmatch(r"\d{4}-\d\d-\d\d", truth) or html is None:
                continue
            counts["pages"] += 1
            article = _article(html, url)
            found = {
                "published_at": article.published_at,
                "htmldate original": htmldate.find_date(html, url=url, original_date=True),
                "htmldate original, not extensive": htmldate.find_date(
                    html, url=url, original_date=True, extensive_search=False
                ),
            }
            signals[article.signals.get("published_at", "none")] += 1
            for name, value in found.items():
                counts[f"{name} found"] += bool(value)
                counts[f"{name} correct"] += bool(value) and str(value)[:10] == truth
                counts[f"{name} in a zone"] += bool(value) and _on_day_somewhere(str(value), truth)
    pages = counts["pages"] or 1
    names = ("published_at", "htmldate original", "htmldate original, not extensive")
    return {
        "pages with a known day": counts["pages"],
        **{
            name: {
                "date found": round(counts[f"{name} found"] / pages, 4),
                "correct to the day": round(counts[f"{name} correct"] / pages, 4),
                "correct to the day, a UTC instant in the site's zone": round(counts[f"{name} in a zone"] / pages, 4),
            }
            for name in names
        },
        "published_at signal": dict(signals.most_common()),
    }


def _on_day_somewhere(value: str, truth: str) -> bool:
    """The value's day as written is the true day, or the value is a UTC instant (the zone the
    site published in unknown) that falls on the true day in some zone of UTC-12...+14."""
    if value[:10] == truth:
        return True
    if not value.endswith(("+00:00", "Z")) or "T" not in value:
        return False
    moment = datetime.fromisoformat(value)
    return any((moment + timedelta(hours=h)).date().isoformat() == truth for h in range(-12, 15))


def label_scores(found: dict[str, Corpus]) -> dict[str, Any]:
    labels = json.loads(LABELS.read_text(encoding="utf-8"))["pages"]
    types: Counter[str] = Counter()
    confusion: Counter[str] = Counter()
    langs: Counter[str] = Counter()
    wrong: list[str] = []
    for label in labels:
        corpus = found.get(label["corpus"])
        html = corpus.html(label["url"]) if corpus is not None and label["url"] in corpus.items else None
        if html is None:
            continue
        article = _article(html, label["url"])
        types["pages"] += 1
        types["correct"] += article.page_type == label["page_type"]
        confusion[f"{label['page_type']} -> {article.page_type}"] += 1
        if article.page_type != label["page_type"]:
            wrong.append(
                f"{label['url'][:80]} {label['page_type']} -> {article.page_type} ({article.signals['page_type']})"
            )
        if label["lang"]:
            langs["pages"] += 1
            langs["correct"] += SAME_LANGUAGE.get(article.lang or "", article.lang) == label["lang"]
    return {
        "page type accuracy": f"{types['correct']}/{types['pages']}",
        "page type (label -> found)": dict(sorted(confusion.items())),
        "page type mistakes": wrong,
        "language accuracy": f"{langs['correct']}/{langs['pages']}",
    }


def language_samples(found: dict[str, Corpus], limit: int) -> list[dict[str, Any]]:
    """Extracted texts with a language: hand labels (bench/page_labels.json), then the declared
    `<html lang>` of trafilatura's pages (agreement, not truth: declarations are often wrong)."""
    samples: list[dict[str, Any]] = []
    for label in json.loads(LABELS.read_text(encoding="utf-8"))["pages"]:
        corpus = found.get(label["corpus"])
        html = corpus.html(label["url"]) if corpus is not None and label["url"] in corpus.items else None
        if html is not None and label["lang"]:
            samples.append({"kind": "hand", "label": label["lang"], "text": _article(html, label["url"]).text})
    corpus = found.get("trafilatura")
    for url in (list(corpus.items)[:limit] if limit else corpus.items) if corpus is not None else ():
        html = corpus.html(url)
        declared = _declared(html) if html is not None else None
        if html is not None and declared:
            samples.append({"kind": "declared", "label": declared, "text": _article(html, url).text})
    return samples


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("paths", nargs="+", type=Path, help="trafilatura's and htmldate's tests/ folders")
    parser.add_argument("--configs", default=",".join([*CONFIGS, BEFORE]), help="trafilatura configurations to compare")
    parser.add_argument("--limit", type=int, default=0, help="pages per set (0 = all)")
    parser.add_argument("--only", default="text,dates,labels", help="parts to run")
    parser.add_argument("--dump-texts", type=Path, help="write the texts and language labels for bench.languages")
    args = parser.parse_args(argv)
    found = corpora(args.paths)
    if args.dump_texts:
        args.dump_texts.write_text(json.dumps(language_samples(found, args.limit), ensure_ascii=False))
        return
    parts = set(args.only.split(","))
    report: dict[str, Any] = {}
    if "text" in parts and "trafilatura" in found:
        report["text"] = text_scores(found["trafilatura"], args.configs.split(","), args.limit)
    date_sets = [found[name] for name in ("htmldate", "mediacloud") if name in found]
    if "dates" in parts and date_sets:
        report["dates"] = date_scores(date_sets, args.limit)
    if "labels" in parts:
        report["labels"] = label_scores(found)
    print(json.dumps(report, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
