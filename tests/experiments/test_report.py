"""Reporting from stored runs: results.json layout, aggregation over seeds, tables, plots."""

from __future__ import annotations

import json
import math

import pytest

from relpos.report.model import ResultsModel
from relpos.report.plots import make_plots
from relpos.report.tables import (
    aggregate,
    label,
    results_dict,
    text_tables,
    write_json_atomic,
    write_report,
)


def stored_run(scheme, variant, task, seed, values, train_len=8):
    ms = []
    for n, v in values.items():
        if task == "lm":
            ms.append({"protocol": "window", "eval_len": n, "bucket_start": -1, "bucket_end": -1, "loss": v,
                       "bpb": v / math.log(2), "ppl": math.exp(v), "accuracy": None, "token_accuracy": None,
                       "count": 100})
            for a in range(0, n, n // 2):
                ms.append({"protocol": "position", "eval_len": n, "bucket_start": a, "bucket_end": a + n // 2,
                           "loss": v, "bpb": v / math.log(2) + a / n, "ppl": None, "accuracy": None,
                           "token_accuracy": None, "count": 50})
            ms.append({"protocol": "fixed_target", "eval_len": n, "bucket_start": -1, "bucket_end": -1, "loss": v,
                       "bpb": v, "ppl": None, "accuracy": None, "token_accuracy": None, "count": 16})
        else:
            ms.append({"protocol": "accuracy", "eval_len": n, "bucket_start": -1, "bucket_end": -1, "loss": None,
                       "bpb": None, "ppl": None, "accuracy": v, "token_accuracy": v, "count": 10})
    return {"scheme": scheme, "variant": variant, "task": task, "seed": seed, "train_len": train_len,
            "job": f"{task}/{scheme}/seed{seed}", "info": {}, "measurements": ms}


@pytest.fixture
def results():
    runs = [
        stored_run("alibi", None, "lm", 0, {8: 1.0, 16: 1.1}),
        stored_run("alibi", None, "lm", 1, {8: 1.2, 16: 1.3}),
        stored_run("rope", None, "lm", 0, {8: 0.9, 16: 3.0}),
        stored_run("rope", "yarn", "lm", 0, {8: 0.9, 16: 1.5}),
        stored_run("rope", "randomized", "lm", 0, {8: 1.0, 16: 1.2}),
        stored_run("alibi", None, "copy", 0, {3: 1.0, 6: 0.25}, train_len=3),
        stored_run("rope", None, "copy", 0, {3: 0.5, 6: float("nan")}, train_len=3),
    ]
    jobs = [{"job": "lm/alibi/seed0", "info": {"train": {"seconds": 2.0, "model": {"x": 1}}}}]
    cfg = {"preset": "t", "schemes": ["rope", "alibi"], "rope_variants": ["yarn"], "randomized": ["rope"]}
    return results_dict(cfg, "fp", runs, jobs, [{"job": "copy/t5/seed0", "error": "x\nValueError: boom", "at": ""}])


def test_labels():
    assert label("rope", None) == "rope" and label("rope", "yarn") == "rope-yarn"
    assert label("alibi", "randomized") == "alibi+rand"


def test_results_layout(results):
    assert results["version"] == 1 and results["fingerprint"] == "fp"
    r = results["runs"][0]
    assert r["label"] == "alibi" and [m["eval_len"] for m in r["metrics"]] == [8, 16]
    assert r["metrics"][0]["bpb"] == pytest.approx(1.0 / math.log(2))
    assert [(p["bucket_start"], p["bucket_end"]) for p in r["position_loss"] if p["eval_len"] == 16] == [(0, 8), (8, 16)]
    assert [f["context_len"] for f in r["fixed_target"]] == [8, 16]
    assert r["train"] == {"seconds": 2.0}  # model config dropped
    nan_run = [x for x in results["runs"] if x["task"] == "copy" and x["scheme"] == "rope"][0]
    assert nan_run["metrics"][1]["accuracy"] is None  # NaN is not valid JSON
    json.dumps(results, allow_nan=False)


def test_aggregate_over_seeds(results):
    agg = aggregate(results, "lm", "loss")
    mean, std, n = agg["alibi"][8]
    assert n == 2 and mean == pytest.approx(1.1) and std == pytest.approx(math.sqrt(0.02))
    assert agg["rope-yarn"][16][:3] == (1.5, 0.0, 1)
    acc = aggregate(results, "copy", "accuracy")
    assert acc["rope"][6][2] == 0  # NaN became missing


def test_text_tables_order_and_marks(results):
    text = text_tables(ResultsModel.from_results(results))
    lm_rows = [ln.split()[0] for ln in text.splitlines() if ln.split() and ln.split()[0] in
               ("rope", "rope-yarn", "rope+rand", "alibi")]
    assert lm_rows[:4] == ["rope", "rope-yarn", "rope+rand", "alibi"]  # config order, variants after
    assert "6*" in text  # lengths beyond training are marked
    assert "1.587±0.204" in text  # bits per byte, mean ± std over the two seeds


def test_plots_and_report(results, tmp_path):
    plots = make_plots(results, tmp_path)
    assert set(plots) == {"lm_loss_vs_length.png", "lm_loss_by_position.png", "lm_fixed_target.png",
                          "accuracy_vs_length.png"}
    for p in plots:
        assert (tmp_path / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rep = write_report(results, tmp_path, plots, command="relpos compare --preset t").read_text()
    assert "relpos compare --preset t" in rep and "copy/t5/seed0" in rep and "ValueError: boom" in rep
    for p in plots:
        assert f"]({p})" in rep


def test_only_algorithmic_results_plot(tmp_path):
    res = results_dict({"schemes": ["alibi"]}, "fp", [stored_run("alibi", None, "parity", 0, {3: 0.5}, 3)])
    assert make_plots(res, tmp_path) == ["accuracy_vs_length.png"]


def test_atomic_json(tmp_path):
    p = tmp_path / "r.json"
    write_json_atomic(p, {"a": 1})
    with pytest.raises(ValueError):
        write_json_atomic(p, {"a": float("nan")})
    assert json.loads(p.read_text()) == {"a": 1}  # the old file survives a failed write
    assert [q.name for q in tmp_path.iterdir()] == ["r.json"]


def test_per_token_table_only_when_it_adds_something(results):
    assert "per-token accuracy" not in text_tables(ResultsModel.from_results(results))  # equal to exact match here
    for r in results["runs"]:
        for m in r["metrics"]:
            if m["accuracy"] is not None:
                m["token_accuracy"] = min(1.0, m["accuracy"] + 0.1)
    assert "copy: per-token accuracy" in text_tables(ResultsModel.from_results(results))


def test_report_names_the_learning_rate_each_scheme_kept(results, tmp_path):
    for r in results["runs"]:
        if r["task"] == "copy":
            tries = [{"lr": 1e-3, "fitted": False}] + ([{"lr": 3e-3, "fitted": True}] if r["scheme"] == "rope" else [])
            r["train"] = {**(r.get("train") or {}), "fit": {"lr": tries[-1]["lr"], "lr_tries": tries}}
    rep = write_report(results, tmp_path, []).read_text()
    assert "- learning rate kept (runs per rate), copy: " in rep
    line = next(x for x in rep.splitlines() if x.startswith("- learning rate kept"))
    assert "rope 0.003 x1" in line and "alibi 0.001 x1" in line and "lm" not in line


def test_tables_average_the_fitted_seeds_only(tmp_path):
    """A seed that missed the gate is counted in `fitted` but left out of the cells (unless none fitted)."""
    def run(scheme, seed, at_L, at_2L, fitted):
        job = {"job": f"copy/{scheme}/seed{seed}", "info": {"train": {"fit": {"fitted": fitted, "score": at_L}}}}
        return stored_run(scheme, None, "copy", seed, {8: at_L, 16: at_2L}), job

    runs, jobs = zip(run("fire", 0, 0.99, 0.80, True), run("fire", 1, 0.06, 0.00, False),
                     run("t5", 0, 0.02, 0.00, False), run("t5", 1, 0.04, 0.00, False))
    res = results_dict({"schemes": ["fire", "t5"]}, "fp", list(runs), list(jobs))
    rows = {ln.split()[0]: ln for ln in text_tables(ResultsModel.from_results(res)).splitlines() if ln.split() and ln.split()[0] in ("fire", "t5")}
    assert rows["fire"].split()[1:] == ["1/2", "(val", "0.53)", "0.99", "0.80"]  # not 0.52±0.66 and 0.40±0.57
    assert rows["t5"].split()[1:] == ["0/2", "(val", "0.03)", "not", "fitted", "0.03±0.01", "0.00±0.00"]
    assert make_plots(res, tmp_path) == ["accuracy_vs_length.png"]


def test_learned_absolute_rows_past_training_are_shown_as_na_never_a_number(tmp_path):
    """A learned table's rows past the training length were never trained: no number is reported from them.
    Decided by the scheme's capability (a learned absolute table), so randomized training (every row
    trained) and relative schemes keep their numbers."""
    from relpos.report.tables import UNTRAINED, learned_table, markdown_tables

    runs = [stored_run("learned", None, "lm", 0, {8: 1.0, 16: 5.3}),
            stored_run("learned", "randomized", "lm", 0, {8: 1.0, 16: 1.1}),
            stored_run("sinusoidal", None, "lm", 0, {8: 1.0, 16: 2.0}),
            stored_run("alibi", None, "lm", 0, {8: 1.0, 16: 1.05})]
    assert learned_table("learned") and not learned_table("sinusoidal") and not learned_table("alibi")
    res = results_dict({"schemes": ["learned", "sinusoidal", "alibi"], "randomized": ["learned"]}, "fp", runs)
    lr = next(r for r in res["runs"] if r["label"] == "learned")
    m16 = next(m for m in lr["metrics"] if m["eval_len"] == 16)
    assert m16["bpb"] is None and m16["loss"] is None and m16["untrained_rows"]
    assert next(m for m in lr["metrics"] if m["eval_len"] == 8)["bpb"] == pytest.approx(1.0 / math.log(2))
    assert all(p["bpb"] is None for p in lr["position_loss"] if p["bucket_end"] > 8)
    assert all(p["bpb"] is not None for p in lr["position_loss"] if p["bucket_end"] <= 8)
    assert "5.3" not in json.dumps(lr["metrics"]) and 5.3 / math.log(2) not in [m["bpb"] for m in lr["metrics"]]
    for r in res["runs"]:
        if r["label"] != "learned":
            assert all(m["bpb"] is not None for m in r["metrics"]) and not any("untrained_rows" in m for m in r["metrics"])
    md = markdown_tables(res, "lm")
    rows = [line for line in md.splitlines() if line.startswith("| learned |")]
    assert len(rows) == 3  # window, fixed-target and far-position tables
    assert all(row.count(UNTRAINED) >= 1 for row in rows) and "7.646" not in "".join(rows)  # 5.3 nats = 7.646 bits
    assert UNTRAINED not in "".join(line for line in md.splitlines() if line.startswith("| learned+rand |"))
    for r in res["runs"]:  # the span through untrained rows is no number either
        r["span"] = {"8": {"median": 3.0, "max": 7}, "16": {"median": 9.0, "max": 13}}
    rows = [line for line in markdown_tables(res, "lm").splitlines() if line.startswith("| learned |")]
    assert rows[-1].endswith(f"| 3 | 7 | {UNTRAINED} | {UNTRAINED} |")


def test_far_position_table_and_corpus_identity_in_the_report(tmp_path):
    from relpos.report.tables import corpus_lines, far_table

    runs = [stored_run("alibi", None, "lm", 0, {8: 1.0, 16: 1.0})]
    ident = {"name": "python-stdlib", "python": "3.11.7", "sha256": "ab" * 32, "leak_window": 64, "unit": "bytes",
             "splits": {"train": {"documents": 600, "bytes": 1000}, "val": {"documents": 30, "bytes": 100,
                                                                            "leaked_windows": 7, "removed_bytes": 90},
                        "test": {"documents": 60, "bytes": 200, "leaked_windows": 9, "removed_bytes": 120}}}
    runs[0]["info"]["corpus"] = ident
    res = results_dict({"schemes": ["alibi"]}, "fp", runs)
    assert res["corpus"] == ident and res["runs"][0]["corpus_sha256"] == ident["sha256"]
    line = corpus_lines(res)[0]
    assert "abababababababab" in line and "1,000 / 100 / 200 bytes" in line and "3.11.7" in line
    assert "7 windows, 90 bytes cut" in line and "0 windows leak" in line
    xs, ratios, far = far_table(res)
    # position buckets of stored_run: bpb = v/ln2 + a/n; the last quarter is inside the second half bucket
    assert xs == [8, 16] and far["alibi"][16][0] == pytest.approx(1 / math.log(2) + 0.5)
    assert ratios["alibi"]["far"][0] == pytest.approx(1.0) and ratios["alibi"]["window"][0] == pytest.approx(1.0)
    text = text_tables(ResultsModel.from_results(res))
    assert "far ratio" in text and "fixed-target ratio" in text
    assert "attention span" not in text  # no run measured one
    res["runs"][0]["span"] = {"8": {"median": 3.0, "max": 7, "windows": 32}, "16": {"median": 5.5, "max": 15}}
    text = text_tables(ResultsModel.from_results(res))
    assert "attention span" in text and "16* median" in text and "16* max" in text
    write_report(res, tmp_path, [])
    assert "abababababababab" in (tmp_path / "report.md").read_text()


def test_the_fitted_column_gives_lm_validation_in_bits_per_byte_like_the_table_beside_it():
    # the fit record keeps the validation loss in nats; the LM tables are in bits per byte
    import math

    from relpos.report.tables import _fit_cell

    runs = [{"task": "lm", "label": "rope", "train": {"fit": {"fitted": True, "score": 2 * math.log(2)}}}]
    res = {"runs": runs}
    assert _fit_cell(res, "lm", "rope", {id(runs[0])}) == "1/1 (val 2.000 bpb)"
    runs[0]["task"] = "copy"
    runs[0]["train"]["fit"]["score"] = 0.97
    assert _fit_cell(res, "copy", "rope", set()) == "0/1 (val 0.97) not fitted"
