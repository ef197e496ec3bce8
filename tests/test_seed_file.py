"""`dcrawl seed SPIDER --file FILE|-` against a real redis-server: validation as the nodes do it,
rejection reasons, JSON-lines seeds, gzip, --dedup, interrupt and resume."""

from __future__ import annotations

import gzip
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from scrapy import Request
from scrapy.utils.project import get_project_settings

from distributed_crawler.addon import with_addon
from distributed_crawler.cli.main import main
from distributed_crawler.cli.project import open_dupefilter
from distributed_crawler.cli.seed import SeedLoader, SeedPusher
from distributed_crawler.connection.calls import run_sync
from distributed_crawler.frontier.enqueue import Enqueuer
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys
from distributed_crawler.frontier.seedkey import SeedKey, taken_key
from distributed_crawler.frontier.seeds import parse_seed
from tests.conftest import ROOT

SEEN = "http://e.com/seen"
GOOD = ["http://e.com/a", "https://e.com/b?x=1", '{"url": "https://e.com/c", "meta": {"k": [1, 2]}, "priority": 7}']
BAD = {
    b"ftp://e.com/file": "bad_scheme",
    b"javascript:alert(1)": "bad_scheme",
    b"\xff\xfe http://e.com/": "not_utf8",
    b'{"url": "https://e.com/x"': "bad_json",
    b'{"url": 5}': "bad_url",
    b'{"url": "https://e.com/", "priority": "high"}': "bad_priority",
    b'{"url": "https://e.com/", "meta": []}': "bad_meta",
    b'{"url": "https://e.com/", "evil": {"x": 1}}': "unknown_field",
    b"[1,2]": "bad_scheme",
    b"http://[::1/": "not_a_url",
    b"http://e.com/a b": "not_a_url",
    b"https://": "not_a_url",
    b"http://e.com/" + b"x" * 70000: "too_large",
}


def seed(capsys: pytest.CaptureFixture, redis_url: str, *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["seed", "news", *args, "--redis-url", redis_url, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def write(path: Path, lines: list[bytes], gz: bool = False) -> Path:
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_counts_and_reasons(tmp_path: Path, redis_url: str, redis_client: redis.Redis, capsys: Any) -> None:
    lines = [g.encode() for g in GOOD] + list(BAD) + [b"", b"   ", b"http://e.com/crlf\r"]
    code, report = seed(capsys, redis_url, "--file", str(write(tmp_path / "seeds.txt", lines)))
    assert code == 0
    expected: dict[str, int] = {}
    for kind in BAD.values():
        expected[kind] = expected.get(kind, 0) + 1
    assert report["rejected_by_kind"] == expected
    assert report["pushed"] == 4 and report["blank"] == 2 and report["last_line"] == len(lines)
    assert report["examples"]["bad_scheme"][0]["line"] == 4
    pushed = redis_client.lrange("news:start_urls", 0, -1)
    assert pushed == [g.encode() for g in GOOD] + [b"http://e.com/crlf"]
    for raw in pushed:  # what was pushed is what a node accepts
        parse_seed(raw, 65536)
    json_seed = parse_seed(pushed[2], 65536)
    assert json_seed.meta == {"k": [1, 2]} and json_seed.priority == 7


def test_gzip_by_magic_bytes_and_human_summary(tmp_path: Path, redis_url: str, redis_client: Any, capsys: Any) -> None:
    path = write(tmp_path / "seeds.txt", [b"http://e.com/1", b"ftp://e.com/", b"http://e.com/2"], gz=True)
    assert main(["seed", "news", "--file", str(path), "--redis-url", redis_url]) == 0
    out = capsys.readouterr().out
    assert "pushed 2 seeds to news:start_urls (list)" in out and "bad_scheme: 1" in out and "line 2:" in out
    assert redis_client.lrange("news:start_urls", 0, -1) == [b"http://e.com/1", b"http://e.com/2"]


def test_garbage_never_crashes(tmp_path: Path, redis_url: str, redis_client: Any, capsys: Any) -> None:
    rng = __import__("random").Random(7)
    lines = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))).replace(b"\n", b"") for _ in range(300)]
    lines.append(b"{" * 100_000)  # deep JSON, longer than SEED_MAX_BYTES
    lines.append(b'{"url": "https://e.com/", "meta": ' + b"[" * 5000 + b"]" * 5000 + b"}")  # nested deep
    lines.append(b"x" * 1_000_000)  # one huge line, never held whole
    path = tmp_path / "garbage.bin"
    path.write_bytes(b"\n".join(lines))  # no final newline
    code, report = seed(capsys, redis_url, "--file", str(path))
    assert code == 0 and report["pushed"] == 0 and report["last_line"] == len(lines)
    assert report["rejected"] + report["blank"] == len(lines)
    assert report["rejected_by_kind"]["too_large"] == 2


def test_command_line_seeds_still_work(redis_url: str, redis_client: Any, capsys: Any) -> None:
    assert main(["seed", "news", "http://e.com/", '{"url": "https://e.com/x"}', "--redis-url", redis_url]) == 0
    assert "seeded 2 into news:start_urls" in capsys.readouterr().out
    assert main(["seed", "news", "http://e.com/", "ftp://x/", "--redis-url", redis_url]) == 1
    assert "not seeded" in capsys.readouterr().err and redis_client.llen("news:start_urls") == 2
    assert main(["seed", "news", "--redis-url", redis_url]) == 1
    assert "--file" in capsys.readouterr().err
    assert main(["seed", "news", "--file", "/nonexistent/seeds", "--redis-url", redis_url]) == 1
    assert "cannot read /nonexistent/seeds" in capsys.readouterr().err


def test_dedup_skips_seen_and_in_file_duplicates(
    tmp_path: Path, redis_url: str, redis_client: Any, capsys: Any
) -> None:
    settings = with_addon(get_project_settings())
    settings.set("REDIS_URL", redis_url)
    keys = SpiderKeys.from_settings(settings, "news")
    df, backend = open_dupefilter(settings, redis_client, keys)  # the node's filter: the crawl saw /seen
    run_sync(
        Enqueuer(frontier_for_mode(redis_client, keys, "fifo"), backend).run(
            "add", [(df.fingerprint_hex(Request(SEEN)), False, "")]
        )
    )
    lines = [
        SEEN.encode() + b"?utm_source=x#top",  # the page the crawl saw (tracking param, fragment)
        b"http://e.com/new",
        b"http://E.com:80/new",  # the same page again, in this file
        b'{"url": "http://e.com/new", "method": "POST"}',  # another request (method)
        b"http://e.com/new2",
    ]
    path = write(tmp_path / "seeds.txt", lines * 2)
    code, report = seed(capsys, redis_url, "--file", str(path), "--dedup", "--batch", "2")
    assert code == 0 and report["pushed"] == 3 and report["duplicates"] == 7
    assert redis_client.lrange("news:start_urls", 0, -1) == [lines[1], lines[3], lines[4]]
    code, report = seed(capsys, redis_url, "--file", str(path), "--dedup")  # a rerun pushes nothing
    assert report["pushed"] == 0 and report["duplicates"] == 10
    code, report = seed(capsys, redis_url, "--file", str(path))  # without --dedup: pushed again
    assert report["pushed"] == 10 and report["duplicates"] is None


def test_set_and_zset_as_the_spider_reads_them(redis_client: redis.Redis) -> None:
    lines = b'http://e.com/a\n{"url": "http://e.com/b", "priority": 9}\nhttp://e.com/a\n'
    SeedLoader(SeedPusher(redis_client, SeedKey("s:set", "set", 300, taken_key("s:set"))), 65536).run(io.BytesIO(lines))
    assert redis_client.scard("s:set") == 2
    SeedLoader(SeedPusher(redis_client, SeedKey("s:zset", "zset", 300, taken_key("s:zset"))), 65536).run(
        io.BytesIO(lines)
    )
    assert redis_client.zpopmax("s:zset")[0] == (b'{"url": "http://e.com/b", "priority": 9}', 9.0)


def test_wrong_key_type_is_one_line(tmp_path: Path, redis_url: str, redis_client: Any, capsys: Any) -> None:
    redis_client.set("news:start_urls", "oops")
    path = write(tmp_path / "seeds.txt", [b"http://e.com/a"])
    assert main(["seed", "news", "--file", str(path), "--redis-url", redis_url]) == 1
    out = capsys.readouterr().out
    assert "holds a string, not a list" in out and "--skip 0" in out


class InterruptAfter(io.BytesIO):
    """A stream that sends this process SIGINT (Ctrl-C) once `n` lines were read."""

    def __init__(self, data: bytes, n: int) -> None:
        super().__init__(data)
        self.n, self.read_lines = n, 0

    def readline(self, size: int | None = -1) -> bytes:
        self.read_lines += 1
        if self.read_lines == self.n + 1:
            os.kill(os.getpid(), signal.SIGINT)
        return super().readline(size)


def test_interrupt_and_resume(redis_url: str, redis_client: redis.Redis, capsys: Any, monkeypatch: Any) -> None:
    lines = [f"http://e.com/{i}".encode() for i in range(1, 101)]
    lines[41] = b"ftp://bad/"
    data = b"\n".join(lines) + b"\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(InterruptAfter(data, 57)))
    code = main(["seed", "news", "--file", "-", "--batch", "10", "--redis-url", redis_url])
    out = capsys.readouterr().out
    assert code == 130
    # Ctrl-C during line 58: lines 1-57 were done (the pending batch pushed), nothing after
    assert "interrupted: lines up to 57 are done, none after" in out and "--skip 57" in out
    assert redis_client.llen("news:start_urls") == 56
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, report = seed(capsys, redis_url, "--file", "-", "--from-line", "58")
    assert code == 0 and report["first_line"] == 58 and report["pushed"] == 43
    assert redis_client.lrange("news:start_urls", 0, -1) == [u for u in lines if u != b"ftp://bad/"]


@pytest.mark.e2e
def test_stdin_and_gzip_in_a_subprocess(tmp_path: Path, redis_url: str, redis_client: redis.Redis) -> None:
    lines = [f"https://e.com/{i}".encode() for i in range(2000)] + [b"mailto:x@e.com", b'{"url": 1}']
    env = {**os.environ, "REDIS_URL": redis_url}
    command = [sys.executable, "-m", "distributed_crawler", "seed", "news", "--file", "-", "--dedup"]
    proc = subprocess.run(
        command, input=gzip.compress(b"\n".join(lines * 2)), capture_output=True, env=env, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert "pushed 2,000 seeds" in out and "bad_scheme: 2" in out and "bad_url: 2" in out
    assert "skipped 2,000 duplicates" in out and "\x1b[" not in out  # no progress bar: stdout is a pipe
    assert redis_client.llen("news:start_urls") == 2000


def test_a_seed_at_a_private_address_is_refused_naming_the_setting(
    tmp_path: Path, redis_url: str, redis_client: Any, capsys: Any
) -> None:
    """The demo project allows loopback (demo/settings.py); the metadata address stays refused."""
    assert main(["seed", "news", "http://0xa9fea9fe/latest/meta-data/", "--redis-url", redis_url]) == 1
    err = capsys.readouterr().err
    assert "169.254.169.254 is link-local; allow it with ALLOWED_PRIVATE_NETWORKS" in err and len(err.splitlines()) == 1
    assert main(["seed", "news", "--site", "http://10.1.2.3/", "--redis-url", redis_url]) == 1
    assert "ALLOWED_PRIVATE_NETWORKS" in capsys.readouterr().err
    lines = [b"http://e.com/1", b"http://[::ffff:192.168.0.1]/", b"http://127.0.0.1:8000/"]
    code, report = seed(capsys, redis_url, "--file", str(write(tmp_path / "seeds.txt", lines)))
    assert code == 0 and report["rejected_by_kind"] == {"private_address": 1}
    assert redis_client.lrange("news:start_urls", 0, -1) == [b"http://e.com/1", b"http://127.0.0.1:8000/"]
