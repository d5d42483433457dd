"""The relpos command line: schemes listing and error handling."""

from __future__ import annotations

import json
import subprocess
import sys

from relpos.cli import main


def test_schemes_json(capsys):
    assert main(["schemes", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {r["name"] for r in data}
    assert {"nope", "t5", "alibi", "randomized"} <= names
    for r in data:
        assert {"name", "acts_on", "params"} <= set(r)


def test_schemes_default_counts(capsys):
    assert main(["schemes", "--json"]) == 0
    data = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    if "learned" in data:
        assert data["learned"]["params"] == 262_144
    if "shaw" in data:
        assert data["shaw"]["params"] == 1_088
    assert data["t5"]["params"] == 32 * 8


def test_schemes_table(capsys):
    assert main(["schemes"]) == 0
    out = capsys.readouterr().out
    assert "t5" in out and "bias" in out


def test_bad_flag_gives_clear_error(capsys):
    assert main(["schemes", "--d-model", "100", "--heads", "8"]) == 2
    assert "must be divisible by --heads" in capsys.readouterr().err


def test_console_script_runs():
    r = subprocess.run([sys.executable, "-m", "relpos.cli", "schemes"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
