"""scrapy-redis's connection settings (its tests/test_connection.py and ConnectionTest pin them):
REDIS_URL beats REDIS_HOST/PORT/DB, which fall back to REDIS_PARAMS, then the defaults; REDIS_PARAMS
adds client options and `redis_cls`. One difference, on purpose: the default host is 127.0.0.1
(scrapy-redis: localhost), which never resolves to an IPv6 address the server does not listen on."""

from __future__ import annotations

from unittest import mock

import pytest
import redis
from scrapy.settings import Settings

from distributed_crawler.compat.server import server_from_settings
from distributed_crawler.connection.clients import RedisConfig
from distributed_crawler.connection.params import effective_url


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REDIS_URL", "REDIS_CLUSTER", "REDIS_SENTINELS", "REDIS_SENTINEL_MASTER"):
        monkeypatch.delenv(name, raising=False)


def _kwargs(settings: dict) -> dict:
    return server_from_settings(Settings(settings)).connection_pool.connection_kwargs


def test_redis_url_alone() -> None:
    args = _kwargs({"REDIS_URL": "redis://foo:bar@localhost:9001/42"})
    assert (args["host"], args["port"], args["password"], args["db"]) == ("localhost", 9001, "bar", 42)


def test_host_and_port() -> None:
    args = _kwargs({"REDIS_HOST": "localhost", "REDIS_PORT": 9001})
    assert (args["host"], args["port"]) == ("localhost", 9001)
    assert RedisConfig.from_settings(Settings({"REDIS_HOST": "h", "REDIS_PORT": 9001, "REDIS_DB": 3})).url == (
        "redis://h:9001/3"
    )


def test_url_beats_host_and_port() -> None:
    settings = {"REDIS_HOST": "baz", "REDIS_PORT": 1337, "REDIS_URL": "redis://foo:bar@localhost:9001/42"}
    args = _kwargs(settings)
    assert (args["host"], args["port"], args["password"], args["db"]) == ("localhost", 9001, "bar", 42)
    assert RedisConfig.from_settings(Settings(settings)).url == "redis://foo:bar@localhost:9001/42"


def test_host_and_port_when_url_is_none() -> None:
    args = _kwargs({"REDIS_HOST": "baz", "REDIS_PORT": 1337, "REDIS_URL": None})
    assert (args["host"], args["port"]) == ("baz", 1337)


def test_defaults() -> None:
    args = _kwargs({})
    assert (args["host"], args["port"], args["db"]) == ("127.0.0.1", 6379, 0)


def test_env_redis_url_beats_the_project_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://envhost:7000/1")
    assert RedisConfig.from_settings(Settings({"REDIS_HOST": "projecthost", "REDIS_PORT": 1})).url == (
        "redis://envhost:7000/1"
    )


def test_params_rank_below_the_settings_of_the_same_name() -> None:
    params = {"host": "paramhost", "port": 7001, "db": 2}
    assert effective_url(Settings({"REDIS_PARAMS": params})) == "redis://paramhost:7001/2"
    assert effective_url(Settings({"REDIS_PARAMS": params, "REDIS_HOST": "sethost"})) == "redis://sethost:7001/2"
    with_url = {"url": "redis://paramurl:7002/4", **params}
    assert effective_url(Settings({"REDIS_PARAMS": with_url, "REDIS_HOST": "sethost"})) == "redis://paramurl:7002/4"
    assert (
        effective_url(Settings({"REDIS_PARAMS": with_url, "REDIS_URL": "redis://seturl:1/0"})) == "redis://seturl:1/0"
    )
    assert effective_url(Settings({"REDIS_PARAMS": '{"host": "fromjson"}'})) == "redis://fromjson:6379/0"


def test_params_reach_our_clients() -> None:
    params = {
        "password": "s3cret",
        "socket_timeout": 7,
        "socket_connect_timeout": 2,
        "socket_keepalive": True,
        "encoding": "latin-1",
        "decode_responses": True,
    }
    config = RedisConfig.from_settings(Settings({"REDIS_HOST": "h", "REDIS_PARAMS": params}))
    assert config.socket_timeout == 7
    assert "s3cret" not in config.masked_url
    sync = config.sync_client().connection_pool.connection_kwargs
    assert (sync["host"], sync["password"], sync["socket_timeout"], sync["socket_keepalive"]) == (
        "h",
        "s3cret",
        7,
        True,
    )
    assert sync["socket_connect_timeout"] == 2
    assert sync["decode_responses"] is False  # our components read bytes, whatever the project's client does
    server = server_from_settings(Settings({"REDIS_HOST": "h", "REDIS_PARAMS": params}))
    assert server.connection_pool.connection_kwargs["decode_responses"] is True


def test_scrapy_redis_server_defaults_and_overrides() -> None:
    args = _kwargs({})
    assert (args["socket_timeout"], args["socket_connect_timeout"], args["retry_on_timeout"]) == (30, 30, True)
    args = _kwargs({"REDIS_PARAMS": {"socket_timeout": 3}})
    assert args["socket_timeout"] == 3


def test_redis_cls_as_class_or_path() -> None:
    cls = mock.Mock()
    server = server_from_settings(Settings({"REDIS_HOST": "h", "REDIS_PARAMS": {"redis_cls": cls, "flag": False}}))
    assert server is cls.from_url.return_value
    cls.from_url.assert_called_with(
        "redis://h:6379/0",
        socket_timeout=30,
        socket_connect_timeout=30,
        retry_on_timeout=True,
        encoding="utf-8",
        flag=False,
    )
    assert isinstance(server_from_settings(Settings({"REDIS_PARAMS": {"redis_cls": "redis.Redis"}})), redis.Redis)
    with pytest.raises(ValueError, match="redis_cls"):
        server_from_settings(Settings({"REDIS_PARAMS": {"redis_cls": "no.such.Class"}}))


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"REDIS_PORT": "x"}, "REDIS_PORT"),
        ({"REDIS_PORT": 70000}, "REDIS_PORT"),
        ({"REDIS_PARAMS": "[1]"}, "REDIS_PARAMS"),
        ({"REDIS_PARAMS": {"socket_timeout": 0}}, "socket_timeout"),
    ],
)
def test_bad_values_fail_with_the_setting_named(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RedisConfig.from_settings(Settings(settings))


def test_a_project_on_host_and_port_reaches_its_server(redis_server) -> None:
    config = RedisConfig.from_settings(Settings({"REDIS_HOST": "127.0.0.1", "REDIS_PORT": redis_server.port}))
    config.check_reachable()
