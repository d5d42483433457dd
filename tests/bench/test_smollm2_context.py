"""benchmarks/smollm2_context.py (the resumable driver) and smollm2_context_table.py (its page section), on
constructed cells: no model is loaded except in the one end-to-end test, which writes a tiny Llama."""

from __future__ import annotations

import json

import pytest

from tests.bench.scripts import load_script

PROTO = {"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "model_fingerprint": "ab", "context": 8192,
         "lengths": [8192, 16384, 32768], "scalings": ["native", "linear", "dynamic", "yarn", "llama3"],
         "passkey_length": 16384, "passkey_depths": [0.5, 0.25, 0.75], "passkey_examples_per_depth": 1,
         "dtype": "float32", "corpus": {"fingerprint": "cf"}, "corpus_glob": "[a-r]*/*.py", "windows_per_length": 1,
         "max_eval_tokens": 32768}


def _lm(name, L, loss, far, secs, same_as=None):
    kind, scaling, _ = name.split("-")
    c = {"name": name, "kind": kind, "scaling": scaling, "length": L, "window_loss": loss, "window_bpb": loss / 2,
         "far_loss": far, "seconds": secs, "cpu_seconds": 2 * secs, "started": "2026-12-05 10:50:00 UTC",
         "finished": "2026-12-05 11:00:00 UTC", "loadavg": [9.0, 12.0], "windows": 1, "tokens": L,
         "measurements": [{"protocol": "window", "eval_len": L, "loss": loss, "count": L,
                           "per_example": [loss]}]}
    if same_as:
        c.update(same_as=same_as, seconds=0.0, cpu_seconds=0.0)
        del c["loadavg"]
    return c


def _pk(scaling, depth, acc, secs=300.0):
    return {"name": f"passkey-{scaling}-16384-d{round(depth * 100)}", "kind": "passkey", "scaling": scaling,
            "length": 16384, "depth": depth, "accuracy": acc, "examples": 1, "answer_loss": 0.1, "token_accuracy": acc,
            "needle_distance": int(16384 * (1 - depth)), "key": "12345", "seconds": secs, "cpu_seconds": secs,
            "started": "2026-12-05 11:00:00 UTC", "finished": "2026-12-05 11:05:00 UTC", "loadavg": [10.0, 11.0]}


def _run_folder(tmp_path, cells):
    drv = load_script("smollm2_context")
    out = tmp_path / "run"
    drv.write_json_atomic(out / "protocol.json", PROTO)
    for c in cells:
        drv.write_json_atomic(out / "cells" / f"{c['name']}.json", c)
    return out


def _with_buckets(c, losses):
    L, k = c["length"], len(losses)
    c["measurements"] += [{"protocol": "position", "eval_len": L, "loss": v, "bucket_start": i * L // k,
                           "bucket_end": (i + 1) * L // k, "count": L // k} for i, v in enumerate(losses)]
    return c


def _partial_cells():
    return [_lm("lm-native-8192", 8192, 1.10, 1.05, 200.0), _lm("lm-linear-8192", 8192, 1.10, 1.05, 0, "native"),
            _with_buckets(_lm("lm-native-16384", 16384, 2.50, 3.90, 400.0), [1.0, 1.2, 5.0, 2.8]), _lm("lm-yarn-16384", 16384, 1.20, 1.25, 440.0),
            _pk("native", 0.5, 1.0), _pk("yarn", 0.5, 0.0)]


def test_section_shows_losses_passkey_time_and_what_is_missing(tmp_path):
    tab = load_script("smollm2_context_table")
    out = _run_folder(tmp_path, _partial_cells())
    (out / "progress.log").write_text("2026-12-05 10:47:45 UTC  model loaded in 168s (rope_type default, L0 8192)\n")
    data = tab.collect(out)
    md = tab.markdown(data)
    assert "once per invocation: 168 s" in md
    assert "at 16,384, 1.1000 against 1.1000" in md  # native's first 8,192 positions reproduce its 8k window
    assert "an illustration, not a ranking" in md
    assert "| native | 1.100 / 0.550 | 2.500 / 1.250 | not run |" in md  # window loss / bpb by length
    assert "| yarn | not run | 1.200 / 0.600 | not run |" in md
    assert "| native | 1.050 | 3.900 | not run |" in md  # far-position loss
    assert "| native | 1/1 | not run | not run | 1/1 |" in md  # passkey: correct / examples per depth, and all
    assert "| yarn | 0/1 | not run | not run | 0/1 |" in md
    assert "depth 50% (8,192 back)" in md
    assert "6 of 30 planned cells finished" in md and "lm-llama3-32768" in md
    assert "16,384 tokens 420 (400-440, 2 windows)" in md and "8,192 tokens 200 (1 window)" in md
    assert "`linear` gave a rotary embedding" in md  # the shared factor-1 cell is said, and not timed
    assert "One window per length" in md and "3 passkey examples per scaling" in md
    assert "`none` (plain RoPE, no scaling) equals `native`" in md
    s = tab.summary(data)
    assert s["wall_seconds"] == pytest.approx(200 + 400 + 440 + 300 + 300)
    assert s["loadavg"] == [9.0, 12.0]


def test_json_round_trip_gives_the_same_section(tmp_path):
    tab = load_script("smollm2_context_table")
    out = _run_folder(tmp_path, _partial_cells())
    j, md = tmp_path / "s.json", tmp_path / "s.md"
    assert tab.main([str(out), "--json", str(j), "--md", str(md)]) == 0
    again = tmp_path / "again.md"
    assert tab.main([str(j), "--md", str(again)]) == 0
    assert again.read_text() == md.read_text()
    data = json.loads(j.read_text())
    assert "per_example" not in json.dumps(data["cells"])  # slimmed
    assert data["summary"]["done"] == 6


def test_a_broken_or_foreign_cell_is_not_shown(tmp_path):
    tab = load_script("smollm2_context_table")
    out = _run_folder(tmp_path, _partial_cells())
    (out / "cells" / "lm-dynamic-16384.json").write_text("{ truncated")
    (out / "cells" / "lm-dynamic-65536.json").write_text(json.dumps(_lm("lm-dynamic-65536", 65536, 9.0, 9.0, 1.0)))
    md = tab.markdown(tab.collect(out))
    assert "| dynamic | not run | not run | not run |" in md
    assert "9.000" not in md


def test_a_folder_without_protocol_is_refused(tmp_path):
    tab = load_script("smollm2_context_table")
    with pytest.raises(ValueError, match="protocol.json"):
        tab.collect(tmp_path)


def test_plan_order_and_names():
    drv = load_script("smollm2_context")
    cells = drv.plan_cells(["native", "yarn"], [16384, 8192], 16384, [0.5, 0.25])
    assert [c["name"] for c in cells] == ["lm-native-8192", "lm-yarn-8192", "lm-native-16384", "lm-yarn-16384",
                                          "passkey-native-16384-d50", "passkey-yarn-16384-d50",
                                          "passkey-native-16384-d25", "passkey-yarn-16384-d25"]
    tab = load_script("smollm2_context_table")
    assert [c["name"] for c in tab.planned(PROTO)] == [
        c["name"] for c in drv.plan_cells(PROTO["scalings"], PROTO["lengths"], 16384, PROTO["passkey_depths"])]


def test_done_cells_skips_broken_files_and_estimate_uses_measured_times(tmp_path):
    drv = load_script("smollm2_context")
    out = _run_folder(tmp_path, _partial_cells())
    (out / "cells" / "lm-dynamic-16384.json").write_text("{ truncated")
    done = drv.done_cells(out)
    assert "lm-dynamic-16384" not in done and "lm-native-8192" in done
    cells = drv.plan_cells(PROTO["scalings"], PROTO["lengths"], 16384, PROTO["passkey_depths"])
    secs, mean = drv.estimate(cells, done)
    assert mean == {8192: 200.0, 16384: 420.0}  # windows only; the shared cell is not a timing
    def left(kind, L):
        return sum(1 for c in cells if (c["kind"], c["length"]) == (kind, L) and c["name"] not in done)

    assert secs == pytest.approx(left("lm", 8192) * 200 + left("lm", 16384) * 420 + left("passkey", 16384) * 300
                                 + left("lm", 32768) * 420 * 2 ** 1.3)


def test_write_json_atomic_refuses_a_link(tmp_path):
    drv = load_script("smollm2_context")
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / "x.json").symlink_to(target)
    with pytest.raises(ValueError, match="not a regular file"):
        drv.write_json_atomic(tmp_path / "cells" / "x.json", {"a": 1})
    assert target.read_text() == "{}"


def test_another_protocol_is_refused(tmp_path):
    drv = load_script("smollm2_context")
    drv.check_protocol(tmp_path, PROTO)
    drv.check_protocol(tmp_path, dict(PROTO))  # the same: accepted
    with pytest.raises(ValueError, match="differs in passkey_depths"):
        drv.check_protocol(tmp_path, {**PROTO, "passkey_depths": [0.5]})


@pytest.mark.slow
def test_driver_end_to_end_resumes_and_shares_factor_one(tmp_path):
    """A tiny Llama: every cell written once; a rerun computes nothing; factor-1 cells share native's window."""
    from tests.data_helpers import tiny_llama, write_folder

    drv = load_script("smollm2_context")
    tiny_llama(tmp_path / "m", max_pos=32)
    write_folder(tmp_path / "docs", n_files=60, size=3000)
    args = ["--model", str(tmp_path / "m"), "--corpus", str(tmp_path / "docs"), "--glob", "**/*.txt", "--out",
            str(tmp_path / "out"), "--context", "64", "--factors", "1,2", "--passkey-length", "256", "--depths",
            "0.5", "--scalings", "native,yarn", "--threads", "1"]
    assert drv.main(args) == 0
    cells = drv.done_cells(tmp_path / "out")
    assert sorted(cells) == ["lm-native-128", "lm-native-64", "lm-yarn-128", "lm-yarn-64", "passkey-native-256-d50",
                             "passkey-yarn-256-d50"]
    assert cells["lm-yarn-64"]["same_as"] == "native"
    assert cells["lm-yarn-64"]["window_loss"] == cells["lm-native-64"]["window_loss"]
    assert "same_as" not in cells["lm-yarn-128"]
    stamp = {n: (tmp_path / "out" / "cells" / f"{n}.json").stat().st_mtime_ns for n in cells}
    assert drv.main(args) == 0
    assert {n: (tmp_path / "out" / "cells" / f"{n}.json").stat().st_mtime_ns for n in cells} == stamp
    assert drv.main([*args[:-2], "--depths", "0.25", "--threads", "1"]) == 2  # another protocol: refused
