"""Constructed compare results for the results-page tests: LM and algorithmic rows whose numbers the tests set."""

from __future__ import annotations

import numpy as np

L, N, W, E = 16, 64, 40, 60  # LM: training / longest length, test windows; algorithmic examples per length
BASE = ["nope", "sinusoidal", "t5", "alibi", "rope"]
CORPUS = {"name": "python-stdlib", "python": "3.11.7", "sha256": "ab" * 32, "leak_window": 64, "unit": "bytes",
          "splits": {"train": {"documents": 5, "bytes": 1234567}, "val": {"documents": 2, "bytes": 2345,
                     "leaked_windows": 17}, "test": {"documents": 3, "bytes": 3456, "leaked_windows": 29}}}


def _fit(ok=True):
    return {"fit": {"fitted": ok, "target": 0.95, "lr": 2e-3,
                    "lr_tries": [{"lr": 2e-3, "score": 1.0, "fitted": ok, "chosen": True}]}}


def _label(scheme, variant):
    return scheme + {None: "", "randomized": "+rand", "randomized-sampled": "+rand-sampled"}[variant]


def lm_run(scheme, seed, ratio, fitted=True, variant=None):
    """An LM row whose far-position ratio at N over L is ``ratio`` (per-window losses with seeded noise)."""
    rng = np.random.default_rng(seed * 101 + len(scheme))
    rows, per = [], {}
    for n, far in ((L, 2.0), (N, 2.0 * ratio)):
        for s in range(0, n, n // 4):
            last = s == 3 * n // 4
            rows.append({"eval_len": n, "bucket_start": s, "bucket_end": s + n // 4, "bpb": far if last else 2.0,
                         "loss": 1.0})
            if last:
                v = far * (1 + 0.02 * rng.standard_normal(W))
                per[f"position/{n}/{s}/value"] = list(v * far / v.mean())  # exactly ``far`` on average
    return {"scheme": scheme, "variant": variant, "label": _label(scheme, variant), "task": "lm", "seed": seed,
            "train_len": L, "job": f"lm/{scheme}/seed{seed}", "position_loss": rows, "fixed_target": [],
            "metrics": [{"eval_len": L, "bpb": 2.0}, {"eval_len": N, "bpb": 2.0 * ratio}], "per_example": per,
            "train": _fit(fitted), "validation": {"score": 1.0}, "span": None}


def algo_run(task, scheme, seed, at_2L, at_L=1.0, fitted=True, variant=None):
    """An algorithmic row: exact match and per-token accuracy ``at_L`` at L and ``at_2L`` at 1.5L and 2L."""
    k = int(round(at_2L * E))
    v = [1.0] * k + [0.0] * (E - k)
    return {"scheme": scheme, "variant": variant, "label": _label(scheme, variant), "task": task, "seed": seed,
            "train_len": L, "job": f"{task}/{scheme}/seed{seed}", "position_loss": [], "fixed_target": [],
            "metrics": [{"eval_len": n, "accuracy": a, "token_accuracy": a, "count": E}
                        for n, a in ((L, at_L), (3 * L // 2, at_2L), (2 * L, k / E))],
            "per_example": {f"accuracy/{2 * L}/-1/token": v, f"accuracy/{2 * L}/-1/value": v},
            "train": _fit(fitted), "validation": {"score": 1.0 if fitted else 0.5}}


def results(runs, randomized=()):
    return {"version": 1, "fingerprint": "0123456789abcdef", "corpus": CORPUS,
            "config": {"preset": "full", "schemes": BASE, "tasks": sorted({r["task"] for r in runs}),
                       "seeds": [0, 1, 2], "randomized": list(randomized)},
            "runs": runs, "failures": []}


def lm_results(**ratio):
    r = {"nope": 1.1, "sinusoidal": 2.0, "t5": 1.2, "alibi": 1.0, "rope": 2.2} | ratio
    return results([lm_run(s, seed, r[s] + 0.01 * seed) for s in BASE for seed in range(3)])


def algo_results(tasks=("copy", "reverse", "copy-distinct"), rand=None, **acc):
    a = {"nope": 0.8, "t5": 0.6, "alibi": 0.3, "sinusoidal": 0.1, "rope": 0.2} | acc
    runs = [algo_run(t, s, seed, a[s]) for t in tasks for s in BASE for seed in range(3)]
    if rand is not None:
        runs += [algo_run(t, "rope", seed, rand, variant="randomized-sampled") for t in tasks for seed in range(3)]
        runs += [algo_run(t, "rope", seed, 0.2, variant="randomized") for t in tasks for seed in range(3)]
    return results(runs, ["rope"] if rand is not None else [])


def _unfit(res, label, seeds=(1, 2), task=None):
    for r in res["runs"]:
        if r["label"] == label and r["seed"] in seeds and (task is None or r["task"] == task):
            r["train"], r["validation"] = _fit(False), {"score": 0.5}
    return res
