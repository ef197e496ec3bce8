"""Admission: the checks every request passes before it enters the shared queue (docs/security.md).

The scheduler's `enqueue_request` runs `Admission.check` on every request a node schedules (links,
sitemap and feed entries, redirects, retries, seeds read by the spider). A refused request never
reaches Redis: it is dead-lettered once with the refusal's reason (`core/refusals.py`), counted in
stats `dc/refused/<reason>` and per host in Redis (`dcrawl hosts`), never retried.

A check is a function `(Request) -> Refusal | None`, built once per node by a *check factory*
`(Settings) -> Check | None` that reads and validates its settings (a bad value raises ValueError
with one line; None = the check is off under these settings). `CHECKS` lists the factories in the
order they run: cheap checks first; the first refusal wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from distributed_crawler.addresses import SETTING as ALLOWED_SETTING
from distributed_crawler.addresses import AddressRule, literal_ip
from distributed_crawler.core.checks import Check, CheckFactory, Refusal
from distributed_crawler.core.traps import url_shape_check

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.settings import BaseSettings

ALLOWED_SCHEMES = ("http", "https")


def host_of(url: str) -> str:
    """The URL's host as the refusal counts name it (lowercase, no port, brackets kept off)."""
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def scheme_check(settings: BaseSettings) -> Check:
    """Only http and https are crawled: a link (or a queue entry) naming file:, ftp:, s3:, data:
    or anything else is refused, whatever download handlers the project enables."""

    def check(request: Request) -> Refusal | None:
        scheme = request.url.split(":", 1)[0].lower()
        if scheme in ALLOWED_SCHEMES:
            return None
        return Refusal("scheme", f"scheme {scheme[:20]!r} is not crawled (only http and https)")

    return check


def address_rule(settings: BaseSettings) -> AddressRule:
    """ALLOWED_PRIVATE_NETWORKS read once (a bad CIDR fails the start with one line)."""
    return AddressRule.from_value(settings.get(ALLOWED_SETTING))


def literal_address_check(settings: BaseSettings) -> Check:
    """A host that is a literal IP in any spelling (`2130706433`, `0x7f.1`, `[::ffff:127.0.0.1]`)
    is judged now, before a lease is spent; names are judged at connect time (safety/connect)."""
    rule = address_rule(settings)

    def check(request: Request) -> Refusal | None:
        host = host_of(request.url)
        ip = literal_ip(host) if host else None
        why = rule.refusal(ip) if ip is not None else None
        return Refusal("private_address", why) if why else None

    return check


CHECKS: tuple[CheckFactory, ...] = (scheme_check, literal_address_check, url_shape_check)


class Admission:
    """The checks of this node, built from its settings; `check` runs them in order."""

    def __init__(self, checks: Sequence[Check]) -> None:
        self.checks = tuple(checks)

    @classmethod
    def from_settings(
        cls, settings: BaseSettings, factories: Sequence[CheckFactory] = CHECKS, extra: Sequence[Check] = ()
    ) -> Admission:
        """The checks of `factories`, then `extra` (checks built from the node's state, such as the
        source registry's scope: core/registry.py)."""
        built = (factory(settings) for factory in factories)
        return cls([*(check for check in built if check is not None), *extra])

    def check(self, request: Request) -> Refusal | None:
        for check in self.checks:
            refusal = check(request)
            if refusal is not None:
                return refusal
        return None
