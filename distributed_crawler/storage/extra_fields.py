"""An item's fields that are not `items` columns, as the JSON object stored in the `data` column.

A project moved from scrapy-redis yields its own fields (`headline`, `price`, `tags`, ...): none is
dropped. Values JSON cannot hold are converted: datetimes, dates and times to ISO 8601 text, bytes
to text (UTF-8, undecodable bytes replaced), sets to sorted lists, tuples to lists, Decimals and
other objects to their text, NaN and infinities to null, non-text keys to text. A `data` object
over MAX_DATA_CHARS is cut, largest fields first: each cut field keeps the start of its JSON text
(as a string) and is named in `"_truncated"`; the row is stored either way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from datetime import date, datetime, time
from typing import Any, TypeAlias

MAX_DATA_CHARS = 1_000_000  # of the `data` JSON text: more is not metadata, and MariaDB's packet has a cap
TRUNCATED = "_truncated"

JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"


def plain(value: object, depth: int = 0) -> JsonValue:
    """*value* as JSON types only (see the module docstring); NUL characters removed (PostgreSQL)."""
    if depth > 50:  # a cyclic or absurdly deep structure: its text
        return str(value)[:1000].replace("\x00", "")
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace").replace("\x00", "")
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(plain(k, depth + 1)): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        items = [plain(v, depth + 1) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, list | tuple):
        return [plain(v, depth + 1) for v in value]
    return str(value).replace("\x00", "")


def data_json(fields: Iterable[tuple[str, Any]], max_chars: int = MAX_DATA_CHARS) -> str | None:
    """The JSON object of *fields* (None when there are none), cut to *max_chars* (module docstring)."""
    values = {str(name): plain(value) for name, value in fields}
    if not values:
        return None
    text = json.dumps(values, ensure_ascii=False, sort_keys=True)
    if len(text) <= max_chars:
        return text
    texts = {k: json.dumps(v, ensure_ascii=False) for k, v in values.items()}
    cut: list[str] = []
    for name in sorted(texts, key=lambda k: len(texts[k]), reverse=True):
        cut.append(name)
        empty = {**values, **dict.fromkeys(cut, ""), TRUNCATED: sorted(cut)}
        share = (max_chars - len(json.dumps(empty, ensure_ascii=False))) // len(cut) - 8  # room for escapes
        if share >= 0 and all(len(texts[k]) > share for k in cut):
            # every cut field gets an equal share of what the others leave (cut on escape-free text)
            kept = {k: texts[k][: share // 2 if _escapes(texts[k][:share]) else share] for k in cut}
            return json.dumps({**values, **kept, TRUNCATED: sorted(cut)}, ensure_ascii=False, sort_keys=True)
    return json.dumps({TRUNCATED: sorted(cut)})  # not even the field names fit


def _escapes(text: str) -> bool:
    """The text would grow when stored as a JSON string (quotes, backslashes, control characters)."""
    return any(c in '"\\' or c < " " for c in text)
