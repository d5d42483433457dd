"""The README stays true: its two set-up commands and its library example."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.S)


def test_starts_with_the_two_setup_commands():
    text = README.read_text()
    first = _blocks("bash")[0]
    assert text.index("```bash") < 40, "the set-up commands come first"
    cmds = [line.split("#")[0].strip() for line in first.strip().splitlines()]
    assert cmds == ["make compare", "make test"]
    makefile = (README.parent / "Makefile").read_text()
    assert "\ncompare:" in makefile and "\ntest:" in makefile
    assert "relpos compare" in makefile
    assert "make test" in (README.parent / ".ci" / "run").read_text()


def test_library_example_runs():
    code = _blocks("python")[0]
    assert "relpos.attention" in code
    exec(compile(code, "README.md", "exec"), {})
