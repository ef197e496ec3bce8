"""A Scrapy DNS_RESOLVER that answers 127.0.0.1 for `*.bench.test` (bench/cluster.py's hosts).

Why: 10,000 hosts on loopback without touching /etc/hosts or a DNS server; every other name goes
to Scrapy's own resolver. The answer goes into Scrapy's DNS cache (`dnscache`, DNSCACHE_SIZE
entries) as a real one would, so a bench of many hosts pays for that cache as a real crawl does.
Use: `-s DNS_RESOLVER=bench.loopback_resolver.LoopbackResolver`.
"""

from __future__ import annotations

from typing import Any

from scrapy.resolver import CachingThreadedResolver, dnscache
from twisted.internet import defer

SUFFIX = ".bench.test"


class LoopbackResolver(CachingThreadedResolver):
    def getHostByName(self, name: str, timeout: Any = ()) -> defer.Deferred:
        if name.lower().rstrip(".").endswith(SUFFIX):
            if dnscache.limit and name not in dnscache:
                dnscache[name] = "127.0.0.1"
            return defer.succeed("127.0.0.1")
        return super().getHostByName(name, timeout)
