"""`dcrawl sources SPIDER import / export / show / remove` against a real redis-server, and a node's
control watch picking a change up (core/pause.py, core/registry.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from scrapy.settings import Settings

from distributed_crawler.cli.main import main
from distributed_crawler.connection.policy import RedisPolicy
from distributed_crawler.core.crawl_control import CrawlControl
from distributed_crawler.core.pause import PauseWatch
from distributed_crawler.core.registry import SourceCache
from distributed_crawler.frontier.factory import frontier_for_mode
from distributed_crawler.frontier.keys import SpiderKeys

OUTLETS = (
    "url,name,country,language,tags,deny,rate\n"
    "https://www.lemonde.fr/,Le Monde,FR,fr,national;daily,/video/,2\n"
    "https://example.com/,Example,US,en,local,,\n"
)


def _dcrawl(redis_url: str, *args: str) -> int:
    return main([*args, "--redis-url", redis_url])


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_import_writes_seeds_and_audits_then_reimport_replaces(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch
) -> None:
    monkeypatch.setenv("USER", "alice")
    assert _dcrawl(redis_url, "sources", "news", "import", _write(tmp_path, "o.csv", OUTLETS)) == 0
    out = capsys.readouterr().out
    assert "2 new (seeded into news:start_urls), 0 replaced, 0 unchanged" in out
    assert set(redis_client.hkeys("{news}:registry")) == {b"lemonde.fr", b"example.com"}
    assert redis_client.get("{news}:registry:version") == b"1"
    seeds = [json.loads(s) for s in redis_client.lrange("news:start_urls", 0, -1)]
    assert {s["url"] for s in seeds} == {"https://www.lemonde.fr/", "https://example.com/"}
    assert {s["callback"] for s in seeds} == {"parse_site"}  # as `dcrawl seed --site`
    # rate 2/s is the domain's override delay, which the lease applies
    assert json.loads(redis_client.hget("{news}:overrides", "lemonde.fr"))["delay"] == 0.5
    # re-import: one entry replaced (new tags, no rate), one unchanged, nothing seeded again
    again = OUTLETS.replace("national;daily,/video/,2", "national,/video/,")
    assert _dcrawl(redis_url, "sources", "news", "import", _write(tmp_path, "o2.csv", again), "--by", "bob") == 0
    assert "0 new, 1 replaced, 1 unchanged" in capsys.readouterr().out
    assert redis_client.llen("news:start_urls") == 2
    assert json.loads(redis_client.hget("{news}:registry", "lemonde.fr"))["tags"] == ["national"]
    assert redis_client.hget("{news}:overrides", "lemonde.fr") is None  # the rate's delay went with it
    assert _dcrawl(redis_url, "audit", "news", "--json") == 0
    audit = [(e["action"], e["target"], e["by"]) for e in json.loads(capsys.readouterr().out)]
    assert audit == [
        ("source_import", "lemonde.fr", "alice"),
        ("source_import", "example.com", "alice"),
        ("set", "lemonde.fr", "alice"),
        ("source_import", "lemonde.fr", "bob"),
        ("unset", "lemonde.fr", "bob"),
    ]
    # export -> remove -> import --no-seed gives the same registry back, unseeded
    assert _dcrawl(redis_url, "sources", "news", "export", str(tmp_path / "all.yaml")) == 0
    before = redis_client.hgetall("{news}:registry")
    assert _dcrawl(redis_url, "sources", "news", "remove", "le monde", "example.com") == 0
    assert redis_client.hlen("{news}:registry") == 0
    assert _dcrawl(redis_url, "sources", "news", "import", str(tmp_path / "all.yaml"), "--no-seed") == 0
    assert "2 new (not seeded: --no-seed)" in capsys.readouterr().out
    assert redis_client.hgetall("{news}:registry") == before and redis_client.llen("news:start_urls") == 2


def test_a_bad_file_writes_nothing_and_says_each_bad_record(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = OUTLETS + "ftp://x.org/,X,,,,,\nhttps://y.org/,Y,Yland,,,,\n"
    assert _dcrawl(redis_url, "sources", "news", "import", _write(tmp_path, "bad.csv", bad)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "line 4: url ('ftp://x.org/')" in err[0] and "line 5: country ('Yland')" in err[1]
    assert err[2] == "dcrawl: nothing imported: 2 bad record(s); fix them and import again"
    assert redis_client.keys("*") == []
    for args in (
        ("import", str(tmp_path / "missing.csv")),
        ("import", _write(tmp_path, "x.txt", "url\n")),
        ("show", "nobody"),
        ("remove",),
        ("import",),
    ):
        assert _dcrawl(redis_url, "sources", "news", *args) == 2, args
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, args
    # a literal private address is refused as `dcrawl seed` refuses it: nothing imported
    private = _write(tmp_path, "p.jsonl", json.dumps({"url": "http://10.1.2.3/"}) + "\n")
    assert _dcrawl(redis_url, "sources", "news", "import", private) == 2
    assert "ALLOWED_PRIVATE_NETWORKS" in capsys.readouterr().err
    assert redis_client.keys("{news}:registry*") == [] and redis_client.keys("news:start_urls") == []


def test_show_names_the_source_and_its_refusals(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert _dcrawl(redis_url, "sources", "news", "import", _write(tmp_path, "o.csv", OUTLETS), "--no-seed") == 0
    redis_client.hset("{news}:refused", mapping={"source_deny www.lemonde.fr": 3, "source_deny example.com": 5})
    capsys.readouterr()
    assert _dcrawl(redis_url, "sources", "news", "show", "lemonde.fr", "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == "Le Monde" and shown["tags"] == ["national", "daily"]
    assert shown["refused"] == {"source_deny": 3}


def test_a_node_applies_a_change_at_its_next_control_read_and_only_rereads_on_change(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    keys = SpiderKeys.from_settings(Settings(), "news")

    async def refresh(watch: PauseWatch) -> int:
        redis_client.config_resetstat()
        await watch.refresh()
        return int(redis_client.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0))

    async def run() -> list[tuple[int, int]]:
        client = aioredis.Redis.from_url(redis_url)
        frontier = frontier_for_mode(client, keys, "host")
        cache = SourceCache()
        watch = PauseWatch(frontier, RedisPolicy("redis://test"), None, cache)
        seen = [(await refresh(watch), len(cache.table))]
        assert (
            main(
                ["sources", "news", "import", _write(tmp_path, "o.csv", OUTLETS), "--no-seed"]
                + ["--redis-url", redis_url]
            )
            == 0
        )
        seen.append((await refresh(watch), len(cache.table)))
        seen.append((await refresh(watch), len(cache.table)))  # nothing changed: the registry is not read
        assert main(["sources", "news", "remove", "Example", "--redis-url", redis_url]) == 0
        seen.append((await refresh(watch), len(cache.table)))
        await client.aclose()
        return seen

    # hgetall calls per refresh (the overrides' one, plus the registry's when its version moved)
    assert asyncio.run(run()) == [(1, 0), (2, 2), (1, 2), (2, 1)]


def test_garbage_in_the_registry_keys_is_one_line_and_changes_nothing(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    outlets = _write(tmp_path, "o.csv", OUTLETS)
    redis_client.set("{news}:registry:version", "not a number")
    assert _dcrawl(redis_url, "sources", "news", "import", outlets, "--no-seed") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "{news}:registry:version is not a whole number" in err[0]
    assert not redis_client.exists("{news}:registry")  # nothing half-written: the version did not move
    redis_client.delete("{news}:registry:version")
    redis_client.rpush("{news}:registry", "x")
    for args in (("import", outlets), ("export",), ("show", "x"), ("remove", "x"), ()):
        assert _dcrawl(redis_url, "sources", "news", *args) == 1, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "redis-cli type '{news}:registry'" in err[0], args


def test_a_node_keeps_its_pause_and_overrides_and_logs_once_when_the_registry_is_garbage(
    redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    keys = SpiderKeys.from_settings(Settings(), "news")
    redis_client.rpush("{news}:registry", "x")  # a list where the hash should be
    redis_client.set("{news}:registry:version", "3")
    redis_client.hset("{news}:overrides", "example.com", json.dumps({"delay": 2}))

    async def run() -> SourceCache:
        client = aioredis.Redis.from_url(redis_url)
        frontier = frontier_for_mode(client, keys, "host")
        cache = SourceCache()
        watch = PauseWatch(frontier, RedisPolicy("redis://test"), None, cache)
        for _ in range(3):
            await watch.refresh()
        redis_client.delete("{news}:registry:version")
        redis_client.hset("{news}:registry:version", "x", "y")  # garbage version: read as none
        state = await CrawlControl.of(frontier).control_state()
        assert state[1] == {b"example.com": b'{"delay": 2}'} and state[2] is None
        await client.aclose()
        return cache

    cache = asyncio.run(run())
    assert len(cache.table) == 0 and cache.version is None
    assert sum("Source registry {news}:registry not read" in r.message for r in caplog.records) == 1


def test_names_after_a_flag_join_the_verbs_list(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert _dcrawl(redis_url, "sources", "news", "import", _write(tmp_path, "o.csv", OUTLETS), "--no-seed") == 0
    assert main(["sources", "news", "remove", "Example", "--by", "bob", "Le Monde", "--redis-url", redis_url]) == 0
    assert "removed 2 source(s)" in capsys.readouterr().out and redis_client.hlen("{news}:registry") == 0


def test_a_registered_source_is_backfilled_by_name(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    """`dcrawl seed news --site "Le Monde" --since ... --until ...` seeds the source's own URL with
    the window (a source in the registry can be backfilled by name); an unknown name is one line."""
    assert _dcrawl(redis_url, "sources", "news", "import", _write(tmp_path, "o.csv", OUTLETS), "--no-seed") == 0
    assert redis_client.llen("news:start_urls") == 0
    args = [
        "seed",
        "news",
        "--site",
        "le monde",
        "--site",
        "example.com",
        "--since",
        "2026-09-01",
        "--until",
        "2026-09-30",
    ]
    assert _dcrawl(redis_url, *args) == 0
    seeds = [json.loads(raw) for raw in redis_client.lrange("news:start_urls", 0, -1)]
    assert sorted(seed["url"] for seed in seeds) == ["https://example.com/", "https://www.lemonde.fr/"]
    assert all(seed["meta"]["backfill"] for seed in seeds), seeds
    assert _dcrawl(redis_url, "seed", "news", "--site", "Le Figaro", "--since", "2026-09-01") == 1
    assert redis_client.llen("news:start_urls") == 2


def test_an_operators_delay_wins_over_the_registrys_rate(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """An import used to overwrite `dcrawl host --delay` with the source's rate (and a remove to
    delete it): the operator's delay stands; unset, the site falls back to its source's rate."""

    def delay() -> float | None:
        raw = redis_client.hget("{news}:overrides", "lemonde.fr")
        return json.loads(raw).get("delay") if raw else None

    assert _dcrawl(redis_url, "host", "news", "lemonde.fr", "set", "--delay", "5", "--concurrency", "1") == 0
    assert _dcrawl(redis_url, "sources", "news", "import", _write(tmp_path, "o.csv", OUTLETS), "--no-seed") == 0
    assert "lemonde.fr keeps its operator's delay" in capsys.readouterr().out
    assert delay() == 5.0  # not the rate's 0.5
    faster = OUTLETS.replace(",/video/,2", ",/video/,4")
    assert _dcrawl(redis_url, "sources", "news", "import", _write(tmp_path, "o2.csv", faster), "--no-seed") == 0
    assert delay() == 5.0
    assert _dcrawl(redis_url, "host", "news", "lemonde.fr", "unset", "--delay") == 0
    assert delay() == 0.25  # the source's rate 4/s, once the operator's delay is gone
    assert json.loads(redis_client.hget("{news}:overrides", "lemonde.fr"))["concurrency"] == 1
    assert _dcrawl(redis_url, "sources", "news", "import", _write(tmp_path, "o3.csv", OUTLETS), "--no-seed") == 0
    assert delay() == 0.5  # the registry's delay follows the registry
    assert _dcrawl(redis_url, "host", "news", "lemonde.fr", "show") == 0
    assert "delay 0.5 (its source's rate)" in capsys.readouterr().out
    assert _dcrawl(redis_url, "host", "news", "lemonde.fr", "set", "--delay", "3") == 0
    assert _dcrawl(redis_url, "sources", "news", "remove", "Le Monde") == 0
    assert delay() == 3.0  # a remove leaves the operator's delay alone
