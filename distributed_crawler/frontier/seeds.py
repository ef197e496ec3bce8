"""Seeds from `<spider>:start_urls`: a plain URL or a JSON object, validated before anything runs.

Anyone with Redis access can push a seed, so a seed is data, never code: only http(s) URLs, only
JSON of the documented shape, only callbacks that are public methods of the spider. As in
scrapy-redis, any other top-level field of a JSON seed is form data (`{"url", "meta",
"url_cookie_key": "x", "method": "POST"}` posts `url_cookie_key=x`; with GET it goes in the query).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload
from urllib.parse import urlsplit

from scrapy import FormRequest, Request

from distributed_crawler.addresses import AddressRule, literal_ip
from distributed_crawler.frontier.envelope import MAX_PRIORITY
from distributed_crawler.frontier.metapolicy import check_meta
from distributed_crawler.meta import PRIVATE_META_PREFIX

T = TypeVar("T")
U = TypeVar("U")

ALLOWED_SCHEMES = ("http", "https")
SEED_FIELDS = {"url", "meta", "priority", "callback", "method", "headers", "body"}
PREVIEW_CHARS = 200


class SeedError(ValueError):
    """A rejected seed; `kind` groups the log lines and the stats (`seeds/rejected/<kind>`)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


@dataclass
class Seed:
    url: str
    meta: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    callback: str | None = None
    method: str = "GET"
    headers: dict[str, Any] = field(default_factory=dict)
    body: str = ""
    formdata: dict[str, str | list[str]] = field(default_factory=dict)  # other fields (scrapy-redis)

    def to_request(self, callback: Any = None) -> Request:
        """The request a node makes of this seed (and `dcrawl seed --dedup` fingerprints): a
        `FormRequest` when the seed has form data, as scrapy-redis makes; `dont_filter`, as there:
        pushing a seed again means "fetch it again"."""
        common: dict[str, Any] = {
            "callback": callback,
            "method": self.method,
            "headers": self.headers or None,
            "meta": self.meta,
            "priority": self.priority,
            "dont_filter": True,
        }
        if self.formdata:
            return FormRequest(self.url, formdata=self.formdata, **common)
        return Request(self.url, body=self.body.encode("utf-8"), **common)


def check_url(url: str) -> str:
    url = url.strip()
    # split() breaks on exactly the characters isspace() names; one C call, not a loop per character
    if len(url.split(maxsplit=1)) != 1:
        raise SeedError("not_a_url", "not a URL (empty or contains whitespace)")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. "Invalid IPv6 URL"
        raise SeedError("not_a_url", f"not a URL ({str(exc)[:100]})") from None
    if parts.scheme.lower() not in ALLOWED_SCHEMES:
        raise SeedError("bad_scheme", f"scheme {parts.scheme or '(none)'!r} is not http or https")
    try:
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        host = None
    if not host:
        raise SeedError("not_a_url", "not a URL (no host)")
    return url


@overload
def _expect(value: object, kind: type[T], name: str) -> T: ...
@overload
def _expect(value: object, kind: tuple[type[T], type[U]], name: str) -> T | U: ...
def _expect(value: object, kind: type[T] | tuple[type[T], type[U]], name: str) -> T | U:
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise SeedError(f"bad_{name}", f"'{name}' must be {expected}, not {type(value).__name__}")
    return value


def check_address(url: str, rule: AddressRule) -> None:
    """A seed whose host is a literal IP the rule refuses (any spelling): SeedError naming the setting.
    Names are judged by the nodes when they connect (core/guard.py)."""
    ip = literal_ip(urlsplit(url).hostname or "")
    why = rule.refusal(ip) if ip is not None else None
    if why:
        raise SeedError("private_address", why)


def parse_seed(raw: bytes | str, max_bytes: int, addresses: AddressRule | None = None) -> Seed:
    """Turn one start_urls entry into a `Seed`, or raise `SeedError` saying why not (`addresses`:
    also refuse a literal private IP, as `dcrawl seed` does; nodes refuse it at enqueue)."""
    seed = _parse_seed(raw, max_bytes)
    if addresses is not None:
        check_address(seed.url, addresses)
    return seed


def _parse_seed(raw: bytes | str, max_bytes: int) -> Seed:
    size = len(raw.encode("utf-8", "replace") if isinstance(raw, str) else raw)
    if size > max_bytes:
        raise SeedError("too_large", f"{size} bytes is more than SEED_MAX_BYTES ({max_bytes})")
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SeedError("not_utf8", "not UTF-8 text") from None
    text = raw.strip()
    if not text.startswith("{"):
        return Seed(url=check_url(text))
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SeedError("bad_json", f"broken JSON ({str(exc)[:100]})") from None
    except RecursionError:
        raise SeedError("bad_json", "JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise SeedError("bad_json", "JSON seed must be an object")
    formdata = {k: _form_value(k, v) for k, v in data.items() if k not in SEED_FIELDS}
    if "url" not in data:
        raise SeedError("bad_url", "'url' is missing")
    seed = Seed(url=check_url(_expect(data["url"], str, "url")))
    if "meta" in data:
        seed.meta = _expect(data["meta"], dict, "meta")
        private = sorted(k for k in seed.meta if k.startswith(PRIVATE_META_PREFIX))
        if private:
            raise SeedError("bad_meta", f"meta key(s) {private[:5]} are reserved for the crawler")
        try:
            check_meta(seed.meta)  # handler names are checked by the node (frontier/codec.py)
        except ValueError as exc:
            raise SeedError("bad_meta", str(exc)) from None
    if "priority" in data:
        seed.priority = _expect(data["priority"], int, "priority")
        if abs(seed.priority) > MAX_PRIORITY:
            raise SeedError("bad_priority", f"'priority' must be between -{MAX_PRIORITY} and {MAX_PRIORITY}")
    if data.get("callback") is not None:
        seed.callback = _expect(data["callback"], str, "callback")
    if "method" in data:
        seed.method = _expect(data["method"], str, "method").upper()
    if "headers" in data:
        seed.headers = _expect(data["headers"], dict, "headers")
        for k, v in seed.headers.items():
            if not isinstance(v, (str, list)) or isinstance(v, list) and not all(isinstance(x, str) for x in v):
                raise SeedError("bad_headers", f"header {k!r} must be a string or a list of strings")
    if "body" in data:
        seed.body = _expect(data["body"], str, "body")
    if formdata and seed.body:
        raise SeedError("bad_body", f"'body' and form data fields {sorted(formdata)[:5]} exclude each other")
    seed.formdata = formdata
    return seed


def _form_value(name: str, value: Any) -> str | list[str]:
    """A form field of a JSON seed: a string or number, or a list of them (scrapy-redis's formdata)."""
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        return [str(v) for v in value]
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise SeedError(
        "unknown_field",
        f"field {name[:50]!r} is neither a seed field ({', '.join(sorted(SEED_FIELDS))}) nor form data "
        "(a string, a number or a list of them)",
    )


def preview(raw: bytes | str) -> str:
    """A short printable excerpt of a rejected seed, for the failed list and the log."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return text[:PREVIEW_CHARS] + ("..." if len(text) > PREVIEW_CHARS else "")
