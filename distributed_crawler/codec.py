"""Requests as JSON in Redis: never pickle.

Anything in Redis may have been written by someone else, so decoding must not run code: the request
class is checked against an allow-list before it is loaded, callbacks must be methods of the spider,
and a payload that does not decode raises `PayloadError` (the scheduler dead-letters it).
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.utils.misc import load_object

from distributed_crawler.defaults import get_setting
from distributed_crawler.tagged import tag_values, untag_values

if TYPE_CHECKING:
    from scrapy import Spider

DEFAULT_ALLOWED_CLASSES: frozenset[str] = frozenset(
    {
        "scrapy.http.request.Request",
        "scrapy.http.request.form.FormRequest",
        "scrapy.http.request.json_request.JsonRequest",
        "scrapy.http.request.rpc.XmlRpcRequest",
    }
)
# Meta keys that belong to one node's handling of one delivery; never shipped to another node.
PRIVATE_META_PREFIX = "_dc_"
# Set by proxy_middleware.py on requests it sent through a pool proxy (the masked proxy). Such a
# request travels without the proxy, Scrapy's `_auth_proxy` and the Proxy-Authorization header:
# the pool's credentials never reach Redis, and the next attempt picks a proxy again.
POOL_PROXY_META = "_dc_proxy"
_POOL_PROXY_FIELDS = frozenset({"proxy", "_auth_proxy"})
# Meta keys Scrapy's own middlewares set that describe one download, not the request.
_TRANSIENT_META = frozenset({
    "download_slot", "download_latency", "download_timeout", "depth_checked",
    "frames",  # rendering.py: the frames of one rendered download
})

FORMAT_VERSION = 1


def allowed_classes(settings: Any) -> tuple[str, ...]:
    """REQUEST_CLASS_ALLOWLIST as a tuple (a list, or "a,b" with -s)."""
    allow = get_setting(settings, "REQUEST_CLASS_ALLOWLIST") or ()
    if isinstance(allow, str):
        allow = [a.strip() for a in allow.split(",") if a.strip()]
    return tuple(allow)


class PayloadError(ValueError):
    """A payload from Redis that is not a request we are willing to build."""


class UnserializableRequestError(TypeError):
    """A request that cannot travel as JSON; the message names the offending key."""


def _class_path(request: Request) -> str:
    cls = type(request)
    return f"{cls.__module__}.{cls.__qualname__}"


def _find_unserializable(value: Any, path: str) -> str | None:
    """Path of the first value json cannot encode, e.g. `meta['item'].price`."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{path}[{k!r}] (key must be a string)"
            found = _find_unserializable(v, f"{path}[{k!r}]")
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _find_unserializable(v, f"{path}[{i}]")
            if found:
                return found
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return None
    return f"{path} ({type(value).__name__})"


class RequestCodec:
    """Encode a `Request` to a JSON string and back, for one spider."""

    def __init__(self, spider: Spider | None, allowed_classes: Iterable[str] = ()) -> None:
        self.spider = spider
        self.allowed = DEFAULT_ALLOWED_CLASSES | frozenset(allowed_classes)

    # -- encode -------------------------------------------------------------
    def to_dict(self, request: Request) -> dict[str, Any]:
        class_path = _class_path(request)
        if class_path not in self.allowed:
            raise UnserializableRequestError(
                f"request class {class_path} is not in REQUEST_CLASS_ALLOWLIST; add it there"
            )
        pooled = POOL_PROXY_META in request.meta
        meta = {
            k: v
            for k, v in request.meta.items()
            if not k.startswith(PRIVATE_META_PREFIX) and k not in _TRANSIENT_META
            and not (pooled and k in _POOL_PROXY_FIELDS)
        }
        try:  # scrapy-playwright's PageMethod travels as tagged JSON (tagged.py)
            meta = tag_values(meta, "meta")
        except ValueError as exc:
            raise UnserializableRequestError(f"{request.url}: {exc}") from None
        for field, value in (("meta", meta), ("cb_kwargs", request.cb_kwargs)):
            bad = _find_unserializable(value, field)
            if bad:
                raise UnserializableRequestError(
                    f"{request.url}: {bad} is not JSON-serializable; "
                    "store only JSON values (str, int, float, bool, None, list, dict) there"
                )
        d = request.to_dict(spider=self.spider)
        return {
            "v": FORMAT_VERSION,
            "id": secrets.token_hex(8),  # two equal requests (dont_filter) stay two queue members
            "class": class_path,
            "url": d["url"],
            "method": d["method"],
            "callback": d["callback"],
            "errback": d["errback"],
            "headers": {
                k.decode("latin-1"): [v.decode("latin-1") for v in vs]
                for k, vs in d["headers"].items()
                if not (pooled and k.lower() == b"proxy-authorization")
            },
            "body": base64.b64encode(d["body"]).decode("ascii") if d["body"] else "",
            "cookies": d["cookies"],
            "meta": meta,
            "encoding": d["encoding"],
            "priority": d["priority"],
            "dont_filter": d["dont_filter"],
            "flags": list(d["flags"]),
            "cb_kwargs": d["cb_kwargs"],
        }

    def encode(self, request: Request) -> str:
        try:
            return json.dumps(self.to_dict(request), separators=(",", ":"), ensure_ascii=False)
        except ValueError as exc:  # e.g. a method not found on the spider
            raise UnserializableRequestError(f"{request.url}: {exc}") from None

    # -- decode -------------------------------------------------------------
    def decode(self, payload: str | bytes) -> Request:
        try:
            d = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            raise PayloadError("not JSON (foreign or pickled data?)") from None
        if not isinstance(d, dict) or d.get("v") != FORMAT_VERSION:
            raise PayloadError("not a request payload of this format version")
        return self.from_dict(d)

    def from_dict(self, d: dict[str, Any]) -> Request:
        class_path = d.get("class")
        if class_path not in self.allowed:
            raise PayloadError(f"request class {class_path!r} is not allow-listed")
        request_cls = load_object(class_path)
        try:
            kwargs: dict[str, Any] = {
                "url": d["url"],
                "method": d.get("method", "GET"),
                "headers": {k: list(vs) for k, vs in (d.get("headers") or {}).items()},
                "body": base64.b64decode(d.get("body") or ""),
                "cookies": d.get("cookies") or {},
                "meta": untag_values(dict(d.get("meta") or {})),
                "encoding": d.get("encoding") or "utf-8",
                "priority": int(d.get("priority") or 0),
                "dont_filter": bool(d.get("dont_filter")),
                "flags": list(d.get("flags") or []),
                "cb_kwargs": dict(d.get("cb_kwargs") or {}),
                "callback": self._method(d.get("callback")),
                "errback": self._method(d.get("errback")),
            }
            return request_cls(**kwargs)
        except PayloadError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise PayloadError(f"malformed request fields ({type(exc).__name__}: {exc})") from None

    def _method(self, name: Any) -> Any:
        if name is None:
            return None
        if not isinstance(name, str) or name.startswith("_") or self.spider is None:
            raise PayloadError(f"callback {name!r} is not a public spider method")
        method = getattr(self.spider, name, None)
        if not callable(method):
            raise PayloadError(f"callback {name!r} not found on spider {self.spider.name!r}")
        return method
