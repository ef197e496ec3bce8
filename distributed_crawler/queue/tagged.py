"""Allow-listed objects inside request meta, as tagged JSON (used by codec.py; never pickle).

Only scrapy-playwright's `PageMethod` travels this way: `PageMethod("wait_for_selector", "#main",
timeout=5000)` becomes `{"__dc_type__": "PageMethod", "method": "wait_for_selector",
"args": ["#main"], "kwargs": {"timeout": 5000}}`. Decoding builds a PageMethod only for a method
name in `PAGE_METHOD_ALLOWLIST` and with JSON arguments: a payload in Redis may come from anyone,
and some Page methods touch the node's files (`set_input_files`, `path=` of `screenshot`/`pdf`).
A dict carrying the tag key with any other type name is rejected, so no other object is ever built.
"""

from __future__ import annotations

from functools import cache
from typing import Any

TYPE_TAG = "__dc_type__"

# Page methods a queued request may ask for. Extend in code, not from data.
PAGE_METHOD_ALLOWLIST: frozenset[str] = frozenset(
    {
        "wait_for_selector",
        "wait_for_load_state",
        "wait_for_timeout",
        "wait_for_function",
        "wait_for_url",
        "evaluate",
        "click",
        "dblclick",
        "fill",
        "type",
        "press",
        "hover",
        "focus",
        "check",
        "uncheck",
        "select_option",
        "dispatch_event",
        "set_viewport_size",
        "emulate_media",
        "set_extra_http_headers",
        "reload",
        "go_back",
        "go_forward",
        "bring_to_front",
        "screenshot",
        "pdf",
        "add_script_tag",
        "add_style_tag",
        "content",
        "title",
    }
)
# Keyword arguments that read or write the node's files: never accepted from a payload.
FORBIDDEN_KWARGS = frozenset({"path"})


@cache
def _page_method_class() -> type[Any] | None:
    try:
        from scrapy_playwright.page import PageMethod
    except ImportError:  # scrapy-playwright not installed: nothing to tag
        return None
    return PageMethod


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


def tag_values(value: Any, path: str) -> Any:
    """`value` with every PageMethod replaced by its tagged dict (the same object if none)."""
    if isinstance(value, dict):
        if TYPE_TAG in value:
            raise ValueError(f"{path} uses the reserved key {TYPE_TAG!r}")
        out = {k: tag_values(v, f"{path}[{k!r}]") for k, v in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    if isinstance(value, (list, tuple)):
        items = [tag_values(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value if all(a is b for a, b in zip(items, value)) else items
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


def untag_values(value: Any, path: str = "meta") -> Any:
    """Inverse of `tag_values`; raises ValueError for a tag that is not allow-listed."""
    if isinstance(value, dict):
        if TYPE_TAG not in value:
            return {k: untag_values(v, f"{path}[{k!r}]") for k, v in value.items()}
        kind = value[TYPE_TAG]
        if kind != "PageMethod":
            raise ValueError(f"{path}: tagged type {kind!r} is not allow-listed")
        cls = _page_method_class()
        if cls is None:
            raise ValueError(f"{path}: a PageMethod needs scrapy-playwright, which is not installed")
        method, args, kwargs = value.get("method"), value.get("args", []), value.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise ValueError(f"{path}: malformed PageMethod")
        _check_page_method(method, kwargs, path)
        return cls(method, *untag_values(args, f"{path}.args"), **untag_values(kwargs, f"{path}.kwargs"))
    if isinstance(value, list):
        return [untag_values(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value
