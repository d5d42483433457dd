"""The published-claim rules of docs/results.md (issue 49): each has three outcomes -- holds, does not hold, not
testable here -- that flip on constructed data; a task at chance never counts; sub-claims compare the same tasks;
every verdict names the scale it was tested at."""

from __future__ import annotations

import statistics

import pytest

from relpos.report import results_claims as claims
from relpos.report.ranking import ranking
from relpos.report.results_page import PageInputs, page_markdown
from tests.experiments.results_support import BASE, L, N, _fit, _unfit, algo_results, algo_run, lm_results, results

# ------------------------------------------------------------------ the claims flip with the data


@pytest.mark.parametrize("ratios, want", [
    ({}, claims.HOLDS),
    ({"alibi": 1.5}, claims.FAILS),            # ALiBi degrades
    ({"sinusoidal": 1.0}, claims.FAILS),       # sinusoidal does not
    ({"rope": 1.02}, claims.FAILS),            # RoPE does not
])
def test_press_rule_flips_with_the_data(ratios, want):
    f = claims.press(lm_results(**ratios))
    assert f.verdict == want, f.evidence
    # the number quoted is the mean of the per-seed far-position ratios, computed here from the windows
    res = lm_results(**ratios)
    per_seed = [statistics.fmean(r["per_example"][f"position/{N}/48/value"])
                / statistics.fmean(r["per_example"][f"position/{L}/12/value"])
                for r in res["runs"] if r["label"] == "alibi"]
    assert f"{statistics.fmean(per_seed):.2f} [" in f.evidence[0]


def test_press_is_not_testable_with_one_fitted_seed():
    f = claims.press(_unfit(lm_results(), "alibi"))
    assert f.verdict == claims.NOT_TESTABLE and "alibi (1 fitted seed)" in f.evidence[0]
    # sinusoidal sharing one fitted seed with ALiBi: not compared, so not testable (RoPE degrades)
    f = claims.press(_unfit(_unfit(lm_results(), "sinusoidal", (2,)), "alibi", (0,)))
    assert f.verdict == claims.NOT_TESTABLE, f.evidence
    assert any(e.startswith("sinusoidal:") and "1 seeds shared" in e and "not compared" in e for e in f.evidence)


def test_every_verdict_names_the_scale_here_and_the_papers():
    """Issue 49: a verdict says at what size it was tested, beside the paper's."""
    res = algo_results(rand=0.7)
    res["runs"] += lm_results()["runs"]
    for r in res["runs"]:
        r["train"]["params"], r["train"]["steps"] = 100_800, 3000
    res["config"]["batch_size"] = 64
    for f in claims.findings(res, ranking(res)):
        assert f.scale.startswith("Scale: here 0.10M parameters, 0.19M training sequences seen"), f.scale
        assert "; the paper: " + claims.PAPER_SCALE[f.claim.key] in f.scale
    page = page_markdown(PageInputs(full=res))
    assert "- Scale: here 0.10M parameters" in page and claims.PAPER_SCALE["kazemnejad"] in page


@pytest.mark.parametrize("case, want", [
    ("as given", claims.HOLDS),
    ("nope behind", claims.FAILS),           # NoPE clearly behind the best on every task
    ("t5 behind", claims.FAILS),             # T5 not second
    ("two tasks", claims.NOT_TESTABLE),      # fewer than three tasks compare
    ("nope one seed", claims.NOT_TESTABLE),  # NoPE lacks two fitted seeds on two of the three
])
def test_kazemnejad_rule_flips_with_the_data(case, want):
    acc = {"nope behind": {"nope": 0.1}, "t5 behind": {"t5": 0.05}}.get(case, {})
    res = algo_results(tasks=("copy", "reverse") if case == "two tasks" else ("copy", "reverse", "copy-distinct"),
                       **acc)
    if case == "nope one seed":
        _unfit(_unfit(res, "nope", task="copy"), "nope", task="reverse")
    f = claims.kazemnejad(res, ranking(res))
    assert f.verdict == want, f.evidence


def test_kazemnejad_never_counts_a_task_at_chance():
    """Issue 49: NoPE ranked (tied first) only where every scheme is at chance said 'does not hold'; parity at
    chance is no evidence, so with two other tasks the claim is not testable, and with three it is."""
    runs = [algo_run("parity", s, seed, 0.5) for s in BASE for seed in range(3)]
    res = algo_results(tasks=("copy", "reverse"))
    res["runs"] += runs
    f = claims.kazemnejad(res, ranking(res))
    assert f.verdict == claims.NOT_TESTABLE and any(e.startswith("at chance") and "parity" in e for e in f.evidence)
    res = algo_results()
    res["runs"] += runs
    assert claims.kazemnejad(res, ranking(res)).verdict == claims.HOLDS


def test_kazemnejad_t5_second_compares_the_same_tasks():
    """Issue 49: T5's MRR over its tasks was compared with ALiBi's over more tasks. T5 beats ALiBi on every task
    both are ranked on; ALiBi ties first on two tasks where T5 did not fit: T5 is still second."""
    tasks = ("copy", "reverse", "copy-distinct", "mqar", "copy-hints")
    res = algo_results(tasks=tasks)
    for r in res["runs"]:
        if r["task"] in ("mqar", "copy-hints") and r["scheme"] == "alibi":
            r.update(algo_run(r["task"], "alibi", r["seed"], 0.8))
    _unfit(_unfit(res, "t5", task="mqar"), "t5", task="copy-hints")
    rk = ranking(res)
    own = {lab: m for lab, (m, _) in rk["own"].items()}
    assert own["alibi"] > own["t5"]  # over different task sets ALiBi would look better
    f = claims.kazemnejad(res, rk)
    assert f.verdict == claims.HOLDS, f.evidence
    assert "over the same 3 tasks (copy, copy-distinct, reverse): T5 0.50" in f.evidence[-1]


@pytest.mark.parametrize("rand, tasks, want", [
    (0.7, ("copy", "reverse", "copy-distinct"), claims.HOLDS),
    (0.05, ("copy", "reverse", "copy-distinct"), claims.FAILS),
    (0.7, ("copy", "reverse"), claims.NOT_TESTABLE),  # fewer than three tasks compare
])
def test_ruoss_rule_flips_with_the_data(rand, tasks, want):
    res = algo_results(tasks=tasks, rand=rand)
    f = claims.ruoss(res, ranking(res))
    assert f.verdict == want, f.evidence
    assert claims.ruoss(algo_results(), None).verdict == claims.NOT_TESTABLE  # nothing randomized


def test_ruoss_never_counts_a_task_where_plain_rope_is_at_chance():
    """Issue 49: 'better on 0 of 1 task compared', that task parity at chance. An improvement over a plain
    scheme at chance is no evidence: with parity the third task, the claim is not testable."""
    res = algo_results(tasks=("copy", "reverse"), rand=0.7)
    res["runs"] += [algo_run("parity", s, seed, 0.5) for s in BASE for seed in range(3)]
    res["runs"] += [algo_run("parity", "rope", seed, 0.9, variant="randomized-sampled") for seed in range(3)]
    f = claims.ruoss(res, ranking(res))
    assert f.verdict == claims.NOT_TESTABLE, f.evidence
    assert any(e.startswith("parity: plain rope is at chance") for e in f.evidence)


def test_ruoss_not_testable_names_the_fitted_seeds():
    res = algo_results(tasks=("copy",), rand=0.7)
    for r in res["runs"]:
        if r["label"] == "rope+rand-sampled":
            r["train"], r["validation"] = _fit(False), {"score": 0.5}
    f = claims.ruoss(res, ranking(res))
    assert f.verdict == claims.NOT_TESTABLE
    assert f.evidence[0] == ("copy: rope+rand-sampled and rope share 0 fitted seeds: not compared "
                             "(rope+rand-sampled fitted 0/3, rope 3/3).")


@pytest.mark.parametrize("best, tasks, want", [
    (0.5, ("parity", "copy", "reverse"), claims.HOLDS),
    (0.97, ("parity", "copy", "reverse"), claims.FAILS),
    (0.97, ("parity",), claims.FAILS),         # one scheme that generalises contradicts it anyway
    (0.5, ("parity",), claims.NOT_TESTABLE),   # copy and reverse not in the results
])
def test_deletang_rule_flips_with_the_data(best, tasks, want):
    runs = [algo_run(t, s, seed, best if (s, t) == ("alibi", "parity") else 0.5 if t == "parity" else 0.1)
            for t in tasks for s in BASE for seed in range(3)]
    f = claims.deletang(results(runs))
    assert f.verdict == want, f.evidence
    assert f"best exact match at 2L alibi {best:.2f}" in f.evidence[0]


def test_ruoss_says_what_the_runs_on_twice_the_budget_show_without_counting_them():
    """A task the ranked runs cannot compare (the randomized model fitted no seed) but the runs on twice the
    budget can: the evidence gives that interval, labelled, and the verdict and the count of tasks compared are
    the ranked runs' alone."""
    res = algo_results(tasks=("copy",), rand=0.7)
    for r in res["runs"]:
        if r["label"] == "rope+rand-sampled":
            r["train"], r["validation"] = _fit(False), {"score": 0.5}
    longer = algo_results(tasks=("copy",), rand=0.7)
    longer["runs"] = [r for r in longer["runs"] if r["scheme"] == "rope"]
    plain = claims.ruoss(res, ranking(res))
    f = claims.ruoss(res, ranking(res), longer={"copy": longer})
    assert f.verdict == plain.verdict == claims.NOT_TESTABLE
    extra = [e for e in f.evidence if e not in plain.evidence]
    assert len(extra) == 1 and extra[0].startswith("copy on twice the budget (not ranked, not counted: another "
                                                   "budget): rope+rand-sampled minus rope +")
    assert "(better; 3 seeds both fitted there)." in extra[0]
    assert f.evidence[-1] == plain.evidence[-1]  # "0 task(s) compared, fewer than 3"
    # where they do not compare on twice the budget either, nothing is added
    for r in longer["runs"]:
        if r["label"] == "rope+rand-sampled":
            r["train"] = _fit(False)
    assert claims.ruoss(res, ranking(res), longer={"copy": longer}).evidence == plain.evidence
    page = page_markdown(PageInputs(full=res, longer={"copy": algo_results(tasks=("copy",), rand=0.7)}))
    assert "copy on twice the budget (not ranked, not counted" in page


def test_kazemnejad_says_how_nope_compares_on_twice_the_budget_without_counting_it():
    """NoPE fits a task only on twice the budget: the evidence gives NoPE minus each scheme that ran there,
    labelled (only the schemes that did not fit the ranked budget ran it), and the verdict is the ranked runs'."""
    res = _unfit(algo_results(tasks=("copy",)), "nope", task="copy")
    longer = algo_results(tasks=("copy",))
    longer["runs"] = [r for r in longer["runs"] if r["scheme"] in ("nope", "t5")]
    plain = claims.kazemnejad(res, ranking(res))
    f = claims.kazemnejad(res, ranking(res), longer={"copy": longer})
    assert f.verdict == plain.verdict == claims.NOT_TESTABLE
    extra = [e for e in f.evidence if e not in plain.evidence]
    assert len(extra) == 1 and extra[0].startswith(
        "copy on twice the budget (not ranked, not counted: another budget, and only the schemes that did not fit "
        "the ranked budget ran there): nope minus t5 "), f.evidence
    assert "seeds both fitted there)." in extra[0]
    # a task where NoPE is ranked already gains nothing from the longer runs
    ranked = algo_results(tasks=("copy",))
    assert claims.kazemnejad(ranked, ranking(ranked), longer={"copy": longer}).evidence == \
        claims.kazemnejad(ranked, ranking(ranked)).evidence
