"""How a key setting of defaults.py becomes a Redis key name: the one place a template is filled.

Key settings are `%`-templates: `%(spider)s` (and scrapy-redis's alias `%(name)s`) is the spider, or
a frontier shard's hash tag (frontier/shards.py); some take one more part (`%(host)s`, `%(node)s`,
`%(domain)s`, `%(source)s`). The objects that own keys (frontier/keys.py `SpiderKeys`,
frontier/seedkey.py `SeedKey`, monitoring/nodes.py `NodeKeys`, the events, news, proxy, politeness,
robots.txt and rendering configs) resolve their names through here, so a template is filled the
same way everywhere and docs/architecture.md §4 lists what they produce (tests/test_keyspace.py).
"""

from __future__ import annotations

from typing import Any

from distributed_crawler.defaults import DEFAULTS, SettingsReader


def fill(template: str, spider: str, **parts: str) -> str:
    """`template` with the spider (or shard tag) and `parts` filled in."""
    return template % {"spider": spider, "name": spider, **parts}


def key(settings: Any, name: str, spider: str, **parts: str) -> str:
    """The key setting `name` (project value, else its default) filled for `spider`."""
    return fill(SettingsReader(settings).str(name), spider, **parts)


def default(name: str) -> str:
    """The default template of key setting `name`, for a config dataclass's field default."""
    value = DEFAULTS[name]
    assert isinstance(value, str), name
    return value


def check_template(name: str, template: str, *parts: str) -> None:
    """ValueError naming the setting when `template` takes other parts than the spider and `parts`."""
    try:
        fill(template, "news", **dict.fromkeys(parts, "x"))
    except (KeyError, ValueError, TypeError):
        allowed = ", ".join(f"%({p})s" for p in ("spider", *parts))
        raise ValueError(f"{name} ({template!r}) must be a key name with at most {allowed} in it") from None
