"""Local forward proxies for the proxy pool tests (standard library only).

`TestProxy(mode)` listens on 127.0.0.1 (a free port) and answers plain-HTTP proxy requests
(absolute URI in the request line), counting every request it receives:

* `forward`: forwards to the origin and relays the answer; with `credentials=("user", "pw")` it
  first demands `Proxy-Authorization: Basic ...` (407 without it, as a real authenticated proxy);
* `auth`: answers 407 Proxy Authentication Required to everything (wrong or missing credentials);
* `ban`: answers 403 Forbidden to everything (a banned exit IP).

A closed port (`tests.conftest.free_port()`, nobody listening) is the fourth kind of bad proxy.
"""

from __future__ import annotations

import base64
import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import urlsplit

MODES = ("forward", "auth", "ban")
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
}


class TestProxy:
    __test__ = False  # not a pytest test class

    def __init__(self, mode: str = "forward", credentials: tuple[str, str] | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.mode = mode
        self.credentials = credentials
        self.received = 0  # requests that reached this proxy
        self.forwarded = 0  # requests it passed on to the origin
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """The proxy URL to give the crawler (with the credentials it accepts)."""
        creds = f"{self.credentials[0]}:{self.credentials[1]}@" if self.credentials else ""
        return f"http://{creds}127.0.0.1:{self.port}"

    def count(self, forwarded: bool = False) -> None:
        with self._lock:
            if forwarded:
                self.forwarded += 1
            else:
                self.received += 1

    def start(self) -> TestProxy:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.proxy = self
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"TestProxy-{self.mode}-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> TestProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    allow_reuse_address = True
    proxy: TestProxy


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30
    server: _Server

    def _answer(self, status: int, reason: str, extra: dict[str, str] | None = None) -> None:
        body = f"<html><body><h1>{status} {reason}</h1></body></html>".encode()
        self.send_response(status, reason)
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _authorized(self) -> bool:
        creds = self.server.proxy.credentials
        if creds is None:
            return True
        expected = "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
        return self.headers.get("Proxy-Authorization") == expected

    def _handle(self) -> None:
        proxy = self.server.proxy
        proxy.count()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if proxy.mode == "ban":
            return self._answer(403, "Forbidden")
        if proxy.mode == "auth" or not self._authorized():
            return self._answer(407, "Proxy Authentication Required", {"Proxy-Authenticate": 'Basic realm="test"'})
        target = urlsplit(self.path)
        if target.scheme != "http" or not target.hostname:
            return self._answer(400, "Bad Request")
        path = target.path + (f"?{target.query}" if target.query else "")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        conn = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=30)
        try:
            conn.request(self.command, path or "/", body=body, headers=headers)
            upstream = conn.getresponse()
            data = upstream.read()
        except OSError:
            return self._answer(502, "Bad Gateway")
        finally:
            conn.close()
        proxy.count(forwarded=True)
        self.send_response(upstream.status, upstream.reason)
        for name, value in upstream.getheaders():
            if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_HEAD = _handle

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""
