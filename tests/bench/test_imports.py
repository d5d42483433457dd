"""The modules of relpos.bench import each other without a cycle (function-level imports included)."""

from __future__ import annotations

import ast
import pathlib

import relpos.bench

PKG = pathlib.Path(relpos.bench.__file__).parent


def _graph() -> dict[str, set[str]]:
    mods = {p.stem for p in PKG.glob("*.py") if p.stem not in ("__init__", "__main__")}
    graph: dict[str, set[str]] = {}
    for m in mods:
        tree = ast.parse((PKG / f"{m}.py").read_text())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("relpos.bench."):
                deps.add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[2] for a in node.names if a.name.startswith("relpos.bench.")}
        graph[m] = deps & mods - {m}
    return graph


def test_no_import_cycle_in_bench():
    graph = _graph()
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            assert state.get(d) != 1, f"import cycle: {' -> '.join(path + [m, d])}"
            if d not in state:
                visit(d, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_peers_and_cases_import_alone():
    import importlib
    import subprocess
    import sys

    for mod in ("relpos.bench.peers", "relpos.bench.cases", "relpos.bench.spec"):
        importlib.import_module(mod)
        subprocess.run([sys.executable, "-c", f"import {mod}"], check=True)
