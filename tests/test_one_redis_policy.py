"""One Redis failure policy: outside connection/ no module decides what a Redis outage means.

A call site names its purpose (`RedisPolicy.run(Purpose.ACK, ...)`); it never catches
`TRANSIENT_ERRORS` nor redis-py's ConnectionError / TimeoutError itself (read with ast: fast).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "distributed_crawler"

REDIS_MODULES = ("redis", "redis.exceptions", "redis.asyncio", "redis.asyncio.client", "redis.client")
OUTAGE_NAMES = {"ConnectionError", "TimeoutError", "BusyLoadingError"}


def _redis_aliases(tree: ast.AST) -> set[str]:
    """Local names bound to redis-py's outage exceptions (`from redis.exceptions import
    ConnectionError as RedisConnectionError`), and the names redis itself is imported as."""
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in REDIS_MODULES:
            aliases.update(a.asname or a.name for a in node.names if a.name in OUTAGE_NAMES)
    return aliases


def _redis_modules(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.asname or a.name for a in node.names if a.name in REDIS_MODULES)
    return names


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def offences(source: str, filename: str) -> list[str]:
    """Where `source` decides about Redis outages itself."""
    tree = ast.parse(source, filename)
    aliases = _redis_aliases(tree)
    modules = _redis_modules(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "TRANSIENT_ERRORS":
            found.append(f"{filename}:{node.lineno} uses TRANSIENT_ERRORS")
        elif isinstance(node, ast.alias) and node.name == "TRANSIENT_ERRORS":
            found.append(f"{filename} imports TRANSIENT_ERRORS")
        elif isinstance(node, ast.ExceptHandler) and node.type is not None:
            caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            for each in caught:
                name = _dotted(each)
                head, _, last = name.rpartition(".")
                if name in aliases or (last in OUTAGE_NAMES and head and head.split(".")[0] in modules):
                    found.append(f"{filename}:{node.lineno} catches {name}")
    return found


def test_no_module_outside_connection_handles_redis_outages_itself() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("connection/"):
            continue
        found += offences(path.read_text(), relative)
    assert not found, (
        "run Redis calls through the node's RedisPolicy (connection/policy.py) with their Purpose "
        "instead of catching outages:\n" + "\n".join(found)
    )


def test_the_check_sees_every_way_of_catching_an_outage() -> None:
    caught = {
        "except TRANSIENT_ERRORS:": "uses TRANSIENT_ERRORS",
        "except TRANSIENT_ERRORS + (ResponseError,) as exc:": "uses TRANSIENT_ERRORS",
        "except redis.ConnectionError:": "catches redis.ConnectionError",
        "except (ValueError, redis.exceptions.TimeoutError):": "catches redis.exceptions.TimeoutError",
        "except RedisConnectionError:": "catches RedisConnectionError",
    }
    header = (
        "import redis\nimport redis.exceptions\n"
        "from redis.exceptions import ConnectionError as RedisConnectionError\n"
        "from distributed_crawler.connection.clients import TRANSIENT_ERRORS\n"
    )
    for clause, says in caught.items():
        found = offences(f"{header}try:\n    pass\n{clause}\n    pass\n", "m.py")
        assert any(says in line for line in found), (clause, found)
    # the builtin errors (asyncio timeouts, sockets of a web server) are not Redis's
    assert offences("try:\n    pass\nexcept (TimeoutError, ConnectionError, OSError):\n    pass\n", "m.py") == []
