"""Every test and bench server has a listen backlog for a crawler's connect bursts.

Why: socketserver's default backlog is 5; a crawler opening dozens of connections at once then
loses some SYNs and waits out TCP's 200 ms / 1 s retransmits, so a test gets slow and measures
nothing. The backlog is `request_queue_size` as a class attribute (read in `server_activate`, so set
on an instance after creation it does nothing): servers are built from a class that sets it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

STDLIB_SERVERS = {"HTTPServer", "ThreadingHTTPServer", "TCPServer", "ThreadingTCPServer"}


def _python_files() -> list[Path]:
    return [p for folder in ("tests", "bench", "demo") for p in sorted((ROOT / folder).rglob("*.py"))]


def _called_name(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def test_no_server_is_built_from_a_stdlib_class_with_the_default_backlog() -> None:
    found = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and _called_name(node) in STDLIB_SERVERS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"use tests/site/local.py's LoopbackServer (or a subclass setting request_queue_size): {found}"


def test_the_backlog_is_never_set_on_an_instance() -> None:
    found = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and target.attr == "request_queue_size":
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"request_queue_size set on an instance does nothing; set it on the class: {found}"
