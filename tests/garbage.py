"""Garbage for every Redis key the crawler reads: what a stray `redis-cli`, an old version or a
scrapy-redis pickle could leave there. Shared by the CLI tests and the chaos test.

- `garbage_values(kind)` yields malformed values of one kind (bytes), `KINDS` lists the kinds;
- `queue_members(token)` yields malformed queue members, each carrying `token` in its first bytes
  (so a dead letter's capped payload preview can be traced back to what was written);
- `write_all_garbage(client, spider)` writes every kind into every key at once (plus wrong-type
  keys where `wrong_types=True`) and returns what it wrote, by key.

A pickle here, if ever unpickled, runs `touch MARKER`: whoever reads these must never unpickle.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

MB = 1024 * 1024
KINDS = (
    "pickle",
    "invalid_utf8",
    "binary",
    "truncated_json",
    "non_object_json",
    "no_envelope",
    "bad_envelope",
    "huge",
    "bad_number",
    "wrong_field_type",
)
# Zset scores Redis accepts that no writer of ours produces (NaN is refused by ZADD itself).
BAD_SCORES = (float("inf"), float("-inf"), 1e308, -1e308)
BAD_NUMBERS = (b"nan", b"NaN", b"inf", b"-inf", b"1e999", b"-1e999", b"12abc", b"", b"\xff\xfe", b"9" * 400)


class Touch:
    """Unpickling this runs `touch <marker>` (os.system): the proof that nothing unpickles."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def pickle_payload(marker: str | Path, token: str = "") -> bytes:
    return pickle.dumps((Touch(str(marker)), token), protocol=2)


def garbage_values(kind: str, marker: str | Path = "/tmp/dc-garbage-unpickled", token: str = "G") -> Iterator[bytes]:
    """Malformed values of one kind; `token` is embedded near the start where the format allows."""
    t = token.encode()
    if kind == "pickle":
        yield pickle_payload(marker, token)
        yield b"\x80\x04" + t + b"\x95garbage-pickle-frame"
    elif kind == "invalid_utf8":
        yield b"\xff\xfe" + t + b"\xc3\x28\xa0\xa1 not utf-8"
    elif kind == "binary":
        yield b"\x00" + t + bytes(range(256))
    elif kind == "truncated_json":
        yield b'{"url": "http://127.0.0.1:9/fuzz/' + t + b'/truncated", "meta": {"a": '
    elif kind == "non_object_json":
        yield from (b"[1, 2, 3]", b"null", b"42", b'"a string"', b"true")
        yield b'["' + t + b'", {"url": "http://127.0.0.1:9/fuzz/list"}]'
    elif kind == "no_envelope":
        yield b'{"url": "http://127.0.0.1:9/fuzz/' + t + b'/no-envelope", "callback": "parse"}'
        yield b"just text " + t
    elif kind == "bad_envelope":
        body = b'{"url": "http://127.0.0.1:9/fuzz/' + t + b'/bad-envelope"}'
        for head in (
            b"x:y:",
            b"0:nan:",
            b"0:1e999:",
            b"0:-inf:",
            b"99999999999999999999999:0:",
            b"-1:0:",
            b"0::",
            b"0:7",
        ):
            yield head + body
    elif kind == "huge":
        yield t + b" " + b"A" * MB
        yield b'0:0:{"url": "http://127.0.0.1:9/fuzz/' + t + b"/huge?" + b"q" * MB + b'"}'
    elif kind == "bad_number":
        yield from BAD_NUMBERS
    elif kind == "wrong_field_type":
        yield b'{"url": 12345, "meta": [1, 2], "token": "' + t + b'"}'
        yield b'{"url": "http://127.0.0.1:9/fuzz/' + t + b'/meta-list", "meta": ["x"], "priority": "high"}'
        yield b'{"url": ["http://127.0.0.1:9/fuzz/' + t + b'"], "headers": "nope", "cb_kwargs": 3}'
        yield b'{"url": "http://127.0.0.1:9/fuzz/' + t + b'/no-callback", "callback": "no_such_callback_' + t + b'"}'
        yield b'{"url": "http://127.0.0.1:9/fuzz/' + t + b'/private", "callback": "_set_crawler"}'
        yield b'{"url": "http://127.0.0.1:9/fuzz/' + t + b'/dunder", "callback": "__init__", "errback": "__class__"}'
    else:
        raise ValueError(f"unknown garbage kind {kind!r}")


def all_values(marker: str | Path = "/tmp/dc-garbage-unpickled", token: str = "G") -> Iterator[tuple[str, bytes]]:
    for kind in KINDS:
        for value in garbage_values(kind, marker, token):
            yield kind, value


def queue_members(marker: str | Path, token: str) -> Iterator[tuple[str, bytes]]:
    """Malformed queue members: raw garbage, and garbage inside a well-formed `0:0:` envelope."""
    for kind, value in all_values(marker, token):
        yield kind, value
        if kind in ("pickle", "binary", "invalid_utf8", "truncated_json", "non_object_json", "wrong_field_type"):
            yield f"{kind}_enveloped", b"0:0:" + value
    yield (
        "foreign_class",
        b'0:0:{"v": 1, "class": "os.system", "url": "http://127.0.0.1:9/fuzz/' + token.encode() + b'"}',
    )


def json_entry(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def write_all_garbage(
    client: redis.Redis,
    spider: str = "news",
    marker: str | Path = "/tmp/dc-garbage-unpickled",
    node_ids: tuple[str, ...] = (),
    now: float | None = None,
    token: str = "G",
) -> dict[str, int]:
    """Every kind of garbage in every key of `spider` at once (types stay right). Returns key -> count.

    `node_ids`: real nodes whose hashes and snapshots get garbage fields too.
    """
    now = now if now is not None else float(client.time()[0])
    s = "{" + spider + "}"
    written: dict[str, int] = {}

    def count(key: str, n: int = 1) -> None:
        written[key] = written.get(key, 0) + n

    values = list(all_values(marker, token))
    # start URLs (list), failed and alerts (lists of JSON)
    for key in (f"{spider}:start_urls", f"{s}:failed", f"{s}:alerts"):
        client.lpush(key, *[v for _, v in values])
        client.lpush(key, json_entry(url=5, reason=["x"], time="yesterday", kind={"a": 1}, node=None, attempts="many"))
        count(key, len(values) + 1)
    # queue, leases, retries: zsets of members; scores sane and insane
    members = list(queue_members(marker, token))
    for key, score_base in ((f"{s}:requests", 0.0), (f"{s}:processing", now - 100), (f"{s}:delayed", now - 1)):
        mapping = {m: score_base + i for i, (_, m) in enumerate(members)}
        for i, score in enumerate(BAD_SCORES):
            mapping[b"0:0:" + f"bad-score-{i}-{token}".encode()] = score
        client.zadd(key, mapping)
        count(key, len(mapping))
    client.set(f"{s}:seq", b"nan-" + token.encode())
    count(f"{s}:seq")
    # dedup filter: a bitmap meta hash with nonsense, and a nonsense piece
    client.hset(
        f"{s}:dupefilter",
        mapping={
            "layers": b"nan",
            "capacity": b"\xff\xfe",
            "error_rate": b"inf",
            "L0:cap": b"-1",
            "L0:n": b"1e999",
            "L0:m": pickle_payload(marker, token),
            "L0:pieces": b"99999999999999999999",
            f"junk-{token}": b"\x00\x01",
        },
    )
    client.set(f"{s}:dupefilter:0:0", b"\xff" * 64)
    client.set(f"{s}:dupefilter:9:9", pickle_payload(marker, token))
    count(f"{s}:dupefilter", 8)
    # nodes: zset of ids (binary ids, insane scores), hashes, last snapshots, alerted
    ids = [
        b"\xff\xfe" + token.encode(),
        pickle_payload(marker, token)[:40],
        b"n" * 300,
        b"",
        b"x:{y}:%(spider)s",
        *[n.encode() for n in node_ids],
    ]
    client.zadd(f"{s}:nodes", {ids[0]: now, ids[1]: float("inf"), ids[2]: 1e308, ids[3]: now, ids[4]: float("-inf")})
    count(f"{s}:nodes", 5)
    bad_fields = {
        "rate": b"nan",
        "pages": b"inf",
        "items": b"1e999",
        "errors": b"-inf",
        "leases": b"\xff",
        "rss": b"9" * 400,
        "started": b"garbage",
        "last_seen": b"-1e308",
        "interval": b"0",
        "state": b"\xff\xfe",
        "host": pickle_payload(marker, token),
        "report": b"[1, 2",
        "in_flight": b"NaN",
        "pid": b"12abc",
        "browser_pages": b"",
    }
    for node in ids:
        key = f"{s}:node:".encode() + node
        client.hset(key, mapping=bad_fields)
        count(f"{s}:node:*")
    last = {node: v for node, (_, v) in zip(ids, values)}
    last[ids[0]] = b'{"rate": "fast", "pages": [1], "state": 7, "report": "[nope", "interval": "nan"}'
    for node in node_ids:
        last[node.encode()] = b'{"rate": NaN, "pages": Infinity, "items": -Infinity, "report": [1, 2]}'
    client.hset(f"{s}:nodes:last", mapping=last)
    client.hset(f"{s}:nodes:alerted", mapping={n: v for n, (_, v) in zip(ids, values[3:])})
    count(f"{s}:nodes:last", len(last))
    count(f"{s}:nodes:alerted", len(ids))
    # cluster totals and the per-minute history
    client.hset(f"{s}:stats", mapping={f"junk-{i}": v for i, v in enumerate(BAD_NUMBERS)})
    client.hset(f"{s}:stats", mapping={"pages": b"nan", "items": b"\xff", "errors": b"1e999"})
    minute = int(now // 60)
    client.hset(
        f"{s}:minutes",
        mapping={
            f"p:{minute}": b"inf",
            f"i:{minute}": b"nan",
            f"e:{minute}": b"\xff",
            "p:nan": b"1",
            "p:" + "9" * 30: b"5",
            f"q-{token}": pickle_payload(marker, token),
            "p:-1": b"-1e999",
        },
    )
    count(f"{s}:stats", 3 + len(BAD_NUMBERS))
    count(f"{s}:minutes", 7)
    # the proxy pool (zset) and its dead hash, the rate keys (strings)
    client.zadd(
        "dc:proxies",
        {
            b"\xff\xfe" + token.encode(): float("inf"),
            pickle_payload(marker, token): 1e308,
            b"not a url " + token.encode(): float("-inf"),
            b"http://" + b"h" * 2000 + b":1": 5,
        },
    )
    client.hset(
        "dc:proxies:dead",
        mapping={
            b"\xff\xfe": b"\x00",
            b"http://dead.invalid:1": b'{"score": "low", "since": "yesterday", "error": [1]}',
            b"http://dead2.invalid:1": b"[1, 2]",
            b"http://dead3.invalid:1": b'{"score": NaN, "since": Infinity}',
            pickle_payload(marker, token): pickle_payload(marker, token),
        },
    )
    count("dc:proxies", 4)
    count("dc:proxies:dead", 5)
    for domain, value in (("127.0.0.1", b"nan"), ("example.com", b"inf"), ("fuzz.invalid", b"\xff\xfe")):
        client.set(f"dc:rate:{domain}", value, ex=30)
        count("dc:rate:*")
    return written


# Keys of the wrong Redis type, and the key each one replaces (the status readers must name them).
def write_wrong_types(client: redis.Redis, spider: str = "news") -> list[str]:
    s = "{" + spider + "}"
    keys = [f"{s}:alerts", f"{s}:minutes", f"{s}:stats", f"{s}:nodes", f"{s}:failed", f"{s}:delayed", "dc:proxies:dead"]
    client.delete(*keys)
    client.set(f"{s}:alerts", "a string where a list belongs")
    client.sadd(f"{s}:minutes", "a", "set")
    client.rpush(f"{s}:stats", "a list")
    client.set(f"{s}:nodes", "a string")
    client.hset(f"{s}:failed", "a", "hash")
    client.set(f"{s}:delayed", "a string")
    client.rpush("dc:proxies:dead", "a list")
    return keys
