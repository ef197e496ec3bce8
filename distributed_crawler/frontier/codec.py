"""Requests as JSON in Redis: never pickle.

Anything in Redis may have been written by someone else, so decoding must not run code: the request
class is checked against an allow-list before it is loaded, callbacks must be public methods of the
spider or Scrapy's own private rule callbacks (callbacks.py), and a payload that does not decode
raises `PayloadError` (the scheduler dead-letters it). Both errors carry a `kind` (`class`,
`callback`, `value`, `format`, `field`) so a node logs each kind of refusal once.

Two payload formats (docs/frontier.md "Entry format"); both are read, the compact one is written:
* compact: `<url>` alone, or `<url> [S][<json object>]` holding only the fields that differ from
  their default, under the JSON format's names except `d` (meta "depth", which nearly every link
  has) and `r` (a Referer header of the request's own origin, as its path: RefererMiddleware puts
  the page a link was found on there, nearly always a page of the same site).
  Defaults: class Request, method GET, callback "parse" (`"callback":null` = none), errback none,
  no headers / body / cookies / meta / flags / cb_kwargs, encoding utf-8, priority 0, dont_filter
  false. The mark `S` (a start request: meta `is_start_request` true, which Scrapy's
  StartSpiderMiddleware adds to every seed) switches three defaults to Scrapy's for a seed: no
  callback, dont_filter true, meta {"is_start_request": true}; a seed is `<url> S`.
  `id` (8 hex) only with dont_filter, and only where the entry can meet an equal one in a zset (the
  single queue, a host's queue of another priority than 0, delayed: a retry or hand-back): two
  equal requests must stay two members there. A new request of priority 0 in host mode waits in
  its host's list, where two equal ones are two entries, and host_pop.lua gives a lease an id
  only when an equal lease is held (lease_apart). `slot` only when it is not the URL's host, and
  `again` (a retry or hand-back, lua/host_pop.lua) always last. A Scrapy URL never holds a space
  (it is percent-escaped); one that does, or one that is not http(s), is written as JSON.
* JSON (every entry written before the compact format, FORMAT_VERSION 1): one object with every
  field, starting with "{".
Python always writes absolute URLs; Lua's host queues and lists store a URL of their own host
without its origin (https: its path; http: "~" and its path; lua/lib/host.lua), and give it back
whole at lease.
"""

from __future__ import annotations

import base64
import enum
import json
import secrets
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from scrapy import Request
from scrapy.utils.misc import load_object

from distributed_crawler.addresses import SETTING as ALLOWED_SETTING
from distributed_crawler.addresses import AddressRule
from distributed_crawler.defaults import SettingsReader
from distributed_crawler.frontier.callbacks import callback_allowed
from distributed_crawler.frontier.metapolicy import check_meta
from distributed_crawler.frontier.tagged import tag_values, untag_values
from distributed_crawler.meta import POOL_PROXY_FIELDS, POOL_PROXY_META, PRIVATE_META_PREFIX, TRANSIENT_META

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
FORMAT_VERSION = 1  # the JSON payload format
DEFAULT_CLASS = "scrapy.http.request.Request"
DEFAULT_CALLBACK = "parse"  # the compact format's callback when none is written
DEPTH_FIELD = "d"  # the compact format's name of meta["depth"]
REFERER_FIELD = "r"  # the compact format's Referer header of the request's own origin, as its path
AGAIN_FIELD = "again"  # lua/host_pop.lua: a retry or hand-back, not a new page for the host's budget
#: the compact format's mark of a start request (its fields start with it): its defaults are
#: Scrapy's for a start request, no callback, dont_filter and meta {"is_start_request": true}
START_MARK = "S"
START_META = "is_start_request"  # scrapy.spidermiddlewares.start.StartSpiderMiddleware
#: compact format: a field is written only when its value differs from this (callback: "parse";
#: headers: none, a Referer of the request's origin as REFERER_FIELD)
_COMPACT_HEAD: tuple[tuple[str, Any], ...] = (("class", DEFAULT_CLASS), ("method", "GET"))
_COMPACT_TAIL: tuple[tuple[str, Any], ...] = (
    ("errback", None),
    ("body", ""),
    ("cookies", {}),
    ("encoding", "utf-8"),
    ("priority", 0),
    ("flags", []),
    ("cb_kwargs", {}),
)


def allowed_classes(settings: Any) -> tuple[str, ...]:
    """REQUEST_CLASS_ALLOWLIST as a tuple (a list, or "a,b" with -s)."""
    return tuple(SettingsReader(settings).list("REQUEST_CLASS_ALLOWLIST"))


#: `_method_name` could not name a callback by itself.
class _Unresolved(enum.Enum):
    """A callback not reachable under its own name (Scrapy's scan finds it)."""

    TOKEN = 0


_UNRESOLVED = _Unresolved.TOKEN
T = TypeVar("T")
U = TypeVar("U")


class PayloadError(ValueError):
    """A payload from Redis that is not a request we are willing to build."""

    def __init__(self, message: str, kind: str = "field") -> None:
        super().__init__(message)
        self.kind = kind


class UnserializableRequestError(TypeError):
    """A request that cannot travel as JSON; the message names the offending key."""

    def __init__(self, message: str, kind: str = "value") -> None:
        super().__init__(message)
        self.kind = kind


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
        settings = getattr(getattr(spider, "crawler", None), "settings", None)
        self.addresses = AddressRule.from_value(settings.get(ALLOWED_SETTING) if settings is not None else None)

    # -- encode -------------------------------------------------------------
    def to_dict(self, request: Request) -> dict[str, Any]:
        class_path = _class_path(request)
        if class_path not in self.allowed:
            raise UnserializableRequestError(
                f"request class {class_path} is not in REQUEST_CLASS_ALLOWLIST; add it there", kind="class"
            )
        for what in ("callback", "errback"):
            name = getattr(getattr(request, what), "__name__", None)
            if name is not None and not callback_allowed(self.spider, name):
                raise UnserializableRequestError(
                    f"{request.url}: {what} {name!r} is a private method; only public spider methods "
                    "(and Scrapy's own CrawlSpider/SitemapSpider callbacks) travel through Redis: rename it",
                    kind="callback",
                )
        # A pool proxy (POOL_PROXY_META) travels without the proxy, `_auth_proxy` and its header:
        # the pool's credentials never reach Redis, and the next attempt picks a proxy again.
        pooled = POOL_PROXY_META in request.meta
        meta = {
            k: v
            for k, v in request.meta.items()
            if not k.startswith(PRIVATE_META_PREFIX)
            and k not in TRANSIENT_META
            and not (pooled and k in POOL_PROXY_FIELDS)
        }
        try:  # bytes, datetime, tuples, sets, Decimal, PageMethod travel as tagged JSON (tagged.py)
            tagged_meta = tag_values(meta, "meta")
            cb_kwargs = tag_values(request.cb_kwargs, "cb_kwargs")
        except ValueError as exc:
            raise UnserializableRequestError(f"{request.url}: {exc}") from None
        for field, value in (("meta", tagged_meta), ("cb_kwargs", cb_kwargs)):
            bad = _find_unserializable(value, field)
            if bad:
                raise UnserializableRequestError(
                    f"{request.url}: {bad} is not JSON-serializable; "
                    "store only JSON values (str, int, float, bool, None, list, dict) or bytes, "
                    "datetime, date, Decimal, tuple, set there (no pickle: docs/migrating-from-scrapy-redis.md)"
                )
        callback, errback = self._method_name(request.callback), self._method_name(request.errback)
        if callback is _UNRESOLVED or errback is _UNRESOLVED:
            # Scrapy's own lookup (it scans every member of the spider); raises ValueError if not found
            d = request.to_dict(spider=self.spider)
            callback, errback = d["callback"], d["errback"]
        return {
            "class": class_path,
            "url": request.url,
            "method": request.method,
            "callback": callback,
            "errback": errback,
            "headers": {
                k.decode("latin-1"): [v.decode("latin-1") for v in vs]
                for k, vs in request.headers.items()
                if not (pooled and k.lower() == b"proxy-authorization")
            },
            "body": base64.b64encode(request.body).decode("ascii") if request.body else "",
            "cookies": request.cookies,
            "meta": tagged_meta,
            "encoding": request.encoding,
            "priority": request.priority,
            "dont_filter": request.dont_filter,
            "flags": list(request.flags),
            "cb_kwargs": cb_kwargs,
        }

    def _method_name(self, func: Callable[..., object] | str | None) -> str | _Unresolved | None:
        """The spider attribute a callback is bound from, found by its own name.

        Request.to_dict finds it by scanning every member of the spider with inspect.getmembers,
        about 4% of a node's CPU; a method is nearly always reachable under its ``__name__``.
        `_UNRESOLVED` when it is not (a method assigned under another name): the caller falls back
        to Scrapy's scan. None and strings pass through, as in Request.to_dict.
        """
        if func is None or isinstance(func, str):
            return func
        target, name = getattr(func, "__func__", None), getattr(func, "__name__", None)
        if self.spider is not None and target is not None and isinstance(name, str):
            found = getattr(type(self.spider), name, None)  # the class: no instance property runs
            if found is target and getattr(func, "__self__", None) is self.spider:
                return name
        return _UNRESOLVED

    def encode(self, request: Request, slot: str | None = None, again: bool = False) -> str:
        """The payload of a request (compact format); `slot` (host mode): its host, which Lua reads
        to put it back into its host's queue (written only when it is not the URL's own host);
        `again`: a retry or hand-back of a page already counted against its host's budget."""
        try:
            return write_payload(self.to_dict(request), slot, again)
        except ValueError as exc:  # e.g. a method not found on the spider
            raise UnserializableRequestError(f"{request.url}: {exc}") from None

    # -- decode -------------------------------------------------------------
    def decode(self, payload: str | bytes) -> Request:
        """A request from an untrusted payload (either format); anything malformed raises
        `PayloadError` with a reason."""
        return self.from_dict(read_payload(payload))

    def from_dict(self, d: dict[str, Any]) -> Request:
        class_path = d.get("class")
        if not isinstance(class_path, str) or class_path not in self.allowed:
            raise PayloadError(f"request class {str(class_path)[:100]!r} is not allow-listed", kind="class")
        request_cls: type[Request] = load_object(class_path)  # REQUEST_CLASS_ALLOWLIST names Request classes
        try:
            return request_cls(**self._kwargs(d))
        except PayloadError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the fields do to Request(), it is the data's fault
            raise PayloadError(f"malformed request fields ({type(exc).__name__}: {exc})"[:300]) from None

    def _kwargs(self, d: dict[str, Any]) -> dict[str, Any]:
        """Request() arguments, every field checked for its JSON type first (it came from Redis)."""
        url = _field(d, "url", str, required=True)
        if url.split(":", 1)[0].lower() not in ("http", "https"):
            raise PayloadError(f"URL scheme of {url[:60]!r} is not http or https", kind="url")
        meta = _field(d, "meta", dict) or {}
        priority = _field(d, "priority", int) or 0
        if isinstance(priority, bool) or not -(2**63) <= priority < 2**63:
            raise PayloadError(f"priority {str(priority)[:30]} is out of range")
        return {
            "url": url,
            "method": _field(d, "method", str) or "GET",
            "headers": _headers(_field(d, "headers", dict) or {}),
            "body": base64.b64decode(_field(d, "body", str) or "", validate=True),
            "cookies": _field(d, "cookies", (dict, list)) or {},
            # private meta belongs to one node's handling of one delivery: never taken from Redis
            "meta": self._meta(meta),
            "encoding": _field(d, "encoding", str) or "utf-8",
            "priority": priority,
            "dont_filter": bool(d.get("dont_filter")),
            "flags": [str(f) for f in _field(d, "flags", list) or []],
            "cb_kwargs": untag_values(_field(d, "cb_kwargs", dict) or {}, "cb_kwargs"),
            "callback": self._method(d.get("callback")),
            "errback": self._method(d.get("errback")),
        }

    def _meta(self, meta: dict[str, Any]) -> dict[str, Any]:
        """Decoded meta, allow-listed (frontier/metapolicy.py); private meta belongs to one node's
        handling of one delivery: never taken from Redis."""
        try:
            check_meta(meta, self.spider, self.addresses)
        except ValueError as exc:
            raise PayloadError(str(exc)[:300], kind="meta") from None
        untagged = untag_values({k: v for k, v in meta.items() if not k.startswith(PRIVATE_META_PREFIX)})
        if not isinstance(untagged, dict):  # meta itself tagged: a tuple, a datetime... is no meta
            raise PayloadError(f"meta is a tagged {type(untagged).__name__}, not an object", kind="meta")
        return untagged

    def _method(self, name: object) -> Callable[..., object] | None:
        if name is None:
            return None
        if not isinstance(name, str) or self.spider is None or not callback_allowed(self.spider, name):
            raise PayloadError(f"callback {str(name)[:100]!r} is not a public spider method", kind="callback")
        method: object = getattr(self.spider, name, None)
        if not callable(method):
            raise PayloadError(f"callback {name[:100]!r} not found on spider {self.spider.name!r}", kind="callback")
        return method


def url_authority(url: str) -> str:
    """The lowercased host[:port] of an absolute URL, as lua/lib/host.lua `host_of` reads it."""
    rest = url.split("://", 1)[1] if "://" in url else ""
    for stop in "/?#":
        rest = rest.split(stop, 1)[0]
    return rest.rsplit("@", 1)[-1].lower()[:300]


def _origin(url: str) -> str:
    """scheme://host[:port] of an absolute URL as written: what precedes the first "/" after "://"
    (the same on both sides of the format, which is all a Referer path needs)."""
    end = url.find("/", url.find("://") + 3)
    return url if end < 0 else url[:end]


def _own_host(url: str, slot: str) -> bool:
    """`slot` is the host[:port] lua/lib/host.lua `host_of` reads from `url` (a quick look first)."""
    start = url.find("://") + 3
    end = start + len(slot)
    if url.startswith(slot, start) and (len(url) == end or url[end] in "/?#"):
        return True
    return slot == url_authority(url)


def write_payload(d: dict[str, Any], slot: str | None = None, again: bool = False) -> str:
    """The compact payload of a request dict (`to_dict`'s, or `read_payload`'s: a field it lacks
    has the JSON format's default)."""
    url = d.get("url")
    if (
        not isinstance(url, str)
        or not url.startswith(("http://", "https://"))
        or " " in url
        or "\n" in url
        or "\r" in url
        or "\t" in url
    ):
        return _json_payload(d, slot, again)
    get = d.get
    meta: Any = get("meta")
    start = isinstance(meta, dict) and meta.get(START_META) is True
    fields: dict[str, Any] = {}
    for name, default in _COMPACT_HEAD:
        value = get(name, default)
        if value != default:
            fields[name] = value
    callback = get("callback")  # absent from a JSON payload: none
    if callback != (None if start else DEFAULT_CALLBACK):
        fields["callback"] = callback
    headers = get("headers")
    if headers:
        referer = headers.get("Referer")
        if type(referer) is list and len(referer) == 1 and isinstance(referer[0], str):
            origin = _origin(url)
            if referer[0].startswith(origin + "/"):
                headers = {k: v for k, v in headers.items() if k != "Referer"}
                fields[REFERER_FIELD] = referer[0][len(origin) :]
        if headers:
            fields["headers"] = headers
    for name, default in _COMPACT_TAIL:
        value = get(name, default)
        if value != default:
            fields[name] = value
    dont_filter = bool(get("dont_filter"))
    if dont_filter != start:
        fields["dont_filter"] = dont_filter
    if start:
        meta = {k: v for k, v in meta.items() if k != START_META}
    if meta:
        depth = meta.get("depth")
        if type(depth) is int:
            fields[DEPTH_FIELD] = depth
            meta = {k: v for k, v in meta.items() if k != "depth"}
        if meta:
            fields["meta"] = meta
    # Two equal requests that skip the filter must stay two members of a zset (the single queue, a
    # host's queue of another priority, delayed): an id tells them apart. A new request of priority
    # 0 in host mode goes to its host's list, where equal members are two entries, and host_pop.lua
    # gives a lease an id only when an equal one is held (lease_apart): it needs none here.
    if dont_filter and (slot is None or again or get("priority", 0) != 0):
        fields["id"] = secrets.token_hex(4)
    if slot is not None and not _own_host(url, slot):
        fields["slot"] = slot
    if again:
        fields[AGAIN_FIELD] = 1
    mark = START_MARK if start else ""
    if not fields:
        return f"{url} {mark}" if start else url
    return f"{url} {mark}{json.dumps(fields, separators=(',', ':'), ensure_ascii=False)}"


def _json_payload(d: dict[str, Any], slot: str | None, again: bool) -> str:
    """The JSON format, for what the compact one cannot hold (a URL with a space, not http(s))."""
    out = {"v": FORMAT_VERSION, "id": secrets.token_hex(8), **{k: v for k, v in d.items() if k not in ("v", "id")}}
    if slot is not None:
        out["slot"] = slot
    if again:
        out[AGAIN_FIELD] = 1
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False)


def read_payload(payload: str | bytes) -> dict[str, Any]:
    """The request dict of a payload of either format (a field it lacks has the JSON format's
    default); raises `PayloadError` when it is neither."""
    try:
        if isinstance(payload, bytes):
            payload = payload.decode("utf-8")
        if payload.startswith("{"):
            d = json.loads(payload)
            if not isinstance(d, dict) or d.get("v") != FORMAT_VERSION:
                raise PayloadError("not a request payload of this format version", kind="format")
            return d
        url, _, rest = payload.partition(" ")
        start = rest[:1] == START_MARK
        if start:
            rest = rest[1:]
        fields = json.loads(rest) if rest else {}
    except (ValueError, UnicodeDecodeError):
        raise PayloadError("not JSON (foreign or pickled data?)", kind="format") from None
    except RecursionError:
        raise PayloadError("JSON nested too deeply", kind="format") from None
    if not isinstance(fields, dict):
        raise PayloadError("not a request payload (its fields are not a JSON object)", kind="format")
    if start:
        d = {"class": DEFAULT_CLASS, "callback": None, "dont_filter": True, **fields, "url": url}
        meta = _field(d, "meta", dict) or {}
        d["meta"] = {START_META: True, **meta}
    else:
        d = {"class": DEFAULT_CLASS, "callback": DEFAULT_CALLBACK, **fields, "url": url}
    if REFERER_FIELD in d:
        referer = d.pop(REFERER_FIELD)
        if not isinstance(referer, str) or not referer.startswith("/"):
            raise PayloadError(f"field {REFERER_FIELD!r} (Referer) is not a path")
        headers = _field(d, "headers", dict) or {}
        d["headers"] = {**headers, "Referer": [_origin(url) + referer]}
    if DEPTH_FIELD in d:
        depth = d.pop(DEPTH_FIELD)
        meta = _field(d, "meta", dict) or {}
        if type(depth) is not int:
            raise PayloadError(f"field {DEPTH_FIELD!r} (depth) is a {type(depth).__name__}, not an int")
        d["meta"] = {**meta, "depth": depth}
    return d


def payload_url(payload: str | bytes) -> str | None:
    """The URL a payload of either format names (a JSON object's "url", else what precedes the first
    space), None when it names none (garbage). Nothing else of the payload is checked."""
    try:
        if isinstance(payload, bytes):
            payload = payload.decode("utf-8")
        if not payload.startswith("{"):
            head = payload.partition(" ")[0]
            return head if "://" in head else None
        d = json.loads(payload)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    url = d.get("url") if isinstance(d, dict) else None
    return url if isinstance(url, str) else None


def payload_slot(payload: str | bytes) -> str | None:
    """The "slot" field of a payload of either format, None without one (then its URL's host is its
    slot, as lua/lib/host.lua `host_of` reads it). Nothing else of the payload is checked."""
    try:
        if isinstance(payload, bytes):
            payload = payload.decode("utf-8")
        if '"slot":' not in payload:
            return None
        rest = payload.partition(" ")[2]
        if rest[:1] == START_MARK:
            rest = rest[1:]
        d = json.loads(payload if payload.startswith("{") else rest)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    slot = d.get("slot") if isinstance(d, dict) else None
    return slot if isinstance(slot, str) else None


@overload
def _field(d: dict[str, Any], name: str, kind: type[T], required: Literal[True]) -> T: ...
@overload
def _field(d: dict[str, Any], name: str, kind: type[T], required: bool = False) -> T | None: ...
@overload
def _field(d: dict[str, Any], name: str, kind: tuple[type[T], type[U]], required: bool = False) -> T | U | None: ...
def _field(
    d: dict[str, Any], name: str, kind: type[T] | tuple[type[T], type[U]], required: bool = False
) -> T | U | None:
    """`d[name]` if it has the JSON type we need; None when absent/null (unless required)."""
    value = d.get(name)
    if value is None:
        if required:
            raise PayloadError(f"field {name!r} is missing")
        return None
    if not isinstance(value, kind):
        raise PayloadError(f"field {name!r} is a {type(value).__name__}, not a {getattr(kind, '__name__', kind)}")
    return value


def _headers(raw: dict[str, Any]) -> dict[str, list[str]]:
    """Header name -> list of strings (a single string is accepted as one value)."""
    headers = {}
    for name, values in raw.items():
        values = [values] if isinstance(values, str) else values
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise PayloadError(f"header {name[:100]!r} must be a string or a list of strings")
        headers[name] = values
    return headers
