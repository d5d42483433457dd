"""The package's layers, read from the code (every import, lazy ones included).

The order is maths < schemes < attention < layers/model < training < the experiment tier (compare, report,
pretrained, extend) < explorer/commands. Inside the experiment tier each sub-package's docstring states what it
may import; this file checks those statements.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "relpos"

#: Modules of relpos.compare that finish a sweep and may therefore write its report.
COMPARE_MAY_REPORT = {"sweep", "worker", "merge", "scale"}
#: The record of a sweep that relpos.report reads: definitions, never what runs it.
REPORT_READS_FROM_COMPARE = {"config", "settings", "presets", "fitting", "store", "store_check", "job", "scale"}
#: What relpos.pretrained shares with the compare sweep: its store and its job runners.
PRETRAINED_USES_FROM_COMPARE = {"store", "store_check", "runner", "leases", "config"}

LOWER = ("distance", "offsets", "validation", "encodings", "attention", "kernels", "model", "nn", "tasks", "data",
         "dedup", "corpus", "outdir")
EXPERIMENT_TIER = ("compare", "report", "pretrained", "extend", "experiments")
TOP = ("commands", "explorer", "cli", "bench")


def _imports(path: Path) -> set[str]:
    """Every ``relpos.*`` module a file imports, at any depth of the file."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("relpos.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("relpos"):
            if node.module == "relpos":
                out |= {f"relpos.{a.name}" for a in node.names}
            else:
                out.add(node.module)
                out |= {f"{node.module}.{a.name}" for a in node.names if (SRC / Path(*node.module.split(".")[1:]) /
                                                                        f"{a.name}.py").exists()}
    return out


def _files(pkg: str):
    root = SRC / pkg
    return sorted(root.rglob("*.py")) if root.is_dir() else [SRC / f"{pkg}.py"]


def _parts(mod: str) -> list[str]:
    return mod.split(".")[1:]


def _violations(pkg: str, allowed) -> list[str]:
    bad = []
    for f in _files(pkg):
        me = f.stem
        for mod in _imports(f):
            parts = _parts(mod)
            if parts and not allowed(me, parts):
                bad.append(f"{f.relative_to(SRC)} imports {mod}")
    return bad


@pytest.mark.parametrize("pkg", ["training"])
def test_training_imports_nothing_above_it(pkg):
    assert _violations(pkg, lambda me, p: p[0] not in EXPERIMENT_TIER + TOP) == []


@pytest.mark.parametrize("pkg", LOWER)
def test_the_library_below_training_imports_nothing_above_it(pkg):
    above = ("training", "train", "checkpoint", "schedule") + EXPERIMENT_TIER + TOP
    assert _violations(pkg, lambda me, p: p[0] not in above or pkg == "corpus" and p[0] == "corpus") == []


def test_compare_rules():
    def ok(me, p):
        if p[0] in ("pretrained", "extend", "experiments") + TOP:
            return False
        return p[0] != "report" or me in COMPARE_MAY_REPORT
    assert _violations("compare", ok) == []


def test_report_rules():
    def ok(me, p):
        if p[0] in ("pretrained", "extend", "experiments") + TOP:
            return False
        return p[0] != "compare" or len(p) == 1 or p[1] in REPORT_READS_FROM_COMPARE
    assert _violations("report", ok) == []


def test_pretrained_rules():
    def ok(me, p):
        if p[0] in ("report", "extend", "experiments") + TOP:
            return False
        return p[0] != "compare" or len(p) > 1 and p[1] in PRETRAINED_USES_FROM_COMPARE
    assert _violations("pretrained", ok) == []


def test_extend_rules():
    """Extension fine-tuning sits on top of the experiment tier: it reads compare's store, trains, evaluates a
    pretrained checkpoint and reports; nothing above it (commands, explorer) and nothing imports it but those."""
    assert _violations("extend", lambda me, p: p[0] not in ("experiments",) + TOP) == []
    for pkg in ("compare", "report", "pretrained", "training"):
        assert _violations(pkg, lambda me, p: p[0] != "extend") == []


def test_every_sub_package_states_its_rules():
    for pkg in ("compare", "report", "pretrained", "training", "extend"):
        doc = ast.get_docstring(ast.parse((SRC / pkg / "__init__.py").read_text())) or ""
        assert "May import" in doc, pkg


def test_no_tracker_numbers_in_the_source():
    """A reader of the code cannot look up a tracker number: the reason belongs in the sentence itself."""
    import re

    hits = [f"{f.relative_to(SRC)}:{i}" for f in SRC.rglob("*.py")
            for i, line in enumerate(f.read_text().splitlines(), 1)
            if re.search(r"\b(issue|issues)\s+#?\d+|\btask\s+#\d+", line, re.I)]
    assert hits == []


def test_nothing_below_the_command_line_takes_parsed_flags():
    """Flags become typed configs in ``commands/``: below it no function takes a parsed ``args`` (a module's own
    ``python -m`` entry point, ``main``, parses and converts its flags in the same place)."""
    bad = []
    for f in SRC.rglob("*.py"):
        rel = f.relative_to(SRC)
        if rel.parts[0] in ("commands", "experiments") or rel.name in ("cli.py", "__main__.py"):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in ("main",):
                params = node.args.args + node.args.kwonlyargs
                hook = lambda a: isinstance(a.annotation, ast.Name) and a.annotation.id == "tuple"  # noqa: E731
                if any(a.arg == "args" and not hook(a) or getattr(a.annotation, "attr", None) == "Namespace"
                       for a in params):
                    bad.append(f"{rel}:{node.lineno} {node.name}")
    assert bad == []
