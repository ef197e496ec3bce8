"""A small local site's server: loopback, a free port, a listen backlog for crawler connect bursts,
a daemon thread; stopped by `stop()` or by leaving its `with` block."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Self


class LoopbackServer(ThreadingHTTPServer):
    """Every test server's class: a listen backlog for a crawler's connect bursts (the default 5
    drops them and the crawler waits out TCP's retransmits), daemon threads."""

    request_queue_size = 128  # a class attribute: set on an instance it does nothing
    daemon_threads = True


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes, headers: Iterable[tuple[str, str]] = ()) -> None:
    """Answer with `status`, `headers`, a Content-Length and `body`; a client gone mid-answer (a
    worker killed by a test) closes the connection instead of raising in the server thread."""
    handler.send_response(status)
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    try:
        handler.wfile.write(body)
    except (BrokenPipeError, ConnectionResetError):
        handler.close_connection = True


class LocalSite:
    """Base of a test site: `serve(Handler)` starts it and returns its URL."""

    _server: ThreadingHTTPServer | None = None

    def serve(self, handler: type[BaseHTTPRequestHandler], port: int = 0, host: str = "127.0.0.1") -> str:
        """Start answering with `handler` on `port` (0: a free one) of `host` (another loopback
        address, 127.0.0.x, is another news source); returns the site's URL."""
        self._server = LoopbackServer((host, port), handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://{host}:{self._server.server_address[1]}"

    def start(self) -> str:
        raise NotImplementedError

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
