"""Builds bench/page_types.py's corpus (661 real pages, and the pages of its "fresh" samples) from
thirteen public repositories, at the commits its figures were taken on (docs/benchmarks.md "Page types on
real pages").

The pages are other people's content: they are not in this repository and are not committed.
Clone (or mirror) the four repositories anywhere, then:

    git clone --bare https://github.com/flairNLP/fundus /tmp/mirrors/fundus.git      # and so on
    .venv/bin/python -m bench.page_types_corpus /tmp/articles_pages \\
        --fundus /tmp/mirrors/fundus.git --htmldate /tmp/mirrors/htmldate.git \
        --autopager /tmp/mirrors/autopager.git --trafilatura /tmp/mirrors/trafilatura.git
    .venv/bin/python -m bench.page_types --corpus /tmp/articles_pages --sample-4

The fifth sample also reads scrapinghub/article-extraction-benchmark, goose3/goose3 and
AndyTheFactory/newspaper4k, the sixth mozilla/readability and postlight/parser, the seventh
codelucas/newspaper, the eighth omnivore-app/omnivore, microlinkhq/metascraper and
karussell/snacktory: pass `--scrapinghub GIT --goose3 GIT --newspaper4k GIT --readability GIT
--postlight GIT --newspaper GIT --omnivore GIT --metascraper GIT --snacktory GIT` too.

Each argument is a git directory (a bare mirror or a clone's `.git`, or a clone's work tree);
only the folders the bench reads are taken out, with `git archive` of the pinned commit (`--ref
HEAD` takes the newest instead: fundus adds and replaces test pages, so the figures move).
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
from pathlib import Path

# name -> (commit the figures were taken on, folder taken out, where bench/page_types.py reads it)
SOURCES = {
    "fundus": ("18da6e53592f99cf0ac5770dc63d6ba99ba63ae8", "tests/resources/parser/test_data"),
    "htmldate": ("b8952828329abaeeb3be21387b526f2be614ce67", "tests"),
    "autopager": ("ff49418d536346c0d0487553c8f6d22a4f74152e", "autopager/data"),
    "trafilatura": ("e90b0ef51ab026fdb905fb6c5b3c84dd3d784fd5", "tests"),  # the fresh check
}
# the fifth to eighth samples' nine more sources (optional: only `--sample-5` and later read them)
SAMPLE_SOURCES = {
    "scrapinghub": ("4a3bc979f76c0df73cb95fe272e2fc1b96f9f010", "ground-truth.json html"),
    "goose3": ("c5a8902eed0c4592a1ff5ec51a0277cf73a3aca7", "tests/data/content"),
    "newspaper4k": ("540bff3e8344cb8291c4829fafd98860f30d9692", "tests/data/html tests/data/metadata"),
    "readability": ("ab4027a8b37669745016869a37a504727992b2ba", "test/test-pages"),  # the sixth sample
    "postlight": ("e8ba7ece291efa4d915d50dd4deeec17d54359f2", "fixtures src/extractors/custom"),  # the sixth sample
    "newspaper": ("1618b547f31c2d1fd19ae3b6afd8f7542dd02074", "tests/data"),  # the seventh sample
    "omnivore": ("322ce62b2e09a4fc8f328dde6003e7066953a9ca", "packages/readabilityjs/test/test-pages"),  # the eighth
    "metascraper": ("20423f52ef9b4a07d3b25e56e34d2756b3291250", "packages/metascraper/test/integration"),  # the eighth
    "snacktory": ("c05c5ec338922b3f9a40cd35597ba8094f9162b0", "src/test test_data"),  # the eighth sample
}


def folders(corpus: Path) -> dict[str, Path]:
    """Where bench/page_types.py finds each source inside a corpus this script built."""
    found = {name: corpus / name / path for name, (_, path) in SOURCES.items()}
    return found | {name: corpus / name for name in SAMPLE_SOURCES}


def take_out(git_dir: Path, commit: str, path: str, into: Path) -> int:
    """`git archive COMMIT PATH...` of `git_dir` unpacked below `into`; the number of files."""
    try:
        archive = subprocess.run(
            ["git", "--git-dir", str(_git_dir(git_dir)), "archive", "--format=tar", commit, *path.split()],
            check=True,
            capture_output=True,
        ).stdout
    except subprocess.CalledProcessError as exc:
        why = exc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["git archive failed"]
        raise SystemExit(f"{git_dir}: {why[0]} (fetch the repository's history, or pass --ref HEAD)") from None
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = [m for m in tar.getmembers() if m.isfile() or m.isdir()]  # no links out of `into`
        tar.extractall(into, members=members, filter="data")
    return sum(m.isfile() for m in members)


def _git_dir(path: Path) -> Path:
    return path / ".git" if (path / ".git").exists() else path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("corpus", type=Path, help="folder to build the corpus in")
    for name in SOURCES:
        parser.add_argument(f"--{name}", type=Path, required=True, help=f"git directory of {name}")
    for name in SAMPLE_SOURCES:
        parser.add_argument(f"--{name}", type=Path, help=f"git directory of {name} (only for --sample-5 and later)")
    parser.add_argument("--ref", help="take this commit of every repository instead of the pinned ones")
    args = parser.parse_args(argv)
    wanted = SOURCES | {name: pin for name, pin in SAMPLE_SOURCES.items() if getattr(args, name)}
    for name, (commit, path) in wanted.items():
        files = take_out(getattr(args, name), args.ref or commit, path, args.corpus / name)
        print(f"{name}: {files} files of {path} at {args.ref or commit[:12]}", file=sys.stderr)
    print(f"then: .venv/bin/python -m bench.page_types --corpus {args.corpus}", file=sys.stderr)


if __name__ == "__main__":
    main()
