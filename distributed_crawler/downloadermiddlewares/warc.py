"""WARC archive of every fetch: a `request` and a `response` record per response, written and flushed
before the spider sees the response, so before its lease can be acked (docs/warc.md).

On when `WARC_DIR` is set. Each node writes its own files `<node>-<time>-<n>.warc.gz` (WARC/1.1, one
gzip member per record, a `warcinfo` record first) and starts the next file once one reaches
`WARC_MAX_SIZE`; files are created exclusively (O_EXCL), so two nodes never write one file.

Where it sits: 950, after every Scrapy middleware (HttpCache is 900). Its `process_request` runs
last, so the request it records is the one sent; its `process_response` runs first, so it sees
each response as the download handler returned it: before RetryMiddleware (550) and
RedirectMiddleware (600) replace a 5xx or 3xx (both are recorded), and before
HttpCompressionMiddleware (590) decodes the body. The body is recorded as it came over the wire:
`Content-Encoding` kept, `Transfer-Encoding` dropped and `Content-Length` set to the stored body
(the handler de-chunks). Responses from Scrapy's HTTP cache (flag `cached`) are not fetches and
are not recorded.

Rendered pages (`meta["playwright"]`, set by rendering/middleware.py) are recorded as the HTML the
browser produced, with the WARC header `X-Rendered-By: chromium` and HTTP headers that describe that
HTML (no Content-Encoding / Transfer-Encoding, Content-Length of the HTML).

Records are built (digests, gzip) and written in one writer thread: the reactor only waits for it.
A write that fails (disk full, directory gone) gives the request back to the queue with its lease
and stops this node; the page is fetched again by a node whose disk works.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import time
import zlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from io import BytesIO
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.exceptions import NotConfigured
from warcio.recordloader import ArcWarcRecord
from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.warcwriter import WARCWriter

from distributed_crawler import __version__
from distributed_crawler.core.node import node_id_from_settings
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.meta import PLAYWRIGHT_META

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

RENDERED_HEADER = "X-Rendered-By"  # WARC header of a response record holding browser-produced HTML
RENDERED_BY = "chromium"
# Request headers never archived: the proxy pool's credentials (Scrapy's HttpProxyMiddleware adds it).
SECRET_REQUEST_HEADERS = frozenset({"proxy-authorization"})
_UNSAFE_NAME = re.compile(r"[^\w.-]")
_CRLF = re.compile(r"[\r\n]+")


@dataclass(frozen=True)
class WarcConfig:
    directory: Path
    max_size: int
    node_id: str

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> WarcConfig | None:
        """None when WARC_DIR is empty (archiving off)."""
        read = SettingsReader(settings)
        directory = read.str("WARC_DIR")
        if not directory:
            return None
        max_size = read.int("WARC_MAX_SIZE", min=1, hint="bytes (1000000000 = 1 GB)")
        return cls(Path(directory).expanduser(), max_size, node_id_from_settings(settings))

    @property
    def file_prefix(self) -> str:
        """The node id made safe for a file name (`/`, spaces and such become `_`)."""
        return _UNSAFE_NAME.sub("_", self.node_id) or "node"


@dataclass(frozen=True)
class Exchange:
    """One fetch, copied off Scrapy's objects in the reactor thread (the writer thread reads only this)."""

    request_url: str
    method: str
    request_headers: list[tuple[str, str]]
    request_body: bytes
    response_url: str
    status: int
    protocol: str
    response_headers: list[tuple[str, str]]
    body: bytes
    started: float  # epoch seconds the request went out (WARC-Date)
    ip_address: str | None = None
    rendered: bool = False
    truncated: bool = False  # the connection dropped mid-body (Scrapy's `dataloss` flag)

    @classmethod
    def of(cls, request: Request, response: Response) -> Exchange:
        latency = request.meta.get("download_latency")
        started = time.time() - (latency if isinstance(latency, int | float) and latency >= 0 else 0.0)
        return cls(
            request_url=request.url,
            method=request.method,
            request_headers=[
                (name, value)
                for name, value in _header_pairs(request.headers)
                if name.lower() not in SECRET_REQUEST_HEADERS
            ],
            request_body=request.body or b"",
            response_url=response.url,
            status=response.status,
            protocol=_protocol(getattr(response, "protocol", None)),
            response_headers=list(_header_pairs(response.headers)),
            body=response.body or b"",
            started=started,
            ip_address=str(response.ip_address) if getattr(response, "ip_address", None) else None,
            rendered=bool(request.meta.get(PLAYWRIGHT_META)),
            truncated="dataloss" in (response.flags or ()),
        )


def _text(value: bytes | str) -> str:
    """A header name or value as text (bytes as latin-1, one char a byte), without CR/LF."""
    text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return _CRLF.sub(" ", text)


def _header_pairs(headers: Any) -> Iterable[tuple[str, str]]:
    for name, values in headers.items():
        for value in values or [b""]:
            yield _text(name), _text(value)


def _protocol(value: Any) -> str:
    text = _text(value or "").upper()
    return text if re.fullmatch(r"HTTP/\d(\.\d)?", text) else "HTTP/1.1"


def _without(headers: list[tuple[str, str]], *names: str) -> list[tuple[str, str]]:
    drop = {n.lower() for n in names}
    return [(n, v) for n, v in headers if n.lower() not in drop]


def response_http_headers(ex: Exchange) -> list[tuple[str, str]]:
    """The response's headers, made to describe the body as stored.

    Plain fetch: the body is as sent, de-chunked: Transfer-Encoding dropped, Content-Length = stored
    length, Content-Encoding kept. Rendered: the browser's HTML, so Content-Encoding dropped too. A
    response without a body by definition (HEAD, 1xx, 204, 304) keeps its headers as they came.
    """
    headers = ex.response_headers
    if ex.method.upper() == "HEAD" or ex.status < 200 or ex.status in (204, 304):
        return headers
    drop = ("Transfer-Encoding", "Content-Length") + (("Content-Encoding",) if ex.rendered else ())
    return [*_without(headers, *drop), ("Content-Length", str(len(ex.body)))]


def request_http_headers(ex: Exchange) -> list[tuple[str, str]]:
    """The request's headers as sent (Host first, as the HTTP client adds it)."""
    headers = ex.request_headers
    if not any(n.lower() == "host" for n, _ in headers):
        headers = [("Host", urlsplit(ex.request_url).netloc), *headers]
    if ex.request_body and not any(n.lower() == "content-length" for n, _ in headers):
        headers = [*headers, ("Content-Length", str(len(ex.request_body)))]
    return headers


def _target(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


class GzipMembers:
    """File wrapper for warcio's writer (built with gzip=False): each record one gzip member, level 6.

    warcio's own gzip (level 9) takes 2.3x the time for the same size on HTML (docs/warc.md). The writer
    calls `flush()` once at the end of every record: that ends the member.
    """

    def __init__(self, file: IO[bytes], level: int = 6) -> None:
        self.file = file
        self.level = level
        self._z = zlib.compressobj(level, zlib.DEFLATED, zlib.MAX_WBITS + 16)

    def write(self, data: bytes) -> None:
        self.file.write(self._z.compress(data))

    def flush(self) -> None:
        self.file.write(self._z.flush())
        self._z = zlib.compressobj(self.level, zlib.DEFLATED, zlib.MAX_WBITS + 16)
        self.file.flush()


class WarcFiles:
    """This node's WARC files. Not thread-safe: one thread (the middleware's writer) calls it."""

    def __init__(self, config: WarcConfig, info: dict[str, str]) -> None:
        self.config = config
        self.info = info
        self.serial = 0  # the `<n>` of the next file
        self.path: Path | None = None
        self.files = 0  # files opened
        self.bytes = 0  # bytes written (compressed, all files)
        self._file: IO[bytes] | None = None
        self._writer: WARCWriter | None = None

    def _open(self) -> WARCWriter:
        self.config.directory.mkdir(parents=True, exist_ok=True)
        while True:
            stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
            path = self.config.directory / f"{self.config.file_prefix}-{stamp}-{self.serial}.warc.gz"
            self.serial += 1
            try:
                self._file = open(path, "xb")  # closed in close()
            except FileExistsError:  # another node with our NODE_ID, or a restart within the second
                continue
            break
        self.path = path
        self.files += 1
        writer = WARCWriter(GzipMembers(self._file), gzip=False, warc_version="1.1")
        writer.write_record(writer.create_warcinfo_record(path.name, self.info))
        self._writer = writer
        return writer

    def write(self, ex: Exchange) -> int:
        """Write the response and request records of `ex` and flush them to the OS; the bytes written."""
        writer = self._writer or self._open()
        assert self._file is not None
        start = self._file.tell()
        try:
            response = self._response_record(writer, ex)
            request = self._request_record(writer, ex, response.rec_headers.get_header("WARC-Record-ID"))
            writer.write_record(response)
            writer.write_record(request)
            self._file.flush()
        except BaseException:
            self.close()  # the file may end in half a record: it ends there, the next write opens a new one
            raise
        written = self._file.tell() - start
        self.bytes += written
        if self._file.tell() >= self.config.max_size:
            self.close()
        return written

    def close(self) -> None:
        file, self._file, self._writer = self._file, None, None
        if file is not None:
            try:
                file.close()
            except OSError as exc:
                logger.error("WARC file %s not closed cleanly: %s", self.path, exc)

    def _date(self, ex: Exchange) -> str:
        return datetime_to_iso_date(datetime.fromtimestamp(ex.started, UTC).replace(tzinfo=None), use_micros=True)

    def _response_record(self, writer: WARCWriter, ex: Exchange) -> ArcWarcRecord:
        try:
            reason = HTTPStatus(ex.status).phrase
        except ValueError:
            reason = ""
        http = StatusAndHeaders(f"{ex.status} {reason}".strip(), response_http_headers(ex), protocol=ex.protocol)
        warc: dict[str, str] = {"WARC-Date": self._date(ex)}
        if ex.ip_address:
            warc["WARC-IP-Address"] = ex.ip_address
        if ex.truncated:
            warc["WARC-Truncated"] = "disconnect"
        if ex.rendered:
            warc[RENDERED_HEADER] = RENDERED_BY
        return writer.create_warc_record(
            ex.response_url,
            "response",
            payload=BytesIO(ex.body),
            length=len(ex.body),
            http_headers=http,
            warc_headers_dict=warc,
        )

    def _request_record(self, writer: WARCWriter, ex: Exchange, response_id: str) -> ArcWarcRecord:
        line = f"{ex.method.upper()} {_target(ex.request_url)} HTTP/1.1"
        http = StatusAndHeaders(line, request_http_headers(ex), is_http_request=True)
        warc = {"WARC-Date": self._date(ex), "WARC-Concurrent-To": response_id}
        return writer.create_warc_record(
            ex.request_url,
            "request",
            payload=BytesIO(ex.request_body),
            length=len(ex.request_body),
            http_headers=http,
            warc_headers_dict=warc,
        )


def warcinfo(config: WarcConfig, settings: BaseSettings, spider_name: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    import scrapy

    try:
        warcio_version = version("warcio")
    except PackageNotFoundError:  # run from a source tree
        warcio_version = "?"
    return {
        "software": f"distributed_crawler/{__version__} (Scrapy/{scrapy.__version__}; warcio/{warcio_version})",
        "format": "WARC File Format 1.1",
        "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/",
        "isPartOf": spider_name,
        "node": config.node_id,
        "hostname": socket.gethostname(),
        "http-header-user-agent": str(settings.get("USER_AGENT") or ""),
        "robots": "obey" if settings.getbool("ROBOTSTXT_OBEY") else "ignore",
        "description": "request and response records of every fetch; Content-Encoding kept, "
        "Transfer-Encoding removed; rendered pages carry X-Rendered-By",
    }


class WarcMiddleware:
    """Downloader middleware (950): writes every fetch to this node's WARC files before the callback."""

    def __init__(self, crawler: Crawler, config: WarcConfig) -> None:
        self.crawler = crawler
        self.config = config
        self.stats = crawler.stats
        self.files: WarcFiles | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="warc")
        self._failed = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> WarcMiddleware:
        config = WarcConfig.from_settings(crawler.settings)
        if config is None:  # off by default: one INFO line, not Scrapy's WARNING for a reasoned NotConfigured
            logger.info("WARC archive off (WARC_DIR is empty)")
            raise NotConfigured
        try:
            config.directory.mkdir(parents=True, exist_ok=True)
            if not os.access(config.directory, os.W_OK | os.X_OK):
                raise PermissionError("not writable")
        except OSError as exc:
            raise ValueError(
                f"WARC_DIR ({config.directory}) cannot be written ({exc.strerror or exc}); "
                "point it at a writable directory or leave it empty to archive nothing"
            ) from None
        mw = cls(crawler, config)
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    def spider_opened(self, spider: Spider) -> None:
        self.files = WarcFiles(self.config, warcinfo(self.config, self.crawler.settings, spider.name))
        logger.info("WARC archive on: %s/%s-*.warc.gz", self.config.directory, self.config.file_prefix)

    def spider_closed(self, spider: Spider) -> None:
        if self.files is not None:
            self._executor.submit(self.files.close)
        self._executor.shutdown(wait=True)

    async def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Request | Response:
        if "cached" in (response.flags or ()):
            return response
        if self.files is None:  # built by spider_opened; a middleware used on its own (tests) builds it here
            self.files = WarcFiles(
                self.config, warcinfo(self.config, self.crawler.settings, getattr(spider, "name", ""))
            )
        exchange = Exchange.of(request, response)
        files = self.files
        try:
            written = await asyncio.get_running_loop().run_in_executor(self._executor, files.write, exchange)
        except OSError as exc:
            return self._write_failed(request, exc)
        self.stats.inc_value("warc/records", 2)
        self.stats.inc_value("warc/bytes", written)
        self.stats.set_value("warc/files", files.files)
        return response

    def _write_failed(self, request: Request, exc: OSError) -> Request:
        """No record, no ack: the request goes back to the queue with its lease; this node stops."""
        self.stats.inc_value("warc/write_errors")
        if not self._failed:
            self._failed = True
            logger.error(
                "WARC record of %s not written to %s (%s); stopping this node, its page goes back to the "
                "queue. Free space or fix WARC_DIR, then restart the node",
                request.url,
                self.config.directory,
                exc,
            )
            try:
                engine = self.crawler.engine
            except (AttributeError, RuntimeError):  # no crawl running (a middleware used on its own)
                engine = None
            if engine is not None:
                asyncio.ensure_future(engine.close_spider_async(reason="warc_write_failed"))
        again = request.copy()  # keeps the lease: the scheduler hands it over, as for a retry
        again.dont_filter = True
        return again
