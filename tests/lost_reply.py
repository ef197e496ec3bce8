"""A TCP proxy in front of a real redis-server that can lose one reply: the command reaches Redis
and runs, then the connection drops before its answer reaches the client (what a network cut or a
client timeout does). Redis clients send such a call again; a count must not land twice."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Handler(socketserver.BaseRequestHandler):
    server: _Proxy

    def handle(self) -> None:
        client: socket.socket = self.request
        upstream = socket.create_connection(("127.0.0.1", self.server.upstream_port), timeout=30)
        up = threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True)
        up.start()
        self._pump(upstream, client, True)
        up.join(30)

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if replies and self.server.lose.is_set():
                    self.server.lose.clear()
                    self.server.lost += 1
                    break  # the answer is dropped with the connection
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for each in (source, sink):
                try:
                    each.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                each.close()


class _Proxy(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, upstream_port: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream_port = upstream_port
        self.lose = threading.Event()  # set: the next reply from Redis is lost
        self.lost = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.server_address[1]}/0"


@contextmanager
def lossy_proxy(upstream_port: int) -> Iterator[_Proxy]:
    """A proxy to 127.0.0.1:`upstream_port`; `proxy.lose.set()` loses the next reply."""
    proxy = _Proxy(upstream_port)
    thread = threading.Thread(target=proxy.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join(10)
