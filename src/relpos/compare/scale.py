"""The scale check: does the language-modelling ranking of the schemes hold across model sizes?

The ``scale`` preset trains the default preset's eight schemes on language
modelling at three model widths (d_model 64 / 128 / 256, about 0.12M / 0.43M / 1.65M parameters, two layers)
and two training lengths (64 and 256 bytes), three seeds each: six cells of 24 runs, each cell one ordinary
``relpos compare`` folder (``OUT/d<width>-L<length>/``), so an interrupted check resumes through the store
like any sweep. Every run trains until it fits, by the default preset's language-modelling rule at one
learning rate (3e-3) for every scheme and size: a constant rate until the validation loss flattens (3 checks,
300 steps, improve it by less than 1 %), then a cooldown of a quarter of the steps so far, at most
:data:`~relpos.compare.presets.SCALE_STEPS` steps of 1,024 bytes; a run not flat in time is marked not
fitted and left out. One rate, not a grid: the check asks whether the ranking moves with size, not which rate
suits which size (stated in the report). A fixed budget of 1,000 cosine steps, tried first, fitted none of the
smallest cell's 24 runs.

**Score.** Per run the verdict's LM number: the far-position ratio (the loss on the last quarter of windows at
the longest evaluation length, 8x the training length, over the last quarter of windows at the training length;
lower is better), over fitted runs. Per training length,
Spearman's rho between the schemes' mean scores of two sizes, with a bootstrap interval over seeds
(:func:`relpos.report.stats.spearman_interval`); the schemes whose rank moves by two places or more
between the smallest and the largest model are named.

**Cost**: measured on the run itself (each run's CPU time is in its folder's ``results.json``;
``scale.json`` sums them per cell), and stated in ``docs/results.md``.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Callable

__all__ = ["cells", "cell_dir", "run_scale", "scale_summary", "scale_markdown"]


def cells() -> list[tuple[int, int]]:
    """(d_model, train_len) of every cell, smallest first."""
    from relpos.compare.presets import SCALE_SIZES, SCALE_TRAIN_LENS

    return [(d, L) for L in SCALE_TRAIN_LENS for d in SCALE_SIZES]


def cell_dir(out: str | Path, d_model: int, train_len: int) -> Path:
    return Path(out) / f"d{d_model}-L{train_len}"


def run_scale(out: str | Path, *, runner=None, workers: int = 2, threads: int = 1, force: bool = False,
              progress: bool | None = None, plots: bool = True, log: Callable[[str], None] | None = None,
              command: str = "", keep_models: bool = False) -> dict:
    """Run (or resume) every cell of the scale check, then write ``OUT/scale.json`` and ``OUT/scale.md``.

    Each cell is a :func:`relpos.compare.sweep.compare` into its own folder; a cell already done is
    skipped by its store. Returns :func:`scale_summary`.
    """
    from relpos.compare.sweep import compare
    from relpos.compare.presets import scale_cell
    from relpos.outdir import write_json_atomic, write_text_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for d, L in cells():
        cfg = scale_cell(d, L)
        cfg.workers, cfg.threads = workers, threads
        compare(cfg, cell_dir(out, d, L), runner=runner, force=force, progress=progress, plots=plots, log=log,
                command=command, keep_models=keep_models)
    summary = scale_summary(out)
    write_json_atomic(out / "scale.json", summary)
    write_text_atomic(out / "scale.md", scale_markdown(summary))
    return summary


def _scores(results: dict) -> dict[str, list[float]]:
    """scheme -> per-seed score of fitted base runs: the verdict's LM number (the far-position ratio, or the
    whole-window ratio for results without position buckets; :func:`relpos.report.ranking.seed_inputs`)."""
    import numpy as np

    from relpos.compare.fitting import fitted_views
    from relpos.report.ranking import seed_inputs

    out: dict[str, list[float]] = {}
    runs = results.get("runs") or []
    for r, ok in zip(runs, fitted_views(runs)):
        if r.get("task") != "lm" or r.get("variant") or not ok:
            continue
        inp, _ = seed_inputs(r, "lm")
        if inp is not None and np.mean(inp["base"]) > 0:
            out.setdefault(r["scheme"], []).append(float(np.mean(inp["far"]) / np.mean(inp["base"])))
    return out


def _cpu_seconds(folder: Path, fingerprint: str | None) -> float | None:
    """CPU time of every job stored in a cell's folder (training tries and evaluation), from its database."""
    from relpos.compare.store import Store

    db = folder / "results.sqlite"
    if not fingerprint or not db.is_file():
        return None
    with Store(db, create=False) as st:
        return float(sum((j["info"] or {}).get("cpu_seconds") or 0.0 for j in st.jobs(fingerprint)))


def _ranks(means: dict[str, float]) -> dict[str, int]:
    order = sorted(means, key=lambda s: (means[s], s))
    return {s: i + 1 for i, s in enumerate(order)}


def scale_summary(out: str | Path) -> dict:
    """Scores per cell, rho between sizes per training length (with intervals), and the schemes that move."""
    from relpos.report.stats import MIN_SEEDS, spearman_interval

    out = Path(out)
    per_cell, done = {}, []
    for d, L in cells():
        f = cell_dir(out, d, L) / "results.json"
        if not f.is_file():
            continue
        res = json.loads(f.read_text())
        sc = {s: v for s, v in _scores(res).items() if len(v) >= MIN_SEEDS}
        params = next((r["train"].get("params") for r in res.get("runs") or [] if (r.get("train") or {}).get("params")),
                      None)
        steps = [(r.get("train") or {}).get("steps") for r in res.get("runs") or [] if not r.get("variant")]
        per_cell[f"d{d}-L{L}"] = {"d_model": d, "train_len": L, "params": params, "scores": sc,
                                  "cpu_seconds": _cpu_seconds(cell_dir(out, d, L), res.get("fingerprint")),
                                  "steps": [s for s in steps if s],
                                  "fitted_runs": sum(len(v) for v in _scores(res).values()),
                                  "runs": len([r for r in res.get("runs") or [] if not r.get("variant")])}
        done.append((d, L))
    rho = []
    from relpos.compare.presets import SCALE_SIZES, SCALE_TRAIN_LENS

    for L in SCALE_TRAIN_LENS:
        for i, a in enumerate(SCALE_SIZES):
            for b in SCALE_SIZES[i + 1:]:
                ca, cb = per_cell.get(f"d{a}-L{L}"), per_cell.get(f"d{b}-L{L}")
                if not ca or not cb:
                    continue
                try:
                    iv = spearman_interval(ca["scores"], cb["scores"])
                except ValueError as e:
                    rho.append({"train_len": L, "a": a, "b": b, "error": str(e)})
                    continue
                ma = {s: statistics.fmean(v) for s, v in ca["scores"].items() if s in cb["scores"]}
                mb = {s: statistics.fmean(v) for s, v in cb["scores"].items() if s in ca["scores"]}
                ra, rb = _ranks(ma), _ranks(mb)
                moved = {s: (ra[s], rb[s]) for s in ra if abs(ra[s] - rb[s]) >= 2}
                rho.append({"train_len": L, "a": a, "b": b, "rho": iv.est, "lo": iv.lo, "hi": iv.hi,
                            "schemes": len(ma), "moved": moved})
    cpu = [c["cpu_seconds"] for c in per_cell.values() if c.get("cpu_seconds")]
    return {"cells": per_cell, "rho": rho, "complete": len(done) == len(cells()),
            "cpu_hours": sum(cpu) / 3600 if cpu else None}


def scale_markdown(summary: dict) -> str:
    """``scale.md``: the scores per cell and the rank correlations between sizes."""
    from relpos.compare.presets import SCALE_STEPS
    from relpos.report.stats import CONFIDENCE

    lines = ["# Scale check: the LM ranking across model sizes", "",
             "Score: the far-position ratio, loss on the last quarter of windows at 8x the training length / at 1x "
             "(lower is better), mean over fitted seeds "
             f"(a scheme needs 2 fitted seeds of 3). Every run trains until its validation loss flattens (3 checks, "
             f"300 steps, improve it by < 1 %), then cools down, at most {SCALE_STEPS:,} steps of 1,024 bytes, at "
             "learning rate 3e-3 for every scheme and size (one rate, no per-size tuning); runs that did not "
             "flatten in time are not fitted and left out.", ""]
    if not summary.get("complete"):
        lines += ["> Incomplete: not every cell has finished; rerun the same command to resume.", ""]
    cells_ = summary["cells"]
    schemes = sorted({s for c in cells_.values() for s in c["scores"]})
    if cells_:
        names = list(cells_)
        lines += ["| scheme | " + " | ".join(f"{n} ({(cells_[n]['params'] or 0) / 1e6:.2f}M)" for n in names) + " |",
                  "|---|" + "---:|" * len(names)]
        for s in schemes:
            cell = []
            for n in names:
                v = cells_[n]["scores"].get(s)
                cell.append(f"{statistics.fmean(v):.2f}" if v else "-")
            lines.append(f"| {s} | " + " | ".join(cell) + " |")
        fitted = [f"{cells_[n]['fitted_runs']}/{cells_[n]['runs']}" for n in names]
        lines.append("| fitted runs | " + " | ".join(fitted) + " |")
        steps = [f"{min(c['steps']):,}-{max(c['steps']):,}" if c.get("steps") else "-" for c in cells_.values()]
        lines.append("| training steps | " + " | ".join(steps) + " |")
        cpu = [f"{c['cpu_seconds'] / 3600:.2f}" if c.get("cpu_seconds") else "-" for c in cells_.values()]
        lines.append("| CPU-hours | " + " | ".join(cpu) + " |")
        lines.append("")
        if summary.get("cpu_hours"):
            lines += [f"Measured cost of the cells so far: {summary['cpu_hours']:.2f} CPU-hours (training tries and "
                      "evaluation, from each job's process CPU time).", ""]
    if summary["rho"]:
        lines += [f"Spearman's rho between sizes ({CONFIDENCE:.0%} bootstrap interval over seeds: each scheme's "
                  "seeds resampled in each size; it covers seed-to-seed variation, not other budgets or rates):", "",
                  "| training length | sizes | rho | interval | schemes | moved by >= 2 ranks (rank small -> large) |",
                  "|---:|---|---:|---|---:|---|"]
        for r in summary["rho"]:
            if "error" in r:
                lines.append(f"| {r['train_len']} | d{r['a']} vs d{r['b']} | - | - | - | {r['error']} |")
                continue
            mv = ", ".join(f"{s} {a}->{b}" for s, (a, b) in sorted(r["moved"].items())) or "none"
            ci = "-" if not math.isfinite(r["lo"]) else f"[{r['lo']:.2f}, {r['hi']:.2f}]"
            lines.append(f"| {r['train_len']} | d{r['a']} vs d{r['b']} | {r['rho']:.2f} | {ci} | {r['schemes']} | "
                         f"{mv} |")
        lines.append("")
    return "\n".join(lines)
