"""The verdict table: fitted runs only, spreads over seeds, ties, mean reciprocal rank."""

from __future__ import annotations

import math

import pytest

from relpos.report.model import ResultsModel
from relpos.report.verdict import SMOKE_NOTE, verdict, verdict_markdown, verdict_text


def _run(label, task, seed, fitted, metrics, *, ms=10.0, span=None, L=None):
    L = L or (64 if task == "lm" else 8)
    ms_list = []
    for n, v in metrics.items():
        if task == "lm":
            ms_list.append({"eval_len": n, "bpb": v, "loss": v, "accuracy": None})
        else:
            ms_list.append({"eval_len": n, "accuracy": v, "bpb": None})
    return {
        "scheme": label, "variant": None, "label": label, "task": task, "seed": seed, "train_len": L,
        "job": f"{task}/{label}/seed{seed}", "metrics": ms_list, "position_loss": [], "fixed_target": [],
        "train": {"ms_per_step": ms, "fit": {"fitted": fitted, "score": 1.0 if fitted else 0.5}},
        "span": span,
    }


def _results(preset="full"):
    runs = []
    for seed in range(3):
        # good: flat LM, holds copy; fitted everywhere
        runs.append(_run("good", "lm", seed, True, {64: 2.0, 256: 2.0 + 0.01 * seed, 1024: 2.02},
                         ms=12.0, span={"1024": {"max": 700}}))
        runs.append(_run("good", "copy", seed, True, {8: 1.0, 12: 0.9, 16: 0.8 + 0.01 * seed}))
        # local: flat LM through a local window
        runs.append(_run("local", "lm", seed, True, {64: 2.0, 256: 2.0, 1024: 2.0}, span={"1024": {"max": 20}}))
        runs.append(_run("local", "copy", seed, True, {8: 1.0, 12: 0.2, 16: 0.0}))
        # nope: degrades
        runs.append(_run("nope", "lm", seed, True, {64: 2.0, 256: 3.0, 1024: 6.0}, span={"1024": {"max": 900}}))
        runs.append(_run("nope", "copy", seed, seed != 2, {8: 0.97 if seed != 2 else 0.3, 12: 0.0, 16: 0.0}))
        # bad: never fits copy; its (great) out-of-distribution numbers must not count
        runs.append(_run("bad", "copy", seed, False, {8: 0.5, 12: 1.0, 16: 1.0}))
    return {"config": {"preset": preset}, "runs": runs}


def test_only_fitted_runs_count_and_unfitted_are_never_ranked():
    v = verdict(_results())
    rows = v["rows"]
    assert rows["bad"]["fitted"]["copy"] == (0, 3)
    assert rows["bad"]["acc"]["copy"]["2x"][2] == 0  # no fitted seed: no number
    assert rows["nope"]["fitted"]["copy"] == (2, 3)
    assert rows["nope"]["acc"]["copy"]["1x"][0] == pytest.approx(0.97)  # the unfitted seed is left out
    ranks = {lab: rk for lab, _, rk in v["ranking"]}
    assert ranks["bad"]["copy"] is None
    # never fitted: not ranked anywhere, last, with no MRR (never a score of 0)
    assert v["ranking"][-1][0] == "bad" and math.isnan(v["ranking"][-1][1])


def test_ratios_spreads_ties_and_ranking():
    v = verdict(_results())
    good = v["rows"]["good"]
    m, s, n = good["lm"][16]
    assert n == 3 and m == pytest.approx(1.01) and s == 0.0
    m4, s4, _ = good["lm"][4]
    assert m4 == pytest.approx(1.005) and s4 > 0
    ranks = {lab: rk for lab, _, rk in v["ranking"]}
    # LM 16x: local (1.00) and good (1.01) differ by more than their (zero) spreads; nope is last
    assert ranks["local"]["lm"] == 1 and ranks["good"]["lm"] == 2 and ranks["nope"]["lm"] == 3
    assert ranks["good"]["copy"] == 1 and ranks["local"]["copy"] == ranks["nope"]["copy"] == 2  # 0.0 and 0.0 tie
    assert v["ranking"][0][0] in ("good", "local")
    mrr = dict((lab, m) for lab, m, _ in v["ranking"])
    assert mrr["good"] == pytest.approx((1 / 2 + 1) / 2)


def test_differences_whose_interval_contains_zero_are_ties():
    res = _results()
    for r in res["runs"]:
        if r["label"] == "nope" and r["task"] == "copy":
            r["train"]["fit"]["fitted"] = True
            r["metrics"][2]["accuracy"] = [0.2, 1.0, 1.4][r["seed"]]
    ranks = {lab: rk for lab, _, rk in verdict(res)["ranking"]}
    assert ranks["nope"]["copy"] == ranks["good"]["copy"] == 1  # the seeds' spread covers the gap


def test_a_row_with_one_fitted_seed_is_not_ranked():
    """Issue 30: a row with one fitted seed entered the ranking with a spread of 0."""
    res = _results()
    for r in res["runs"]:
        if r["label"] == "nope" and r["task"] == "copy":
            r["train"]["fit"]["fitted"] = r["seed"] == 0
            r["metrics"][2]["accuracy"] = 1.0  # its one seed would be the best
    v = verdict(res)
    ranks = {lab: rk for lab, _, rk in v["ranking"]}
    assert ranks["nope"]["copy"] is None and ranks["good"]["copy"] == 1
    assert "not ranked (1/3 fitted)" in verdict_markdown(res)


def test_views_get_their_own_table_and_never_enter_the_ranking():
    res = _results()
    res["config"]["schemes"] = ["good", "local", "nope", "bad"]
    for seed in range(3):
        r = _run("good", "copy", seed, True, {8: 1.0, 12: 1.0, 16: 1.0})
        r.update(variant="pi", label="good-pi")
        res["runs"].append(r)
    v = verdict(res)
    assert "good-pi" not in {lab for lab, _, _ in v["ranking"]}
    md = verdict_markdown(res)
    assert "against plain RoPE" not in md  # no plain rope here: nothing to compare with
    for r in res["runs"]:
        if r["scheme"] == "good":
            r["scheme"] = "rope"
            r["label"] = r["label"].replace("good", "rope")
    res["config"]["schemes"] = ["rope", "local", "nope", "bad"]
    md = verdict_markdown(res)
    assert "### RoPE scalings and randomized positions against plain RoPE" in md
    assert next(line for line in md.splitlines() if line.startswith("| rope-pi |"))


def test_tries_table_shows_every_try():
    res = _results()
    for r in res["runs"]:
        r["train"]["fit"]["lr_tries"] = [{"lr": 1e-3, "fitted": False, "score": 0.5, "chosen": False},
                                         {"lr": 3e-3, "fitted": True, "score": 0.97, "chosen": True}]
    md = verdict_markdown(res)
    assert "## Learning-rate tries" in md
    row = next(line for line in md.splitlines() if line.startswith("| good |") and "kept" in line)
    assert "0/3, 0.50" in row and "3/3, 0.97, kept x3" in row


def test_local_window_and_cost():
    v = verdict(_results())
    assert v["rows"]["local"]["local"] is True and v["rows"]["good"]["local"] is False
    assert v["rows"]["good"]["cost"] == pytest.approx((12.0 + 10.0) / 2 / 10.0)  # per task fastest, mean over tasks
    assert any("Local window" in n and "local" in n for n in v["notes"])
    assert any(n.startswith("LM") and "degraded: nope" in n for n in v["notes"])
    assert "copy at 2L: no fitted scheme held; best good 0.81 exact match." in v["notes"]


def test_unflattened_lm_runs_are_shown_in_parentheses_and_not_ranked():
    res = _results()
    for r in res["runs"]:
        if r["label"] == "local" and r["task"] == "lm":
            r["train"]["fit"]["fitted"] = False
    v = verdict(res)
    assert v["rows"]["local"]["lm"] == {} and v["rows"]["local"]["lm_provisional"][16][0] == pytest.approx(1.0)
    assert {lab: rk for lab, _, rk in v["ranking"]}["local"]["lm"] is None
    assert any("still improving" in n and "local" in n for n in v["notes"])
    row = next(line for line in verdict_markdown(res).splitlines() if line.startswith("| local "))
    assert "(1.00±0.00)" in row


def test_rendering_and_smoke_label():
    md = verdict_markdown(_results())
    assert md.startswith("## Verdict") and "| scheme | fitted |" in md and "copy 0/3" in md
    assert "(local)" in md and SMOKE_NOTE not in md
    assert SMOKE_NOTE in verdict_text(ResultsModel.from_results(_results("ci"))) and SMOKE_NOTE in verdict_markdown(_results("ci"))
    assert not math.isnan(verdict(_results())["ranking"][0][1])


def test_passkey_is_reported_but_not_ranked():
    res = _results()
    res["runs"].append(_run("good", "passkey", 0, True, {256: 0.0}))
    v = verdict(res)
    assert "passkey" not in v["tasks"] and "passkey" not in v["rows"]["good"]["fitted"]


def test_algorithmic_tasks_are_ranked_by_per_token_accuracy_at_2l_when_reported():
    res = _results()
    for r in res["runs"]:
        if r["task"] == "copy":
            for m in r["metrics"]:
                # exact match 0 past L for everyone; per-token accuracy tells "local" ahead of "good"
                if m["eval_len"] > 8:
                    m["accuracy"] = 0.0
                m["token_accuracy"] = {"good": 0.3, "local": 0.6, "nope": 0.1}.get(r["label"], 0.0)
    ranks = {lab: rk for lab, _, rk in verdict(res)["ranking"]}
    assert ranks["local"]["copy"] == 1 and ranks["good"]["copy"] == 2 and ranks["nope"]["copy"] == 3


def test_a_view_that_misses_the_gate_at_L_is_not_fitted_and_never_ranked():
    """Randomized RoPE passes its gate at sampled positions; evaluated at 0..N-1 it is another model at L."""
    from relpos.report.tables import markdown_tables

    res = _results()
    for seed in range(2):
        for task, at_0_to_n, sampled in (("copy", {8: 0.04, 12: 0.9, 16: 0.9}, {8: 0.96, 12: 0.0, 16: 0.0}),
                                         ("lm", {64: 3.35, 256: 3.5, 1024: 3.6}, {64: 2.03, 256: 2.4, 1024: 3.6})):
            for label, metrics in (("rand", at_0_to_n), ("rand-sampled", sampled)):
                r = _run(label, task, seed, True, metrics)
                r["job"] = f"{task}/rope+rand/seed{seed}"  # two views of one trained model
                res["runs"].append(r)
    v = verdict(res)
    rows = v["rows"]
    assert rows["rand"]["fitted"] == {"copy": (0, 2), "lm": (0, 2)}
    assert rows["rand-sampled"]["fitted"] == {"copy": (2, 2), "lm": (2, 2)}
    ranks = {lab: rk for lab, _, rk in v["ranking"]}
    assert ranks["rand"]["copy"] is None and ranks["rand"]["lm"] is None  # its great numbers past L never count
    assert rows["rand"]["acc"]["copy"]["2x"][2] == 0
    table = markdown_tables(res, "copy")
    assert "| rand | 0/2 (val 1.00) not fitted |" in table and "| rand-sampled | 2/2 (val 1.00) |" in table


def _buckets(n, bpbs):
    w = n // len(bpbs)
    return [{"eval_len": n, "bucket_start": i * w, "bucket_end": (i + 1) * w, "bpb": b} for i, b in enumerate(bpbs)]


def test_the_verdicts_lm_number_is_the_far_position_ratio_not_the_window_mean():
    # a model built to degrade only at far positions: the whole-window mean barely moves (1.03), the last
    # quarter of the 16x window is 1.5x the last quarter at L; the verdict, its note and the table say 1.50
    res = _results()
    for r in res["runs"]:
        if r["label"] == "good" and r["task"] == "lm":
            r["metrics"] = [{"eval_len": 64, "bpb": 2.0}, {"eval_len": 256, "bpb": 2.0}, {"eval_len": 1024, "bpb": 2.06}]
            r["position_loss"] = (_buckets(64, [2.0, 2.0, 2.0, 2.0]) + _buckets(256, [2.0, 2.0, 2.0, 2.0])
                                  + _buckets(1024, [1.96, 1.96, 1.96, 3.0]))
            r["span"] = {"1024": {"median": 300, "max": 700}}
    v = verdict(res)
    row = v["rows"]["good"]
    assert row["lm"][16][0] == pytest.approx(1.5) and row["lm"][4][0] == pytest.approx(1.0)
    assert not row["lm_window_fallback"] and v["rows"]["nope"]["lm_window_fallback"]  # no buckets: said so
    assert any("far-position ratio" in n and "good x1.50" in n for n in v["notes"])
    assert any("without position buckets" in n and "nope" in n for n in v["notes"])
    text = verdict_text(ResultsModel.from_results(res))
    assert "LM far 16x/1x" in text and "300/700" in text


def test_lm_columns_follow_the_lengths_measured_as_in_the_scale_preset():
    """Evaluated to 8x only (the scale preset): the columns are 4x and 8x, and the note reads 8x, the length the
    ranking reads, never an empty 16x column."""
    res = {"config": {"preset": "scale"}, "runs": [
        _run(lab, "lm", s, True, {64: 2.0, 256: 2.0 * f4, 512: 2.0 * f8}) for s in range(3)
        for lab, f4, f8 in (("flat", 1.0, 1.0), ("late", 1.02, 1.30))]}
    v = verdict(res)
    assert v["lm_factors"] == [4, 8]
    assert v["rows"]["late"]["lm"][8][0] == pytest.approx(1.3)
    assert any("late x1.30" in n for n in v["notes"])
    md = verdict_markdown(res)
    assert "LM far 8x/1x" in md and "16x" not in md.split("## Ranking")[0]


def test_cost_is_robust_to_one_slowed_run():
    """A run slowed by a paused or shared machine (10x its wall time) does not move the cost column: the
    fastest of the seeds per task; the mean of all runs would read 4x."""
    base = verdict(_results())["rows"]["good"]["cost"]
    res = _results()
    slow = next(r for r in res["runs"] if r["label"] == "good")
    slow["train"]["ms_per_step"] *= 10
    assert verdict(res)["rows"]["good"]["cost"] == pytest.approx(base)
