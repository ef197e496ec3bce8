"""Imports go down the stack only, and the package has no import cycle (read with ast: fast)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "distributed_crawler"

# Layer -> the layers it must never import from.
FORBIDDEN = {
    "connection": {
        "frontier",
        "core",
        "dedup",
        "downloadermiddlewares",
        "monitoring",
        "cli",
        "spiders",
        "rendering",
        "proxies",
        "storage",
        "commands",
        "compat",
        "recrawl",
        "news",
    },
    "compat": {"core", "downloadermiddlewares", "monitoring", "cli", "spiders", "rendering", "commands", "recrawl"},
    "frontier": {
        "compat",
        "core",
        "dedup",
        "downloadermiddlewares",
        "monitoring",
        "cli",
        "spiders",
        "rendering",
        "commands",
        "recrawl",
    },
    "dedup": {
        "compat",
        "core",
        "downloadermiddlewares",
        "monitoring",
        "cli",
        "spiders",
        "rendering",
        "commands",
        "recrawl",
    },
    "core": {"compat", "downloadermiddlewares", "monitoring", "cli", "spiders", "rendering", "commands", "recrawl"},
    "proxies": {"core", "downloadermiddlewares", "monitoring", "cli", "spiders", "rendering", "commands", "recrawl"},
    "storage": {"core", "downloadermiddlewares", "monitoring", "cli", "spiders", "rendering", "commands", "recrawl"},
    # rendering uses core for the node's Redis context only (PLAYWRIGHT_AUTO's shared verdicts).
    "rendering": {"downloadermiddlewares", "monitoring", "cli", "spiders", "commands", "recrawl"},
    "downloadermiddlewares": {"monitoring", "cli", "spiders", "rendering", "commands", "recrawl"},
    "recrawl": {"monitoring", "cli", "spiders", "rendering", "commands", "downloadermiddlewares", "news"},
    # news/: page-level logic (extraction, canonical links, documents, near-duplicate index)
    "news": {
        "core",
        "dedup",
        "downloadermiddlewares",
        "monitoring",
        "cli",
        "spiders",
        "rendering",
        "commands",
        "storage",
        "recrawl",
    },
    # events/: the change feed, above storage/core/recrawl; monitoring reads its figures, the CLI runs it
    "events": {"compat", "downloadermiddlewares", "cli", "spiders", "rendering", "commands"},
    "meta": {"*"},
    "internals": {"*"},
    "addresses": {"*"},
    "bounded": {"*"},
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Module -> the distributed_crawler modules it imports, wherever the import statement is
    (inside a function, under TYPE_CHECKING); `from package import module` names the module."""
    modules = {_module_name(path) for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.startswith("distributed_crawler"):
                    found.add(node.module)
                    found.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("distributed_crawler"))
        graph[name] = found
    return graph


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_imports_go_down_the_stack() -> None:
    bad = []
    for module, targets in _imports().items():
        forbidden = FORBIDDEN.get(_layer(module), set())
        for target in targets:
            layer = _layer(target)
            if layer and layer != _layer(module) and ("*" in forbidden or layer in forbidden):
                bad.append(f"{module} imports {target}")
    assert not bad, "upward imports:\n" + "\n".join(sorted(bad))


def test_no_import_cycles() -> None:
    graph = _imports()
    cycles = []
    state: dict[str, int] = {}  # 1 = on the path, 2 = done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if target not in graph:
                continue
            if state.get(target) == 1:
                cycles.append(" -> ".join(path[path.index(target) :] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


# The queue modes' own modules: only frontier/ (and what builds a frontier for it) may import them.
QUEUE_MODE_MODULES = {
    "distributed_crawler.frontier.host",
    "distributed_crawler.frontier.single",
    "distributed_crawler.frontier.sharded",
    "distributed_crawler.frontier.shards",
    "distributed_crawler.frontier.scripts",
}


def _frontier_clients(graph: dict[str, set[str]]) -> list[str]:
    """The Scrapy glue, the CLI and the dashboard: they talk to the Frontier only."""
    return sorted(
        m
        for m in graph
        if m == "distributed_crawler.core.scheduler"
        or m.startswith("distributed_crawler.cli.")
        or m.startswith("distributed_crawler.monitoring.dashboard")
    )


def test_scheduler_cli_and_dashboard_know_no_queue_mode() -> None:
    graph = _imports()
    clients = _frontier_clients(graph)
    assert "distributed_crawler.core.scheduler" in clients and "distributed_crawler.cli.seed" in clients
    bad = [f"{m} imports {t}" for m in clients for t in sorted(graph[m] & QUEUE_MODE_MODULES)]
    for module in clients:
        path = PACKAGE.parent / (module.replace(".", "/") + ".py")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            # a branch on the mode: `frontier.mode == ...`, `... in ...mode`, on either side
            if isinstance(node, ast.Compare) and any(
                isinstance(side, ast.Attribute) and side.attr == "mode" for side in [node.left, *node.comparators]
            ):
                bad.append(f"{module}:{node.lineno} compares a queue mode")
    assert not bad, "queue-mode knowledge outside queue/:\n" + "\n".join(bad)


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def test_the_scheduler_builds_its_parts_once_and_sets_nothing_on_them() -> None:
    """Every part gets its final arguments in its constructor (RedisScheduler.build_parts): the
    scheduler assigns only its own attributes (`self.x = ...`), never one of a part's."""
    path = PACKAGE / "core" / "scheduler.py"
    bad = [
        f"core/scheduler.py:{node.lineno} sets {ast.unparse(target)}"
        for node in ast.walk(_tree(path))
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        for sub in ast.walk(target)
        if isinstance(sub, ast.Attribute) and not (isinstance(sub.value, ast.Name) and sub.value.id == "self")
    ]
    assert not bad, "a part wired from outside (pass it to the part's constructor):\n" + "\n".join(bad)


def test_parts_take_the_frontier_itself_never_a_callable_that_returns_it() -> None:
    bad = [
        f"{path.relative_to(PACKAGE)}: {needle}"
        for path in sorted((PACKAGE / "core").glob("*.py"))
        for needle in ("Callable[[], Frontier]", "self._frontier()")
        if needle in path.read_text()
    ]
    assert not bad, "pass the frontier object (bound at open), not a getter:\n" + "\n".join(bad)


def test_every_module_logs_under_its_own_name() -> None:
    """`logger = logging.getLogger(__name__)`, never another module's logger: a log line names the
    module that wrote it (Scrapy's memory line, Scrapy's own logger, is the one exception)."""
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and any(alias.name == "logger" for alias in node.names):
                bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports another module's logger")
            if (
                isinstance(node, ast.Assign)
                and [ast.unparse(t) for t in node.targets] == ["logger"]
                and ast.unparse(node.value) != "logging.getLogger(__name__)"
            ):
                bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} logger = {ast.unparse(node.value)}")
    assert not bad, "\n".join(bad)


def test_each_scheduler_part_has_a_unit_test() -> None:
    """The parts that carry the scheduler's work, each pinned by a test of its own with fakes."""
    tests = Path(__file__).resolve().parent
    missing = [
        part for part in ("intake", "outbox", "feeder", "lease_keeper") if not (tests / f"test_{part}.py").exists()
    ]
    assert not missing, f"no unit test for core/{missing}"
