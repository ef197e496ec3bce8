"""`dcrawl import-scrapy-redis SPIDER`: a scrapy-redis crawl's keys, taken over.

The old queue is written by scrapy-redis 0.9.1 itself (installed for these tests), so the format is
the real one. Unpickling happens only with the operator's flag, and even then loads no class: a
forged entry that would run a command on unpickling is refused and reported, and runs nothing.
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
from pathlib import Path

import pytest
import redis
from scrapy import Request
from scrapy.http import HtmlResponse
from scrapy_redis.queue import FifoQueue, PriorityQueue

from distributed_crawler.cli.main import main
from distributed_crawler.frontier.codec import RequestCodec
from distributed_crawler.frontier.envelope import split_member
from tests.compat.project.spiders.dmoz import DmozSpider
from tests.conftest import queued_members


@pytest.fixture
def project(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    monkeypatch.setenv("SCRAPY_SETTINGS_MODULE", "tests.compat.project.settings")
    monkeypatch.setenv("REDIS_URL", redis_url)


def _rule_requests(spider: DmozSpider) -> list[Request]:
    body = b"".join(f'<a href="/article/{i}">a{i}</a>'.encode() for i in range(1, 6))
    response = HtmlResponse("http://e.com/", body=body, request=Request("http://e.com/"))
    spider._compile_rules()
    requests = [r for r in spider._requests_to_follow(response) if r is not None]
    requests[0].meta["seen_at"] = datetime.datetime(2026, 1, 2, 3, 4, 5)
    requests[0].meta["pair"] = (1, 2)
    return requests


class Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


LAST_ERR: list[str] = []


def _run(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, dict]:
    code = main(["import-scrapy-redis", "dmoz", "--json", *args])
    captured = capsys.readouterr()
    LAST_ERR[:] = [captured.err]
    return code, json.loads(captured.out)


@pytest.mark.parametrize("queue_cls", [PriorityQueue, FifoQueue])
def test_old_queue_is_converted_only_with_the_flag(
    project, redis_client: redis.Redis, capsys: pytest.CaptureFixture, queue_cls
) -> None:
    spider = DmozSpider()
    old = queue_cls(redis_client, spider, "dmoz:requests")
    requests = _rule_requests(spider)
    for request in requests:
        old.push(request)
    redis_client.sadd("dmoz:dupefilter", "a" * 40, "b" * 40)

    code, report = _run(capsys)
    assert code == 0 and report["converted"] == 0
    assert report["old_queue"] == {
        "key": "dmoz:requests",
        "type": redis_client.type("dmoz:requests").decode(),
        "count": 5,
    }
    assert any("--unpickle-old-queue" in note for note in report["notes"])
    assert queued_members(redis_client, "dmoz") == []

    assert "WARNING" not in LAST_ERR[0]
    code, report = _run(capsys, "--unpickle-old-queue", "--delete-old-keys")
    assert "WARNING: --unpickle-old-queue unpickles 5 entries of dmoz:requests" in LAST_ERR[0]
    assert (code, report["converted"], report["refused"]) == (0, 5, 0), report["refused_examples"]
    assert sorted(report["deleted"]) == ["dmoz:dupefilter", "dmoz:requests"]
    codec = RequestCodec(spider)
    decoded = [codec.decode(split_member(m).payload) for m in queued_members(redis_client, "dmoz")]
    assert sorted(r.url for r in decoded) == sorted(r.url for r in requests)
    assert all(r.callback == spider._callback and r.errback == spider._errback for r in decoded)
    first = next(r for r in decoded if r.url == requests[0].url)
    assert first.meta["seen_at"] == datetime.datetime(2026, 1, 2, 3, 4, 5) and first.meta["pair"] == (1, 2)

    code, report = _run(capsys, "--unpickle-old-queue")  # again: nothing left to do
    assert code == 0 and report["converted"] == 0 and report["old_queue"]["count"] == 0


def test_a_forged_pickle_runs_nothing_and_keeps_the_old_queue(
    project, redis_client: redis.Redis, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    spider = DmozSpider()
    old = PriorityQueue(redis_client, spider, "dmoz:requests")
    old.push(Request("http://e.com/ok"))
    marker = tmp_path / "pwned"
    redis_client.zadd("dmoz:requests", {pickle.dumps(Exploit(marker)): 0})
    redis_client.zadd("dmoz:requests", {b"not a pickle": 0})
    code, report = _run(capsys, "--unpickle-old-queue", "--delete-old-keys")
    assert not marker.exists()
    assert code == 1 and report["converted"] == 1 and report["refused"] == 2
    assert any("refused to load" in r and "system" in r for r in report["refused_examples"])
    assert redis_client.zcard("dmoz:requests") == 3  # kept: not everything converted
    assert any("kept dmoz:requests" in note for note in report["notes"])


def test_start_urls_are_taken_as_is_and_their_type_checked(
    project, redis_client: redis.Redis, capsys: pytest.CaptureFixture
) -> None:
    redis_client.sadd("dmoz:start_urls", "http://e.com/")
    code, report = _run(capsys)
    assert code == 0
    assert report["start_urls"] == {"key": "dmoz:start_urls", "type": "set", "count": 1}
    assert any("REDIS_START_URLS_AS_SET = True" in note for note in report["notes"])
    assert redis_client.scard("dmoz:start_urls") == 1


def test_our_own_keys_are_never_taken_for_old_ones(project, capsys: pytest.CaptureFixture) -> None:
    assert main(["import-scrapy-redis", "dmoz", "--old-queue-key", "{%(spider)s}:requests"]) == 1
    assert "one of our own keys" in capsys.readouterr().err
