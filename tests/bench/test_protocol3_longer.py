"""``benchmarks/protocol3_longer.py``: which schemes of a finished task train again on twice the budget, and
with which command (nothing trains here)."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from relpos.report.stats import MIN_SEEDS
from tests.bench.scripts import load_script

mod = load_script("protocol3_longer")


def _store(path, rows, gate=3700):
    """A store's ``jobs`` table with ``(task, scheme, randomized, fitted, lr)`` rows (seeds numbered per label):
    fitted runs first pass the gate at ``gate`` and stop at ``gate + 500``, the others run the budget (6,000)."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE jobs (task TEXT, scheme TEXT, randomized INTEGER, info TEXT)")
    for task, scheme, rnd, fitted, lr in rows:
        fit = {"fitted": fitted, "lr": lr, "budget": 6000, "lr_tries": [{"lr": 1e-3}, {"lr": 3e-3}],
               **({"first_pass_step": gate} if fitted else {})}
        info = {"train": {"fit": fit, "steps": gate + 500 if fitted else 6000}}
        con.execute("INSERT INTO jobs VALUES (?, ?, ?, ?)", (task, scheme, rnd, json.dumps(info)))
    con.commit()
    con.close()
    return path


def test_its_threshold_is_the_pages():
    assert mod.MIN_SEEDS == MIN_SEEDS


def test_it_picks_the_schemes_that_fit_fewer_than_two_seeds(tmp_path):
    rows = [("copy", "t5", 0, k < 2, 3e-3) for k in range(3)]  # 2 of 3: ranked, not run again
    rows += [("copy", "nope", 0, k < 1, 3e-3) for k in range(3)]
    rows += [("copy", "rope", 1, False, 3e-3) for _ in range(3)]
    rows += [("reverse", "nope", 0, False, 1e-3) for _ in range(3)]
    db = _store(tmp_path / "results.sqlite", rows)
    labels, budget, grid, gate = mod.unfitted(db, "copy")
    assert sorted(labels) == ["nope", "rope+rand"] and budget == 6000 and grid == [1e-3, 3e-3] and gate == 3700
    assert mod.short(labels, gate) == labels and mod.short(labels, 3000) == {} and mod.short(labels, None) == {}
    cmd = mod.command("copy", labels, budget, grid, tmp_path / "out", 2, "relpos")
    assert cmd[cmd.index("--schemes") + 1] == "nope" and cmd[cmd.index("--randomized") + 1] == "rope"
    assert cmd[cmd.index("--steps") + 1] == "12000"
    assert cmd[cmd.index("--lr") + 1] == "0.003" and cmd[cmd.index("--lr-grid") + 1] == "none"
    assert cmd[-1] == str(tmp_path / "out" / "copy")


def test_seeds_that_kept_different_rates_keep_the_grid(tmp_path):
    db = _store(tmp_path / "results.sqlite", [("copy", "nope", 0, False, lr) for lr in (1e-3, 3e-3, 3e-3)])
    labels, budget, grid, gate = mod.unfitted(db, "copy")
    assert gate is None  # no run fitted
    cmd = mod.command("copy", labels, budget, grid, tmp_path, 1, "relpos")
    assert "--lr" not in cmd and cmd[cmd.index("--lr-grid") + 1] == "0.001,0.003"
    assert cmd[cmd.index("--randomized") + 1] == "none"


def test_an_unfinished_task_is_refused(tmp_path):
    db = _store(tmp_path / "results.sqlite", [("copy", "nope", 0, False, 3e-3)] * 2)
    with pytest.raises(SystemExit, match="not finished: nope have fewer than 3 seeds"):
        mod.unfitted(db, "copy")
    with pytest.raises(SystemExit, match="no finished runs"):
        mod.unfitted(db, "mqar")


def test_the_dry_run_prints_and_trains_nothing(tmp_path, capsys):
    full = tmp_path / "full"
    full.mkdir()
    _store(full / "results.sqlite", [("copy", "nope", 0, False, 3e-3)] * 3 + [("copy", "t5", 0, True, 3e-3)] * 3)
    assert mod.main([str(full), str(tmp_path / "longer"), "copy", "--dry-run", "--relpos", "/nonexistent"]) == 0
    assert "copy: nope (0/3 fitted);" in capsys.readouterr().out and not (tmp_path / "longer").exists()
    # curves that already reach twice the gate step (a gate at 2,500: 6,000 >= 5,000): nothing to run
    _store(tmp_path / "early.sqlite", [("copy", "nope", 0, False, 3e-3)] * 3 + [("copy", "t5", 0, True, 3e-3)] * 3,
           gate=2500)
    (tmp_path / "f2").mkdir()
    (tmp_path / "early.sqlite").rename(tmp_path / "f2" / "results.sqlite")
    assert mod.main([str(tmp_path / "f2"), str(tmp_path / "longer"), "copy", "--dry-run"]) == 0
    assert "already reach twice the median gate step" in capsys.readouterr().out


def test_the_store_is_copied_while_it_trains(tmp_path):
    """--snapshot copies the live store every --snapshot-every seconds while the task trains, not only at its end."""
    import sys

    mod = load_script("protocol3_longer")
    store, log = tmp_path / "results.sqlite", tmp_path / "copies"
    train = [sys.executable, "-c", f"import time, pathlib; time.sleep(0.3); pathlib.Path({str(store)!r}).touch(); "
             "time.sleep(1.2)"]
    copy = [sys.executable, "-c", f"open({str(log)!r}, 'a').write('x')"]
    assert mod.run_with_snapshots(train, dict(os.environ), copy, store, 0.2) == 0
    assert 1 <= len(log.read_text()) <= 7  # only once the store exists (about 1.2 s of 0.2 s waits)
    assert mod.run_with_snapshots([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ), None, store, 0.2) == 3
