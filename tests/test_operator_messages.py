"""What `dcrawl` and a node say when the operator got something wrong: the truth, in one line."""

from __future__ import annotations

import json
import re

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.cli.events import since_to_id
from distributed_crawler.cli.main import main
from distributed_crawler.connection.clients import RedisConfig
from tests.conftest import ROOT, crawl_preflight, one_error_line


def test_status_of_an_unknown_spider_says_so_and_names_the_ones_there(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture
) -> None:
    assert main(["status", "news", "--redis-url", redis_url]) == 1  # an empty Redis: no crawl at all
    assert "no crawl named 'news'" in capsys.readouterr().err
    redis_client.lpush("news:start_urls", "https://example.com/")
    redis_client.hset("{sport}:stats", "pages", 3)
    assert main(["status", "nosuchspider", "--redis-url", redis_url]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no crawl named 'nosuchspider'" in err, err
    assert "spiders there: news" in err
    assert main(["status", "news", "--json", "--redis-url", redis_url]) == 0  # seeds only: a crawl
    assert json.loads(capsys.readouterr().out)["pending"] is not None


def test_seed_to_an_unknown_spider_warns_unless_new(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture
) -> None:
    redis_client.lpush("news:start_urls", "https://example.com/")
    assert main(["seed", "nwes", "https://example.org/", "--redis-url", redis_url]) == 0
    err = capsys.readouterr().err
    assert "warning: no crawl named 'nwes'" in err and "spiders there: news" in err and "--new" in err
    assert redis_client.llen("nwes:start_urls") == 1  # seeded all the same
    assert main(["seed", "sport", "https://example.org/", "--new", "--redis-url", redis_url]) == 0
    assert capsys.readouterr().err == ""
    assert main(["seed", "news", "https://example.org/b", "--redis-url", redis_url]) == 0
    assert capsys.readouterr().err == ""  # a crawl that exists: nothing to warn about


def test_events_since_0_is_the_start(redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture) -> None:
    assert since_to_id("0", 1e9) == since_to_id("0-0", 1e9) == since_to_id(None, 1e9) == "0-0"
    redis_client.xadd("{news}:events", {"event": "new", "url": "https://example.com/a", "version": "1"})
    assert main(["events", "news", "--since", "0", "--json", "--redis-url", redis_url]) == 0
    assert "https://example.com/a" in capsys.readouterr().out


def test_a_bad_port_in_redis_url_names_redis_url(capsys: pytest.CaptureFixture) -> None:
    for url in ("redis://127.0.0.1:99999/0", "redis://u:secret@127.0.0.1:port/0"):
        with pytest.raises(ValueError, match=r"^REDIS_URL \(.*\) has a bad port"):
            RedisConfig.from_settings(Settings({"REDIS_URL": url}))
        assert main(["status", "news", "--redis-url", url]) == 1
        err = capsys.readouterr().err
        assert "REDIS_URL" in err and "bad port" in err and "secret" not in err


@pytest.mark.e2e
def test_concurrent_requests_0_is_named_as_such(redis_url: str) -> None:
    line = one_error_line(crawl_preflight({"REDIS_URL": redis_url}, "-s", "CONCURRENT_REQUESTS=0"))
    assert "CONCURRENT_REQUESTS (0) must be >= 1" in line and "redis_batch_size" not in line


def test_the_readme_names_the_commands_of_its_first_block_as_they_are() -> None:
    """Its first block lists make targets; the sentence under it names which of them set themselves
    up, and each one named is in the block and the Makefile (it once said "both" above four)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    listed = re.findall(r"^make ([\w-]+)", block, re.M)
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    assert listed and set(listed) <= targets
    after = readme.split("```", 2)[2].split("\n\n", 2)[1]
    named = re.findall(r"`make ([\w-]+)`", after)
    assert named and set(named) <= set(listed), after
    assert not re.search(r"\b(both|the two) commands\b", after, re.I), after
