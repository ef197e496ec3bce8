"""The private-address guard: the rule against every special range and IP spelling (addresses.py),
and the connect-time endpoint (core/guard.py) connecting only to the address it checked."""

from __future__ import annotations

import ipaddress

import pytest
from scrapy import Request
from scrapy.utils.test import get_crawler
from twisted.internet.protocol import Factory
from twisted.internet.testing import MemoryReactor
from twisted.python.failure import Failure

from distributed_crawler.addresses import AddressRule, literal_ip
from distributed_crawler.core.guard import AddressRefused, GuardedEndpoint, guarded_agent, rule_of
from tests.site.local import LoopbackServer

DEFAULT = AddressRule()

REFUSED = [
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "private"),  # 0.0.0.0/8 "this network"
    ("10.1.2.3", "private"),
    ("100.64.0.1", "shared (CGNAT)"),
    ("100.127.255.254", "shared (CGNAT)"),
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("169.254.169.254", "link-local"),  # the cloud metadata address
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.0.0.8", "special-purpose"),  # IETF protocol assignments (is_global in Python 3.11.7)
    ("192.0.2.1", "private"),  # documentation
    ("192.168.1.1", "private"),
    ("198.18.0.1", "private"),  # benchmarking
    ("198.51.100.1", "private"),
    ("203.0.113.1", "private"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "private"),  # reserved
    ("255.255.255.255", "private"),  # broadcast
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("fe80::1", "link-local"),
    ("fc00::1", "private"),  # unique-local
    ("fd12:3456::1", "private"),
    ("ff02::1", "multicast"),
    ("2001:db8::1", "private"),  # documentation
    ("100::1", "private"),  # discard-only
    ("::ffff:127.0.0.1", "carries 127.0.0.1, loopback"),  # IPv4-mapped
    ("::ffff:169.254.169.254", "carries 169.254.169.254, link-local"),
    ("::ffff:10.0.0.1", "carries 10.0.0.1, private"),
    ("64:ff9b::7f00:1", "carries 127.0.0.1, loopback"),  # NAT64
    ("64:ff9b::a9fe:a9fe", "carries 169.254.169.254, link-local"),
    ("2002:7f00:1::", "carries 127.0.0.1, loopback"),  # 6to4
    ("2002:a00:1::1", "carries 10.0.0.1, private"),
    ("::127.0.0.1", "reserved"),  # IPv4-compatible (deprecated)
]
ALLOWED = ["8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700:4700::1111", "2a00:1450:4001:82a::200e"]


@pytest.mark.parametrize(("address", "kind"), REFUSED)
def test_every_special_range_is_refused_by_default(address: str, kind: str) -> None:
    why = DEFAULT.refusal(address)
    assert why is not None and kind in why and "ALLOWED_PRIVATE_NETWORKS" in why


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_pass(address: str) -> None:
    assert DEFAULT.refusal(address) is None


def test_allowed_networks_cover_their_mapped_forms_only() -> None:
    rule = AddressRule.from_value("127.0.0.0/8,::1/128")
    for address in ("127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1", "64:ff9b::7f00:2"):
        assert rule.refusal(address) is None, address
    for address in ("10.0.0.1", "169.254.169.254", "::ffff:10.0.0.1", "fe80::1"):
        assert rule.refusal(address) is not None, address
    only_one = AddressRule.from_value(["127.0.0.1/32"])
    assert only_one.refusal("127.0.0.1") is None and only_one.refusal("127.0.0.2") is not None


SPELLINGS = [
    ("127.0.0.1", "127.0.0.1"),
    ("2130706433", "127.0.0.1"),  # one decimal number
    ("0x7f000001", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),  # octal part
    ("0x7f.1", "127.0.0.1"),  # hex part, the last one fills 3 bytes
    ("127.1", "127.0.0.1"),
    ("127.0.1", "127.0.0.1"),
    ("0x7F.0.0.0x1", "127.0.0.1"),
    ("127.0.0.1.", "127.0.0.1"),  # trailing dot
    ("017700000001", "127.0.0.1"),  # one octal number
    ("0xa9fea9fe", "169.254.169.254"),
    ("%31%32%37.0.0.1", "127.0.0.1"),  # percent-encoded, as a browser decodes it
    ("１２７.０.０.１", "127.0.0.1"),  # full-width digits (NFKC)
    ("0", "0.0.0.0"),
    ("0x", "0.0.0.0"),  # a browser's reading (inet_aton refuses it: refusing is the safe side)
    ("[::1]", "::1"),
    ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
    ("::ffff:7f00:1", "::ffff:7f00:1"),
    ("[fe80::1%25eth0]", "fe80::1"),  # zone id
]
NOT_IPS = ["example.com", "127.0.0.1.example.com", "1.2.3.4.5", "256.0.0.1", "08.0.0.1", "a.b", "", "[::g]"]


@pytest.mark.parametrize(("host", "address"), SPELLINGS)
def test_every_ip_spelling_is_read_as_a_socket_or_browser_reads_it(host: str, address: str) -> None:
    assert literal_ip(host) == ipaddress.ip_address(address)
    assert DEFAULT.refusal(literal_ip(host) or "8.8.8.8") is not None


@pytest.mark.parametrize("host", NOT_IPS)
def test_names_and_invalid_numbers_are_not_literal_ips(host: str) -> None:
    assert literal_ip(host) is None


@pytest.mark.parametrize("value", ["10.0.0.0/33", "not-a-network", "127.0.0.1/8/2"])
def test_bad_cidrs_fail_with_one_line(value: str) -> None:
    with pytest.raises(ValueError, match=rf"^ALLOWED_PRIVATE_NETWORKS \({value}\) must be CIDRs"):
        AddressRule.from_value(value)


class _Resolver:
    """The reactor's name resolver, answering from a table (one answer list per lookup: rebinding)."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers

    def resolveHostName(self, receiver, host, portNumber=0, **kwargs):
        from twisted.internet.address import IPv4Address, IPv6Address

        receiver.resolutionBegan(None)
        for address in self.answers[host].pop(0):
            kind = IPv6Address if ":" in address else IPv4Address
            receiver.addressResolved(kind("TCP", address, portNumber))
        receiver.resolutionComplete()


def _endpoint(answers: dict[str, list[list[str]]], host: str, rule: AddressRule = DEFAULT):
    reactor = MemoryReactor()
    reactor.nameResolver = _Resolver(answers)  # type: ignore[attr-defined]
    refused: list[AddressRefused] = []
    return reactor, GuardedEndpoint(reactor, host, 80, rule, 10, None, refused.append), refused


def _failure(d) -> Failure:
    out: list[Failure] = []
    d.addErrback(out.append)
    assert out, "the connection was not refused"
    return out[0]


def test_a_name_resolving_to_a_private_address_is_refused_before_connecting() -> None:
    reactor, endpoint, refused = _endpoint({"internal.test": [["10.0.0.5"]]}, "internal.test")
    failure = _failure(endpoint.connect(Factory()))
    assert failure.check(AddressRefused) and "10.0.0.5" in failure.value.detail
    assert reactor.tcpClients == [] and len(refused) == 1


def test_dns_rebinding_is_judged_on_each_connection() -> None:
    """Public on the first lookup, private on the next: the second connection is refused."""
    answers = {"rebind.test": [["93.184.215.14"], ["127.0.0.1"]]}
    reactor, endpoint, refused = _endpoint(answers, "rebind.test")
    endpoint.connect(Factory())
    assert [c[0] for c in reactor.tcpClients] == ["93.184.215.14"]  # connected to the address it checked
    failure = _failure(endpoint.connect(Factory()))
    assert failure.check(AddressRefused) and [c[0] for c in reactor.tcpClients] == ["93.184.215.14"]


def test_a_name_with_public_and_private_addresses_connects_to_the_public_ones_only() -> None:
    reactor, endpoint, refused = _endpoint({"mixed.test": [["127.0.0.1", "93.184.215.14"]]}, "mixed.test")
    endpoint.connect(Factory())
    assert [c[0] for c in reactor.tcpClients] == ["93.184.215.14"] and not refused


def test_literal_ips_and_allowed_networks_at_connect_time() -> None:
    reactor, endpoint, refused = _endpoint({}, "169.254.169.254")
    assert _failure(endpoint.connect(Factory())).check(AddressRefused)
    allowed = AddressRule.from_value("127.0.0.0/8")
    reactor, endpoint, refused = _endpoint({}, "127.0.0.1", allowed)
    endpoint.connect(Factory())
    assert [c[0] for c in reactor.tcpClients] == ["127.0.0.1"]


def test_the_agent_is_guarded_except_through_an_operators_proxy() -> None:
    crawler = get_crawler(settings_dict={"ALLOWED_PRIVATE_NETWORKS": "127.0.0.0/8"})
    assert rule_of(crawler) == AddressRule.from_value("127.0.0.0/8")
    assert guarded_agent(crawler, Request("http://a.test/"), 10, None, None, None) is not None
    proxied = Request("http://a.test/", meta={"proxy": "http://127.0.0.1:3128"})
    assert guarded_agent(crawler, proxied, 10, None, None, None) is None  # Scrapy's proxy agent
    assert guarded_agent(get_crawler(), Request("http://a.test/"), 10, None, None, None) is None  # not ours


def test_the_browsers_egress_proxy_connects_only_to_allowed_addresses() -> None:
    """rendering/egress.py: CONNECT and absolute-URI requests, refused ones answered 403, never connected."""
    import asyncio
    import threading
    from http.server import BaseHTTPRequestHandler

    from distributed_crawler.rendering.egress import EgressProxy

    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return None

        def do_GET(self) -> None:
            hits.append(f"{self.server.server_address[0]}{self.path}")
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    servers = [LoopbackServer((host, 0), Handler) for host in ("127.0.0.1", "127.0.0.2")]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    allowed, internal = (s.server_address[1] for s in servers)
    refused: list[tuple[str, str]] = []

    async def ask(proxy: EgressProxy, head: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(head)
        out = await asyncio.wait_for(reader.read(), 5)  # to EOF: the proxy closes after one answer
        writer.close()
        return out

    now = [0.0]
    proxy = EgressProxy(
        AddressRule.from_value("127.0.0.1/32"), lambda url, why: refused.append((url, why)), clock=lambda: now[0]
    )

    async def main() -> list[bytes]:
        await proxy.start()
        try:
            return [
                await ask(proxy, f"GET http://127.0.0.1:{allowed}/a HTTP/1.1\r\nHost: x\r\n\r\n".encode()),
                await ask(proxy, f"GET http://127.0.0.2:{internal}/b HTTP/1.1\r\nHost: x\r\n\r\n".encode()),
                await ask(proxy, f"CONNECT 127.0.0.2:{internal} HTTP/1.1\r\n\r\n".encode()),
                await ask(proxy, f"CONNECT localhost:{internal} HTTP/1.1\r\n\r\n".encode()),  # nothing listens there
                await ask(proxy, b"CONNECT 127.0.0.3:443 HTTP/1.1\r\n\r\n"),
            ]
        finally:
            await proxy.close()

    try:
        ok, plain, tunnel, _, _ = asyncio.run(main())
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
    assert ok.startswith(b"HTTP/1.0 200") and ok.endswith(b"ok")
    assert plain.startswith(b"HTTP/1.1 403") and tunnel.startswith(b"HTTP/1.1 403")
    assert hits == ["127.0.0.1/a"]
    assert [url for url, _ in refused] == [
        f"http://127.0.0.2:{internal}/b",
        f"https://127.0.0.2:{internal}/",
        "https://127.0.0.3:443/",
    ]
    # what the rendering handler asks when a page's document failed: refused lately, by host and port
    why = refused[0][1]
    assert proxy.refusal_of(f"https://127.0.0.2:{internal}/other?q") == why and "127.0.0.2 is loopback" in why
    assert proxy.refusal_of("https://127.0.0.3/x") is not None  # default port
    assert proxy.refusal_of("http://127.0.0.3/x") is None  # another port
    assert proxy.refusal_of(f"http://127.0.0.1:{allowed}/a") is None and proxy.refusal_of("http://[::1") is None
    now[0] = 61.0
    assert proxy.refusal_of(f"https://127.0.0.2:{internal}/") is None  # forgotten after RECENT_SECONDS
