"""The browser's way out: a local proxy that applies the private-address rule to every connection
Chromium opens (docs/security.md).

Page routes see only the first URL of a redirect chain, and Chromium resolves names itself, so the
route check alone leaves redirects inside the browser and DNS rebinding open. With this proxy as
the browser's proxy (`--proxy-server`, loopback not bypassed) every connection, redirect hops and
WebSockets included, is made here: the host is resolved once, refused addresses are dropped, and
the proxy connects to an allowed address itself, as the plain-HTTP guard does (core/guard.py).

HTTPS and WebSockets come as CONNECT tunnels (piped as bytes); plain HTTP as one absolute-URI
request per connection (forwarded with `Connection: close`, so a kept-alive connection never
carries a second host's request). Contexts with an operator's proxy do not use it (exempt).

A refused connection is answered 403 and remembered for a while by host and port (`refusal_of`):
the browser only reports a failed navigation (a refused CONNECT) or the 403 (plain HTTP), so the
rendering handler asks here whether a page's document was refused (a dead letter, not a retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from distributed_crawler.addresses import AddressRule

logger = logging.getLogger(__name__)

HEAD_MAX = 64 * 1024  # request line and headers
CONNECT_TIMEOUT = 10.0
PIPE_CHUNK = 64 * 1024
RECENT_SECONDS = 60.0  # a refusal is remembered this long (a render asks within its timeout)
RECENT_MAX = 10_000  # refused (host, port) pairs remembered (then forgotten all at once)
DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


class Refused(Exception):
    def __init__(self, host: str, why: str) -> None:
        super().__init__(why)
        self.host = host
        self.why = why


class EgressProxy:
    """`start()` binds 127.0.0.1 on a free port (`server` is the proxy URL); `on_refused(url, why)`
    hears every refused connection, `refusal_of(url)` says whether one was refused lately."""

    def __init__(
        self,
        rule: AddressRule,
        on_refused: Callable[[str, str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rule = rule
        self.on_refused = on_refused
        self.clock = clock
        self._server: asyncio.base_events.Server | None = None
        self._recent: dict[tuple[str, int], tuple[float, str]] = {}
        self.port = 0

    @property
    def server(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    def refusal_of(self, url: str) -> str | None:
        """Why a connection to `url`'s host and port was refused in the last RECENT_SECONDS, if it was."""
        try:
            parts = urlsplit(url)
            key = ((parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(parts.scheme.lower(), 0))
        except ValueError:
            return None
        found = self._recent.get(key)
        return found[1] if found is not None and found[0] > self.clock() else None

    def _refused(self, url: str, host: str, port: int, why: str) -> None:
        """Remember, then tell: both before the browser hears the 403."""
        if len(self._recent) >= RECENT_MAX:
            self._recent.clear()
        self._recent[(host.strip("[]").lower(), port)] = (self.clock() + RECENT_SECONDS, why)
        self.on_refused(url, why)

    async def _connect(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Resolve once, keep the allowed addresses, connect to the first that accepts."""
        host = host.strip("[]")
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        verdicts = [(a, self.rule.refusal(a)) for a in addresses]
        allowed = [a for a, why in verdicts if why is None]
        if not allowed:
            raise Refused(host, verdicts[0][1] or "" if verdicts else f"{host} does not resolve")
        error: Exception = OSError(f"cannot connect to {host}")
        for address in allowed:
            try:
                return await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_TIMEOUT)
            except (OSError, TimeoutError) as exc:
                error = exc
        raise error

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if len(head) > HEAD_MAX:
                return
            line, _, rest = head.partition(b"\r\n")
            method, target, version = line.decode("latin-1").split(" ", 2)
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                url = f"https://{target}/"
                try:
                    up_reader, upstream = await self._connect(host, int(port))
                except Refused as exc:
                    self._refused(url, host, int(port), exc.why)
                    writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                parts = urlsplit(target)
                if parts.scheme != "http" or not parts.hostname:
                    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                try:
                    up_reader, upstream = await self._connect(parts.hostname, parts.port or 80)
                except Refused as exc:
                    self._refused(target, parts.hostname, parts.port or 80, exc.why)
                    writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                path = parts.path or "/"
                if parts.query:
                    path += "?" + parts.query
                headers = [
                    h
                    for h in rest.split(b"\r\n")
                    if h and not h.lower().startswith((b"proxy-", b"connection:", b"keep-alive:"))
                ]
                upstream.write(f"{method} {path} {version}\r\n".encode("latin-1"))
                upstream.write(b"\r\n".join([*headers, b"Connection: close"]) + b"\r\n\r\n")
            await asyncio.gather(_pipe(reader, upstream), _pipe(up_reader, writer))
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            return
        finally:
            for w in (upstream, writer):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(PIPE_CHUNK):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.write_eof()
