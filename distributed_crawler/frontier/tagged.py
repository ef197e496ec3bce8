"""Allow-listed objects inside request meta and cb_kwargs, as tagged JSON (used by codec.py; never pickle).

What scrapy-redis's pickle carried in `meta` and that projects rely on travels as a dict with a type
tag, and comes back as the same type: `bytes`, `datetime`, `date`, `Decimal`, `tuple`, `set`,
`frozenset` (e.g. `{"__dc_type__": "datetime", "value": "2026-12-03T09:00:00+00:00"}`), plus
scrapy-playwright's `PageMethod`: `PageMethod("wait_for_selector", "#main", timeout=5000)` becomes
`{"__dc_type__": "PageMethod", "method": "wait_for_selector", "args": ["#main"], "kwargs":
{"timeout": 5000}}`. Decoding builds a PageMethod only for a method name in
`PAGE_METHOD_ALLOWLIST` and with JSON arguments: a payload in Redis may come from anyone, and some
Page methods touch the node's files (`set_input_files`, `path=` of `screenshot`/`pdf`). A dict
carrying the tag key with any other type name is rejected, so no other object is ever built;
any other object (a model instance, a Selector, a function) is still refused at encode time.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
from functools import cache
from typing import Any

from distributed_crawler.meta import DOCUMENT_PAGE_METHODS

TYPE_TAG = "__dc_type__"

# Page methods a queued request may ask for: those that act on the current document, and these
# that change the page beyond it. Extend in code, not from data.
PAGE_METHOD_ALLOWLIST: frozenset[str] = DOCUMENT_PAGE_METHODS | {
    "set_viewport_size",
    "emulate_media",
    "set_extra_http_headers",
    "go_back",
    "go_forward",
    "bring_to_front",
    "add_script_tag",
    "add_style_tag",
}
# Keyword arguments that read or write the node's files: never accepted from a payload.
FORBIDDEN_KWARGS = frozenset({"path"})
MAX_SCALAR_CHARS = 100  # a tagged datetime/date/Decimal text longer than this is not one


@cache
def _page_method_class() -> type[Any] | None:
    try:
        from scrapy_playwright.page import PageMethod
    except ImportError:  # scrapy-playwright not installed: nothing to tag
        return None
    page_method: type[Any] = PageMethod  # scrapy-playwright ships no type information
    return page_method


def _check_page_method(method: Any, kwargs: Any, where: str) -> None:
    if not isinstance(method, str):
        raise ValueError(
            f"{where} is a PageMethod with a callable ({getattr(method, '__qualname__', method)!r}); "
            "only a Page method name can travel through Redis"
        )
    if method not in PAGE_METHOD_ALLOWLIST:
        raise ValueError(
            f"{where}: PageMethod {method!r} is not in tagged.PAGE_METHOD_ALLOWLIST "
            f"({', '.join(sorted(PAGE_METHOD_ALLOWLIST))})"
        )
    if not isinstance(kwargs, dict) or FORBIDDEN_KWARGS & set(kwargs):
        raise ValueError(f"{where}: PageMethod {method!r} must not get a file path argument")


def tag_values(value: object, path: str) -> object:
    """`value` with every PageMethod replaced by its tagged dict (the same object if none). Any value
    a spider put in meta comes in (`object`); what cannot be tagged goes out as it came."""
    if isinstance(value, dict):
        if TYPE_TAG in value:
            raise ValueError(f"{path} uses the reserved key {TYPE_TAG!r}")
        out = {k: tag_values(v, f"{path}[{k!r}]") for k, v in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    if isinstance(value, list):
        items = [tag_values(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value if all(a is b for a, b in zip(items, value)) else items
    if isinstance(value, tuple) or isinstance(value, (set, frozenset)) and type(value) in (set, frozenset):
        kind = "tuple" if isinstance(value, tuple) else type(value).__name__
        return {TYPE_TAG: kind, "items": [tag_values(v, f"{path}[{i}]") for i, v in enumerate(value)]}
    scalar = _tag_scalar(value)
    if scalar is not None:
        return scalar
    cls = _page_method_class()
    if cls is not None and isinstance(value, cls):
        _check_page_method(value.method, value.kwargs, path)
        return {
            TYPE_TAG: "PageMethod",
            "method": value.method,
            "args": tag_values(list(value.args), f"{path}.args"),
            "kwargs": tag_values(dict(value.kwargs), f"{path}.kwargs"),
        }
    return value


def _tag_scalar(value: Any) -> dict[str, Any] | None:
    """The tagged dict of a bytes/datetime/date/Decimal value; None for anything else."""
    if type(value) is bytes:
        return {TYPE_TAG: "bytes", "value": base64.b64encode(value).decode("ascii")}
    if type(value) is datetime.datetime:  # before date: a datetime is a date
        return {TYPE_TAG: "datetime", "value": value.isoformat()}
    if type(value) is datetime.date:
        return {TYPE_TAG: "date", "value": value.isoformat()}
    if type(value) is decimal.Decimal:
        return {TYPE_TAG: "decimal", "value": str(value)}
    return None


_SCALAR_PARSERS: dict[str, Any] = {
    "bytes": lambda text: base64.b64decode(text, validate=True),
    "datetime": datetime.datetime.fromisoformat,
    "date": datetime.date.fromisoformat,
    "decimal": decimal.Decimal,
}
_CONTAINERS: dict[str, type] = {"tuple": tuple, "set": set, "frozenset": frozenset}


def _untag_simple(kind: str, value: dict[str, Any], path: str) -> object:
    """A tagged scalar or container back to its type; ValueError (with `path`) when malformed."""
    if kind in _CONTAINERS:
        items = value.get("items")
        if not isinstance(items, list):
            raise ValueError(f"{path}: malformed tagged {kind}")
        try:
            return _CONTAINERS[kind](untag_values(v, f"{path}[{i}]") for i, v in enumerate(items))
        except TypeError:  # an unhashable member of a set
            raise ValueError(f"{path}: a tagged {kind} with an unhashable member") from None
    text = value.get("value")
    limit = None if kind == "bytes" else MAX_SCALAR_CHARS
    if not isinstance(text, str) or limit is not None and len(text) > limit:
        raise ValueError(f"{path}: malformed tagged {kind}")
    try:
        return _SCALAR_PARSERS[kind](text)
    except (ValueError, binascii.Error, decimal.InvalidOperation):
        raise ValueError(f"{path}: malformed tagged {kind} {text[:40]!r}") from None


def untag_values(value: object, path: str = "meta") -> object:
    """Inverse of `tag_values`; raises ValueError for a tag that is not allow-listed."""
    if isinstance(value, dict):
        if TYPE_TAG not in value:
            return {k: untag_values(v, f"{path}[{k!r}]") for k, v in value.items()}
        kind = value[TYPE_TAG]
        if isinstance(kind, str) and (kind in _CONTAINERS or kind in _SCALAR_PARSERS):
            return _untag_simple(kind, value, path)
        if kind != "PageMethod":
            raise ValueError(f"{path}: tagged type {kind!r} is not allow-listed")
        cls = _page_method_class()
        if cls is None:
            raise ValueError(f"{path}: a PageMethod needs scrapy-playwright, which is not installed")
        method, args, kwargs = value.get("method"), value.get("args", []), value.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise ValueError(f"{path}: malformed PageMethod")
        _check_page_method(method, kwargs, path)
        args_back, kwargs_back = untag_values(args, f"{path}.args"), untag_values(kwargs, f"{path}.kwargs")
        assert isinstance(args_back, list) and isinstance(kwargs_back, dict)  # a list and a dict untag as such
        return cls(method, *args_back, **kwargs_back)
    if isinstance(value, list):
        return [untag_values(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value
