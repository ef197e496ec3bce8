"""Redis ACL users and TLS set up wrong: one line at start naming the fix, exit 2; an ACL changed
mid-crawl: an ERROR naming the rule, the node waits and finishes once it is fixed.

Each test starts its own redis-server (ACL users made by the default user, TLS with a self-signed
certificate made by the `openssl` CLI).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.core.access import check_node_access, node_needs
from tests.conftest import ROOT, RedisServer, Workers, crawl_preflight, dcrawl, one_error_line, stored_rows, wait_for
from tests.redis_topologies import RedisClusterNodes
from tests.site.server import NewsSite

pytestmark = pytest.mark.e2e

PASSWORD = "acl-test-pw"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    redis_server = RedisServer(tmp_path).start()
    yield redis_server
    redis_server.stop()


def user_url(server: RedisServer, user: str) -> str:
    return f"redis://{user}:{PASSWORD}@127.0.0.1:{server.port}/0"


def set_user(server: RedisServer, user: str, *rules: str) -> str:
    """Create (or redefine) `user` with `rules`; its REDIS_URL."""
    admin = redis.Redis.from_url(server.url)
    try:
        admin.execute_command("ACL", "SETUSER", user, "reset", "on", f">{PASSWORD}", *rules)
    finally:
        admin.close()
    return user_url(server, user)


def one_cli_line(proc: subprocess.CompletedProcess) -> str:
    """`dcrawl`'s one line for a refused start: exit 1, one line on stderr, no traceback."""
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("user", "rules", "says"),
    [
        # (a) every command but the scripts: the node runs Lua scripts for everything it does
        (
            "noscript",
            ("~*", "&*", "+@all", "-@admin", "-@scripting"),
            ("may not run evalsha", "ACL SETUSER noscript +@scripting"),
        ),
        # (b) a key pattern that misses the spider's hash tag and the seed key's hold zset
        (
            "newsonly",
            ("~news*", "&*", "+@all", "-@admin"),
            ("may not use the keys {news}*, {news:start_urls}*", "ACL SETUSER newsonly ~{news}* ~{news:start_urls}*"),
        ),
    ],
)
def test_missing_permissions_are_one_line_at_start(
    server: RedisServer, user: str, rules: tuple[str, ...], says: tuple[str, ...]
) -> None:
    url = set_user(server, user, *rules)
    line = one_error_line(crawl_preflight({"REDIS_URL": url}))
    for part in (*says, "~{news}*", "&{news}:doorbell", "docs/security.md"):
        assert part in line, line
    assert PASSWORD not in line and "corrupt key" not in line
    # an operator's command with the same user says the same kind of line
    cli = one_cli_line(dcrawl(url, "status", "news"))
    for part in says:
        assert part in cli, cli


@pytest.mark.parametrize(
    ("rules", "args", "says"),
    [
        # commands that word a refused read as a key of the wrong type unless they pass the refusal on
        (("-xread", "-xreadgroup"), ("events", "news"), ("may not run 'xread'", "add `+xread`")),
        (("-@scripting",), ("sources", "news"), ("may not run evalsha", "ACL SETUSER reader +@scripting")),
        (
            ("-@scripting",),
            ("sources", "news", "import", "SOURCES", "--no-seed"),
            ("may not run evalsha", "ACL SETUSER reader +@scripting"),
        ),
        (("-rpush",), ("seed", "news", "https://news.example/"), ("may not run 'rpush'", "add `+rpush`")),
    ],
)
def test_a_command_refused_by_the_acl_says_which_permission_and_its_fix(
    server: RedisServer, tmp_path: Path, rules: tuple[str, ...], args: tuple[str, ...], says: tuple[str, ...]
) -> None:
    """Not Redis's raw NOPERM text inside another error's words ("check its type"), but the one line
    that names the permission and how to add it."""
    admin = redis.Redis.from_url(server.url)
    try:
        admin.flushall()
        admin.xadd("{news}:events", {"event": "new", "url": "https://news.example/a"})
        admin.zadd("{news}:sources", {"news.example": 1})
    finally:
        admin.close()
    sources = tmp_path / "sources.csv"
    sources.write_text("url\nhttps://news.example/\n")
    url = set_user(server, "reader", "~*", "&*", "+@all", "-@admin", *rules)
    line = one_cli_line(dcrawl(url, *(str(sources) if a == "SOURCES" else a for a in args)))
    for part in (*says, "docs/security.md"):
        assert part in line, line
    assert "check its type" not in line and "must say hash" not in line and "should be a sorted set" not in line
    assert PASSWORD not in line


def test_deploy_redis_conf_user_passes_the_check(server: RedisServer) -> None:
    """The ACL user deploy/redis.conf gives the crawler has everything a node needs, sharded or not."""
    line = next(line for line in (ROOT / "deploy" / "redis.conf").read_text().splitlines() if "user crawler on" in line)
    rules = [rule for rule in line.lstrip("# ").split()[3:] if not rule.startswith(">")]
    url = set_user(server, "crawler", *rules)
    for settings in ({}, {"FRONTIER_SHARDS": 6}, {"SCHEDULER_QUEUE_CLASS": "priority", "FRONTIER_SHARDS": 2}):
        check_node_access(Settings(settings), RedisConfig(url=url), "news")  # raises PermissionDenied


def test_a_user_with_the_keys_of_another_spider_is_refused(server: RedisServer) -> None:
    """The rule a node of `news` needs does not let a node of `sport` in; the line names sport's keys."""
    url = set_user(server, "newsnode", *node_needs(Settings(), "news").rule.split())
    check_node_access(Settings(), RedisConfig(url=url), "news")
    with pytest.raises(Exception, match=re.escape("ACL SETUSER newsnode ~{sport}* ~sport:start_urls")):
        check_node_access(Settings(), RedisConfig(url=url), "sport")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_check_on_a_redis_cluster(tmp_path: Path) -> None:
    """On a 3-master Cluster (every node keeps its own users) with shards on every master: the rule
    a sharded node needs lets it in; a key pattern without the shards' tags is named, tag by tag."""
    cluster = RedisClusterNodes(tmp_path).start()
    try:
        sharded = Settings({"FRONTIER_SHARDS": 6})
        needs = node_needs(sharded, "news")
        for port in cluster.live_ports():
            admin = redis.Redis(port=port)
            admin.execute_command("ACL", "SETUSER", "node", "reset", "on", f">{PASSWORD}", *needs.rule.split())
            admin.execute_command("ACL", "SETUSER", "one", "reset", "on", f">{PASSWORD}", "~{news}*", "~news:*")
            admin.execute_command("ACL", "SETUSER", "one", "~{news:*", "~dc:*", "&*", "+@all", "-@admin")
            admin.close()
        url = f"redis://node:{PASSWORD}@127.0.0.1:{cluster.live_ports()[0]}/0"
        check_node_access(sharded, RedisConfig(url=url, cluster=True), "news")
        with pytest.raises(Exception, match=r"may not use the keys \{news~0\.\d+\}\*, .*on every node of the cluster"):
            check_node_access(sharded, RedisConfig(url=url.replace("node:", "one:"), cluster=True), "news")
    finally:
        cluster.stop()


# -- TLS ---------------------------------------------------------------------------------------
@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[RedisServer, Path]]:
    """A TLS-only redis-server whose certificate is self-signed (its own CA)."""
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=60,
    )
    redis_server = RedisServer(tmp_path)
    cert = tmp_path / "server.crt"
    redis_server.extra = (
        "--port",
        "0",
        "--tls-port",
        str(redis_server.port),
        "--tls-cert-file",
        str(cert),
        "--tls-key-file",
        str(tmp_path / "server.key"),
        "--tls-ca-cert-file",
        str(cert),
        "--tls-auth-clients",
        "no",
    )
    redis_server.url_override = f"rediss://127.0.0.1:{redis_server.port}/0?ssl_ca_certs={cert}"
    redis_server.start()
    yield redis_server, cert
    redis_server.stop()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_tls_without_the_ca_names_ssl_ca_certs(tls_server: tuple[RedisServer, Path]) -> None:
    server, cert = tls_server
    url = f"rediss://127.0.0.1:{server.port}/0"  # no ssl_ca_certs: the self-signed certificate fails
    line = one_error_line(crawl_preflight({"REDIS_URL": url}))
    assert "TLS" in line and "certificate" in line and "ssl_ca_certs" in line, line
    assert "start redis-server" not in line
    cli = one_cli_line(dcrawl(url, "status", "news"))
    assert "TLS" in cli and "ssl_ca_certs" in cli and "start redis-server" not in cli, cli
    # the fix the line names works: a seed goes in and status reads it back over TLS
    fixed_url = f"{url}?ssl_ca_certs={cert}"
    seeded = dcrawl(fixed_url, "seed", "news", "http://e.com/", "--new")
    assert seeded.returncode == 0, seeded.stderr
    fixed = dcrawl(fixed_url, "status", "news", "--json")
    assert fixed.returncode == 0 and json.loads(fixed.stdout)["seeds"] == 1, fixed.stderr


# -- an ACL changed mid-crawl ------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("narrowed", "add"),
    [(("-@scripting",), "`+@scripting`"), (("resetkeys", "~news:*"), "it")],
    ids=["no-scripting", "no-spider-keys"],
)
def test_acl_changed_mid_crawl_is_an_error_line_and_the_crawl_resumes(
    server: RedisServer, tmp_path: Path, narrowed: tuple[str, ...], add: str
) -> None:
    """The node runs with exactly the rule the start-up line recommends for `news` (so that rule is
    enough for a whole crawl); an operator narrows it before the seed comes: an ERROR naming
    what was refused and the rule, no traceback, no "corrupt key", nothing crawled meanwhile (every
    step is a script) and the node does not close as idle; put back, the crawl finishes whole."""
    rule = node_needs(Settings(), "news").rule.split()
    url = set_user(server, "crawler", *rule)
    db = tmp_path / "items.db"
    # MAX_IDLE_TIME_BEFORE_CLOSE: the node exits by itself once the crawl is done
    workers = Workers(tmp_path, {"REDIS_URL": url, "STORAGE_URL": f"sqlite:///{db}", "MAX_IDLE_TIME_BEFORE_CLOSE": "3"})
    admin = redis.Redis.from_url(server.url)
    try:
        with NewsSite(articles=40, per_page=10, delay=0.01) as site:
            workers.start("acl")
            workers.wait_ready("acl")
            set_user(server, "crawler", *rule, *narrowed)
            admin.lpush("news:start_urls", site.url + "/")
            wait_for("the refusal logged", lambda: "refused this user's call" in workers.log("acl"), 60, workers)
            time.sleep(4)  # longer than MAX_IDLE_TIME_BEFORE_CLOSE; calls keep being refused: still one line
            assert workers.procs["acl"].poll() is None and site.hits() == 0 and admin.llen("news:start_urls") == 1
            set_user(server, "crawler", *rule)
            assert workers.wait_all(120) == {"acl": 0}
            expected = site.expected_urls()
    finally:
        workers.stop_all()
        admin.close()
    assert set(stored_rows(db)) == expected
    log = workers.log("acl")
    refusals = [line for line in log.splitlines() if "refused this user's call" in line]
    assert 1 <= len(refusals) <= 3, refusals  # one per kind of refusal per minute
    assert all(f"add {add} to the user's ACL rule" in line and "+@all -@admin" in line for line in refusals)
    assert "Traceback" not in log and "corrupt key" not in log and PASSWORD not in log
