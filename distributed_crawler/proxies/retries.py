"""A request's proxy failures: counted apart from its RETRY_TIMES, bounded by PROXY_RETRY_TIMES.

An attempt that a pool proxy failed (a ban answer, 407, a connection refused or reset by the proxy,
a timeout through it) says nothing about the page, so it must not spend the page's retries: with a
few bad proxies in the pool a page that needs all its RETRY_TIMES was lost whenever one attempt
drew a bad proxy. downloadermiddlewares/proxy.py marks such an attempt (`mark_failure`) and
downloadermiddlewares/retry.py sends the request again through another proxy, counting it in meta
`proxy_retry_times` instead of `retry_times`.

The count has its own bound so a request that every proxy fails ends: PROXY_RETRY_TIMES proxy
retries, "auto" = the number of proxies the cluster knows (pooled and dead: a proxy evicted while the
request was under way still failed it), at least MIN_PROXY_RETRIES. One more proxy failure and the
request is dead-lettered `proxy_failed`, naming the proxies (masked) that failed it.

The count and the list travel with the retry copy through Redis: they are read back as untrusted.
"""

from __future__ import annotations

from typing import Any

from distributed_crawler.meta import (
    MAX_PROXY_FAILURES,
    PROXY_FAILURE_META,
    PROXY_FAILURES_META,
    PROXY_RETRY_LIMIT_META,
    PROXY_RETRY_TIMES_META,
)

PROXY_FAILED = "proxy_failed"  # the dead-letter reason of a request its proxies failed too often
MIN_PROXY_RETRIES = 3  # "auto" never gives a request fewer proxy retries than this
MAX_TEXT = 300  # characters of a proxy or a reason kept in meta


def parse_retry_times(value: Any) -> int | None:
    """PROXY_RETRY_TIMES: None for "auto", else an integer >= 0 (also from `-s`, as text)."""
    text = str(value).strip().lower() if isinstance(value, str) else None
    if text == "auto":
        return None
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        number = int(text if text is not None else value)
    except (TypeError, ValueError):
        number = -1
    if number < 0:
        raise ValueError(
            f"PROXY_RETRY_TIMES ({value!r}) must be 'auto' or an integer >= 0 "
            "(retries on another proxy after a proxy failure)"
        )
    return number


def retry_limit(configured: int | None, known_proxies: int) -> int:
    """Proxy retries a request gets: the setting, or for "auto" the proxies known, at least 3."""
    return configured if configured is not None else max(MIN_PROXY_RETRIES, known_proxies)


def proxy_retry_times(meta: dict[str, Any]) -> int:
    """How many attempts of the request a proxy failed so far (0 for anything that is not a count)."""
    value = meta.get(PROXY_RETRY_TIMES_META)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def proxy_failures(meta: dict[str, Any]) -> list[tuple[str, str]]:
    """The (masked proxy, reason) pairs of the request's last proxy failures; malformed ones skipped."""
    value = meta.get(PROXY_FAILURES_META)
    if not isinstance(value, list | tuple):
        return []
    pairs = []
    for item in value[-MAX_PROXY_FAILURES:]:
        if isinstance(item, list | tuple) and len(item) == 2 and all(isinstance(x, str) for x in item):
            pairs.append((item[0][:MAX_TEXT], item[1][:MAX_TEXT]))
    return pairs


def mark_failure(meta: dict[str, Any], masked_proxy: str, reason: str, limit: int) -> None:
    """This attempt failed because of its proxy (`masked_proxy`, never with its password)."""
    meta[PROXY_FAILURE_META] = reason
    meta[PROXY_RETRY_LIMIT_META] = limit
    pairs = [*proxy_failures(meta), (masked_proxy[:MAX_TEXT], reason[:MAX_TEXT])]
    meta[PROXY_FAILURES_META] = [list(p) for p in pairs[-MAX_PROXY_FAILURES:]]


def attempt_failure(meta: dict[str, Any]) -> tuple[str, int] | None:
    """(reason, PROXY_RETRY_TIMES) when this attempt failed because of its proxy, else None."""
    reason = meta.get(PROXY_FAILURE_META)
    limit = meta.get(PROXY_RETRY_LIMIT_META)
    if not isinstance(reason, str) or not isinstance(limit, int):
        return None
    return reason, limit


def failures_detail(failed: int, limit: int, pairs: list[tuple[str, str]]) -> str:
    """One line for the dead letter and the log: the proxies that failed the request, and the fix."""
    tried = "; ".join(f"{proxy} ({reason})" for proxy, reason in pairs) or "no proxy recorded"
    return (
        f"{failed} attempts failed because of their proxy (PROXY_RETRY_TIMES {limit}): {tried}; "
        "check the pool with `dcrawl proxies list`, then `dcrawl failed SPIDER --requeue`"
    )
