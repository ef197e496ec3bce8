"""Redis replies parsed into their typed shape: a reply is untrusted input (a key someone else wrote,
a script of another version), so a value of the wrong shape raises one ValueError naming the call
instead of travelling on as `Any`."""

from __future__ import annotations

from collections.abc import Sequence


def reply_int(value: object, what: str) -> int:
    """An integer reply (redis-py gives int; a Lua number in a table may come as bytes or str)."""
    if isinstance(value, bool) or not isinstance(value, (int, bytes, str)):
        raise ValueError(f"{what}: expected an integer reply, got {type(value).__name__}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{what}: expected an integer reply, got {value!r:.40}") from None


def reply_float(value: object, what: str) -> float:
    """A number reply (Lua returns non-integers as strings)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, bytes, str)):
        raise ValueError(f"{what}: expected a number reply, got {type(value).__name__}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{what}: expected a number reply, got {value!r:.40}") from None
    return number


def reply_list(value: object, what: str, length: int = 0) -> list[object]:
    """An array reply, of at least `length` elements."""
    if not isinstance(value, (list, tuple)) or len(value) < length:
        raise ValueError(f"{what}: expected an array reply of {length}+ elements, got {value!r:.60}")
    return list(value)


def reply_ints(value: object, what: str, length: int = 0) -> list[int]:
    """An array reply of integers (at least `length`)."""
    return [reply_int(item, what) for item in reply_list(value, what, length)]


def reply_bytes(value: object, what: str) -> bytes:
    """A bulk string reply (a sync or asyncio client without decode_responses gives bytes)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise ValueError(f"{what}: expected a string reply, got {type(value).__name__}")


def reply_texts(values: Sequence[object], what: str) -> list[str]:
    """Bulk strings as str (invalid UTF-8 replaced)."""
    return [reply_bytes(v, what).decode("utf-8", "replace") for v in values]
