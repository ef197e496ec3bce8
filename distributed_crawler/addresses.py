"""The private-address rule: which IP addresses a crawl may connect to (docs/security.md).

Refused unless `ALLOWED_PRIVATE_NETWORKS` allows it: every address that is not globally routable
(`ipaddress`'s `is_global`), plus multicast, reserved and unspecified ones, and the IPv6 forms that
carry an IPv4 address (IPv4-mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`,
Teredo) judged by the address they carry. `literal_ip` reads a URL host the way a socket
(`inet_aton`) or a browser (WHATWG URL) does, so `2130706433`, `0177.0.0.1`, `0x7f.1` and `127.1`
are all 127.0.0.1.

Stdlib only: the connection layer, rendering, the scheduler and the CLI all use it.
"""

from __future__ import annotations

import ipaddress
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SETTING = "ALLOWED_PRIVATE_NETWORKS"
NAT64 = ipaddress.ip_network("64:ff9b::/96")
CGNAT = ipaddress.ip_network("100.64.0.0/10")
# IANA's special-purpose ranges that are not globally reachable, spelled out so the rule does not
# depend on the Python release's `is_global` tables (3.11.7 calls 192.0.0.8 global, for one).
SPECIAL = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
        "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
        "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
        "::/127", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "3fff::/20", "5f00::/16",
        "fc00::/7", "fe80::/10", "ff00::/8",
    )
)  # fmt: skip


def _kind(ip: IPAddress) -> str | None:
    """Why `ip` itself is not a public address (None: it is globally routable)."""
    checks = (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("shared (CGNAT)", isinstance(ip, ipaddress.IPv4Address) and ip in CGNAT),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
        ("special-purpose", any(ip.version == n.version and ip in n for n in SPECIAL)),
        ("not globally routable", not ip.is_global),
    )
    return next((name for name, hit in checks if hit), None)


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4, Teredo client), if any."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


@dataclass(frozen=True)
class AddressRule:
    """Which non-public addresses the operator allows (ALLOWED_PRIVATE_NETWORKS)."""

    allowed: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_value(cls, value: str | Iterable[str] | None) -> AddressRule:
        """A list of CIDRs, or one comma-separated string (`-s ALLOWED_PRIVATE_NETWORKS=a,b`)."""
        items = value.split(",") if isinstance(value, str) else list(value or ())
        networks = []
        for item in items:
            text = str(item).strip()
            if not text:
                continue
            try:
                networks.append(ipaddress.ip_network(text, strict=False))
            except ValueError:
                raise ValueError(
                    f"{SETTING} ({text}) must be CIDRs such as 127.0.0.0/8 or ::1/128 (a list, or comma-separated "
                    "on -s); fix or remove it"
                ) from None
        return cls(tuple(networks))

    def _allows(self, ip: IPAddress) -> bool:
        return any(ip.version == net.version and ip in net for net in self.allowed)

    def refusal(self, ip: IPAddress | str) -> str | None:
        """Why a connection to `ip` is refused (one line naming the setting), None if it may go."""
        if isinstance(ip, str):
            ip = ipaddress.ip_address(ip.split("%", 1)[0])
        if self._allows(ip):
            return None
        inner = embedded_ipv4(ip)
        if inner is not None:
            if self._allows(inner):
                return None  # the address it carries is one the operator allows
            if _kind(inner):
                return f"address {ip} carries {inner}, {_kind(inner)}; allow it with {SETTING}"
        kind = _kind(ip)
        if kind is None:
            return None
        return f"address {ip} is {kind}; allow it with {SETTING}"


def _ipv4_part(part: str) -> int | None:
    """One dotted part as inet_aton / WHATWG read it: 0x hex, leading-0 octal, else decimal."""
    if part[:2] in ("0x", "0X"):
        digits, base = part[2:], 16
    elif len(part) > 1 and part[0] == "0":
        digits, base = part[1:], 8
    else:
        digits, base = part, 10
    if digits == "":
        return 0 if base == 16 else None
    try:
        return int(digits, base) if digits.isascii() and digits.isalnum() else None
    except ValueError:
        return None


def _ipv4(host: str) -> ipaddress.IPv4Address | None:
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # "127.0.0.1." is still the address
    if not 1 <= len(parts) <= 4 or any(p == "" for p in parts):
        return None
    numbers = [_ipv4_part(p) for p in parts]
    if any(n is None for n in numbers):
        return None
    *head, last = [n for n in numbers if n is not None]
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(parts)):
        return None
    value = last
    for i, n in enumerate(head):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def literal_ip(host: str) -> IPAddress | None:
    """The address a URL host names literally, in any spelling a socket or a browser accepts."""
    text = unicodedata.normalize("NFKC", unquote(host)).strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text.split("%", 1)[0])
        except ValueError:
            return None
    return _ipv4(text)
