"""The private-address guard at connect time (docs/security.md).

Every plain HTTP(S) connection a node opens to a site is made by `GuardedEndpoint`: it resolves
the host once, drops every address the rule refuses (addresses.py, ALLOWED_PRIVATE_NETWORKS) and
connects to an allowed address itself, so the address checked is the address connected to. That
covers at once a name that resolves to a private address, DNS rebinding (the name is resolved for
this connection, not trusted from an earlier answer) and every redirect hop (each is a new
request, so a new connection or a pooled one made through this same check).

Scrapy's HTTP/1.1 handler builds an agent per download (`internals.guard_http11_agents` lets
`guarded_agent` build it); every handler that falls back to it (scrapy-playwright's, ours) is
covered. A request through an operator's proxy (meta `proxy`) is not: the proxy connects and
resolves; its literal-IP targets are refused at enqueue (core/admission.py).

A refused connection fails the download with `AddressRefused` (an IgnoreRequest: never retried,
no proxy penalty) after the scheduler dead-lettered it with reason `private_address`.
"""

from __future__ import annotations

import ipaddress
import weakref
from typing import TYPE_CHECKING, Any, cast

from scrapy.exceptions import IgnoreRequest
from twisted.internet import defer
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP6ClientEndpoint, wrapClientTLS
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IResolutionReceiver, IStreamClientEndpoint
from twisted.web.client import Agent
from twisted.web.error import SchemeNotSupported
from twisted.web.iweb import IAgentEndpointFactory
from zope.interface import implementer  # type: ignore[import-untyped]

from distributed_crawler.addresses import SETTING, AddressRule
from distributed_crawler.core.checks import Refusal
from distributed_crawler.internals import (
    bound_connection_pool,
    bound_downloader_slots,
    guard_http11_agents,
    scheduler_of,
)
from distributed_crawler.meta import LEASE_META

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request
    from scrapy.crawler import Crawler
    from twisted.internet.interfaces import IProtocolFactory
    from twisted.web.client import URI

REASON = "private_address"
POOL_IDLE_SECONDS = 30.0  # an idle keep-alive connection to a site is closed after this (Twisted's: 240 s)
SLOT_IDLE_SECONDS = 10.0  # a downloader slot is dropped this long after its delay passed (Scrapy's: 60 s)


class AddressRefused(IgnoreRequest):
    """The host resolved only to addresses the rule refuses."""

    def __init__(self, host: str, address: str, detail: str) -> None:
        super().__init__(f"{host}: {detail}")
        self.host = host
        self.address = address
        self.detail = detail


def _resolve(reactor: Any, host: str, port: int) -> defer.Deferred[list[str]]:
    """The host's addresses, through the reactor's resolver (Scrapy's DNS cache and DNS_TIMEOUT)."""
    try:
        return defer.succeed([str(ipaddress.ip_address(host.strip("[]")))])
    except ValueError:
        pass
    found: defer.Deferred[list[str]] = defer.Deferred()
    addresses: list[str] = []

    @implementer(IResolutionReceiver)
    class Receiver:
        @staticmethod
        def resolutionBegan(resolution: Any) -> None:
            return None

        @staticmethod
        def addressResolved(address: Any) -> None:
            addresses.append(address.host)

        @staticmethod
        def resolutionComplete() -> None:
            found.callback(addresses)

    reactor.nameResolver.resolveHostName(Receiver(), host, portNumber=port)
    return found


@implementer(IStreamClientEndpoint)
class GuardedEndpoint:
    """Resolve, keep the allowed addresses, connect to them in turn (the first that accepts wins)."""

    def __init__(
        self,
        reactor: Any,
        host: str,
        port: int,
        rule: AddressRule,
        timeout: float,
        bind_address: Any,
        on_refused: Callable[[AddressRefused], None],
    ) -> None:
        self.reactor = reactor
        self.host = host
        self.port = port
        self.rule = rule
        self.timeout = timeout
        self.bind_address = bind_address
        self.on_refused = on_refused

    def connect(self, protocol_factory: IProtocolFactory) -> defer.Deferred[Any]:
        resolved = _resolve(self.reactor, self.host, self.port)
        return resolved.addCallback(self._connect_allowed, protocol_factory)

    def _connect_allowed(self, addresses: list[str], protocol_factory: IProtocolFactory) -> defer.Deferred[Any]:
        if not addresses:
            raise DNSLookupError(f"no results for hostname lookup: {self.host}")
        verdicts = [(address, self.rule.refusal(address)) for address in addresses]
        allowed = [address for address, why in verdicts if why is None]
        if not allowed:
            address, why = verdicts[0]
            refused = AddressRefused(self.host, address, why or "")
            self.on_refused(refused)
            raise refused
        return self._try(allowed, protocol_factory)

    def _try(self, addresses: list[str], protocol_factory: IProtocolFactory) -> defer.Deferred[Any]:
        address, rest = addresses[0], addresses[1:]
        kind = TCP6ClientEndpoint if ":" in address else TCP4ClientEndpoint
        attempt = kind(self.reactor, address, self.port, self.timeout, self.bind_address).connect(protocol_factory)
        if rest:
            attempt.addErrback(lambda _: self._try(rest, protocol_factory))
        return attempt


@implementer(IAgentEndpointFactory)
class GuardedEndpointFactory:
    """Endpoints of one download: TCP for http, TLS over it for https (SNI and checks on the name)."""

    def __init__(
        self,
        reactor: Any,
        context_factory: Any,
        timeout: float,
        bind_address: Any,
        rule: AddressRule,
        on_refused: Callable[[AddressRefused], None],
    ) -> None:
        self.reactor = reactor
        self.context_factory = context_factory
        self.timeout = timeout
        self.bind_address = bind_address
        self.rule = rule
        self.on_refused = on_refused

    def endpointForURI(self, uri: URI) -> GuardedEndpoint | IStreamClientEndpoint:
        host = uri.host.decode("ascii")
        endpoint = GuardedEndpoint(
            self.reactor, host, uri.port, self.rule, self.timeout, self.bind_address, self.on_refused
        )
        if uri.scheme == b"http":
            return endpoint
        if uri.scheme == b"https":
            return wrapClientTLS(
                self.context_factory.creatorForNetloc(uri.host, uri.port), cast("IStreamClientEndpoint", endpoint)
            )
        raise SchemeNotSupported(f"Unsupported scheme: {uri.scheme!r}")


_rules: weakref.WeakKeyDictionary[Any, AddressRule | None] = weakref.WeakKeyDictionary()


def rule_of(crawler: Crawler) -> AddressRule | None:
    """The crawler's rule, read once; None for a crawler without our settings (not guarded)."""
    if crawler not in _rules:
        value = crawler.settings.get(SETTING)
        _rules[crawler] = None if value is None else AddressRule.from_value(value)
    return _rules[crawler]


def guarded_agent(
    crawler: Crawler, request: Request, timeout: float, context_factory: Any, bind_address: Any, pool: Any
) -> Agent | None:
    """The agent of one plain download: guarded unless it goes through the operator's proxy.
    Scrapy's connection pool and downloader slots are kept bounded on the way (docs/settings.md,
    per-host state)."""
    if pool is not None:
        bound_connection_pool(pool, POOL_IDLE_SECONDS)
    bound_downloader_slots(crawler, SLOT_IDLE_SECONDS)
    rule = rule_of(crawler)
    if rule is None or request.meta.get("proxy"):
        return None  # Scrapy's own agent
    from twisted.internet import reactor

    bind = request.meta.get("bindaddress") or bind_address
    bind = (bind, 0) if isinstance(bind, str) else bind

    def refused(exc: AddressRefused) -> None:
        record_refusal(crawler, request, Refusal(REASON, exc.detail))

    factory = GuardedEndpointFactory(reactor, context_factory, timeout, bind, rule, refused)
    agent: Agent = Agent.usingEndpointFactory(reactor, factory, pool=pool)  # an unannotated classmethod
    return agent


def record_refusal(
    crawler: Crawler, request: Request, refusal: Refusal, source: str = "connect", counted: bool = False
) -> None:
    """Dead-letter a scheduled request (our scheduler acks its lease as usual); a request that was
    not scheduled (robots.txt) is only counted and logged. `counted`: already counted and logged
    when it happened (the browser's proxy), so only the dead letter is written."""
    scheduler = scheduler_of(crawler)
    if LEASE_META in request.meta and hasattr(scheduler, "refuse"):
        scheduler.refuse(request, refusal, source, counted)
    elif counted:
        return
    elif hasattr(scheduler, "refusals"):
        scheduler.refusals.note(request.url, refusal, source)
    else:
        crawler.stats.inc_value(f"dc/refused/{refusal.reason}")


def install() -> None:
    """Guard every HTTP/1.1 download of this process (crawlers without ALLOWED_PRIVATE_NETWORKS
    in their settings keep Scrapy's agent)."""
    guard_http11_agents(guarded_agent)
