"""Many small sites behind one loopback port, told apart by the Host header (bench/cluster.py).

Why: a frontier spread over Cluster masters by host needs thousands of hosts, and thousands of
listening sockets (one per port or 127.x address) would cost a thread each. Here every host
`h<N>.bench.test:<port>` (resolved to 127.0.0.1 by bench/loopback_resolver.py) has a home page
linking `--links` leaf pages of its own; robots.txt allows everything. `GET /__bench__/state` on any
host returns {"hits": requests served, "pages": pages served (robots.txt not counted), "robots":
robots.txt answers, "robots_hosts": hosts whose robots.txt was asked}. `--delay S` answers every
request S seconds late (a real site's response time; bench/wide.py: 0.05). An idle keep-alive
connection is closed after IDLE_SECONDS, as real servers do (Apache 5 s, nginx 75 s), so the site
holds a thread per recently active connection only, not per host ever crawled.
Run: `python bench/hosts_site.py --links 2` prints `READY <port>` and serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType

CONTROL = "/__bench__/state"
ROBOTS = b"User-agent: *\nAllow: /\n"
IDLE_SECONDS = 5.0


class HostsServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, links: int, delay: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.links = links
        self.delay = delay
        self.lock = threading.Lock()
        self.hits = 0
        self.pages = 0
        self.robots = 0
        self.robots_hosts: set[str] = set()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection per host and worker
    timeout = IDLE_SECONDS  # an idle keep-alive connection is closed (its thread ends)
    server: HostsServer

    def log_message(self, format: str, *args: object) -> None:
        return None

    def do_GET(self) -> None:
        host = self.headers.get("Host", "unknown")
        path = self.path.split("?", 1)[0]
        page = path != "/robots.txt" and path != CONTROL
        if path != CONTROL and self.server.delay > 0:
            time.sleep(self.server.delay)
        with self.server.lock:
            if path != CONTROL:
                self.server.hits += 1
                self.server.pages += page
            if path == "/robots.txt":
                self.server.robots += 1
                self.server.robots_hosts.add(host)
            state = {
                "hits": self.server.hits,
                "pages": self.server.pages,
                "robots": self.server.robots,
                "robots_hosts": len(self.server.robots_hosts),
            }
        if path == CONTROL:
            self._send(200, "application/json", json.dumps(state).encode())
        elif path == "/robots.txt":
            self._send(200, "text/plain", ROBOTS)
        elif path == "/":
            items = "".join(
                f'<li><a href="http://{host}/story/{i}">Story {i} of {host}</a></li>'
                for i in range(1, self.server.links + 1)
            )
            self._send(200, "text/html", _html(f"Home of {host}", f"<ul>{items}</ul>"))
        elif path.startswith("/story/"):
            text = f"<p>Story {path.rsplit('/', 1)[1]} of {host}. " + "Words of the story. " * 40 + "</p>"
            self._send(200, "text/html", _html(f"Story on {host}", f"<article>{text}</article>"))
        else:
            self._send(404, "text/plain", b"not found")

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _html(title: str, body: str) -> bytes:
    return (
        f"<!doctype html><html><head><title>{title}</title></head><body><h1>{title}</h1>{body}</body></html>".encode()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", type=int, default=2, help="leaf pages linked from each host's home page")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer (a site's response time)")
    args = parser.parse_args(argv)
    server = HostsServer(args.links, args.delay)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
