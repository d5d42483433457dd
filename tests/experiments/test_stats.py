"""Paired bootstrap intervals, the tie rule, the minimum of fitted seeds, Spearman's rho."""

from __future__ import annotations

import math

import numpy as np
import pytest

from relpos.report.stats import (
    MIN_SEEDS,
    paired_bootstrap,
    per_example_key,
    rank_against_best,
    spearman,
    spearman_interval,
)


def _seeds(values_per_seed):
    return [{"v": np.asarray(v, dtype=float)} for v in values_per_seed]


def test_tie_when_the_interval_contains_zero_on_a_constructed_case():
    rng = np.random.default_rng(0)
    base = [rng.random(200) < 0.6 for _ in range(3)]
    # b flips 2 of 200 examples per seed: a difference far inside the noise of 200 examples -> a tie
    b = [x.copy() for x in base]
    for x in b:
        x[:2] = ~x[:2]
    iv = paired_bootstrap(_seeds(base), _seeds(b))
    assert iv.lo <= 0 <= iv.hi and iv.tie
    # c is right on 40 more examples in every seed -> not a tie, and the sign says better
    c = [x.copy() for x in base]
    for x in c:
        x[np.nonzero(~x)[0][:40]] = True
    iv = paired_bootstrap(_seeds(c), _seeds(base))
    assert not iv.tie and iv.lo > 0 and iv.est == pytest.approx(0.2)


def test_pairing_over_examples_sees_a_small_consistent_difference():
    """Every example 0.01 better, on examples whose scores vary widely: paired, the interval excludes 0."""
    rng = np.random.default_rng(1)
    b = [rng.random(300) for _ in range(3)]
    a = [x + 0.01 for x in b]
    iv = paired_bootstrap(_seeds(a), _seeds(b))
    assert not iv.tie and iv.lo == pytest.approx(0.01) and iv.hi == pytest.approx(0.01)


def test_seed_variation_enters_the_interval():
    # a beats b by a lot on seed 0 and loses on seed 1: resampling the seeds covers 0
    a = _seeds([[1.0] * 50, [0.0] * 50])
    b = _seeds([[0.0] * 50, [0.6] * 50])
    iv = paired_bootstrap(a, b)
    assert iv.tie and iv.lo < 0 < iv.hi


def test_ratio_statistic_and_errors():
    a = [{"far": np.full(8, 3.0), "base": np.full(32, 2.0)} for _ in range(2)]
    b = [{"far": np.full(8, 2.0), "base": np.full(32, 2.0)} for _ in range(2)]
    iv = paired_bootstrap(a, b, lambda m: m["far"] / m["base"])
    assert iv.est == pytest.approx(0.5) and not iv.tie
    with pytest.raises(ValueError, match="same seeds"):
        paired_bootstrap(a, b[:1])
    with pytest.raises(ValueError, match="paired"):
        paired_bootstrap(_seeds([[1.0, 0.0]]), _seeds([[1.0]]))


def test_rank_against_best_needs_two_fitted_seeds_and_ranks_ties_first():
    good = [{"v": np.ones(64), "_seed": s} for s in range(3)]
    same = [{"v": np.r_[np.ones(63), 0.0], "_seed": s} for s in range(3)]
    worse = [{"v": np.r_[np.ones(32), np.zeros(32)], "_seed": s} for s in range(3)]
    lonely = [{"v": np.ones(64), "_seed": 0}]  # one fitted seed: never ranked, however good
    out = rank_against_best({"good": good, "same": same, "worse": worse, "lonely": lonely})
    assert out["best"] == "good" and out["excluded"] == ["lonely"] and MIN_SEEDS == 2
    assert out["rank"] == {"good": 1, "same": 1, "worse": 3}
    assert out["tie"]["same"] and not out["tie"]["worse"] and out["vs_best"]["worse"].est == pytest.approx(-0.5)
    low = rank_against_best({"a": good, "b": worse}, higher_is_better=False)
    assert low["best"] == "b" and low["rank"] == {"a": 2, "b": 1}


def test_spearman_and_its_interval():
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    a = {s: [float(i), float(i) + 0.1] for i, s in enumerate("abcde")}
    iv = spearman_interval(a, a)
    assert iv.est == 1.0 and iv.lo == 1.0
    flipped = {s: [-v for v in vs] for s, vs in a.items()}
    assert spearman_interval(a, flipped).est == -1.0
    with pytest.raises(ValueError, match="at least 3"):
        spearman_interval({"a": [1.0]}, {"a": [1.0]})
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_per_example_scores_travel_from_the_task_to_results_json():
    from relpos.compare.job import Job, run_job
    from relpos.report.tables import results_dict
    from tests.experiments.test_fitting import _tiny

    cfg = _tiny("copy", task_train={"copy": {"steps": 2, "batch_size": 4, "warmup": 1}})
    res = run_job(Job("copy", "alibi", 0).to_dict(), cfg.to_dict())
    run = res["runs"][0]
    assert "per_example" not in run["measurements"][0]  # moved out of the measurement rows
    for n in (1, 2):
        v = run["per_example"][per_example_key("accuracy", n)]
        tok = run["per_example"][per_example_key("accuracy", n, field="token")]
        m = next(m for m in run["measurements"] if m["eval_len"] == n)
        assert len(v) == len(tok) == m["count"] == 16 and set(v) <= {0, 1}
        assert np.mean(v) == pytest.approx(m["accuracy"]) and np.mean(tok) == pytest.approx(m["token_accuracy"])
    assert run["validation"]["kind"] == "val_exact_at_L" and 0 <= run["validation"]["score"] <= 1
    stored = {"scheme": "alibi", "variant": None, "task": "copy", "seed": 0, "train_len": 1, "job": res["job"],
              "info": {k: v for k, v in run.items() if k != "measurements"}, "measurements": run["measurements"]}
    doc = results_dict(cfg.to_dict(), "f", [stored])
    assert doc["runs"][0]["per_example"] == run["per_example"] and doc["runs"][0]["validation"] == run["validation"]


def test_lm_ranking_reads_the_far_position_ratio_per_window():
    """The LM score is the far-quarter loss at the longest length over the far quarter at L, per test window."""
    from relpos.report.ranking import seed_inputs

    def run(far_loss_long):
        pos, per = [], {}
        for n, far in ((64, 2.0), (256, far_loss_long)):
            for a in range(0, n, n // 4):
                pos.append({"eval_len": n, "bucket_start": a, "bucket_end": a + n // 4, "bpb": 1.0})
            per[per_example_key("position", n, 3 * n // 4)] = [far, far + 0.2]  # two windows
        return {"train_len": 64, "metrics": [{"eval_len": 64, "bpb": 1.0}, {"eval_len": 256, "bpb": 1.0}],
                "position_loss": pos, "per_example": per}

    inp, real = seed_inputs(run(3.0), "lm")
    assert real and list(inp["far"]) == [3.0, 3.2] and list(inp["base"]) == [2.0, 2.2]
    # whole windows say 1.0 for both; the far quarter tells them apart, paired per window
    a = [{"far": seed_inputs(run(3.0), "lm")[0]["far"], "base": seed_inputs(run(3.0), "lm")[0]["base"]}] * 2
    b = [{"far": seed_inputs(run(2.0), "lm")[0]["far"], "base": seed_inputs(run(2.0), "lm")[0]["base"]}] * 2
    iv = paired_bootstrap(a, b, lambda m: m["far"] / m["base"])
    assert iv.est > 0.4 and not iv.tie


def test_a_decision_near_its_edge_is_recomputed_with_more_resamples(monkeypatch):
    """Issue 49: with 1,000 resamples three decisions moved when the bootstrap was reseeded. An interval whose
    bound lies near 0 or +-BORDERLINE is recomputed with REFINE times the resamples; one far from them is not."""
    from relpos.report import stats

    calls = []

    def fake(a, b, stat=None, *, n_boot, seed):
        calls.append(n_boot)
        return fake.iv

    monkeypatch.setattr(stats, "paired_bootstrap", fake)
    for iv, want in ((stats.Interval(0.1, 0.0041, 0.2), [100, 100 * stats.REFINE]),
                     (stats.Interval(0.1, -0.001, 0.2), [100, 100 * stats.REFINE]),
                     (stats.Interval(0.1, 0.05, 0.2), [100])):
        calls.clear()
        fake.iv = iv
        stats.decided_bootstrap([], [], n_boot=100, seed=3)
        assert calls == want


def test_few_seeds_get_every_draw_of_seeds_equally_often():
    """The first stage is enumerated (3 seeds: 27 draws, each as often), so the bounds move less with the
    bootstrap's seed than when the draws' shares are random."""
    rng = np.random.default_rng(0)
    a = [{"v": rng.random(64) + 0.1 * s} for s in range(3)]
    b = [{"v": rng.random(64)} for _ in range(3)]
    los = [paired_bootstrap(a, b, n_boot=2700, seed=s).lo for s in range(5)]
    assert max(los) - min(los) < 0.01
    assert paired_bootstrap(a, b, n_boot=2700, seed=1) == paired_bootstrap(a, b, n_boot=2700, seed=1)


# The shipped protocol-3 parity scores of KERPLE and FIRE (per-token accuracy at 2L, 256 test examples per seed,
# seeds 0-2, packed bits): the difference lies on a lattice of 1/768, and the 2.5 % quantile of the sampled
# bootstrap fell on 3/768 or 4/768 with the bootstrap's seed, on either side of BORDERLINE (0.0039 / 0.0052).
_PARITY = {
    "kerple-log": ["aaaaaaaaaaaaaaaabaaaaaaaaaaaaaaaaeaaaaaaeaaabeeaaaeaaaaaaeaaaa2a",
                   "55557555555555d55555555555555555555555d5555555d555555555755555d5",
                   "aaaa8aaaaaaaaa22aaaaaaaaaaaaaaaaaeaaaa28eaaebeeaaaeaaaaa8eaaaa2a"],
    "fire": ["aaaa82a8aaaaaa228aaaaa8aaaaa88aaaaaaaa28a2aa8a2aaaaa2a8a882a2a2a",
             "5555555555555555455555555555555551555555555141155515555551555555",
             "5555555555555555555555555555555551555555155141155515555551555555"],
}


def _parity_rows():
    return {lab: [{"v": np.unpackbits(np.frombuffer(bytes.fromhex(h), dtype=np.uint8)).astype(float), "_seed": s}
                  for s, h in enumerate(hexes)] for lab, hexes in _PARITY.items()}


def test_a_rank_on_a_lattice_tie_does_not_depend_on_the_bootstrap_seed():
    """Issue 49: FIRE's parity rank was 3 or 4 with the bootstrap's seed (1 of 140 decisions). Differences of
    per-token accuracies lie on a lattice, and their bootstrap distribution is now computed exactly: the same
    interval, tie and rank under every seed and number of resamples."""
    rows = _parity_rows()
    strip = lambda lab: [{"v": s["v"]} for s in rows[lab]]  # noqa: E731
    ivs = {paired_bootstrap(strip("kerple-log"), strip("fire"), n_boot=n, seed=s) for s in range(5) for n in (200, 10000)}
    assert len(ivs) == 1
    (iv,) = ivs
    assert iv.lo * 768 == pytest.approx(round(iv.lo * 768)) and iv.hi * 768 == pytest.approx(round(iv.hi * 768))
    ranks = {tuple(sorted(rank_against_best(rows, n_boot=10000, seed=s)["rank"].items())) for s in range(5)}
    assert len(ranks) == 1


def test_the_exact_lattice_bootstrap_matches_a_large_sampled_one_and_is_antisymmetric():
    from relpos.report.stats import lattice_step

    rng = np.random.default_rng(3)
    # per-token accuracies over 8 tokens: multiples of 1/8, paired, with a small shift per seed
    a = [{"v": rng.integers(0, 9, 64) / 8} for _ in range(3)]
    b = [{"v": np.clip(x["v"] - rng.integers(0, 2, 64) / 8, 0, 1)} for x in a]
    assert lattice_step([x["v"] for x in a]) == 8 and lattice_step([np.array([0.1234567891])]) is None
    exact = paired_bootstrap(a, b)
    assert paired_bootstrap(b, a) == (-exact.est, -exact.hi, -exact.lo)
    # the same two-stage bootstrap, sampled (a non-default statistic is never computed exactly)
    sampled = paired_bootstrap(a, b, lambda m: m["v"], n_boot=54000, seed=1)
    step = 1 / (8 * 64 * 3)
    assert abs(sampled.lo - exact.lo) <= 3 * step and abs(sampled.hi - exact.hi) <= 3 * step
    assert sampled.est == pytest.approx(exact.est)
    # off a lattice the interval is sampled, as before: the bootstrap's seed moves it a little
    c = [{"v": x["v"] + rng.normal(0, 1e-3, 64)} for x in a]
    assert paired_bootstrap(c, b, seed=0) != paired_bootstrap(c, b, seed=1)
