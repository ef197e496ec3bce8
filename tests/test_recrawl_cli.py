"""`dcrawl schedule` and `dcrawl recrawl` against a real redis-server and a SQLite items table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from scrapy import Request
from scrapy.settings import Settings

from distributed_crawler.cli.main import main
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.dedup.fingerprint import CanonicalFingerprinter, FingerprintConfig
from distributed_crawler.frontier.codec import RequestCodec, payload_url
from distributed_crawler.frontier.envelope import make_member, split_member
from distributed_crawler.frontier.factory import frontier_from_settings
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.recrawl.schedule import FINGERPRINT_CHARS, RecrawlKeys, RevisitSchedule
from distributed_crawler.storage.backends import open_storage
from tests.conftest import queued_members

KEYS = SpiderKeys.from_settings(Settings(), "news")
RKEYS = RecrawlKeys.from_settings(Settings(), "news")
SECTIONS = ["https://a.test/section/world", "https://b.test/section/city"]
STORED = ["https://a.test/article/1", "https://a.test/article/2", "https://b.test/article/3", *SECTIONS]


def fingerprint(url: str) -> str:
    return (
        CanonicalFingerprinter(FingerprintConfig.from_settings(Settings()))
        .fingerprint(Request(url))
        .hex()[:FINGERPRINT_CHARS]
    )


@pytest.fixture
def crawled(redis_client: redis.Redis, tmp_path: Path) -> str:
    """A crawl as the nodes leave it: sections scheduled (due in an hour), every page stored."""
    schedule = RevisitSchedule(redis_client, frontier_from_settings(Settings(), "news", redis_client))
    codec = RequestCodec(None)
    for url in SECTIONS:
        member = make_member(codec.encode(Request(url), slot=url.split("/")[2], again=True), 0)
        run_sync(schedule.record(fingerprint(url), (3600, 3600), 2.0, "body", digest="d", etag='"e"', member=member))
    source = f"sqlite:///{tmp_path / 'items.db'}"
    backend = open_storage(source)
    backend.upsert_many([{"url": u, "text": u} for u in STORED])
    backend.close()
    return source


def run(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_schedule_shows_what_is_due(
    crawled: str, redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture
) -> None:
    code, out, _ = run(capsys, "schedule", "news", "--json", "--redis-url", redis_url)
    assert code == 0
    data = json.loads(out)
    assert (data["scheduled"], data["due_now"], data["due_next_hour"]) == (2, 0, 2)
    assert {e["url"] for e in data["next"]} == set(SECTIONS)
    assert all(e["interval"] == 3600 and e["etag"] == '"e"' and 3500 < e["due_in"] <= 3600 for e in data["next"])
    code, out, _ = run(capsys, "schedule", "news", "--redis-url", redis_url)
    assert code == 0 and "2 URLs scheduled" in out and "section/world" in out
    code, out, _ = run(capsys, "status", "news", "--json", "--redis-url", redis_url)
    assert code == 0 and json.loads(out)["recrawl"] == {"scheduled": 2, "due_now": 0, "due_next_hour": 2}
    code, out, _ = run(capsys, "status", "news", "--redis-url", redis_url)
    assert "revisits 2 (0 due now, 2 next hour)" in out
    redis_client.hset(RKEYS.state, fingerprint(SECTIONS[0]), "garbage")
    code, out, err = run(capsys, "schedule", "news", "--json", "--redis-url", redis_url)
    assert code == 0 and json.loads(out)["unreadable"] == 1 and "skipped" not in err  # --json: in the object


def test_recrawl_pattern_touches_only_what_matches(
    crawled: str, redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture
) -> None:
    code, out, _ = run(
        capsys, "recrawl", "news", "--pattern", r"^https://a\.test/", "--from", crawled, "--redis-url", redis_url
    )
    assert code == 0
    assert "1 scheduled URLs due now, 2 stored URLs queued" in out
    queued = {payload_url(split_member(m).payload) for m in queued_members(redis_client)}
    assert queued == {"https://a.test/article/1", "https://a.test/article/2"}  # the section is moved by the nodes
    due = redis_client.zrangebyscore(RKEYS.schedule, "-inf", redis_client.time()[0] + 1)
    assert due == [fingerprint(SECTIONS[0]).encode()]


def test_recrawl_all_queues_each_stored_url_once_bypassing_the_filter(
    crawled: str, redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture
) -> None:
    for _ in range(2):  # every pass queues again: the seen-filter is bypassed on purpose
        code, out, _ = run(capsys, "recrawl", "news", "--all", "--from", crawled, "--redis-url", redis_url)
        assert code == 0 and "2 scheduled URLs due now, 3 stored URLs queued" in out
    members = queued_members(redis_client)
    assert len(members) == 6 and len({payload_url(split_member(m).payload) for m in members}) == 3


def test_recrawl_errors_are_one_line(
    crawled: str, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code, _, err = run(capsys, "recrawl", "news", "--pattern", "(", "--from", crawled, "--redis-url", redis_url)
    assert code == 1 and err.startswith("dcrawl: --pattern '(' is not a regex") and err.count("\n") == 1
    code, _, err = run(capsys, "recrawl", "news", "--all", "--from", "nosuch://x", "--redis-url", redis_url)
    assert code == 1 and "Unsupported STORAGE_URL scheme" in err and "--from" in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as exit_info:  # neither --all nor --pattern: argparse's usage error
        main(["recrawl", "news", "--redis-url", redis_url])
    assert exit_info.value.code == 2


def test_keys_of_the_wrong_type_are_one_line_never_a_traceback(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture
) -> None:
    redis_client.set(RKEYS.schedule, "not a zset")
    code, out, _ = run(capsys, "status", "news", "--json", "--redis-url", redis_url)
    status = json.loads(out)
    assert code == 0 and status["recrawl"]["scheduled"] == 0
    assert RKEYS.schedule in {w["key"] for w in status["wrong_type"]}
    code, _, err = run(capsys, "schedule", "news", "--redis-url", redis_url)
    assert code == 1 and err.startswith("dcrawl: cannot read the schedule") and err.count("\n") == 1
