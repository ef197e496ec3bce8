"""A URL's host, one way for the whole package: lower case, no trailing dot, IDNA (punycode).

The politeness slot, the shard of a URL, the registry's site, canonical links, per-site rules and
the counts per host all key on the host, so two spellings of one host (`Example.COM.`,
`bücher.de` / `xn--bcher-kva.de`) must give one name everywhere. Scrapy's requests already carry
the punycode form (w3lib's `safe_url_string`); IDNA here makes a URL written by hand (a seed, a
canonical link, a registry entry) name the same host. Stdlib only: every folder uses it.
"""

from __future__ import annotations

from urllib.parse import urlsplit


def normalize_host(host: str) -> str:
    """`host` in lower case, without trailing dots, non-ASCII labels IDNA-encoded as w3lib does
    (a name the IDNA codec refuses, like a label over 63 characters, stays as written)."""
    host = host.lower().rstrip(".")
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def url_host(url: str) -> str:
    """The host of `url` (no port, no user info; an IPv6 literal without brackets); "" for a URL
    without one (`data:`, a relative link, garbage)."""
    try:
        host = urlsplit(url).hostname
    except ValueError:  # an unclosed IPv6 bracket
        return ""
    return normalize_host(host) if host else ""
