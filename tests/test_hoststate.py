"""frontier/hoststate.py owns the host hash: its field list matches what the Lua scripts read and
write, and its one reader returns errors in place."""

from __future__ import annotations

import re
from pathlib import Path

import redis
from scrapy.settings import Settings

from distributed_crawler.connection.calls import run_sync
from distributed_crawler.frontier.hoststate import FIELDS, SHOWN, read_hosts
from distributed_crawler.frontier.keys import SpiderKeys

LUA = Path(__file__).resolve().parent.parent / "distributed_crawler" / "lua"


def test_the_field_list_names_every_field_the_scripts_use_on_the_host_hash() -> None:
    used: set[str] = set()
    for name in ("lib/host.lua", "host_block.lua", "enqueue.lua", "host_pop.lua"):
        text = (LUA / name).read_text()
        for call in re.findall(
            r'"(?:HMGET|HGET|HSET|HINCRBY)",\s*(?:hkey|hash|hprefix \.\. s\.host)((?:,\s*"\w+")+)', text
        ):
            used.update(re.findall(r'"(\w+)"', call))
        for fields in re.findall(r"for _, \w+ in ipairs\(\{([^}]*)\}\)", text):
            used.update(re.findall(r'"(\w+)"', fields))
    assert used and used <= set(FIELDS), sorted(used - set(FIELDS))
    assert set(SHOWN) <= set(FIELDS)


def test_read_hosts_gives_sizes_and_fields_with_errors_in_place(redis_client: redis.Redis) -> None:
    keys = SpiderKeys.from_settings(Settings(), "hoststate")
    redis_client.zadd(keys.host_queue("a.com"), {"x": 1, "y": 2})
    redis_client.hset(keys.host("a.com"), mapping={"iv": "1.5", "bo": "2"})
    redis_client.set(keys.host_queue("b.com"), "not a zset")
    try:
        (a_size, a_fields), (b_size, b_fields) = run_sync(read_hosts(redis_client, keys, ["a.com", "b.com"]))
        assert a_size == 2 and dict(zip(SHOWN, a_fields))["iv"] in (b"1.5", "1.5")
        assert isinstance(b_size, redis.ResponseError) and b_fields == [None] * len(SHOWN)
        assert run_sync(read_hosts(redis_client, keys, ["a.com"], fields=())) == [(2, None)]
    finally:
        redis_client.delete(keys.host_queue("a.com"), keys.host("a.com"), keys.host_queue("b.com"))


def test_a_push_entry_is_one_type_and_a_plain_tuple_reads_as_one() -> None:
    from distributed_crawler.frontier.base import Placement, placed_entry
    from distributed_crawler.frontier.enqueue import PushEntry, push_entry

    assert push_entry(("fp", False, "m")) == PushEntry("fp", False, "m", 0.0, None, None, None, None)
    placed = placed_entry("fp", True, "m", 2.0, Placement("a.com", 1.0, -1, 3))
    assert placed == PushEntry("fp", True, "m", 2.0, "a.com", 1.0, -1, 3) and placed.slot == "a.com"
    assert placed_entry("fp", True, "m", 0.0, Placement()).slot is None
