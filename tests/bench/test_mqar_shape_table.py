"""``benchmarks/mqar_shape_table.py``: first steps to the lookup and to the gate, read from the probe's curves."""

from __future__ import annotations

import json

from tests.bench.scripts import load_script


def _curve(exacts, done=True):
    return {"history": [{"step": 250 * i, "loss": 1.0, "acc": e, "exact": e} for i, e in enumerate(exacts)],
            "done": done, "seconds": 1.0}


def test_table_reads_first_steps_and_running_runs(tmp_path, capsys):
    mod = load_script("mqar_shape_table")
    (tmp_path / "h1").mkdir()
    (tmp_path / "h4").mkdir()
    (tmp_path / "h1" / "rope.json").write_text(json.dumps(_curve([0.0, 0.3, 0.6, 0.97, 0.9])))
    (tmp_path / "h4" / "rope.json").write_text(json.dumps(_curve([0.0, 0.1, 0.2], done=False)))
    rows = mod.collect(tmp_path)
    assert rows[1]["rope"]["step_formed"] == 500 and rows[1]["rope"]["step_gate"] == 750
    assert rows[1]["rope"]["best_exact"] == 0.97 and rows[1]["rope"]["final_exact"] == 0.9
    assert rows[4]["rope"]["step_gate"] is None and not rows[4]["rope"]["done"]
    md = mod.markdown(rows)
    assert "| rope | 0.97 | 500 | 750 | 0.20 | >500 | >500 (running) |" in md
    assert "1 head: 1 / 1 of 1; 4 heads: 0 / 0 of 1" in md
