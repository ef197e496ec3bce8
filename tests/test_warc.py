"""WARC archive (downloadermiddlewares/warc.py): records, digests, rotation, failures, and a real crawl."""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import os
import re
import sqlite3
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.exceptions import NotConfigured
from scrapy.http import HtmlResponse, Response
from scrapy.utils.test import get_crawler
from warcio.archiveiterator import ArchiveIterator

from distributed_crawler.addon import COMPONENTS
from distributed_crawler.dedup.fingerprint import canonicalize_url
from distributed_crawler.downloadermiddlewares.warc import RENDERED_HEADER, WarcMiddleware
from distributed_crawler.meta import LEASE_META, PLAYWRIGHT_META
from tests.conftest import Workers
from tests.site.server import NewsSite

FILE_NAME = re.compile(r"^(?P<node>.+)-(?P<time>\d{14})-(?P<n>\d+)\.warc\.gz$")
PNG = bytes(range(256)) * 40  # binary, every byte value


def sha1_b32(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


def middleware(tmp_path: Path, **settings: Any) -> WarcMiddleware:
    crawler = get_crawler(settings_dict={"WARC_DIR": str(tmp_path / "warc"), "NODE_ID": "node-1", **settings})
    return WarcMiddleware.from_crawler(crawler)


def fetch(mw: WarcMiddleware, response: Response) -> Any:
    assert response.request is not None
    return asyncio.run(mw.process_response(response.request, response))


def read(path: Path) -> list[dict[str, Any]]:
    """Every record of a WARC file, its digests checked by warcio (raises on a mismatch)."""
    records = []
    with open(path, "rb") as f:
        for record in ArchiveIterator(f, check_digests="raise"):
            raw = record.raw_stream.read()  # the payload as stored (no content decoding)
            records.append(
                {
                    "type": record.rec_type,
                    "warc": dict(record.rec_headers.headers),
                    "http": record.http_headers,
                    "payload": raw,
                }
            )
    return records


def gzip_members(path: Path) -> int:
    data, members = path.read_bytes(), 0
    while data:
        z = zlib.decompressobj(zlib.MAX_WBITS + 16)
        z.decompress(data)
        assert z.eof, f"{path.name} ends inside a gzip member"
        data, members = z.unused_data, members + 1
    return members


def warc_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.warc.gz"), key=lambda p: int(FILE_NAME.match(p.name)["n"]))  # type: ignore[index]


def test_off_without_warc_dir_and_bad_settings_fail_at_start(tmp_path: Path) -> None:
    with pytest.raises(NotConfigured):
        WarcMiddleware.from_crawler(get_crawler(settings_dict={}))
    with pytest.raises(ValueError, match=r"WARC_MAX_SIZE \(0\) must be >= 1"):
        middleware(tmp_path, WARC_MAX_SIZE=0)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ValueError, match=r"WARC_DIR \(.*a-file/warc\) cannot be written"):
        WarcMiddleware.from_crawler(get_crawler(settings_dict={"WARC_DIR": str(tmp_path / "a-file" / "warc")}))
    assert COMPONENTS["DOWNLOADER_MIDDLEWARES"]["distributed_crawler.downloadermiddlewares.warc.WarcMiddleware"] == 950


def test_request_and_response_records_with_digests(tmp_path: Path) -> None:
    mw = middleware(tmp_path)
    html = "<html><body>café</body></html>".encode()
    page = Request("http://site.test/a?x=1", headers={"User-Agent": "ua", "Proxy-Authorization": "Basic c2VjcmV0"})
    png = Request("http://site.test/logo.png")
    zipped = Request("http://site.test/z", headers={"Accept-Encoding": "gzip"})
    post = Request("http://site.test/form", method="POST", body=b"q=1")
    moved = Request("http://site.test/old")
    down = Request("http://site.test/down")
    responses = [
        HtmlResponse(page.url, body=html, headers={"Content-Type": "text/html; charset=utf-8"}, request=page),
        Response(png.url, body=PNG, headers={"Content-Type": "image/png"}, request=png),
        Response(
            zipped.url,
            body=gzip.compress(html),
            headers={"Content-Encoding": "gzip", "Transfer-Encoding": "chunked", "Content-Type": "text/html"},
            request=zipped,
        ),
        Response(post.url, body=b"ok", request=post, protocol="HTTP/1.0"),
        Response(moved.url, status=301, headers={"Location": "/new"}, request=moved),
        Response(down.url, status=503, body=b"busy", headers={"X-Evil": "a\r\nInjected: 1"}, request=down),
    ]
    for response in responses:
        assert fetch(mw, response) is response
    mw.spider_closed(None)  # type: ignore[arg-type]

    [path] = warc_files(tmp_path / "warc")
    assert FILE_NAME.match(path.name)["node"] == "node-1"  # type: ignore[index]
    records = read(path)
    assert gzip_members(path) == len(records) == 1 + 2 * len(responses)  # gzip per record
    assert records[0]["type"] == "warcinfo"
    assert b"node: node-1" in records[0]["payload"] and b"format: WARC File Format 1.1" in records[0]["payload"]
    pairs = records[1:]
    assert [r["type"] for r in pairs] == ["response", "request"] * len(responses)
    for (resp, req), sent in zip(zip(pairs[::2], pairs[1::2]), responses):
        assert resp["warc"]["WARC-Target-URI"] == req["warc"]["WARC-Target-URI"] == sent.url
        assert req["warc"]["WARC-Concurrent-To"] == resp["warc"]["WARC-Record-ID"]
        assert resp["warc"]["WARC-Date"] == req["warc"]["WARC-Date"]
        assert resp["warc"]["WARC-Payload-Digest"] == sha1_b32(sent.body)
        assert "WARC-Block-Digest" in resp["warc"] and "WARC-Block-Digest" in req["warc"]
        assert resp["payload"] == sent.body  # as received: never decoded
        assert resp["http"].get_statuscode() == str(sent.status)
        assert RENDERED_HEADER not in resp["warc"]
    page_req = pairs[1]["http"]
    assert page_req.protocol == "GET" and page_req.get_header("Host") == "site.test"
    assert page_req.get_header("User-Agent") == "ua"
    assert page_req.get_header("Proxy-Authorization") is None  # the pool's credentials stay out
    zipped_resp = pairs[4]["http"]
    assert zipped_resp.get_header("Content-Encoding") == "gzip"  # the body is stored compressed
    assert zipped_resp.get_header("Transfer-Encoding") is None  # and de-chunked
    assert zipped_resp.get_header("Content-Length") == str(len(responses[2].body))
    assert gzip.decompress(pairs[4]["payload"]) == html
    assert pairs[7]["payload"] == b"q=1" and pairs[7]["http"].protocol == "POST"
    assert pairs[6]["http"].protocol == "HTTP/1.0"
    assert pairs[8]["http"].get_header("Location") == "/new"
    evil = pairs[10]["http"]
    assert evil.get_header("Injected") is None and evil.get_header("X-Evil") == "a Injected: 1"
    assert mw.stats.get_value("warc/records") == 2 * len(responses)
    assert mw.stats.get_value("warc/files") == 1


def test_rendered_page_is_the_browsers_html_and_marked(tmp_path: Path) -> None:
    mw = middleware(tmp_path)
    request = Request("http://site.test/app", meta={PLAYWRIGHT_META: True})
    dom = b"<html><body>rendered by js</body></html>"
    response = HtmlResponse(
        request.url,
        body=dom,
        headers={"Content-Type": "text/html", "Content-Encoding": "br", "Content-Length": "12"},
        request=request,
        flags=["playwright"],
    )
    fetch(mw, response)
    cached = Request("http://site.test/cached")
    fetch(mw, Response(cached.url, body=b"old", request=cached, flags=["cached"]))  # not a fetch: not recorded
    mw.spider_closed(None)  # type: ignore[arg-type]
    [path] = warc_files(tmp_path / "warc")
    _, resp, req = read(path)
    assert resp["warc"][RENDERED_HEADER] == "chromium"
    assert resp["payload"] == dom
    assert resp["http"].get_header("Content-Encoding") is None
    assert resp["http"].get_header("Content-Length") == str(len(dom))
    assert req["warc"]["WARC-Concurrent-To"] == resp["warc"]["WARC-Record-ID"]


def test_files_rotate_by_size_each_with_warcinfo(tmp_path: Path) -> None:
    mw = middleware(tmp_path, WARC_MAX_SIZE=1)  # every pair fills a file
    for i in range(3):
        request = Request(f"http://site.test/{i}")
        fetch(mw, Response(request.url, body=PNG, request=request))
    mw.spider_closed(None)  # type: ignore[arg-type]
    files = warc_files(tmp_path / "warc")
    assert [int(FILE_NAME.match(p.name)["n"]) for p in files] == [0, 1, 2]  # type: ignore[index]
    for i, path in enumerate(files):
        records = read(path)
        assert [r["type"] for r in records] == ["warcinfo", "response", "request"]
        assert records[0]["warc"]["WARC-Filename"] == path.name
        assert records[1]["warc"]["WARC-Target-URI"] == f"http://site.test/{i}"


def test_two_writers_with_one_node_id_never_share_a_file(tmp_path: Path) -> None:
    a, b = middleware(tmp_path), middleware(tmp_path)
    for mw, path in ((a, "a"), (b, "b"), (a, "a2")):
        request = Request(f"http://site.test/{path}")
        fetch(mw, Response(request.url, body=b"x", request=request))
    a.spider_closed(None)  # type: ignore[arg-type]
    b.spider_closed(None)  # type: ignore[arg-type]
    files = warc_files(tmp_path / "warc")
    assert len(files) == 2
    uris = [[r["warc"]["WARC-Target-URI"] for r in read(p) if r["type"] == "response"] for p in files]
    assert sorted(uris) == [["http://site.test/a", "http://site.test/a2"], ["http://site.test/b"]]


def test_a_failed_write_gives_the_request_back_with_its_lease(tmp_path: Path) -> None:
    mw = middleware(tmp_path)
    os.rmdir(tmp_path / "warc")
    (tmp_path / "warc").write_text("not a directory")  # every open now fails
    request = Request("http://site.test/p", meta={LEASE_META: b"lease-1"})
    again = fetch(mw, Response(request.url, body=b"x", request=request))
    assert isinstance(again, Request) and again.url == request.url
    assert again.meta[LEASE_META] == b"lease-1" and again.dont_filter  # handed over, never acked
    assert mw.stats.get_value("warc/write_errors") == 1
    assert mw.stats.get_value("warc/records") is None
    mw.spider_closed(None)  # type: ignore[arg-type]


# -- a real crawl ------------------------------------------------------------------------------


def _stat(log: str, name: str) -> int:
    found = re.findall(rf"'{re.escape(name)}': (\d+)", log)
    return int(found[-1]) if found else 0


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_workers_archive_every_fetch_once(
    site: NewsSite, workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    warc_dir = tmp_path / "warc"
    for node in ("node-a", "node-b"):
        workers.start(node, "CONCURRENT_REQUESTS=8", f"WARC_DIR={warc_dir}", "WARC_MAX_SIZE=20000")
    workers.wait_ready("node-a", "node-b")
    redis_client.lpush("news:start_urls", site.url + "/")
    assert workers.wait_all(timeout=90) == {"node-a": 0, "node-b": 0}
    with sqlite3.connect(tmp_path / "items.db") as conn:
        stored = [url for (url,) in conn.execute("SELECT url FROM items")]
    assert set(stored) == site.expected_urls()

    files = list(warc_dir.iterdir())
    assert files and all(FILE_NAME.match(p.name) for p in files), [p.name for p in files]
    by_node = Counter(FILE_NAME.match(p.name)["node"] for p in files)  # type: ignore[index]
    assert set(by_node) == {"node-a", "node-b"}
    assert max(by_node.values()) > 1, "WARC_MAX_SIZE=20000 should have rotated a file"
    ok_pages: Counter[str] = Counter()
    responses = 0
    robots = 0
    for path in files:
        records = read(path)
        assert records[0]["type"] == "warcinfo"
        ids = {r["warc"]["WARC-Record-ID"]: r for r in records if r["type"] == "response"}
        requests = [r for r in records if r["type"] == "request"]
        assert len(requests) == len(ids) and {r["warc"]["WARC-Concurrent-To"] for r in requests} == set(ids)
        for record in ids.values():
            responses += 1
            assert record["warc"]["WARC-Payload-Digest"] == sha1_b32(record["payload"])
            url = record["warc"]["WARC-Target-URI"]
            robots += url.endswith("/robots.txt")
            if record["http"].get_statuscode() == "200":
                ok_pages[canonicalize_url(url)] += 1
    for url in stored:
        assert ok_pages[url] == 1, f"{url}: {ok_pages[url]} 200 responses archived"
    assert robots >= 1
    fetched = sum(_stat(workers.log(n), "downloader/response_count") for n in ("node-a", "node-b"))
    assert responses == fetched, "one response record per fetch"
    assert sum(_stat(workers.log(n), "warc/records") for n in ("node-a", "node-b")) == 2 * fetched
    for node in ("node-a", "node-b"):
        assert "Traceback" not in workers.log(node) and "ERROR" not in workers.log(node), workers.log(node)[-3000:]


def archived_ok_pages(directory: Path) -> Counter[str]:
    """Canonical URL -> 200 response records, reading each file up to a record cut by kill -9."""
    pages: Counter[str] = Counter()
    for path in directory.glob("*.warc.gz"):
        with open(path, "rb") as f:
            try:
                for record in ArchiveIterator(f, check_digests="raise"):
                    record.raw_stream.read()
                    if record.rec_type == "response" and record.http_headers.get_statuscode() == "200":
                        pages[canonicalize_url(record.rec_headers.get_header("WARC-Target-URI"))] += 1
            except Exception:  # noqa: BLE001 (the killed node's last record may be cut short: stop there)
                continue
    return pages


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_kill9_never_acks_a_page_whose_record_is_lost(
    workers: Workers, redis_client: redis.Redis, tmp_path: Path
) -> None:
    warc_dir, db = tmp_path / "warc", tmp_path / "items.db"
    settings = ["SCHEDULER_LEASE_SECONDS=3", "CONCURRENT_REQUESTS=8", f"WARC_DIR={warc_dir}"]

    def stored() -> list[str]:
        try:
            with sqlite3.connect(db, timeout=10) as conn:
                return [url for (url,) in conn.execute("SELECT url FROM items")]
        except sqlite3.OperationalError:
            return []

    with NewsSite(articles=200, per_page=20, delay=0.02) as site:
        redis_client.lpush("news:start_urls", site.url + "/")
        workers.start("victim", *settings)
        deadline = time.monotonic() + 60
        while len(stored()) < 40:
            assert time.monotonic() < deadline, workers.log("victim")[-3000:]
            time.sleep(0.05)
        workers.kill9("victim")
        workers.start("finisher", *settings, "MAX_IDLE_TIME_BEFORE_CLOSE=4")
        assert workers.wait_all(timeout=90)["finisher"] == 0
        urls = stored()
        assert set(urls) == site.expected_urls()
    archived = archived_ok_pages(warc_dir)
    missing = [url for url in urls if not archived[url]]
    assert not missing, f"stored (acked) without a WARC record: {missing[:5]}"
    assert any(p.name.startswith("victim-") for p in warc_dir.iterdir())
