"""The generator of docs/results.md (issue 30): every published claim is a rule on the JSON that flips when the
data contradicts it, rows with one fitted seed never enter a ranking, missing folders get one line, the page is
re-derived from the files it ships, and nothing relpos did not write is overwritten."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from relpos.report import claim_changes
from relpos.report import results_claims as claims
from relpos.report.ranking import ranking
from relpos.report.results_page import MARKER, PageInputs, inputs_from_folders, inputs_from_json_dir, main, \
    page_markdown

from tests.experiments.results_support import BASE, N, _fit, _unfit, algo_results, algo_run, lm_results


def test_a_row_with_one_fitted_seed_never_enters_the_ranking():
    res = algo_results(tasks=("copy",), nope=1.0)
    for r in res["runs"]:
        if r["label"] == "nope" and r["seed"]:
            r["train"], r["validation"] = _fit(False), {"score": 0.5}
    rk = ranking(res)
    assert "nope" not in rk["per_task"]["copy"]["rank"] and rk["per_task"]["copy"]["best"] == "t5"
    page = page_markdown(PageInputs(full=res))
    assert "not ranked (1/3 fitted)" in page
    f = claims.kazemnejad(res, rk)
    assert f.verdict == claims.NOT_TESTABLE and "its fitted seeds: copy 1/3" in f.evidence[-1]  # why, by task


def test_a_scheme_ranked_alone_on_a_task_gains_nothing_from_it():
    """On a task where every other scheme fitted one seed, the one ranked scheme is first by default: the task
    is left out of every MRR (the overall one and Kazemnejad's), and the page says so."""
    res = algo_results(tasks=("copy", "reverse"), nope=0.8, t5=0.6)
    for r in res["runs"]:  # reverse: only sinusoidal (the worst on copy) keeps two fitted seeds
        if r["task"] == "reverse" and r["scheme"] != "sinusoidal" and r["seed"]:
            r["train"], r["validation"] = _fit(False), {"score": 0.5}
    rk = ranking(res)
    assert rk["per_task"]["reverse"]["rank"] == {"sinusoidal": 1} and rk["compared"] == ["copy"]
    mrr = {lab: m for lab, m, _ in rk["order"]}
    assert mrr["sinusoidal"] == pytest.approx(1 / rk["per_task"]["copy"]["rank"]["sinusoidal"])
    assert mrr["sinusoidal"] < 1.0  # it would read 1/2 * (1 + 1/r) > 1/r with reverse counted
    page = page_markdown(PageInputs(full=res))
    assert "- **reverse** (per-token accuracy at 2L): only sinusoidal 0.10 is ranked, so nothing is compared" in page
    assert "left out of the MRR: reverse." in page and "| 1 (alone) |" in page
    assert ("(mean reciprocal rank over the same tasks for every scheme: copy, the 1 of 1 compared task(s) on "
            "which all 5 are ranked): first of 5: nope") in page
    f = claims.kazemnejad(res, rk)  # reverse (NoPE not ranked there) never enters T5's or the others' MRR
    assert f.verdict == claims.NOT_TESTABLE and "NoPE is compared on 1 algorithmic task(s)" in f.evidence[-1]


# ------------------------------------------------------------------ the page


@pytest.mark.parametrize("factor", [4, 8])
def test_the_page_states_the_randomized_position_range_from_the_results(factor):
    res = algo_results(tasks=("copy",), rand=0.5)
    res["config"]["random_positions_factor"] = factor
    page = page_markdown(PageInputs(full=res))
    line = next(ln for ln in page.splitlines() if ln.startswith("* **Randomized positions**"))
    assert ("trained for rope). Each training sequence takes a sorted sample of distinct positions from "
            f"[0, {factor} x the longest evaluated sequence") in line
    assert "Randomized positions" not in page_markdown(PageInputs(full=algo_results(tasks=("copy",))))


def _tables(page: str, heading: str) -> list[list[str]]:
    sec = page.split(heading, 1)[1].split("\n## ", 1)[0]
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in sec.splitlines() if ln.startswith("| ")]


def test_fitted_fractions_and_banner_are_counted_from_the_json():
    res = algo_results()
    res["runs"] += lm_results()["runs"]
    res["runs"][0]["train"], res["runs"][0]["validation"] = _fit(False), {"score": 0.5}
    page = page_markdown(PageInputs(full=res))
    assert page.startswith(MARKER + "\n")
    rows = _tables(page, "## Fitted fractions")
    tasks = rows[0][1:]
    for row in rows[1:-1]:
        for t, cell in zip(tasks, row[1:]):
            rs = [r for r in res["runs"] if r["task"] == t and r["label"] == row[0]]
            assert cell == f"{sum(r['train']['fit']['fitted'] for r in rs)}/{len(rs)}"
    assert rows[-1][0] == "all rows"
    assert "`abababababababab`" in page and "1,234,567 / 2,345 / 3,456 bytes" in page
    assert "**0** after cleaning (17 from validation, 29 from test cut out before)" in page


def test_missing_folders_each_give_one_line():
    page = page_markdown(PageInputs())
    for line in ("No `full` results: this section waits for them.", "No `full` results: nothing is ranked yet.",
                 "No scale-check results yet (`relpos compare --preset scale`).",
                 "No `default` results: this section waits for them.",
                 "No protocol-2 verdict table was given (`--previous`).", "- the `full` preset: no results."):
        assert line in page
    for f in claims.findings(None, None):
        assert f.verdict == claims.NOT_TESTABLE


def _folder(path: Path, res: dict) -> Path:
    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps(res))
    return path


def test_the_page_is_rederived_from_the_shipped_files_and_never_overwrites_a_foreign_file(tmp_path):
    full = algo_results(rand=0.7)
    full["runs"] += lm_results()["runs"]
    f = _folder(tmp_path / "full", full)
    d = _folder(tmp_path / "default", lm_results())
    out, jd = tmp_path / "docs" / "results.md", tmp_path / "docs" / "results" / "protocol3"
    argv = ["--full", str(f), "--default", str(d), "--out", str(out), "--json-dir", str(jd)]
    out.parent.mkdir()
    out.write_text("# a page someone wrote\n")
    assert main(argv) == 2 and out.read_text() == "# a page someone wrote\n" and not jd.exists()
    assert main(argv + ["--force"]) == 0
    page = out.read_text()
    inp, _ = inputs_from_folders(f, None, d)
    assert page == page_markdown(inp, "results/protocol3/") == page_markdown(inputs_from_json_dir(jd),
                                                                              "results/protocol3/")
    assert main(argv) == 0 and out.read_text() == page  # its own page: rewritten, the same
    (jd / "times.json").unlink()
    (jd / "times.json").write_text("not ours\n")
    (jd / "page-files.json").write_text("[]")
    assert main(argv) == 2 and (jd / "times.json").read_text() == "not ours\n"
    assert main(argv + ["--full", str(tmp_path / "nowhere")]) == 2


def test_the_shipped_protocol3_json_reads_into_a_page():
    """The schema of real results: the default preset's shipped JSON as a stand-in for the full preset."""
    p = Path(__file__).resolve().parents[2] / "docs" / "results" / "protocol3" / "default-results.json"
    res = json.loads(p.read_text())
    page = page_markdown(PageInputs(full=res, default=res))
    assert f"`{res['corpus']['sha256'][:16]}`" in page
    assert "Nothing is ranked: no scheme has 2 fitted seeds" in page  # one seed
    m = re.search(r"held: (.*?); degraded", page)
    assert m and "alibi x" in m.group(1)


def test_the_time_table_reads_the_stores_cpu_seconds():
    times = {"full": {"cpu_seconds": 5400.0, "jobs": 3, "fingerprint": "fff", "wall_seconds": 600.0,
                      "by_task": {"lm": {"jobs": 2, "cpu_seconds": 3600.0}, "copy": {"jobs": 1, "cpu_seconds": 1800.0}}},
             "scale/d64-L64": {"cpu_seconds": 1800.0, "jobs": 24, "fingerprint": "a"},
             "scale/d128-L64": {"cpu_seconds": 3600.0, "jobs": 24, "fingerprint": "b"}}
    rows = _tables(page_markdown(PageInputs(full=lm_results(), times=times)), "## Time")
    assert rows[1] == ["default", "-", "-", "-", "no results"]
    assert rows[2] == ["full (`fff`)", "3", "1.50", "10.0 min", "lm 1.00 (2 jobs), copy 0.50 (1 job)"]
    assert rows[3] == ["scale (2 of 6 cells)", "48", "1.50", "-", "d64-L64 0.50, d128-L64 1.00"]


def _job(end: str, tries: list[float], ev: float, reused_end: str | None = None) -> dict:
    info = {"train": {"seconds": tries[-1], "seconds_all_tries": sum(tries)}, "eval_seconds": ev}
    if reused_end:
        info["reused_from"] = {"finished_at": reused_end}
    return {"finished_at": end, "train_seconds": tries[-1], "eval_seconds": ev, "info": info}


def test_wall_time_counts_every_try_leaves_out_gaps_and_dates_reused_jobs_when_trained():
    from relpos.report.results_inputs import busy_seconds, job_interval

    t0 = "2026-12-04T10:00:00+00:00"
    a = _job("2026-12-04T10:10:00+00:00", [200.0, 300.0], 100.0)  # 600 s: starts at 10:00, not 10:05
    assert job_interval(a) == (datetime.fromisoformat(t0).timestamp(), datetime.fromisoformat(t0).timestamp() + 600)
    b = _job("2026-12-04T10:08:00+00:00", [300.0], 0.0)  # runs beside a (two workers): counted once
    c = _job("2026-12-04T14:01:00+00:00", [60.0], 0.0)  # a later session: the gap between is not counted
    # copied by --reuse at 15:00, trained the day before: dated by when it was trained
    d = _job("2026-12-04T15:00:00+00:00", [100.0], 20.0, reused_end="2026-12-03T09:02:00+00:00")
    assert busy_seconds([a, b, c]) == 600 + 60
    assert busy_seconds([a, b, c, d]) == 600 + 60 + 120
    assert busy_seconds([]) == 0.0


def _untrained_past_L(res: dict, label: str) -> None:
    """Mark ``label``'s LM buckets at the longest length as read through untrained table rows, as results.json
    does for a learned absolute table past L (losses nulled, per-window scores kept)."""
    for r in res["runs"]:
        if r["label"] == label:
            for p in r["position_loss"]:
                if p["eval_len"] == N:
                    p.update(bpb=None, loss=None, untrained_rows=True)


def test_a_learned_table_read_past_its_rows_gives_no_number():
    """results.json nulls the bucket losses past L of a learned absolute table but keeps their per-window
    scores; the claims never read them."""
    res = lm_results()
    _untrained_past_L(res, "alibi")
    assert claims.value(res, "lm", "alibi") == (None, 0)
    assert claims.press(res).verdict == claims.NOT_TESTABLE
    from relpos.report.ranking import ranking_markdown

    row = next(ln for ln in ranking_markdown(res).splitlines() if ln.startswith("| alibi |") and "not ranked" in ln)
    assert "not ranked (untrained rows: no number)" in row  # fitted 3/3: the reason is the rows, not the fit


def test_what_changed_reads_the_old_verdict_table_and_names_the_flips():
    old = ("# old\n\n## Verdict\n\n- notes\n\n| scheme | fitted | LM 16x/1x | copy 2L | MRR |\n|---|---|---:|---:|---:|\n"
           "| alibi | lm 3/3 | 0.98±0.00 | 0.10 | 1.00 |\n| t5 | lm 3/3 | 1.01±0.01 | 0.00 | 0.50 |\n"
           "| rope | lm 3/3 | 2.50±0.09 | 0.00 | 0.20 |\n\n## Next\n")
    prev = claim_changes.previous_from_page(old)
    assert prev["rows"]["t5"]["LM 16x/1x"] == "1.01±0.01"
    res = lm_results()  # t5 1.2: was held at 1.01, now degraded
    lines = claim_changes.changes(prev, res, ranking(res))
    assert "LM verdicts that changed (held when the ratio is <= 1.05): t5 (held -> degraded)." in lines[0]
    row = next(ln for ln in lines if ln.startswith("| t5 |"))
    assert row.startswith("| t5 | 1.01 | 1.21 [") and "held -> degraded" in row
    assert "- copy: on the old page, not in these results (no results yet)." in lines  # full runs copy: not yet
    old_hints = old.replace("copy 2L", "copy-hints 2L")
    lines = claim_changes.changes(claim_changes.previous_from_page(old_hints), res, ranking(res))
    assert "- copy-hints: on the old page, not in these results (not part of this preset)." in lines
    new_style = old.replace("copy 2L", "copy-hints exact 2L")  # a protocol-3 page as the previous one
    lines = claim_changes.changes(claim_changes.previous_from_page(new_style), res, ranking(res))
    assert "- copy-hints: on the old page, not in these results (not part of this preset)." in lines
    with pytest.raises(ValueError, match="no '## Verdict'"):
        claim_changes.previous_from_page("# nothing\n")


def test_a_full_folder_filled_task_by_task_names_the_presets_missing_tasks():
    """`--tasks lm` records only lm in the folder's config; the page still lists the full preset's other tasks."""
    from relpos.compare.presets import FULL_ALGORITHMIC

    res = lm_results()
    assert res["config"]["tasks"] == ["lm"]
    page = page_markdown(PageInputs(full=res))
    line = next(ln for ln in page.splitlines() if ln.startswith("- `full`: tasks without results yet"))
    assert line.endswith(", ".join(sorted(FULL_ALGORITHMIC)) + ".")


def test_a_task_with_runs_still_to_come_is_named_provisional():
    res = lm_results()
    pairs = len(res["config"]["schemes"]) * len(res["config"]["seeds"])
    res["runs"] = [r for r in res["runs"] if not (r["scheme"] == "rope" and r["seed"] == 2)]
    page = page_markdown(PageInputs(full=res))
    assert f"- `full`: lm has {pairs - 1} of its {pairs} scheme-seed runs; the rest are not run yet" in page
    assert "scheme-seed runs" not in page_markdown(PageInputs(full=lm_results()))


def test_the_verdict_shows_a_learned_table_past_its_rows_as_na():
    from relpos.report.results_doc import UNTRAINED
    from relpos.report.verdict import _table, verdict

    res = lm_results()
    _untrained_past_L(res, "alibi")
    v = verdict(res)
    header, rows = _table(res, v)
    row = next(r for r in rows if r[0] == "alibi")
    assert UNTRAINED in row and not any("alibi" in n and "whole-window" in n for n in v["notes"])
    assert any(n.startswith("LM rows read past their trained table rows") and "alibi" in n for n in v["notes"])


# ------------------------------------------------------------------ issue 49: like for like, borderline, speed, times


def test_the_overall_order_reads_the_same_tasks_for_every_scheme():
    """Issue 49: the overall MRR averaged 2 to 6 tasks per scheme. NoPE, best on copy, fitted nothing else: the
    overall order reads the tasks every scheme in it is ranked on, and NoPE's MRR over its own task is shown
    labelled as such, not as a place in the order."""
    res = algo_results(nope=0.9)
    _unfit(_unfit(res, "nope", task="reverse"), "nope", task="copy-distinct")
    rk = ranking(res)
    assert rk["common"] == ["copy", "copy-distinct", "reverse"]
    order = [lab for lab, m, _ in rk["order"] if m == m]
    assert "nope" not in order and len(order) == 4 and rk["own"]["nope"] == (1.0, 1)
    page = page_markdown(PageInputs(full=res))
    assert "not in this order (not ranked on every one of these tasks): nope." in page
    assert "MRR (own tasks: different sets)" in page


def test_a_task_at_chance_keeps_its_ranks_but_enters_no_mrr():
    """Parity, where every scheme guesses (0.5 at 2L), ranked six schemes first and ALiBi fifth by noise among
    guesses, and counted in the overall MRR. A task whose best scheme is at chance enters no MRR; one whose best
    is above chance does."""
    res = algo_results(tasks=("copy", "reverse"))
    res["runs"] += [algo_run("parity", s, seed, 0.5) for s in BASE for seed in range(3)]
    rk = ranking(res)
    assert rk["at_chance"] == ["parity"] and "parity" in rk["compared"] and rk["per_task"]["parity"]["rank"]
    assert rk["common"] == ["copy", "reverse"] and all(n == 2 for _, n in rk["own"].values())
    page = page_markdown(PageInputs(full=res))
    assert "so these ranks are among guesses and the task enters no MRR" in page
    assert "parity at chance, in no MRR" in page
    res = algo_results(tasks=("copy", "reverse"))
    res["runs"] += [algo_run("parity", s, seed, 0.9 if s == "alibi" else 0.5) for s in BASE for seed in range(3)]
    rk = ranking(res)
    assert rk["at_chance"] == [] and rk["common"] == ["copy", "parity", "reverse"]


def test_borderline_decisions_are_counted_and_marked():
    from relpos.report.ranking import BORDERLINE_MARK, borderline_decisions
    from relpos.report.stats import Interval

    res = algo_results(tasks=("copy",))
    rk = ranking(res)
    assert borderline_decisions(rk)["n"] == 0 and borderline_decisions(rk)["of"] >= 4
    pt = rk["per_task"]["copy"]
    pt["vs_best"]["t5"] = Interval(-0.2, -0.3, -0.004)  # a bound within 0.005 of 0
    near = borderline_decisions(rk)
    assert near["n"] == 1 and ("copy", "t5") in near["vs_best"] and ("copy", "t5") in near["rank"]
    page = page_markdown(PageInputs(full=res))
    assert "- **Borderline decisions**: 0 of" in page
    from relpos.report.ranking import ranking_markdown

    md = ranking_markdown(res, rk)
    assert f"-0.20 [-0.30, -0.00] tie {BORDERLINE_MARK}" in md and "Borderline decisions" in md  # decided a tie


def test_learning_speed_reads_the_first_pass_and_says_na_where_not_recorded():
    res = algo_results(tasks=("copy",))
    for r in res["runs"]:
        if r["label"] == "alibi":
            r["train"]["fit"]["first_pass_step"] = [900, 1200, None][r["seed"]]
        if r["label"] == "t5":
            r["train"]["fit"]["first_pass_step"] = 700
    page = page_markdown(PageInputs(full=res))
    rows = {r[0]: r[1:] for r in _tables(page, "## Learning speed")}
    assert rows["alibi"] == ["1,050 (3/3; 2 passed)"] and rows["t5"] == ["700 (3/3)"] and rows["nope"] == ["n/a (3/3)"]
    assert "- copy: fastest to pass the gate: t5 (median 700 steps" in page


def test_times_come_only_from_a_store_shipped_beside_the_page(tmp_path):
    """Issue 49: times.json typed CPU-hours of folders whose store was gone. Read back, a time comes from the
    store shipped in the JSON folder; a figure in times.json without one is not on the page."""
    from relpos.compare.store import Store

    res = lm_results()
    jd = tmp_path / "json"
    jd.mkdir()
    (jd / "full-results.json").write_text(json.dumps(res))
    (jd / "default-results.json").write_text(json.dumps({**res, "fingerprint": "fedcba9876543210"}))
    (jd / "times.json").write_text(json.dumps({"default": {"cpu_seconds": 1111.0, "jobs": 16,
                                                           "fingerprint": "fedcba9876543210"}}))
    (jd / "full").mkdir()
    with Store(jd / "full" / "results.sqlite") as st:
        st.bind(res["fingerprint"], {})
        for i in range(2):
            st.write_job(res["fingerprint"], {"job": f"lm/alibi/seed{i}", "scheme": "alibi", "task": "lm", "seed": i,
                                              "train": {"seconds": 10.0}, "eval_seconds": 1.0,
                                              "cpu_seconds": 1800.0 * (i + 1), "runs": []})
    rows = _tables(page_markdown(inputs_from_json_dir(jd)), "## Time")
    assert rows[1][0] == "default" and rows[1][-1] == "store not shipped: CPU time not recorded"
    assert rows[2][:3] == [f"full (`{res['fingerprint']}`)", "2", "1.50"]
