"""Every Lua script against garbage in every key it reads, on a real redis-server.

Anyone can write to Redis (a manual `redis-cli`, an older version, scrapy-redis's pickles): a
script must return normally whatever a value holds, and put the garbage where its header says
(dead-lettered, skipped, reset). Only a key of the wrong Redis type may raise, and then WRONGTYPE.
Expired leases are simulated by writing old scores: nothing here sleeps.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from typing import Any

import pytest
import redis

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.connection.lua import lua_source
from distributed_crawler.dedup.bloom import layer_plan, piece_key
from distributed_crawler.frontier.base import Frontier
from distributed_crawler.frontier.codec import payload_url
from distributed_crawler.frontier.envelope import MAX_PRIORITY, split_member
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from tests.frontiers import pop as lease_flat

Q, PROC, DELAYED, SEQ, FAILED = "{g}:requests", "{g}:processing", "{g}:delayed", "{g}:seq", "{g}:failed"
META = "{g}:dupefilter"
KEYS_G = SpiderKeys(
    "g",
    "g:start_urls",
    Q,
    PROC,
    DELAYED,
    META,
    FAILED,
    SEQ,
    "{g}:stats",
    "{g}:nodes",
    "{g}:node:%(node)s",
    "{g}:doorbell",
)
SPAN = 2**36
YEAR = 365 * 86400

GARBAGE: dict[str, bytes] = {
    "pickle": b"\x80\x04\x95\x1c\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x03url\x94\x8c\x08http://x\x94s.",
    "invalid_utf8": b"\xff\xfe\xfd\xc3(\xe2\x82abc",
    "binary_nul": b"\x00\x01\x02\x00binary\x00",
    "truncated_json": b'{"url": "http://trunc',
    "non_object_json": b"[1, 2, 3]",
    "no_envelope": b'{"url": "http://no-envelope"}',
    "non_numeric_envelope": b"x:y:{}",
    "huge_deliveries": b"99999999999999999999:1:{}",
    "huge_priority": b"1:99999999999999999999:{}",
    "deliveries_only": b'5:{"url": "http://d"}',
    "nan": b"nan",
    "inf": b"inf",
    "megabyte": b"\x80garbage" * (1 << 17),
    "empty": b"",
}
KINDS = list(GARBAGE)


def good(url: str, priority: int = 0, deliveries: int = 0) -> bytes:
    return f"{deliveries}:{priority}:{json.dumps({'url': url})}".encode()


def script(client: redis.Redis, name: str) -> Any:
    """A raw script: for the ones without a facade and for garbage in KEYS/ARGV."""
    return client.register_script(lua_source(name))


def queue(client: redis.Redis, qtype: str = "priority") -> Frontier:
    return frontier_for_mode(client, KEYS_G, qtype)


def server_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def preview(raw: bytes) -> str:
    return raw[:300].decode("utf-8", "replace")


def dead_letters(client: redis.Redis) -> list[dict]:
    return [json.loads(raw) for raw in client.lrange(FAILED, 0, -1)]  # strict: valid UTF-8 JSON


def wrong_type(client: redis.Redis, key: str) -> None:
    client.delete(key)
    client.xadd(key, {"a": "b"})  # a stream: a type none of the scripts uses


def assert_wrongtype(call: Callable[[], object]) -> None:
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        call()


# --- reclaim.lua ---------------------------------------------------------------------------


def reclaim(client: redis.Redis, qtype: str = "priority", max_deliveries: int = 5, limit: int = 1000) -> list[int]:
    return list(run_sync(queue(client, qtype).reclaim(max_deliveries, limit, failed_cap=1000, node_id="n1")))


def queue_members(client: redis.Redis, qtype: str) -> list[bytes]:
    return client.zrange(Q, 0, -1) if qtype == "priority" else client.lrange(Q, 0, -1)


@pytest.mark.parametrize("qtype", ["priority", "fifo"])
@pytest.mark.parametrize("kind", KINDS)
def test_reclaim_dead_letters_garbage_and_requeues_the_rest(redis_client: redis.Redis, kind: str, qtype: str) -> None:
    raw = GARBAGE[kind]
    redis_client.zadd(PROC, {good("a", 2, 1): 1, raw: 2, good("b", 0, 1): 3})
    assert reclaim(redis_client, qtype) == [2, 1]
    assert redis_client.zcard(PROC) == 0
    assert sorted(payload_url(split_member(m).payload) for m in queue_members(redis_client, qtype)) == ["a", "b"]
    (entry,) = dead_letters(redis_client)
    assert entry["reason"].startswith("not a queue entry")
    assert entry["source"] == "reclaim" and entry["url"] == "" and entry["node"] == "n1"
    assert entry["payload"] == preview(raw)
    assert entry["attempts"] == 0 and isinstance(entry["time"], float)


def test_reclaim_many_garbage_members_in_one_call_with_utf8_made_valid(redis_client: redis.Redis) -> None:
    rng = random.Random(12)
    members = {bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))) for _ in range(300)}
    members = {m for m in members if not split_ok(m)}
    # truncated and broken multi-byte sequences of every length, beside valid ones
    members |= {
        b"\xe2\x82",
        b"\xe2\x82A",
        b"\xf0\x9f\x98",
        b"\xf0\x9f\x98\x80ok",
        b"\xed\xa0\x80",
        b"\xc0\xaf",
        b"\xf4\x90\x80\x80",
        b"\xe0\x80\x80",
        "héllo wörld ✓".encode(),
        b"x" * 299 + "é".encode(),
    }
    redis_client.zadd(PROC, dict.fromkeys(members, 0))
    requeued, dead = reclaim(redis_client)
    assert (requeued, dead) == (0, len(members))
    assert sorted(e["payload"] for e in dead_letters(redis_client)) == sorted(preview(m) for m in members)


def split_ok(member: bytes) -> bool:
    try:
        d, p, _ = member.split(b":", 2)
        return d.isdigit() and len(d) <= 9 and p.lstrip(b"-").isdigit()
    except ValueError:
        return False


def test_reclaim_poison_with_an_undecodable_payload_is_capped_and_valid_utf8(redis_client: redis.Redis) -> None:
    payload = b"\x80\x04pickle\xff" * 1000
    redis_client.zadd(PROC, {b"5:3:" + payload: 1})
    assert reclaim(redis_client, max_deliveries=5) == [0, 1]
    (entry,) = dead_letters(redis_client)
    assert entry["reason"].startswith("lease expired 5 times") and entry["attempts"] == 5 and entry["priority"] == 3
    assert entry["payload"] == preview(payload) and entry["url"] == ""


def test_reclaim_poison_keeps_a_full_json_payload_and_a_string_url_only(redis_client: redis.Redis) -> None:
    big = json.dumps({"url": "http://big", "body": "ü" * 5000})
    odd = json.dumps({"url": {"not": "a string"}})
    redis_client.zadd(PROC, {f"5:0:{big}".encode(): 1, f"5:1:{odd}".encode(): 2})
    assert reclaim(redis_client, max_deliveries=5) == [0, 2]
    by_priority = {e["priority"]: e for e in dead_letters(redis_client)}
    assert by_priority[0]["payload"] == big and by_priority[0]["url"] == "http://big"
    assert by_priority[1]["payload"] == odd and by_priority[1]["url"] == ""


def test_reclaim_dead_letters_leases_that_would_never_expire(redis_client: redis.Redis) -> None:
    now = server_now(redis_client)
    ours_soon, ours_late = good("soon", 0, 1), good("late", 0, 1)
    redis_client.zadd(
        PROC,
        {
            good("forever", 4, 2): math.inf,
            b"\x80garbage-forever": math.inf,
            good("far", 0, 1): now + 2 * YEAR,
            ours_soon: now + 60,
            ours_late: now + 300 * 86400,
            good("past", 1, 1): -math.inf,
        },
    )
    assert reclaim(redis_client) == [1, 3]
    assert set(redis_client.zrange(PROC, 0, -1)) == {ours_soon, ours_late}  # legitimate leases untouched
    assert [payload_url(split_member(m).payload) for m in redis_client.zrange(Q, 0, -1)] == ["past"]
    entries = {e["url"]: e for e in dead_letters(redis_client)}
    assert set(entries) == {"forever", "far", ""}
    assert "more than a year ahead" in entries["forever"]["reason"]
    assert json.loads(entries["forever"]["payload"]) == {"url": "forever"} and entries["forever"]["priority"] == 4
    assert entries[""]["reason"].startswith("not a queue entry") and "more than a year ahead" in entries[""]["reason"]
    assert entries[""]["payload"] == preview(b"\x80garbage-forever")


def test_reclaim_limit_counts_far_future_leases_too(redis_client: redis.Redis) -> None:
    redis_client.zadd(
        PROC, {good(f"e{i}", 0, 1): 1 for i in range(3)} | {good(f"f{i}", 0, 1): math.inf for i in range(3)}
    )
    assert reclaim(redis_client, limit=4) == [3, 1]
    assert reclaim(redis_client, limit=4) == [0, 2]


@pytest.mark.parametrize(
    "value", [b"abc", b"nan", b"1.5", b"99999999999999999999", b"9223372036854775807", b"\xff\x00"]
)
@pytest.mark.parametrize("name", ["reclaim", "release", "pop", "enqueue"])
def test_a_garbage_sequence_counter_is_reset(redis_client: redis.Redis, name: str, value: bytes) -> None:
    redis_client.set(SEQ, value)
    if name == "reclaim":
        redis_client.zadd(PROC, {good("a", 1, 1): 1})
        assert reclaim(redis_client) == [1, 0]
    elif name == "release":
        redis_client.zadd(PROC, {good("a", 1, 1): server_now(redis_client) + 60})
        assert run_sync(queue(redis_client).release([good("a", 1, 1)])) == 1
    elif name == "pop":
        redis_client.zadd(DELAYED, {good("a", 1): 1})
        assert pop(redis_client, "priority", 0) == []
    else:
        assert enqueue_set(redis_client, [good("a", 1)]) == [0, 1]
    assert redis_client.get(SEQ) == b"1"
    ((member, score),) = redis_client.zrange(Q, 0, -1, withscores=True)
    assert split_member(member).priority == 1 and abs(score) in (SPAN - 1, SPAN + 1)  # seq 1 in priority 1


@pytest.mark.parametrize("name", ["reclaim", "release", "pop", "enqueue"])
def test_a_sequence_counter_of_the_wrong_type_raises_wrongtype(redis_client: redis.Redis, name: str) -> None:
    wrong_type(redis_client, SEQ)
    if name == "reclaim":
        redis_client.zadd(PROC, {good("a", 1, 1): 1})
        assert_wrongtype(lambda: reclaim(redis_client))
    elif name == "release":
        redis_client.zadd(PROC, {good("a", 1, 1): server_now(redis_client) + 60})
        assert_wrongtype(lambda: run_sync(queue(redis_client).release([good("a", 1, 1)])))
    elif name == "pop":
        redis_client.zadd(DELAYED, {good("a", 1): 1})
        assert_wrongtype(lambda: pop(redis_client, "priority", 1))
    else:
        assert_wrongtype(lambda: enqueue_set(redis_client, [good("a", 1)]))
    assert redis_client.type(SEQ) == b"stream"  # never overwritten


@pytest.mark.parametrize("key", [PROC, Q, FAILED])
def test_reclaim_raises_wrongtype_for_a_key_of_another_type(redis_client: redis.Redis, key: str) -> None:
    redis_client.zadd(PROC, {good("a", 0, 1): 1, good("b", 0, 9): 1, b"garbage": 1})
    wrong_type(redis_client, key)
    assert_wrongtype(lambda: reclaim(redis_client))


# --- pop.lua -------------------------------------------------------------------------------


def pop(client: redis.Redis, qtype: str, n: int, lease: float = 60) -> list[bytes]:
    return lease_flat(queue(client, qtype), n, lease, due_batch=100)


def push_raw(client: redis.Redis, qtype: str, members: list[bytes]) -> None:
    if qtype == "priority":
        client.zadd(Q, {m: i for i, m in enumerate(members)})
    else:
        for m in members:
            client.lpush(Q, m)


@pytest.mark.parametrize("qtype", ["priority", "fifo", "lifo"])
@pytest.mark.parametrize("kind", KINDS)
def test_pop_leases_garbage_in_the_queue_as_is(redis_client: redis.Redis, kind: str, qtype: str) -> None:
    raw = GARBAGE[kind]
    push_raw(redis_client, qtype, [good("a"), raw, good("b")])
    leases = pop(redis_client, qtype, 10)
    assert len(leases) == 3 and redis_client.exists(Q) == 0
    assert set(leases) == set(redis_client.zrange(PROC, 0, -1))
    assert b"1:0:" + raw in leases
    ours = [split_member(lease) for lease in leases if lease != b"1:0:" + raw]
    assert sorted(payload_url(e.payload) for e in ours) == ["a", "b"] and {e.deliveries for e in ours} == {1}


def test_pop_ignores_queue_scores_of_inf(redis_client: redis.Redis) -> None:
    redis_client.zadd(Q, {good("a"): math.inf, b"garbage": -math.inf, good("b"): 0})
    assert len(pop(redis_client, "priority", 10)) == 3


@pytest.mark.parametrize("qtype", ["priority", "fifo"])
@pytest.mark.parametrize("kind", KINDS)
def test_pop_moves_garbage_due_in_delayed_to_the_queue_and_leases_it(
    redis_client: redis.Redis, kind: str, qtype: str
) -> None:
    raw = GARBAGE[kind]
    redis_client.zadd(DELAYED, {raw: 1, good("retry", 3): 2, good("later"): server_now(redis_client) + 3600})
    leases = pop(redis_client, qtype, 10)
    assert b"1:0:" + raw in leases and len(leases) == 2
    assert redis_client.zrange(DELAYED, 0, -1) == [good("later")]


def test_pop_moves_delayed_entries_due_never_or_at_minus_inf(redis_client: redis.Redis) -> None:
    redis_client.zadd(
        DELAYED, {b"garbage": math.inf, good("a"): -math.inf, good("b"): server_now(redis_client) + 2 * YEAR}
    )
    leases = pop(redis_client, "priority", 10)
    assert len(leases) == 3 and redis_client.exists(DELAYED) == 0


def test_pop_clamps_a_huge_priority_from_delayed_to_a_finite_score(redis_client: redis.Redis) -> None:
    huge_up, huge_down = b"0:" + b"9" * 400 + b":{}", b"0:-" + b"9" * 400 + b":{}"
    redis_client.zadd(DELAYED, {huge_up: 1, huge_down: 2})
    redis_client.zadd(Q, {good("normal"): 0})
    first = pop(redis_client, "priority", 1)
    assert first == [b"1:0:" + huge_up]  # clamped to the top priority, leased for dead-lettering
    scores = dict(redis_client.zrange(Q, 0, -1, withscores=True))
    assert math.isfinite(scores[huge_down]) and scores[huge_down] >= MAX_PRIORITY * SPAN
    assert pop(redis_client, "priority", 2) == [good("normal", 0, 1), b"1:0:" + huge_down]


@pytest.mark.parametrize("key", [Q, PROC, DELAYED])
def test_pop_raises_wrongtype_for_a_key_of_another_type(redis_client: redis.Redis, key: str) -> None:
    redis_client.zadd(DELAYED, {good("a"): 1})
    wrong_type(redis_client, key)
    assert_wrongtype(lambda: pop(redis_client, "priority", 1))


# --- release.lua / renew.lua ---------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_release_skips_garbage_leases_and_releases_the_rest(redis_client: redis.Redis, kind: str) -> None:
    raw = GARBAGE[kind]
    deadline = server_now(redis_client) + 60
    redis_client.zadd(PROC, {raw: deadline, good("a", 0, 2): deadline})
    released = run_sync(queue(redis_client).release([raw, good("a", 0, 2)]))
    assert released == 1
    assert redis_client.zrange(PROC, 0, -1) == [raw]  # left for reclaim.lua to dead-letter
    assert redis_client.zrange(Q, 0, -1) == [good("a", 0, 1)]


@pytest.mark.parametrize("kind", KINDS)
def test_renew_leaves_garbage_alone(redis_client: redis.Redis, kind: str) -> None:
    raw = GARBAGE[kind]
    redis_client.zadd(PROC, {raw: math.inf, good("a", 0, 1): 1, b"other": -math.inf})
    renewed = run_sync(queue(redis_client).renew([raw, good("a", 0, 1), b"absent"], 60))
    assert renewed == 1
    assert redis_client.zscore(PROC, raw) == math.inf and redis_client.zscore(PROC, good("a", 0, 1)) > 1


def test_release_and_renew_raise_wrongtype(redis_client: redis.Redis) -> None:
    wrong_type(redis_client, PROC)
    assert_wrongtype(lambda: run_sync(queue(redis_client, "fifo").release([good("a", 0, 1)])))
    assert_wrongtype(lambda: run_sync(queue(redis_client).renew([good("a", 0, 1)], 60)))


# --- enqueue.lua / bloom_grow.lua ----------------------------------------------------------


def enqueue_set(client: redis.Redis, members: list[bytes], qtype: str = "priority") -> list[int]:
    argv: list = [qtype, len(members), "", "set", 0, "push"]
    for m in members:
        argv += ["", "1", "0", m]
    return script(client, "enqueue")(keys=[Q, SEQ, PROC, DELAYED, "{g}:df"], args=argv)


def make_bitmap(client: redis.Redis) -> list[str]:
    """A one-layer bitmap filter as bloom_grow.lua writes it; returns its piece keys."""
    layer = layer_plan(1000, 0.01, 0)
    pieces = [piece_key(META, 0, j) for j in range(layer.pieces)]
    for key, length in zip(pieces, layer.piece_lengths()):
        client.setrange(key, length - 1, b"\0")
    client.hset(META, mapping={**layer.to_meta(0), "L0:n": 0, "layers": 1})
    return pieces


def enqueue_bitmap(
    client: redis.Redis, pieces: list[str], layers: int = 1, fp: str = "0123456789abcdef01234567"
) -> list[int]:
    argv = ["priority", 1, "", "bitmap", layers, "push", fp, "0", "0", good("a")]
    return script(client, "enqueue")(keys=[Q, SEQ, PROC, DELAYED, META, *pieces], args=argv)


FIELD_GARBAGE = [
    "abc",
    "nan",
    "inf",
    "-inf",
    "-1",
    "1.5",
    "1e3",
    "0x10",
    " 7",
    "99999999999999999999",
    "",
    "\xff",
    "\x00",
]


@pytest.mark.parametrize("field", ["layers", "L0:m", "L0:k", "L0:pbits", "L0:cap", "L0:pieces", "L0:n"])
@pytest.mark.parametrize("value", [*FIELD_GARBAGE, "0", None])
def test_enqueue_reports_a_corrupt_bitmap_meta_hash_with_code_3(
    redis_client: redis.Redis, field: str, value: str | None
) -> None:
    pieces = make_bitmap(redis_client)
    if value is None:
        redis_client.hdel(META, field)
    else:
        redis_client.hset(META, field, value)
    before = redis_client.hgetall(META)
    code, *done = enqueue_bitmap(redis_client, pieces)
    if field == "L0:n" and value in ("0", None):  # a fresh layer: valid
        assert (code, done) == (0, [1])
        return
    if field == "layers" and value in ("0", None):  # no layer yet: the caller's view is stale
        assert (code, done) == (2, [])
    else:
        assert (code, done) == (3, [])
    assert redis_client.hgetall(META) == before and redis_client.exists(Q, SEQ) == 0  # nothing written


def test_enqueue_code_3_when_pieces_do_not_cover_the_bits(redis_client: redis.Redis) -> None:
    pieces = make_bitmap(redis_client)
    redis_client.hset(META, "L0:m", 2**51)
    assert enqueue_bitmap(redis_client, pieces) == [3]
    assert enqueue_bitmap(redis_client, pieces, layers=1) == [3]


def test_enqueue_code_2_when_the_caller_passed_another_layout(redis_client: redis.Redis) -> None:
    pieces = make_bitmap(redis_client)
    assert enqueue_bitmap(redis_client, pieces[:-1]) == [2]
    assert enqueue_bitmap(redis_client, pieces, layers=2) == [2]
    assert enqueue_bitmap(redis_client, pieces) == [0, 1]


@pytest.mark.parametrize("member", [b"garbage", b"1:" + b"9" * 400 + b":{}", b"1:-" + b"9" * 400 + b":{}", b"\xff:1:x"])
def test_enqueue_clamps_or_defaults_a_member_priority(redis_client: redis.Redis, member: bytes) -> None:
    assert enqueue_set(redis_client, [member]) == [0, 1]
    score = redis_client.zscore(Q, member)
    assert math.isfinite(score) and abs(score) <= MAX_PRIORITY * SPAN + SPAN


@pytest.mark.parametrize("key", ["meta", "piece"])
def test_enqueue_raises_wrongtype_for_a_filter_key_of_another_type(redis_client: redis.Redis, key: str) -> None:
    pieces = make_bitmap(redis_client)
    wrong_type(redis_client, META if key == "meta" else pieces[0])
    assert_wrongtype(lambda: [enqueue_bitmap(redis_client, pieces, fp=f"{i:024x}") for i in range(1, 50)])


def bloom_grow(client: redis.Redis, seen: int) -> int:
    layer = layer_plan(1000, 0.01, seen)
    keys = [META, *(piece_key(META, seen, j) for j in range(layer.pieces))]
    fields = [x for kv in layer.to_meta(seen).items() for x in kv]
    return script(client, "bloom_grow")(keys=keys, args=[seen, "bitmap", 1000, "0.01", *layer.piece_lengths(), *fields])


@pytest.mark.parametrize("value", FIELD_GARBAGE)
def test_bloom_grow_reports_a_corrupt_layers_field_with_minus_1(redis_client: redis.Redis, value: str) -> None:
    redis_client.hset(META, "layers", value)
    assert bloom_grow(redis_client, 0) == -1
    assert redis_client.hgetall(META) == {b"layers": value.encode()} and redis_client.dbsize() == 1


def test_bloom_grow_still_grows_and_raises_wrongtype(redis_client: redis.Redis) -> None:
    assert bloom_grow(redis_client, 0) == 1
    assert bloom_grow(redis_client, 0) == 0
    assert redis_client.hget(META, "layers") == b"1"
    wrong_type(redis_client, META)
    assert_wrongtype(lambda: bloom_grow(redis_client, 1))


# --- heartbeat.lua -------------------------------------------------------------------------

HB_KEYS = ["{g}:nodes", "{g}:node:n1", "{g}:nodes:last", "{g}:nodes:alerted", "{g}:history", "{g}:stats"]


def heartbeat(client: redis.Redis, deltas: tuple[int, int, int] = (5, 2, 1)) -> float:
    fields = {"id": "n1", "state": "running"}
    stamp = script(client, "heartbeat")(
        keys=HB_KEYS,
        args=["n1", 30, 3900, *deltas, json.dumps(fields), "id", "n1", "state", "running"],
    )
    return float(stamp)


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "1.5", "9223372036854775807", "\xff\x00", ""])
def test_heartbeat_resets_counters_that_are_not_integers(redis_client: redis.Redis, value: str) -> None:
    minute = int(server_now(redis_client) // 60)
    for m in (minute, minute + 1):  # the minute may turn between here and the script
        redis_client.hset(HB_KEYS[4], mapping={f"p:{m}": value, f"i:{m}": value, f"e:{m}": "7"})
    redis_client.hset(HB_KEYS[5], mapping={"pages": value, "items": "10", "errors": value})
    stamp = heartbeat(redis_client)
    m = int(stamp // 60)
    history = redis_client.hgetall(HB_KEYS[4])
    assert (history[f"p:{m}".encode()], history[f"i:{m}".encode()], history[f"e:{m}".encode()]) == (b"5", b"2", b"8")
    assert redis_client.hgetall(HB_KEYS[5]) == {b"pages": b"5", b"items": b"12", b"errors": b"1"}
    assert redis_client.zscore(HB_KEYS[0], "n1") == pytest.approx(stamp, abs=0.01)


@pytest.mark.parametrize("index", range(6))
def test_heartbeat_raises_wrongtype_for_a_key_of_another_type(redis_client: redis.Redis, index: int) -> None:
    wrong_type(redis_client, HB_KEYS[index])
    assert_wrongtype(lambda: heartbeat(redis_client))


# --- rate.lua ------------------------------------------------------------------------------

RATE_KEY = "dc:rate:example.com"


def rate(client: redis.Redis, interval: float = 2.0) -> float:
    return float(script(client, "rate")(keys=[RATE_KEY], args=[f"{interval:.6f}"]))


@pytest.mark.parametrize(
    "value",
    [
        *FIELD_GARBAGE,
        "1e400",
        "-1e400",
        "1e18",
        "99999999999999999999999999999999999999",
        "-99999999999",
        "\x80\x04pickle",
    ],
)
def test_rate_treats_a_garbage_reservation_as_none(redis_client: redis.Redis, value: str) -> None:
    redis_client.set(RATE_KEY, value)
    wait = rate(redis_client)
    assert wait == 0.0
    now = server_now(redis_client)
    assert float(redis_client.get(RATE_KEY)) == pytest.approx(now + 2, abs=1)
    assert 0 < redis_client.pttl(RATE_KEY) <= 4000
    assert rate(redis_client) == pytest.approx(2, abs=0.5)  # the limit works again


def test_rate_waits_are_finite_and_bounded(redis_client: redis.Redis) -> None:
    now = server_now(redis_client)
    redis_client.set(RATE_KEY, f"{now + 3000:.6f}")
    assert rate(redis_client) == pytest.approx(3000, abs=2)  # a long queue of reservations is kept
    redis_client.set(RATE_KEY, f"{now + 3700:.6f}")
    assert rate(redis_client) == 0.0  # beyond an hour: garbage
    redis_client.set(RATE_KEY, f"{now + 5000:.6f}")
    assert rate(redis_client, interval=7200) == pytest.approx(5000, abs=2)  # within one long interval
    redis_client.set(RATE_KEY, "x" * (1 << 20))
    assert rate(redis_client) == 0.0


def test_rate_raises_wrongtype(redis_client: redis.Redis) -> None:
    wrong_type(redis_client, RATE_KEY)
    assert_wrongtype(lambda: rate(redis_client))


# --- proxy_*.lua ---------------------------------------------------------------------------

POOL, DEAD = "{p}:proxies", "{p}:proxies:dead"


def pick(client: redis.Redis, rnd: float, min_score: float = 0) -> bytes | None:
    return script(client, "proxy_pick")(keys=[POOL], args=[rnd, min_score])


def test_proxy_pick_keeps_weights_finite_with_inf_scores(redis_client: redis.Redis) -> None:
    redis_client.zadd(POOL, {"http://inf": math.inf, "http://ok": 10, "http://neg": -math.inf})
    # weights: -inf and +inf count as the minimum score (1 each), ok 11: total 13
    assert [pick(redis_client, r) for r in (0.0, 0.07, 0.08, 0.5, 0.92, 0.93, 0.999999)] == [
        b"http://neg",
        b"http://neg",
        b"http://ok",
        b"http://ok",
        b"http://ok",
        b"http://inf",
        b"http://inf",
    ]
    redis_client.delete(POOL)
    redis_client.zadd(POOL, {"http://inf": math.inf})
    assert pick(redis_client, 0.0) == b"http://inf" and pick(redis_client, 0.5) == b"http://inf"


def test_proxy_pick_with_huge_scores_and_garbage_members(redis_client: redis.Redis) -> None:
    members = {raw: 1e300 if i % 2 else -1e300 for i, raw in enumerate(GARBAGE.values())}
    members[b"http://ok"] = 10
    redis_client.zadd(POOL, members)
    for r in (0.0, 0.3, 0.6, 0.999999):
        assert pick(redis_client, r) in members


@pytest.mark.parametrize("score", [math.inf, -math.inf, 1e300, -1e300])
@pytest.mark.parametrize("delta", [1, -3])
def test_proxy_record_never_stores_or_returns_inf(redis_client: redis.Redis, score: float, delta: int) -> None:
    redis_client.zadd(POOL, {"http://p": score})
    state, new = script(redis_client, "proxy_record")(keys=[POOL, DEAD], args=["http://p", delta, 20, 0, "boom"])
    assert math.isfinite(float(new))
    if state == b"evicted":
        entry = json.loads(redis_client.hget(DEAD, "http://p"))
        assert (
            entry["error"] == "boom" and math.isfinite(entry["score"]) and redis_client.zscore(POOL, "http://p") is None
        )
    else:
        assert state in (b"ok", b"failed") and redis_client.zscore(POOL, "http://p") == float(new)


def test_proxy_revive_revives_entries_that_cannot_tell_their_age(redis_client: redis.Redis) -> None:
    now = server_now(redis_client)
    dead = {
        **{f"http://{kind}": raw for kind, raw in GARBAGE.items()},
        "http://null": b"null",
        "http://string": b'"just a string"',
        "http://array": b'[1, {"since": 1}]',
        "http://since-text": b'{"since": "abc", "error": "e1"}',
        "http://since-nan": b'{"since": "nan"}',
        "http://since-inf": b'{"since": 1e400}',
        "http://since-table": b'{"since": {"a": 1}}',
        "http://since-future": json.dumps({"since": now + YEAR}).encode(),
        "http://since-neg-inf": b'{"since": -1e400}',
        "http://error-table": json.dumps({"since": 0, "error": {"x": 1}}).encode(),
        "http://error-long": json.dumps({"since": 0, "error": "e" * 5000}).encode(),
        "http://deep": b"[" * 5000 + b"]" * 5000,
    }
    redis_client.hset(DEAD, mapping={**dead, "http://recent": json.dumps({"since": now, "error": "x"})})
    flat = script(redis_client, "proxy_revive")(keys=[POOL, DEAD], args=[600, 1])
    revived = dict(zip(flat[::2], flat[1::2]))
    assert set(revived) == {k.encode() for k in dead}
    assert redis_client.hkeys(DEAD) == [b"http://recent"]
    assert revived[b"http://since-text"] == b"e1" and revived[b"http://error-table"] == b""
    assert revived[b"http://error-long"] == b"e" * 500
    assert all(score == 1 for _, score in redis_client.zrange(POOL, 0, -1, withscores=True))


def test_proxy_add_with_garbage_in_the_dead_hash(redis_client: redis.Redis) -> None:
    redis_client.hset(DEAD, mapping={"http://a": GARBAGE["pickle"], "http://b": "nan"})
    assert script(redis_client, "proxy_add")(keys=[POOL, DEAD], args=["load", 10, "http://a", "http://c"]) == 1
    assert script(redis_client, "proxy_add")(keys=[POOL, DEAD], args=["add", 10, "http://a", "http://b"]) == 2
    assert redis_client.exists(DEAD) == 0 and redis_client.zcard(POOL) == 3


@pytest.mark.parametrize("key", [POOL, DEAD])
def test_proxy_scripts_raise_wrongtype(redis_client: redis.Redis, key: str) -> None:
    wrong_type(redis_client, key)
    calls = [
        lambda: script(redis_client, "proxy_add")(keys=[POOL, DEAD], args=["add", 10, "http://a"]),
        lambda: (
            script(redis_client, "proxy_revive")(keys=[POOL, DEAD], args=[600, 1])
            if key == DEAD
            else pick(redis_client, 0.5)
        ),
    ]
    if key == POOL:
        calls.append(lambda: script(redis_client, "proxy_record")(keys=[POOL, DEAD], args=["http://a", 1, 20, 0, ""]))
    for call in calls:
        assert_wrongtype(call)


# --- counts.lua ----------------------------------------------------------------------------


def test_counts_sizes_whatever_the_keys_hold(redis_client: redis.Redis) -> None:
    redis_client.zadd(PROC, {GARBAGE["pickle"]: math.inf, b"x": -math.inf})
    redis_client.lpush(Q, GARBAGE["binary_nul"], GARBAGE["megabyte"])
    redis_client.set(SEQ, GARBAGE["invalid_utf8"])
    redis_client.hset(META, "layers", "nan")
    redis_client.sadd(DELAYED, "a", "b", "c")
    redis_client.xadd(FAILED, {"a": "b"})
    sizes = script(redis_client, "counts")(keys=[PROC, Q, SEQ, META, DELAYED, FAILED, "{g}:absent"])
    assert sizes == [2, 2, len(GARBAGE["invalid_utf8"]), 1, 3, 0, 0]


@pytest.mark.parametrize("mode", ["set", "bitmap"])
@pytest.mark.parametrize("blocked", [Q, DELAYED])
def test_a_push_refused_half_way_leaves_the_url_unseen(redis_client: redis.Redis, mode: str, blocked: str) -> None:
    """Lua does not roll back: a fingerprint marked seen before a refused push would be lost for good
    (seen in the chaos test: a queue key briefly of the wrong type lost a page's links)."""
    fp, delay = "0123456789abcdef01234567", "5" if blocked == DELAYED else "0"
    pieces = make_bitmap(redis_client) if mode == "bitmap" else []
    dedup_key = META if mode == "bitmap" else "{g}:df"
    argv = ["priority", 1, "", mode, 1 if mode == "bitmap" else 0, "push", fp, "0", delay, good("a")]
    call = lambda: script(redis_client, "enqueue")(keys=[Q, SEQ, PROC, DELAYED, dedup_key, *pieces], args=argv)  # noqa: E731
    redis_client.set(blocked, "not a zset")
    assert_wrongtype(call)
    redis_client.delete(blocked)
    assert call() == [0, 1]  # still new: pushed now
    assert redis_client.zcard(blocked) == 1
    assert call() == [0, 0]  # and seen from now on
