"""scrapy-redis's connection settings: REDIS_URL, else REDIS_HOST/PORT/DB, plus REDIS_PARAMS.

scrapy-redis builds its client as `redis_cls.from_url(url, **params)` (or `redis_cls(**params)`),
`params` being `REDIS_PARAMS` with each of `REDIS_URL`, `REDIS_HOST`, `REDIS_PORT`, `REDIS_DB`
laid over it when the setting is set (truthy); a URL, from either place, beats host/port/db. We
keep that precedence and turn the result into one URL plus the connection options our own clients
accept; `redis_cls` and the text options (`encoding`, `decode_responses`) only shape the project's
own client, `spider.server` (compat/server.py): our components need bytes.
"""

from __future__ import annotations

import json
from typing import Any

from distributed_crawler.defaults import SettingsReader

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6379
# REDIS_PARAMS keys our asyncio/sync clients take too (connection options, credentials, TLS).
CLIENT_PARAMS = frozenset(
    {
        "password",
        "username",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "socket_keepalive_options",
        "health_check_interval",
        "retry_on_timeout",
        "ssl",
        "ssl_keyfile",
        "ssl_certfile",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_check_hostname",
        "ssl_password",
        "ssl_min_version",
        "ssl_ciphers",
    }
)
# Keys that say where the server is: turned into the URL, never passed on as options.
ADDRESS_PARAMS = ("url", "host", "port", "db")


def redis_params(settings: Any) -> dict[str, Any]:
    """REDIS_PARAMS as a dict (a dict in settings.py, or a JSON object with `-s`)."""
    raw = SettingsReader(settings).raw("REDIS_PARAMS")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raw = None
    if raw is None:
        return {}
    if not isinstance(raw, dict) and hasattr(raw, "copy_to_dict"):  # a Scrapy BaseSettings
        raw = raw.copy_to_dict()
    if not isinstance(raw, dict):
        raise ValueError(f"REDIS_PARAMS ({str(raw)[:100]}) must be a dict, e.g. {{'socket_timeout': 30}}")
    return dict(raw)


def _setting(settings: Any, name: str) -> str | int | float | None:
    """A connection setting if set (truthy, as scrapy-redis reads them), else None."""
    value = SettingsReader(settings).raw(name)
    if not value:
        return None
    if not isinstance(value, (str, int, float)):
        raise ValueError(f"{name} ({str(value)[:100]}) must be a string or a number")
    return value


def effective_url(settings: Any, params: dict[str, Any] | None = None) -> str:
    """The server's URL: REDIS_URL, else REDIS_PARAMS["url"], else one built from REDIS_HOST /
    REDIS_PORT / REDIS_DB (each falling back to REDIS_PARAMS, then 127.0.0.1:6379/0)."""
    params = redis_params(settings) if params is None else params
    url = _setting(settings, "REDIS_URL") or params.get("url")
    if url:
        return str(url)
    host = str(_setting(settings, "REDIS_HOST") or params.get("host") or DEFAULT_HOST)
    port = _setting(settings, "REDIS_PORT") or params.get("port") or DEFAULT_PORT
    db = _setting(settings, "REDIS_DB") or params.get("db") or 0
    try:
        port, db = int(port), int(db)
    except (TypeError, ValueError):
        raise ValueError(f"REDIS_PORT ({port}) and REDIS_DB ({db}) must be integers") from None
    if not 0 < port < 65536 or db < 0:
        raise ValueError(f"REDIS_PORT ({port}) must be 1-65535 and REDIS_DB ({db}) >= 0")
    if ":" in host and not host.startswith("["):  # an IPv6 address
        host = f"[{host}]"
    return f"redis://{host}:{port}/{db}"


def client_options(params: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The REDIS_PARAMS options our own clients take, as sorted pairs (for a frozen config)."""
    return tuple(sorted((k, v) for k, v in params.items() if k in CLIENT_PARAMS))
