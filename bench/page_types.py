"""Page-type classification on real pages, split by site into a tuning half and a held-out half
(docs/benchmarks.md "Page types on real pages").

The pages are other people's content and are not in the repository. bench/page_types_corpus.py
takes them out of clones of three public repositories, at the commits the figures were taken on,
into one folder (`--corpus DIR`); or pass the three folders:

    --fundus      flairNLP/fundus tests/resources/parser/test_data (one news article per publisher
                  and date, `*.html.gz`, its URL in the folder's `meta.info`)
    --mediacloud  adbar/htmldate tests (eval_mediacloud_2020.json and test_set/: stories that
                  MediaCloud collected from news feeds in 2020)
    --autopager   scrapinghub/autopager autopager/data (data.csv and html/: pages collected to
                  train pagination detection, i.e. home, section, archive, search, forum and shop
                  listings)
    --trafilatura adbar/trafilatura tests (evaldata.json and eval/: pages its extraction is scored
                  on; optional): the "fresh" checks, three samples of 159, 160 and 160 pages of
                  other sites, each labelled before the rules ran on it; the rules changed after the
                  first ("fresh-1"), the prose rule was aimed at the kind of the second's misses
                  ("fresh-2"), the third ("fresh-3") was run once (bench/page_labels_trafilatura.json)
    --sample-4    also the fourth sample ("fresh-4"): 250 pages of htmldate's tests/eval_default.json
                  on sites no other group holds, drawn again here and checked against
                  bench/page_labels_htmldate.json, labelled before the rules ran on them, run once
    --sample-5    also the fifth ("fresh-5"): 223 pages of trafilatura's, htmldate's, scrapinghub's
                  article-extraction-benchmark's, goose3's and newspaper4k's test pages on sites
                  no other group holds (bench/page_labels_sample5.json)
    --sample-6    also the sixth ("fresh-6"): 210 pages of htmldate's and trafilatura's real-world
                  tests, mozilla/readability's and postlight/parser's test pages
                  (bench/page_labels_sample6.json)
    --sample-7    also the seventh ("fresh-7"): 90 pages of codelucas/newspaper's full-text tests
                  (bench/page_labels_sample7.json)
    --sample-8    also the eighth ("fresh-8"): 137 pages of omnivore-app/omnivore's reader tests,
                  microlinkhq/metascraper's integration tests and karussell/snacktory's test pages
                  (bench/page_labels_sample8.json)
    --sample-9    also the ninth ("fresh-9"): 155 pages of trafilatura's and htmldate's evaluation
                  sets no other group holds (second and later pages of sites read before)
                  (bench/page_labels_sample9.json)
                  Each was labelled by readers who neither ran nor read the rules, committed,
                  then run once; the rules changed after 5 and 6 (docs/benchmarks.md)

Labelling rule (decided from where a page comes from, before any classifier ran):
- fundus: article (the corpus is one article page per publisher);
- mediacloud: article, except the pages bench/page_labels.json labels otherwise by hand (a home
  page, a feed redirect, a video page) and those in MEDIACLOUD_NOT_ARTICLE, read one by one (title
  and URL): tweets, wiki diffs, a forum thread, a Q&A page, a journal's landing page, a company
  register entry, a radio programme, an image search result, a spam product page;
- autopager: list, except the rows in AUTOPAGER_NOT_LIST, read one by one (title and URL): forum
  threads, reviews, product and business pages are "other", the blog posts and news items are
  "article".

Split: by registered domain, the half is the parity of the first byte of the domain's SHA-1
(never tuned on: "held-out"; the rules were tuned on "tuning" only); the trafilatura pages are
their own groups, "fresh-1", "fresh-2" and "fresh-3", the htmldate sample "fresh-4". A page counts for:
- article recall: labelled article and classified article (what STORE_PAGE_TYPES=article stores);
- list recognised: labelled list and classified list or other (not stored by default), and the
  stricter share classified exactly "list".

    .venv/bin/python -m bench.page_types_corpus /tmp/articles_pages --fundus GIT --htmldate GIT --autopager GIT \
        --trafilatura GIT
    .venv/bin/python -m bench.page_types --corpus /tmp/articles_pages --sample-4 [--show tuning]
    .venv/bin/python -m bench.page_types --fundus DIR --mediacloud DIR --autopager DIR
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import hashlib
import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import lxml.html

from bench.page_types_corpus import folders
from distributed_crawler.core.traps import registered_domain
from distributed_crawler.news.extract import extract_article

LABELS = Path(__file__).with_name("page_labels.json")
FRESH_LABELS = Path(__file__).with_name("page_labels_trafilatura.json")
HTMLDATE_LABELS = Path(__file__).with_name("page_labels_htmldate.json")
SAMPLE_5_LABELS = Path(__file__).with_name("page_labels_sample5.json")
SAMPLE_6_LABELS = Path(__file__).with_name("page_labels_sample6.json")
SAMPLE_7_LABELS = Path(__file__).with_name("page_labels_sample7.json")
SAMPLE_8_LABELS = Path(__file__).with_name("page_labels_sample8.json")
SAMPLE_9_LABELS = Path(__file__).with_name("page_labels_sample9.json")
# every label file in the order it was made: a sample draws no page (or site) of the files before it
LABEL_FILES = (
    LABELS,
    FRESH_LABELS,
    HTMLDATE_LABELS,
    SAMPLE_5_LABELS,
    SAMPLE_6_LABELS,
    SAMPLE_7_LABELS,
    SAMPLE_8_LABELS,
    SAMPLE_9_LABELS,
)
GROUPS = ("tuning", "held-out", *(f"fresh-{n}" for n in range(1, 10)))
PLACEHOLDER_SITES = {"example.com", "exemple.com"}  # goose3's made-up test pages
SAMPLE_4 = 250  # pages of htmldate's evaluation set in the fourth sample
AUTOPAGER_NOT_LIST = {
    **dict.fromkeys(("1", "2", "3", "38", "42", "62", "64"), "other"),  # forum threads
    **dict.fromkeys(("4", "48", "135", "157"), "other"),  # a business, a player, a product, a comic strip
    **dict.fromkeys(("54", "55", "56", "57", "58"), "other"),  # reviews of one restaurant, hotel, book
    **dict.fromkeys(("83", "84", "132", "150", "155"), "article"),  # a feature (2 pages), a news item, 2 posts
}

MEDIACLOUD_NOT_ARTICLE = dict.fromkeys(
    (
        "https://twitter.com/Reuters/status/1281836879789404160/photo/1",
        "https://wiki.d-addicts.com/index.php?title=Park_Ye_Jin&diff=591343&oldid=588001",
        "https://bn.wikipedia.org/w/index.php?title=Jim_Higgs&diff=3986629&oldid=0",
        "https://hypixel.net/threads/what-whered-it-go.2675645/",
        "http://oshiete.goo.ne.jp/qa/11763760.html",
        "https://www.jstor.org/stable/2669240?origin=crossref",
        "https://www.dln.com/newcorporations/details/ref_index/438057",
        "https://www.slobodnaevropa.org/a/30657941.html",
    ),
    "other",
)


@dataclass(frozen=True)
class Page:
    corpus: str
    url: str
    label: str
    html: str | bytes

    @property
    def site(self) -> str:
        return registered_domain(urlsplit(self.url).hostname or "")

    @property
    def half(self) -> str:
        if self.corpus.startswith("trafilatura"):
            return "fresh-" + self.corpus.rsplit("-", 1)[-1]
        if self.corpus == "htmldate":
            return "fresh-4"
        if self.corpus.startswith("sample-"):
            return "fresh-" + self.corpus.rsplit("-", 1)[-1]
        return "held-out" if hashlib.sha1(self.site.encode()).digest()[0] % 2 else "tuning"


def fundus(root: Path) -> Iterator[Page]:
    for meta in sorted(root.glob("*/meta.info")):
        for name, info in json.loads(meta.read_text()).items():
            path = meta.parent / name
            if path.exists():
                yield Page("fundus", info["url"], "article", gzip.decompress(path.read_bytes()))


def mediacloud(root: Path) -> Iterator[Page]:
    hand = {p["url"]: p["page_type"] for p in json.loads(LABELS.read_text())["pages"] if p["corpus"] == "mediacloud"}
    for url, info in json.loads((root / "eval_mediacloud_2020.json").read_text()).items():
        path = root / "test_set" / info["file"]
        if path.exists():
            label = hand.get(url) or MEDIACLOUD_NOT_ARTICLE.get(url) or _spam_or_image(url) or "article"
            yield Page("mediacloud", url, label, path.read_bytes())


def _spam_or_image(url: str) -> str | None:
    """Mediacloud pages whose URLs are too long to list: an image search result, a spam page, and two
    feed redirects saved as a bot wall (Incapsula) and as an empty response: no story in the HTML."""
    prefixes = (
        "https://www.google.com/imgres?",
        "http://auto-door16814.ttblogs.com/",
        "http://feeds.bizjournals.com/~r/industry_12/~3/_rJ5SC99V8E/",
        "http://feeds.bizjournals.com/~r/industry_20/~3/Imon3NQaB8c/",
    )
    return "other" if url.startswith(prefixes) else None


def autopager(root: Path) -> Iterator[Page]:
    with (root / "data.csv").open(encoding="utf-8") as rows:
        for row in csv.DictReader(rows):
            path = root / "html" / f"{row['File Name']}.html"
            if path.exists():
                html = path.read_bytes().decode(row["Encoding"] or "utf-8", "replace")
                yield Page("autopager", row["Page URL"], AUTOPAGER_NOT_LIST.get(row["File Name"], "list"), html)


def trafilatura(root: Path) -> Iterator[Page]:
    """The pages of bench/page_labels_trafilatura.json but those labelled "unsure"."""
    evaldata = json.loads((root / "evaldata.json").read_text())
    for entry in json.loads(FRESH_LABELS.read_text())["pages"]:
        info = evaldata.get(entry["url"])
        path = root / "eval" / info["file"] if info else None
        if entry["label"] != "unsure" and path is not None and path.exists():
            yield Page(f"trafilatura-{entry['round']}", entry["url"].strip(), entry["label"], path.read_bytes())


def htmldate_sample(root: Path, corpus: list[Page]) -> Iterator[Page]:
    """The pages of bench/page_labels_htmldate.json but those labelled "unsure", after checking
    that they are the sample its "how" describes, drawn again here from `corpus` (every page of the
    other sources) and htmldate's eval_default.json."""
    evaldata = json.loads((root / "eval_default.json").read_text())
    labelled = json.loads(HTMLDATE_LABELS.read_text())["pages"]
    if [p["url"] for p in labelled] != _draw_sample_4(root, evaldata, corpus):
        raise SystemExit(
            f"{HTMLDATE_LABELS.name}: its URLs are not the sample drawn from this corpus (pinned commits?)"
        )
    for entry in labelled:
        if entry["label"] != "unsure":
            html = (root / "eval" / evaldata[entry["url"]]["file"]).read_bytes()
            yield Page("htmldate", entry["url"], entry["label"], html)


def _draw_sample_4(root: Path, evaldata: dict[str, dict[str, str]], corpus: list[Page]) -> list[str]:
    """htmldate's evaluation URLs sorted by SHA-1, one a registered domain, none of a domain that
    another sample or label file holds, with their file present: the first SAMPLE_4."""
    hand = [p["url"] for name in (LABELS, FRESH_LABELS) for p in json.loads(name.read_text())["pages"]]
    taken = {p.site for p in corpus} | {Page("", url.strip(), "", "").site for url in hand}
    drawn: list[str] = []
    for url in sorted(evaldata, key=lambda u: hashlib.sha1(u.encode()).hexdigest()):
        site = Page("", url.strip(), "", "").site
        if site and site not in taken and (root / "eval" / evaldata[url]["file"]).exists():
            taken.add(site)
            drawn.append(url)
    return drawn[:SAMPLE_4]


def drawn_sample(number: int, labels: Path, drawn: list[tuple[str, Path]]) -> Iterator[Page]:
    """The pages of a sample's label file but those labelled "unsure", after checking that they are
    the sample its "how" describes (`drawn`: drawn again here from the sources)."""
    labelled = json.loads(labels.read_text())["pages"]
    files = dict(drawn)
    if [p["url"] for p in labelled] != list(files):
        raise SystemExit(f"{labels.name}: its URLs are not the sample drawn from this corpus (pinned commits?)")
    for entry in labelled:
        if entry["label"] != "unsure":
            path = files[entry["url"]]
            html = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            yield Page(f"sample-{number}", entry["url"], entry["label"], html)


def _taken(corpus: list[Page], *label_files: Path) -> set[str]:
    """Registered domains no later sample may draw: the corpus's, the label files', made-up ones."""
    hand = [p["url"] for name in label_files for p in json.loads(name.read_text())["pages"]]
    return {p.site for p in corpus} | {Page("", url.strip(), "", "").site for url in hand} | PLACEHOLDER_SITES


def _one_a_domain(candidates: dict[str, Path], taken: set[str]) -> list[tuple[str, Path]]:
    """The candidates sorted by the SHA-1 of the URL, one a registered domain, none `taken`, file present."""
    drawn: list[tuple[str, Path]] = []
    for url in sorted(candidates, key=lambda u: hashlib.sha1(u.encode()).hexdigest()):
        site = Page("", url, "", "").site
        if site and site not in taken and candidates[url].exists():
            taken.add(site)
            drawn.append((url, candidates[url]))
    return drawn


def _draw_sample_5(roots: dict[str, Path], corpus: list[Page]) -> list[tuple[str, Path]]:
    """Every page of the five sources that has a URL and a file, sorted by the SHA-1 of its URL, one
    a registered domain, none of a domain that another sample or label file holds."""
    candidates: dict[str, Path] = {}
    for name, index in (("trafilatura", "evaldata.json"), ("htmldate", "eval_default.json")):
        for url, info in json.loads((roots[name] / index).read_text()).items():
            candidates.setdefault(url.strip(), roots[name] / "eval" / info["file"])
    for key, info in json.loads((roots["scrapinghub"] / "ground-truth.json").read_text()).items():
        candidates.setdefault(info["url"], roots["scrapinghub"] / "html" / f"{key}.html.gz")
    for folder, pages in (("tests/data/content", "tests/data/content"), ("tests/data/metadata", "tests/data/html")):
        for name in ("goose3", "newspaper4k"):
            for meta in sorted((roots[name] / folder).glob("*.json")):
                url = json.loads(meta.read_text()).get("url")
                if url:
                    candidates.setdefault(url, roots[name] / pages / f"{meta.stem}.html")
    return _one_a_domain(candidates, _taken(corpus, *LABEL_FILES[:3]))


def _draw_sample_6(roots: dict[str, Path], corpus: list[Page]) -> list[tuple[str, Path]]:
    """The test pages of htmldate's and trafilatura's real-world tests (tests/cache, named in
    tests/realworld_tests.py), of mozilla/readability (test/test-pages, the URL from the page's
    canonical link or og:url) and of postlight/parser (fixtures, the URL from each site's test),
    drawn as `_draw_sample_5` draws, none of a domain the fifth sample holds either."""
    candidates: dict[str, Path] = {}
    for name in ("htmldate", "trafilatura"):
        for url, file in _mock_pages(roots[name] / "realworld_tests.py").items():
            candidates.setdefault(url, roots[name] / "cache" / file)
    for page in sorted((roots["readability"] / "test/test-pages").glob("*/source.html")):
        url = _canonical_url(page)
        if url:
            candidates.setdefault(url, page)
    for test in sorted((roots["postlight"] / "src/extractors/custom").glob("*/index.test.js")):
        url, fixture = _POSTLIGHT_URL.search(test.read_text()), _POSTLIGHT_FIXTURE.search(test.read_text())
        if url and fixture:
            candidates.setdefault(url.group(1), roots["postlight"] / "fixtures" / fixture.group(1))
    return _one_a_domain(candidates, _taken(corpus, *LABEL_FILES[:4]))


def _draw_sample_7(roots: dict[str, Path], corpus: list[Page]) -> list[tuple[str, Path]]:
    """codelucas/newspaper's full-text test pages (tests/data/fulltext_url_list.txt; the file of a
    URL is its registered domain and its rank among that domain's URLs, as its tests name them):
    every page of a registered domain no earlier sample or label file holds (the set has two at
    most of a domain)."""
    data = roots["newspaper"] / "tests/data"
    seen: Counter[str] = Counter()
    drawn: list[tuple[str, Path]] = []
    taken = _taken(corpus, *LABEL_FILES[:5])
    for url in (line.strip() for line in (data / "fulltext_url_list.txt").read_text().splitlines()):
        site = Page("", url, "", "").site
        seen[site] += 1
        path = data / "html" / f"{site}{seen[site]}.html"
        if url and site and site not in taken and path.exists():
            drawn.append((url, path))
    return drawn


def _draw_sample_8(roots: dict[str, Path], corpus: list[Page]) -> list[tuple[str, Path]]:
    """omnivore-app/omnivore's own reader test pages (the URL in each page's url.txt), the pages of
    microlinkhq/metascraper's integration tests (the URL its test names) and karussell/snacktory's test
    pages (the URL in the comment above the test that reads it, else the page's canonical link or
    og:url), drawn as `_draw_sample_5` draws, none of a domain an earlier sample holds."""
    candidates: dict[str, Path] = {}
    for url_file in sorted((roots["omnivore"] / "packages/readabilityjs/test/test-pages").glob("*/url.txt")):
        url = url_file.read_text().strip()
        if url.startswith(("http://", "https://")):
            candidates.setdefault(url, url_file.with_name("source.html"))
    for test in sorted((roots["metascraper"] / "packages/metascraper/test/integration").glob("*/index.js")):
        found = _METASCRAPER_URL.search(test.read_text())
        if found:
            candidates.setdefault(found.group(1), test.with_name("input.html"))
    resources = roots["snacktory"] / "src/test/resources/de/jetwick/snacktory"
    for test in sorted((roots["snacktory"] / "src/test/java/de/jetwick/snacktory").glob("ArticleTextExtractor*.java")):
        comment = ""
        for line in test.read_text(errors="replace").splitlines():
            said = _SNACKTORY_COMMENT.search(line)
            comment = said.group(1) if said else ("" if line.strip().startswith(("@Test", "public void")) else comment)
            read = _SNACKTORY_READ.search(line)
            if read:
                name = read.group(1) or read.group(2)
                path = roots["snacktory"] / name if read.group(1) else resources / name
                url = comment or (_canonical_url(path) if path.exists() else "")
                if url:
                    candidates.setdefault(url, path)
    return _one_a_domain(candidates, _taken(corpus, *LABEL_FILES[:6]))


def _draw_sample_9(roots: dict[str, Path], corpus: list[Page]) -> list[tuple[str, Path]]:
    """The pages of trafilatura's and htmldate's evaluation sets that no earlier group or label file
    holds (their sites do: these are the second and later pages of sites read before), sorted by the
    SHA-1 of the URL."""
    hand = [p["url"].strip() for f in LABEL_FILES[:7] for p in json.loads(f.read_text())["pages"]]
    used = {p.url for p in corpus} | set(hand)
    candidates: dict[str, Path] = {}
    for name, index in (("trafilatura", "evaldata.json"), ("htmldate", "eval_default.json")):
        for url, info in json.loads((roots[name] / index).read_text()).items():
            path = roots[name] / "eval" / info["file"]
            if url.strip() not in used and path.exists():
                candidates.setdefault(url.strip(), path)
    return [(url, candidates[url]) for url in sorted(candidates, key=lambda u: hashlib.sha1(u.encode()).hexdigest())]


_METASCRAPER_URL = re.compile(r"const url\s*=\s*['\"`](https?://[^'\"`\s]+)['\"`]")
_SNACKTORY_COMMENT = re.compile(r"//\s*\??\s*(https?://\S+)")
_SNACKTORY_READ = re.compile(r"readFileAsString\(\"(test_data/[^\"]+)\"\)|getResourceAsStream\(\"([^\"/]+\.html)\"\)")
_POSTLIGHT_URL = re.compile(r"url\s*=\s*['\"`]\s*(https?://[^'\"`\s]+)['\"`]")
_POSTLIGHT_FIXTURE = re.compile(r"readFileSync\(\s*['\"`]\./fixtures/([^'\"`]+)['\"`]")


def _mock_pages(test_file: Path) -> dict[str, str]:
    """The `MOCK_PAGES = {url: file}` literal of a real-world test file, read (never run)."""
    for node in ast.walk(ast.parse(test_file.read_text())):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "MOCK_PAGES" for t in node.targets):
            return {str(k): str(v) for k, v in ast.literal_eval(node.value).items()}
    return {}


def _canonical_url(page: Path) -> str:
    root = lxml.html.fromstring(page.read_bytes())
    url = root.xpath('string(//link[@rel="canonical"]/@href)') or root.xpath(
        'string(//meta[@property="og:url"]/@content)'
    )
    return url.strip() if url.strip().startswith(("http://", "https://")) else ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--corpus", type=Path, help="a folder bench/page_types_corpus.py built")
    parser.add_argument("--fundus", type=Path, help="fundus' tests/resources/parser/test_data")
    parser.add_argument("--mediacloud", type=Path, help="htmldate's tests")
    parser.add_argument("--autopager", type=Path, help="autopager's autopager/data")
    parser.add_argument("--trafilatura", type=Path, help="trafilatura's tests (optional: the fresh check)")
    for number, labels in enumerate(LABEL_FILES[2:], start=4):
        parser.add_argument(
            f"--sample-{number}", action="store_true", help=f"also the samples up to this one ({labels.name})"
        )
    parser.add_argument("--show", choices=GROUPS, help="list this group's misclassified pages")
    args = parser.parse_args(argv)
    if args.corpus:
        built = folders(args.corpus)
        args.fundus, args.mediacloud, args.autopager = built["fundus"], built["htmldate"], built["autopager"]
        args.trafilatura = args.trafilatura or (built["trafilatura"] if built["trafilatura"].exists() else None)
    if not (args.fundus and args.mediacloud and args.autopager):
        parser.error(
            "pass --corpus DIR (bench/page_types_corpus.py builds it), or --fundus, --mediacloud and --autopager"
        )
    pages = [*fundus(args.fundus), *mediacloud(args.mediacloud), *autopager(args.autopager)]
    pages += [*trafilatura(args.trafilatura)] if args.trafilatura else []
    newest = max((n for n in range(4, 10) if getattr(args, f"sample_{n}")), default=0)
    pages += [*htmldate_sample(args.mediacloud, pages)] if newest >= 4 else []
    if newest >= 5:
        if not args.corpus:
            parser.error(
                f"--sample-{newest} reads more sources: pass --corpus DIR (bench/page_types_corpus.py builds it)"
            )
        roots = folders(args.corpus) | {"trafilatura": args.trafilatura, "htmldate": args.mediacloud}
        draws = (_draw_sample_5, _draw_sample_6, _draw_sample_7, _draw_sample_8, _draw_sample_9)
        for number, (labels, draw) in enumerate(zip(LABEL_FILES[3:], draws, strict=True), start=5):
            if number <= newest:  # each draw leaves out the pages and sites of the samples before it
                pages += [*drawn_sample(number, labels, draw(roots, pages))]
    results: dict[str, Counter[tuple[str, str]]] = {g: Counter() for g in GROUPS}
    signals: Counter[tuple[str, str, str]] = Counter()
    sites: dict[str, set[str]] = {g: set() for g in GROUPS}
    started = time.process_time()
    for page in pages:
        article = extract_article(page.html, page.url)
        results[page.half][(page.label, article.page_type)] += 1
        sites[page.half].add(page.site)
        signals[(page.half, article.page_type, article.signals.get("page_type", ""))] += 1
        wrong = (page.label == "article") != (article.page_type == "article")
        if args.show == page.half and wrong:
            print(f"  {page.label:8} -> {article.page_type:8} {article.signals.get('page_type')}  {page.url[:110]}")
    print(f"{len(pages)} pages, {time.process_time() - started:.0f} s CPU")
    for half, counts in results.items():
        if not counts:
            continue
        labels = Counter(label for label, _ in counts.elements())
        kept = counts[("article", "article")]
        lists_not_stored = labels["list"] - counts[("list", "article")]
        others_not_stored = labels["other"] - counts[("other", "article")]
        print(
            f"{half}: {len(sites[half])} sites, {labels['article']} articles, {labels['list']} list, "
            f"{labels['other']} other pages\n"
            f"  article recall {kept}/{labels['article']} ({100 * kept / max(1, labels['article']):.1f} %)\n"
            f"  list recognised (list or other) {lists_not_stored}/{labels['list']} "
            f"({100 * lists_not_stored / max(1, labels['list']):.1f} %), exactly list {counts[('list', 'list')]}\n"
            f"  other not stored {others_not_stored}/{labels['other']}\n"
            f"  confusion (label -> type): {dict(sorted(counts.items()))}"
        )
    print("deciding signal (half, type, signal):", dict(sorted(signals.items())))


if __name__ == "__main__":
    main()
