"""`dcrawl` against a real redis-server: status, failed (list, requeue), reclaim, seed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.cli.main import main
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.dedup.dupefilter import SetDedup
from distributed_crawler.frontier.enqueue import Enqueuer
from distributed_crawler.frontier.envelope import make_member
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from tests.conftest import ROOT, free_port
from tests.frontiers import pop

KEYS = SpiderKeys.from_settings(Settings(), "news")


def run(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().out


def push(client: redis.Redis, *urls: str, qtype: str = "priority") -> None:
    keys = SpiderKeys.from_settings(Settings(), "news")
    enqueuer = Enqueuer(frontier_for_mode(client, keys, qtype), SetDedup(keys.dupefilter))
    run_sync(enqueuer.run("push", [(url, False, make_member(json.dumps({"url": url}), 0)) for url in urls]))


def test_status_json_counts(redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture) -> None:
    push(redis_client, "http://e.com/1", "http://e.com/2", "http://e.com/3")
    pop(frontier_for_mode(redis_client, KEYS, "priority"), 1, 60)
    redis_client.lpush("{news}:failed", json.dumps({"url": "x", "reason": "r"}))
    redis_client.lpush("news:start_urls", "http://e.com/")
    code, out = run(capsys, "status", "news", "--redis-url", redis_url, "--json")
    status = json.loads(out)
    assert code == 0
    assert (status["pending"], status["leased"], status["delayed"], status["failed"]) == (2, 1, 0, 1)
    assert status["nodes"] == [] and status["dedup"]["count"] == 3 and status["dedup"]["bytes"] > 0
    assert status["dedup"]["backend"] == "set"


def test_reclaim_and_failed_requeue(redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture) -> None:
    push(redis_client, "http://e.com/a", "http://e.com/b", qtype="host")  # the default queue type
    scripts = frontier_for_mode(redis_client, KEYS, "host")
    pop(scripts, 2, 60)
    code, out = run(capsys, "reclaim", "news", "--redis-url", redis_url)
    assert code == 0 and "requeued 0" in out  # not expired yet
    for member in redis_client.zrange("{news}:processing", 0, -1):
        redis_client.zadd("{news}:processing", {member: 1})  # expired
    code, out = run(capsys, "reclaim", "news", "--redis-url", redis_url)
    assert "requeued 2" in out and redis_client.zcard("{news}:q:e.com") == 2

    # Deliver both up to SCHEDULER_MAX_DELIVERIES (5): they become dead letters.
    for _ in range(4):
        pop(scripts, 2, 60)
        for member in redis_client.zrange("{news}:processing", 0, -1):
            redis_client.zadd("{news}:processing", {member: 1})
        run(capsys, "reclaim", "news", "--redis-url", redis_url)
    assert redis_client.llen("{news}:failed") == 2 and redis_client.zcard("{news}:q:e.com") == 0
    redis_client.lpush("{news}:failed", json.dumps({"url": "bad seed", "reason": "rejected seed", "source": "seed"}))

    code, out = run(capsys, "failed", "news", "--redis-url", redis_url, "--json")
    entries = json.loads(out)
    assert sorted(e["url"] for e in entries) == ["bad seed", "http://e.com/a", "http://e.com/b"]
    code, out = run(capsys, "failed", "news", "--redis-url", redis_url, "--requeue")
    assert code == 0 and "requeued 2" in out and "kept 1" in out
    assert redis_client.llen("{news}:q:e.com/") == 2 and redis_client.llen("{news}:failed") == 1  # priority 0: the list
    popped = pop(scripts, 2, 60)
    assert all(m.startswith(b"1:") for m in popped)  # a fresh delivery count


def test_seed_validates(redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture) -> None:
    code, _ = run(
        capsys, "seed", "news", "http://e.com/", '{"url": "https://e.com/x", "priority": 3}', "--redis-url", redis_url
    )
    assert code == 0 and redis_client.llen("news:start_urls") == 2
    assert main(["seed", "news", "javascript:alert(1)", "--redis-url", redis_url]) == 1
    assert "not http or https" in capsys.readouterr().err


@pytest.mark.e2e
def test_unreachable_redis_one_line_masked() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "distributed_crawler",
            "status",
            "news",
            "--json",
            "--redis-url",
            f"redis://ops:hunter2@127.0.0.1:{free_port()}/0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "redis://ops:***@127.0.0.1" in proc.stderr
    assert "hunter2" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_reader_that_leaves_early_is_no_error(redis_url: str, redis_client: redis.Redis) -> None:
    """`dcrawl status news --json | head -c1`: the pipe closes before dcrawl writes; quiet exit 0."""
    redis_client.lpush("news:start_urls", "http://e.com/")
    proc = subprocess.Popen(
        [sys.executable, "-m", "distributed_crawler", "status", "news", "--json", "--redis-url", redis_url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the first byte
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()


def test_values_after_a_flag_join_the_command_list() -> None:
    """`dcrawl seed news --new URL` (as docs/deploy.md writes it) and `proxies add --json URL`."""
    from distributed_crawler.cli.main import parse_args

    args = parse_args(["seed", "news", "--new", "http://a.test/", "http://b.test/", "--redis-url", "redis://x"])
    assert args.urls == ["http://a.test/", "http://b.test/"] and args.new and args.redis_url == "redis://x"
    assert parse_args(["seed", "news", "http://a.test/", "--new"]).urls == ["http://a.test/"]
    with pytest.raises(SystemExit):
        parse_args(["seed", "news", "--new", "http://a.test/", "--no-such-flag"])
    with pytest.raises(SystemExit):
        parse_args(["status", "news", "extra"])  # a command without a list keeps argparse's refusal
