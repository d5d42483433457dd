"""One results model (issue 51, item 4): the report's inputs -- fit gates, far-position losses, ranking inputs,
ranks and intervals, the verdict -- are computed once per report, into :class:`relpos.report.model.ResultsModel`,
and the terminal tables, report.md, the results page and the explorer's results view read it.

Measured by following the calls (``sys.setprofile``) while each output is made from a small constructed results
document. Before the model, ``relpos compare --report-only`` on the shipped protocol-3 full folder ran
``fitted_views`` 11 times and the ranking (every bootstrap interval of it) twice, and the results page ran
``fitted_views`` 297 times on the shipped protocol-3 JSON and several claim intervals more than once."""

from __future__ import annotations

import ast
import collections
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from relpos.report.model import ResultsModel
from tests.experiments.results_support import algo_results, lm_results

SRC = Path(__file__).resolve().parents[2] / "src" / "relpos"

#: (file, function) -> how the call is keyed: a repeated key is the same input computed twice.
WATCH = {
    ("views.py", "fitted_views"): lambda f: (id(f["runs"]),),
    ("ranking.py", "ranking"): lambda f: (id(getattr(f["results"], "results", f["results"])),),
    ("verdict.py", "verdict"): lambda f: (id(getattr(f["results"], "results", f["results"])),),
    ("ranking.py", "seed_inputs"): lambda f: (id(f["run"]),),
    ("ranking.py", "lm_far_losses"): lambda f: (id(f["run"]), f["L"], f["n"]),
    ("results_claims.py", "_value"): lambda f: (f["task"], f["lab"], f["seed"]),
    ("results_claims.py", "_diff"): lambda f: (f["task"], f["a"], f["b"], f["seed"]),
    ("stats.py", "rank_against_best"): lambda f: (id(f["_caller"].get("results")), f["_caller"].get("t"),
                                                  _rows_key(f["rows"])),
}


def _rows_key(rows: dict) -> tuple:
    """The content of one task's ranking rows: label, seed and the mean of each per-example array."""
    return tuple((lab, s["_seed"], k, float(np.mean(v))) for lab in sorted(rows) for s in rows[lab]
                 for k, v in sorted(s.items()) if k != "_seed")


@pytest.fixture(autouse=True)
def _few_resamples(monkeypatch):
    """Counting does not need 10,000 resamples an interval (the tests stay fast)."""
    from relpos.report import ranking, results_claims

    monkeypatch.setattr(ranking, "N_BOOT_REPORT", 300)
    monkeypatch.setattr(results_claims, "N_BOOT_REPORT", 300)


def _results() -> dict:
    """Three algorithmic tasks with randomized RoPE views, and language modelling; three seeds."""
    res = algo_results(rand=0.7)
    res["runs"] += lm_results()["runs"]
    res["config"]["tasks"] = sorted({r["task"] for r in res["runs"]})
    return res


def _following(fn):
    """Run ``fn``; per watched function, the keys of its calls (in call order)."""
    calls = collections.defaultdict(list)

    def prof(frame, event, arg):
        if event == "call":
            key = (Path(frame.f_code.co_filename).name, frame.f_code.co_name)
            if key in WATCH and frame.f_code.co_filename.startswith(str(SRC)):
                args = {**frame.f_locals, "_caller": frame.f_back.f_locals}  # the ranking's document and task
                calls[key[1]].append(WATCH[key](args))

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def _computed_once(calls) -> None:
    for name, keys in calls.items():
        twice = [k for k, n in collections.Counter(keys).items() if n > 1]
        assert not twice, f"{name} computed {len(keys)} times for {len(set(keys))} inputs; repeated: {twice[:3]}"


def test_finishing_compare_computes_each_report_input_once(tmp_path):
    """What ``relpos compare`` does after its last run: report.md, then the terminal tables and verdict."""
    from relpos.compare.sweep import CompareSummary, summary_text
    from relpos.report.tables import write_report

    res = _results()
    out = {}

    def finish():
        model = ResultsModel.from_results(res)  # as compare() builds it, once
        summary = CompareSummary(tmp_path, res["fingerprint"], total=1, skipped=1, results=res, model=model,
                                 report_only=True)
        write_report(summary.model, tmp_path, [])
        out["text"] = summary_text(summary)

    calls = _following(finish)
    _computed_once(calls)
    assert len(calls["fitted_views"]) == len(calls["ranking"]) == len(calls["verdict"]) == 1
    assert len(calls["rank_against_best"]) == 4  # lm, copy, reverse, copy-distinct: each ranked once
    assert calls["lm_far_losses"] and calls["seed_inputs"]
    # and the outputs are those of the results dict, read without a model
    from relpos.report.tables import text_tables
    from relpos.report.verdict import verdict_markdown, verdict_text

    assert text_tables(ResultsModel.from_results(res)) in out["text"] and verdict_text(ResultsModel.from_results(res)) in out["text"]
    assert verdict_markdown(res) in (tmp_path / "report.md").read_text()


def test_the_results_page_computes_each_report_input_once():
    from relpos.report.results_page import PageInputs, page_markdown

    full, default = _results(), _results()
    calls = _following(lambda: page_markdown(PageInputs(full=full, default=default)))
    _computed_once(calls)
    assert len(calls["fitted_views"]) == len(calls["ranking"]) == len(calls["verdict"]) == 2  # full, default
    assert calls["_value"] and calls["_diff"]  # the claim rules' own intervals, each once


def test_the_explorer_results_view_reads_one_model_per_loaded_results(tmp_path):
    from relpos.explorer.api import Explorer

    (tmp_path / "results.json").write_text(json.dumps(_results()))
    ex = Explorer([tmp_path], shipped_models=False)

    def views():
        for task in ("lm", "copy", "reverse"):
            ex.results_view({"source": "0", "task": task})

    calls = _following(views)
    assert len(calls["fitted_views"]) == 1 and not calls["ranking"]  # the gate only: no bootstrap for a view
    got = ex.results_view({"source": "0", "task": "copy"})["series"]
    assert {s["label"]: s["fitted_rows"] for s in got}["rope"] == 3


def test_the_far_position_choice_lives_in_one_function():
    """The far quarter (``far_loss``) and the whole-window fallback (bits per byte of whole windows) are read only
    in ``lm_far_losses``; every report output reaches them through it (or the model's kept copy of it). The fit
    gate's own loss at L (``compare.fitting``) is no far-position number."""
    found = []
    for pkg in ("report", "compare"):
        for f in sorted((SRC / pkg).rglob("*.py")):
            tree = ast.parse(f.read_text())
            for fn in ast.walk(tree):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call):
                        name = getattr(node.func, "id", getattr(node.func, "attr", None))
                        bpb = name == "metric_at" and any(isinstance(a, ast.Constant) and a.value == "bpb"
                                                          for a in node.args)
                        if name == "far_loss" or bpb and pkg == "report":
                            found.append((f.relative_to(SRC).as_posix(), fn.name))
    assert found and set(found) == {("report/ranking.py", "lm_far_losses")}, found


@pytest.mark.parametrize("field", ["fitted", "results"])
def test_the_model_is_frozen(field):
    model = ResultsModel.from_results(_results())
    with pytest.raises(AttributeError):
        setattr(model, field, None)
    assert ResultsModel.from_results(model) is model


def test_terminal_tables_take_the_model_and_refuse_a_dict_by_name():
    from relpos.report.tables import text_tables
    from relpos.report.verdict import verdict_text

    for fn in (text_tables, verdict_text):
        with pytest.raises(TypeError, match=fn.__name__ + r"\(\) takes a ResultsModel, got dict"):
            fn({"runs": []})
