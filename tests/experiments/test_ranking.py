"""The LM far-position ratio is chosen in one place (:func:`relpos.report.ranking.lm_far_losses`): the
verdict's number (:func:`relpos.report.verdict.lm_ratio`) and the ranking's per-seed inputs
(:func:`relpos.report.ranking.seed_inputs`) agree on it, far positions and whole-window fallback alike."""

import math

import pytest

from relpos.report.ranking import lm_far_losses, seed_inputs
from relpos.report.verdict import lm_ratio

L, N = 8, 32


def _buckets(n, far_bpb, far_loss):
    """Four buckets of a window of ``n`` bytes: flat 1.0 except the last quarter (``loss`` differs from ``bpb``
    so that reading the wrong field shows)."""
    return [{"eval_len": n, "bucket_start": s, "bucket_end": s + n // 4,
             "bpb": far_bpb if s == 3 * n // 4 else 1.0, "loss": far_loss if s == 3 * n // 4 else 0.5}
            for s in range(0, n, n // 4)]


def _run(bucket_lens):
    """An LM run trained at L, evaluated at L and 4L; position buckets at ``bucket_lens`` only; no per-window
    scores (so the ranking reads the same summary numbers as the verdict)."""
    far = {L: (2.0, 7.0), N: (5.0, 11.0)}
    rows = [r for n in bucket_lens for r in _buckets(n, *far[n])]
    return {"task": "lm", "train_len": L, "position_loss": rows,
            "metrics": [{"eval_len": L, "bpb": 1.25, "loss": 0.9}, {"eval_len": N, "bpb": 2.0, "loss": 1.3}]}


@pytest.mark.parametrize("bucket_lens, want, far", [
    ((L, N), 5.0 / 2.0, True),     # far quarters at both lengths: the far-position ratio
    ((N,), 2.0 / 1.25, False),     # buckets at one length only: whole windows at both (never mixed)
    ((), 2.0 / 1.25, False),       # old results without buckets: whole windows
])
def test_verdict_and_ranking_read_the_same_lm_ratio(bucket_lens, want, far):
    run = _run(bucket_lens)
    assert lm_far_losses(run, L, N)[2] is far
    ratio, is_far = lm_ratio(run, L, N)
    assert (ratio, is_far) == (pytest.approx(want, rel=1e-12), far)
    inp, real = seed_inputs(run, "lm")
    assert not real and inp["_far"] == N
    assert inp["far"][0] / inp["base"][0] == ratio  # exactly the same number


def test_lm_ratio_without_a_length_is_nan_and_ranking_has_no_input():
    run = _run((L, N))
    run["metrics"] = run["metrics"][:1]  # only the training length measured
    run["position_loss"] = [p for p in run["position_loss"] if p["eval_len"] == L]
    assert math.isnan(lm_ratio(run, L, N)[0])
    assert seed_inputs(run, "lm") == (None, False)


def test_a_learned_table_read_past_its_trained_rows_never_enters_the_ranking():
    """results.json blanks such losses but keeps per-window scores: the ranking must not read those."""
    run = _run((L, N))
    for r in run["position_loss"] + run["metrics"]:
        if r["eval_len"] == N:
            r.update(bpb=None, loss=None, untrained_rows=True)
    from relpos.report.stats import per_example_key

    run["per_example"] = {per_example_key("position", r["eval_len"], r["bucket_start"]): [1.0, 1.0]
                          for r in run["position_loss"]}  # still present, as results.json keeps them
    assert seed_inputs(run, "lm") == (None, False)
    trained = _run((L, N))
    trained["per_example"] = run["per_example"]
    assert seed_inputs(trained, "lm")[1] is True  # the same run on trained rows enters, with its per-window scores
