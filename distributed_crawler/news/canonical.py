"""`<link rel="canonical">`: the URL a site says a page lives at, trusted only within the site.

A canonical link pointing to another site is ignored (a syndicated copy naming its source is a
near-duplicate, not the same page; a hijacked page must not overwrite another site's row).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from lxml import etree
from scrapy.http import TextResponse
from tld import get_fld

from distributed_crawler.urlhost import url_host

CANONICAL_XPATH = (
    "//link[contains(concat(' ', normalize-space(translate(@rel, 'CANONICAL', 'canonical')), ' '), ' canonical ')]"
    "/@href"
)
_CANONICAL = etree.XPath(CANONICAL_XPATH, smart_strings=False)  # compiled once, run on the page's parsed tree


def site_of(url: str) -> str:
    """The registered domain of a URL's host (`amp.example.co.uk` -> `example.co.uk`); an IP
    address or a name without a public suffix (localhost) is its own site."""
    host = url_host(url)
    try:
        ipaddress.ip_address(host.strip("[]"))
        return host
    except ValueError:
        pass
    return get_fld(host, fix_protocol=True, fail_silently=True) or host


def same_site(url: str, other: str) -> bool:
    site = site_of(url)
    return bool(site) and site == site_of(other)


def canonical_link(response: TextResponse) -> str | None:
    """The page's same-site canonical URL (absolute, http or https), or None."""
    for href in _CANONICAL(response.selector.root)[:1]:
        href = href.strip()
        if not href or len(href) > 2048:
            return None
        try:
            url = response.urljoin(href)
        except ValueError:
            return None
        if urlsplit(url).scheme in ("http", "https") and same_site(url, response.url):
            return url
    return None
