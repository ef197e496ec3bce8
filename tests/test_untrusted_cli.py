"""Operator commands on a Redis full of garbage: they show what they can, exit 0, say what they skipped.

`tests/garbage.py` writes every kind of garbage (pickle, invalid UTF-8, binary, truncated and
non-object JSON, members without or with a broken envelope, 1 MB members, NaN/±inf/huge numbers,
fields of the wrong type) into every key at once; wrong-type keys are a second scenario.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.cli.main import main, requeue_member
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.monitoring.nodes import NodeKeys, beat, heartbeat_script
from tests.conftest import ROOT, dcrawl, queued_requests
from tests.garbage import write_all_garbage, write_wrong_types

DCRAWL = [sys.executable, "-m", "distributed_crawler"]


def assert_readable(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]


def garbage(redis_client: redis.Redis, tmp_path: Path) -> Path:
    """A live node with real heartbeats, a real dead letter, then every kind of garbage everywhere."""
    keys = NodeKeys.from_settings(Settings(), "news")
    run_sync(
        beat(
            heartbeat_script(redis_client),
            keys,
            "node-1",
            10.0,
            {"state": "running", "pages": 7, "items": 4, "rate": 3.5, "host": "h"},
            (7, 4, 0),
        )
    )
    redis_client.lpush(
        "{news}:failed",
        json.dumps(
            {
                "url": "http://e.com/ok",
                "reason": "HTTP 500",
                "source": "retry",
                "payload": json.dumps({"url": "http://e.com/ok"}),
                "priority": 0,
            }
        ),
    )
    marker = tmp_path / "unpickled"
    write_all_garbage(redis_client, "news", marker=marker, node_ids=("node-1",))
    return marker


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_status_and_failed_survive_every_kind_of_garbage_in_every_key(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    marker = garbage(redis_client, tmp_path)

    proc = dcrawl(redis_url, "status", "news", "--json")
    assert_readable(proc)
    status = json.loads(proc.stdout)  # strict JSON: no NaN/Infinity sneaks through
    json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"{c} in status JSON"))
    for field in ("pending", "leased", "delayed", "failed"):
        assert isinstance(status[field], int) and status[field] > 0
    assert status["dedup"].keys() >= {"count", "bytes"}
    (node,) = status["nodes"]  # the garbage ids are skipped, the real node stays
    assert node["id"] == "node-1" and node["alive"] is True
    assert all(isinstance(node[f], (int, float)) for f in ("pages", "items", "rate"))
    assert status["skipped"]["{news}:nodes"] >= 3 and status["skipped"]["{news}:failed"] >= 10
    assert status["wrong_type"] == []
    assert status["failures"] and all(isinstance(f.get("url", ""), str) for f in status["failures"])

    proc = dcrawl(redis_url, "status", "news")
    assert_readable(proc)
    assert "node-1" in proc.stdout and "skipped" in proc.stdout and "{news}:failed" in proc.stdout

    proc = dcrawl(redis_url, "failed", "news", "--json")
    assert_readable(proc)
    entries = json.loads(proc.stdout)
    assert len(entries) == 41  # --limit 50: 1 real + 40 garbage (incl. one with fields of the wrong type)
    assert sum(e["reason"] == "unreadable dead letter" for e in entries) >= 20
    assert all(isinstance(e["url"], str) and isinstance(e["reason"], str) for e in entries)
    assert "unreadable entries in {news}:failed" in proc.stderr

    proc = dcrawl(redis_url, "failed", "news")
    assert_readable(proc)
    assert "unreadable dead letter" in proc.stdout and "unreadable entries in {news}:failed" in proc.stdout

    queue_before = queued_requests(redis_client)
    proc = dcrawl(redis_url, "failed", "news", "--requeue")
    assert_readable(proc)
    assert "requeued 1;" in proc.stdout and "kept 40" in proc.stdout
    assert queued_requests(redis_client) == queue_before + 1
    assert redis_client.llen("{news}:failed") == 40  # everything without a request stays

    proc = dcrawl(redis_url, "proxies", "list", "--json")
    assert_readable(proc)
    listed = json.loads(proc.stdout)
    assert listed["proxies"] and "skipped" in proc.stderr
    assert_readable(dcrawl(redis_url, "proxies", "list"))
    assert not marker.exists(), "something unpickled a payload"


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_keys_of_the_wrong_type_are_named_with_their_fix(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    garbage(redis_client, tmp_path)
    wrong = write_wrong_types(redis_client)
    proc = dcrawl(redis_url, "status", "news", "--json")
    assert_readable(proc)
    status = json.loads(proc.stdout)
    assert sorted(w["key"] for w in status["wrong_type"]) == sorted(wrong)
    assert all(w["fix"] == f"redis-cli del '{w['key']}'" for w in status["wrong_type"])
    assert status["failed"] == 0 and status["delayed"] == 0 and status["nodes"] == []
    proc = dcrawl(redis_url, "status", "news")
    assert_readable(proc)
    flat = " ".join(proc.stdout.split())
    for key in wrong:
        assert f"redis-cli del '{key}'" in flat
    for args in (
        ("failed", "news"),
        ("failed", "news", "--json"),
        ("failed", "news", "--requeue"),
        ("proxies", "list"),
    ):
        proc = dcrawl(redis_url, *args)
        assert_readable(proc)
    assert "redis-cli del '{news}:failed'" in dcrawl(redis_url, "failed", "news").stderr


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_dashboard_api_survives_garbage_and_wrong_types(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    garbage(redis_client, tmp_path)
    redis_client.set("{other}:nodes", "a string")  # a second spider whose nodes key is of the wrong type
    redis_client.zadd(b"{\xff\xfe}:requests", {b"x": 1})  # a spider name that is not text
    proc = subprocess.Popen(
        [*DCRAWL, "dashboard", "--port", "0", "--redis-url", redis_url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        url = line.split(" on ", 1)[1].split()[0]
        for path in ("", "api/status", "api/status/news", "api/status/other", "api/spiders"):
            with urllib.request.urlopen(url + path, timeout=30) as response:
                assert response.status == 200
                body = response.read().decode()
            if path.startswith("api/"):
                data = json.loads(body, parse_constant=lambda c, path=path: pytest.fail(f"{c} in {path}"))
                if path == "api/status":
                    assert set(data["spiders"]) == {"news", "other"}
                    assert data["spiders"]["news"]["skipped"]
                    assert data["spiders"]["other"]["wrong_type"][0]["key"] == "{other}:nodes"
        write_wrong_types(redis_client)
        with urllib.request.urlopen(url + "api/status/news", timeout=30) as response:
            assert len(json.loads(response.read())["wrong_type"]) == 7
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "Traceback" not in err, err[-3000:]


def test_requeue_member_takes_only_valid_requests() -> None:
    ok = {"source": "retry", "payload": '{"url": "http://e.com/", "meta": {"retry_times": 2}}', "priority": 3}
    assert requeue_member(ok) == '0:3:{"url":"http://e.com/","meta":{}}'
    for bad in (
        {**ok, "priority": "high"},
        {**ok, "priority": float("nan")},
        {**ok, "priority": 1e999},
        {**ok, "priority": 2**40},
        {**ok, "priority": [1]},
        {**ok, "priority": True},
        {**ok, "priority": 1.5},
        {**ok, "payload": "\x80\x04garbage"},
        {**ok, "payload": "[1, 2]"},
        {**ok, "payload": '{"url": 5}'},
        {**ok, "payload": '{"url": "file:///etc/passwd"}'},
        {**ok, "payload": 42},
        {**ok, "payload": ""},
        {**ok, "payload": '{"url": "http://e.com/' + "a" * 2_000_000 + '"}'},
        {**ok, "source": "seed"},
        {**ok, "source": ["retry"]},
        {"url": "", "reason": "unreadable dead letter"},
    ):
        assert requeue_member(bad) is None, bad
    assert requeue_member({**ok, "priority": 4.0}) is not None
    assert requeue_member({k: v for k, v in ok.items() if k != "priority"}) == '{"url":"http://e.com/","meta":{}}'
    # a compact payload (frontier/codec.py), and one a text that is not ours
    compact = {**ok, "payload": 'https://e.com/a {"d":2,"meta":{"retry_times":2}}'}
    assert requeue_member(compact) == '0:3:https://e.com/a {"d":2}'
    assert requeue_member({**ok, "payload": "not a url"}) is None


def test_status_in_process_reads_garbage_with_the_sync_client(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    garbage(redis_client, tmp_path)
    assert main(["status", "news", "--json", "--redis-url", redis_url]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["totals"]["pages"] >= 0 and len(status["history"]) == 60
    keys = SpiderKeys.from_settings(Settings(), "news")
    assert redis_client.type(keys.requests) == b"zset"  # reading changed nothing
