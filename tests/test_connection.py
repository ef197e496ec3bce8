"""Redis connections: ACL user:password, TLS (rediss://), masking, and a Redis restart mid-crawl."""

from __future__ import annotations

import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.connection.clients import RedisConfig, RedisUnavailable
from distributed_crawler.redact import mask_url
from tests.conftest import RedisServer, Workers
from tests.site.server import NewsSite


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:secret@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://user:secret@host:6380/1", "rediss://user:***@host:6380/1"),
        ("redis://user:p%40ss@host/0", "redis://user:***@host/0"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_bad_scheme_is_rejected_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"REDIS_URL \(http://u:\*\*\*@h/0\) must start with redis://"):
        RedisConfig.from_settings(Settings({"REDIS_URL": "http://u:pw@h/0"}))


def test_wrong_password_says_so(redis_url: str, redis_client: redis.Redis) -> None:
    redis_client.acl_setuser(
        "crawler", enabled=True, passwords=["+right-pw"], keys=["*"], channels=["*"], commands=["+@all"]
    )
    url = redis_url.replace("redis://", "redis://crawler:wrong-pw@")
    with pytest.raises(RedisUnavailable) as info:
        RedisConfig(url=url).check_reachable()
    assert "crawler:***@" in str(info.value) and "wrong-pw" not in str(info.value)


def rows(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT url FROM items")}


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(90)
def test_crawl_as_acl_user_never_logs_the_password(
    site: NewsSite, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    redis_client.acl_setuser(
        "crawler", enabled=True, passwords=["+acl-pw-123"], keys=["*"], channels=["*"], commands=["+@all"]
    )
    url = redis_url.replace("redis://", "redis://crawler:acl-pw-123@")
    workers = Workers(
        tmp_path,
        {"REDIS_URL": url, "STORAGE_URL": f"sqlite:///{tmp_path / 'items.db'}", "MAX_IDLE_TIME_BEFORE_CLOSE": "2"},
    )
    redis_client.lpush("news:start_urls", site.url + "/")
    try:
        workers.start("acl", "LOG_LEVEL=DEBUG")
        assert workers.wait_all(60) == {"acl": 0}
    finally:
        workers.stop_all()
    assert rows(tmp_path / "items.db") == site.expected_urls()
    log = workers.log("acl")
    assert "acl-pw-123" not in log and "crawler:***@" in log


@pytest.fixture(scope="module")
def tls_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tls")

    def sh(*args: str) -> None:
        subprocess.run(args, cwd=d, check=True, capture_output=True, timeout=60)

    sh(
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
    )
    sh(
        "openssl",
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    )
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    sh(
        "openssl",
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    )
    return d


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(90)
def test_crawl_over_tls(site: NewsSite, tls_certs: Path, tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.extra = (
        "--port",
        "0",
        "--tls-port",
        str(server.port),
        "--tls-cert-file",
        str(tls_certs / "server.crt"),
        "--tls-key-file",
        str(tls_certs / "server.key"),
        "--tls-ca-cert-file",
        str(tls_certs / "ca.crt"),
        "--tls-auth-clients",
        "no",
    )
    url = f"rediss://127.0.0.1:{server.port}/0?ssl_ca_certs={tls_certs / 'ca.crt'}"
    server.url_override = url
    server.start()
    try:
        redis.Redis.from_url(url).lpush("news:start_urls", site.url + "/")
        workers = Workers(
            tmp_path,
            {"REDIS_URL": url, "STORAGE_URL": f"sqlite:///{tmp_path / 'items.db'}", "MAX_IDLE_TIME_BEFORE_CLOSE": "2"},
        )
        try:
            workers.start("tls")
            assert workers.wait_all(60) == {"tls": 0}
        finally:
            workers.stop_all()
    finally:
        server.stop()
    assert rows(tmp_path / "items.db") == site.expected_urls()


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_redis_restart_mid_crawl_is_survived(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, "--appendonly", "yes", "--appendfsync", "always").start()
    db = tmp_path / "items.db"
    workers = Workers(
        tmp_path, {"REDIS_URL": server.url, "STORAGE_URL": f"sqlite:///{db}", "MAX_IDLE_TIME_BEFORE_CLOSE": "3"}
    )
    try:
        with NewsSite(articles=200, per_page=20, delay=0.05) as site:
            workers.start("survivor", "CONCURRENT_REQUESTS=4")
            workers.wait_ready("survivor")
            redis.Redis.from_url(server.url).lpush("news:start_urls", site.url + "/")
            deadline = time.monotonic() + 30
            while site.hits("/article") < 20:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            server.stop()  # SIGTERM: Redis flushes its AOF and exits
            time.sleep(3)
            server.start()
            assert workers.wait_all(90) == {"survivor": 0}
            expected = site.expected_urls()
    finally:
        workers.stop_all()
        server.stop()
    assert rows(db) == expected
    log = workers.log("survivor")
    assert "Traceback" not in log
    # the node's Redis policy: one line when the outage starts, one when it ends (a flap at most)
    starts, backs = log.count(" unreachable since "), log.count(" back after ")
    assert 1 <= starts <= 2 and backs == starts, "an outage is logged once per node, not per call or purpose"
