"""`dcrawl replay` (cli/replay.py) on a WARC written here: HTML 200 records only, the encodings undone,
rows and versions as a crawl stores them, idempotent, and a file that is not a WARC is one line."""

from __future__ import annotations

import gzip
import json
from io import BytesIO
from pathlib import Path

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from distributed_crawler.cli.main import parse_args
from distributed_crawler.storage.backends import open_storage

WORDS = "harbour ferry council bridge market tower garden canal museum library orchard river".split()


def story(edit: str = "") -> bytes:
    text = " ".join(WORDS[i % len(WORDS)] + f"{i}" for i in range(120))
    return (
        "<!doctype html><html lang='en'><head><title>Ferry story</title><meta property='og:type' content='article'>"
        f'<script type=\'application/ld+json\'>{{"@type": "NewsArticle", "datePublished": "2026-11-02T08:00:00Z"}}</script>'
        f"</head><body><article><h1>Ferry story</h1><p>{text}</p><p>{edit}</p></article></body></html>"
    ).encode()


def write_warc(path: Path, records: list[tuple[str, int, str, bytes, bool]]) -> None:
    with open(path, "wb") as out:
        writer = WARCWriter(out, gzip=True)
        for url, status, kind, body, gzipped in records:
            headers = [("Content-Type", kind)]
            if gzipped:
                body = gzip.compress(body)
                headers.append(("Content-Encoding", "gzip"))
            http = StatusAndHeaders(f"{status} OK", headers, protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(url, "response", payload=BytesIO(body), http_headers=http))


def replay(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    parsed = parse_args(["replay", "news", *args, "--json", "-s", "NEAR_DUPLICATES=False"])  # no Redis here
    assert parsed.func(parsed) == 0
    return json.loads(capsys.readouterr().out)


def test_replay_stores_html_pages_and_their_versions_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    warc, db = tmp_path / "a.warc.gz", f"sqlite:///{tmp_path / 'items.db'}"
    url = "https://news.example/2026/11/ferry"
    write_warc(
        warc,
        [
            (url, 200, "text/html; charset=utf-8", story(), True),  # gzip on the wire, as archived
            ("https://news.example/logo.png", 200, "image/png", b"\x89PNG", False),
            ("https://news.example/gone", 404, "text/html", b"<p>gone</p>", False),
            (url, 200, "text/html", story("Correction: the ferry leaves at nine."), False),
        ],
    )
    dry = replay(capsys, str(warc), "--to", db, "--dry-run")
    assert (dry["records"], dry["html"], dry["new"]) == (4, 2, 2) and open_storage(db).count() == 0
    first = replay(capsys, str(warc), "--to", db)
    assert (first["new"], first["changed"], first["not_stored"]) == (1, 1, 0)
    backend = open_storage(db)
    versions = backend.versions(url)
    backend.close()
    assert [v["version"] for v in versions] == [1, 2] and "Correction" in versions[-1]["text"]
    assert versions[-1]["node"] == "replay" and versions[0]["fetched_at"].startswith("20")  # WARC-Date
    again = replay(capsys, str(warc), "--to", db)
    assert (again["new"], again["changed"], again["known"], again["unchanged"]) == (0, 0, 1, 1)


def test_a_file_that_is_not_a_warc_is_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk.warc.gz"
    junk.write_bytes(b"not a warc at all\n" * 10)
    parsed = parse_args(
        ["replay", "news", str(junk), "--to", f"sqlite:///{tmp_path / 'x.db'}", "-s", "NEAR_DUPLICATES=False"]
    )
    with pytest.raises(ValueError, match="is not a WARC file"):
        parsed.func(parsed)
    parsed = parse_args(["replay", "news", str(tmp_path / "missing.warc.gz"), "--to", f"sqlite:///{tmp_path / 'x.db'}"])
    with pytest.raises(ValueError, match="cannot read"):
        parsed.func(parsed)
