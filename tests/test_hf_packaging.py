"""Packaging (issue 31): a LICENSE file, an SPDX license, no upper cap on torch, an ``hf`` extra."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_license_file_and_spdx_string():
    p = _project()
    assert p["license"] == "MIT" and p["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_torch_has_no_upper_cap_in_the_package_but_the_makefile_pins_it():
    torch = [d for d in _project()["dependencies"] if re.match(r"torch\b", d)]
    assert torch and not any("<" in d or "==" in d for d in torch), torch
    assert 'torch==2.13.0' in (ROOT / "Makefile").read_text()


def test_hf_extra_and_the_test_extra_holds_what_the_hf_tests_import():
    extras = _project()["optional-dependencies"]
    names = {re.split(r"[<>=!~ ]", d)[0] for d in extras["hf"]}
    assert {"transformers", "tokenizers", "gguf", "accelerate"} <= names
    test = {re.split(r"[<>=!~ ]", d)[0] for d in extras["test"]}
    assert names <= test  # `make test` on a fresh machine installs what tests/test_hf_*.py use
