"""The report of the ``extend`` benchmark: tables, steps-to-match and the three claim rules.

Rows are what :mod:`relpos.extend.store` holds: one per (recipe, seed, rate, K). :func:`select` keeps, for each
(recipe, seed, K), the row whose rate has the lowest **validation** loss at the fine-tuning length (K = 0 has no
rate); every number below reads the kept rows' **test** measurements.

* Far-position ratio against K, per recipe: the loss on the last quarter of windows of ``n`` tokens over the
  same quarter of windows of ``L`` tokens (:func:`relpos.tasks.lm.far_loss`), mean over seeds, with the 95 %
  paired bootstrap interval (:func:`relpos.report.stats.paired_bootstrap`, seeds then windows) of its
  difference from direct fine-tuning at the same K.
* Loss at L before (K = 0) and after (the largest K): what the extension costs in distribution.
* Steps-to-match: the fewest fine-tuning steps of the grid at which a recipe's mean test loss at ``factor x L``
  is at most plain RoPE's best fine-tuned one (direct fine-tuning, its best K).

Claims (:func:`claims`), each ``holds``, ``does not hold`` or ``not testable here``:

* ``pi_beats_direct`` -- after fine-tuning, PI's loss at ``factor x L`` is below direct fine-tuning's at the same
  K: holds when at every K > 0 the paired interval of PI minus direct lies below 0;
* ``yarn_half_steps`` -- YaRN reaches PI's best fine-tuned loss at ``factor x L`` (mean over seeds) in at most half
  PI's steps (the fewest K at which PI reaches it); not testable when the grid has no K > 0 at or below half PI's;
* ``yarn_beyond`` -- past the fine-tuning length (every evaluation length above ``factor x L``), YaRN's loss is
  below PI's at the largest K: holds when every paired interval of YaRN minus PI lies below 0.

Each needs :data:`relpos.report.stats.MIN_SEEDS` seeds measured for both recipes; runs from models that did
not fit are never a conclusion (every claim: not testable here).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

__all__ = ["select", "claims", "tables", "steps_to_match", "write_report", "HOLDS", "FAILS", "UNTESTABLE"]

HOLDS, FAILS, UNTESTABLE = "holds", "does not hold", "not testable here"
N_BOOT = 1000


def select(rows: list[dict]) -> dict:
    """``{(recipe, k): {seed: row}}``: per (recipe, seed, K) the row of the rate with the lowest validation loss."""
    best: dict = {}
    for r in rows:
        key = (r["recipe"], int(r["k"]))
        cur = best.setdefault(key, {}).get(r["seed"])
        if cur is None or (r["val_loss"], r["lr"]) < (cur["val_loss"], cur["lr"]):
            best[key][r["seed"]] = r
    return best


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else math.nan


def _loss(sel, rec, k, n) -> float:
    return _mean(r["lengths"][str(n)]["loss"] for r in sel.get((rec, k), {}).values())


def _ratio(row, n, L) -> float:
    a, b = row["lengths"][str(n)], row["lengths"][str(L)]
    return _mean(a["far"]) / _mean(b["far"])


def _common(sel, a, b) -> list[int]:
    return sorted(set(sel.get(a, {})) & set(sel.get(b, {})))


def _interval(sel, a, b, n, *, ratio_of: int | None = None):
    """Paired bootstrap interval of ``a - b`` (keys ``(recipe, k)``) at length ``n``: window loss, or with
    ``ratio_of = L`` the far-position ratio; None with fewer than MIN_SEEDS shared seeds."""
    from relpos.report.stats import MIN_SEEDS, paired_bootstrap

    seeds = _common(sel, a, b)
    if len(seeds) < MIN_SEEDS:
        return None
    if ratio_of is None:
        side = lambda key: [{"v": sel[key][s]["lengths"][str(n)]["windows"]} for s in seeds]  # noqa: E731
        return paired_bootstrap(side(a), side(b), n_boot=N_BOOT)
    side = lambda key: [{"far": sel[key][s]["lengths"][str(n)]["far"],  # noqa: E731
                         "base": sel[key][s]["lengths"][str(ratio_of)]["far"]} for s in seeds]
    return paired_bootstrap(side(a), side(b), lambda m: m["far"] / m["base"], n_boot=N_BOOT)


def steps_to_match(sel, grid, n: int, target: float, rec: str) -> int | None:
    """The fewest K of ``grid`` at which ``rec``'s mean test loss at ``n`` is at most ``target`` (None: never)."""
    for k in sorted(grid):
        v = _loss(sel, rec, k, n)
        if math.isfinite(v) and v <= target:
            return k
    return None


def _best_finetuned(sel, grid, rec, n) -> float:
    vals = [_loss(sel, rec, k, n) for k in grid if k > 0]
    vals = [v for v in vals if math.isfinite(v)]
    return min(vals) if vals else math.nan


def _enough(sel, a: str, b: str, ks) -> bool:
    from relpos.report.stats import MIN_SEEDS

    return all(len(_common(sel, (a, k), (b, k))) >= MIN_SEEDS for k in ks)


def claims(sel: dict, grid: list[int], L: int, factor: int, eval_factors, *, fitted: bool = True) -> list[dict]:
    """The three claim rules (see the module docstring): ``[{"claim", "outcome", "why"}]``."""
    n4 = factor * L
    ks = [k for k in grid if k > 0]
    out = []

    def add(name, outcome, why):
        out.append({"claim": name, "outcome": outcome, "why": why})

    if not fitted:
        for name in ("pi_beats_direct", "yarn_half_steps", "yarn_beyond"):
            add(name, UNTESTABLE, "some models did not fit (--allow-unfitted): their numbers carry no conclusion")
        return out
    # PI against direct fine-tuning at the same K
    if not ks or not _enough(sel, "pi", "direct", ks):
        add("pi_beats_direct", UNTESTABLE, "needs PI and direct fine-tuning at every K > 0 on at least 2 seeds")
    else:
        ivs = {k: _interval(sel, ("pi", k), ("direct", k), n4) for k in ks}
        bad = [k for k, iv in ivs.items() if not iv.hi < 0]
        txt = "; ".join(f"K={k}: {iv.est:+.4f} [{iv.lo:+.4f}, {iv.hi:+.4f}]" for k, iv in ivs.items())
        add("pi_beats_direct", HOLDS if not bad else FAILS,
            f"PI minus direct, test loss at {factor}x L (nats): {txt}"
            + (f"; not below 0 at K = {', '.join(map(str, bad))}" if bad else ""))
    # YaRN reaches PI's fine-tuned loss in at most half PI's steps
    target = _best_finetuned(sel, grid, "pi", n4)
    k_pi = steps_to_match(sel, ks, n4, target, "pi") if math.isfinite(target) else None
    if k_pi is None or not _enough(sel, "yarn", "pi", [max(ks)]) or not any(0 < k <= k_pi / 2 for k in grid):
        add("yarn_half_steps", UNTESTABLE, "needs PI and YaRN on at least 2 seeds and a K > 0 at or below half the "
                                           "steps PI needs" + (f" (PI needs {k_pi}; grid {grid})" if k_pi else ""))
    else:
        k_y = steps_to_match(sel, grid, n4, target, "yarn")
        ok = k_y is not None and k_y <= k_pi / 2
        add("yarn_half_steps", HOLDS if ok else FAILS,
            f"PI's best fine-tuned loss at {factor}x L is {target:.4f} nats, first reached at K = {k_pi}; YaRN "
            + (f"reaches it at K = {k_y}" if k_y is not None else "does not reach it within the grid"))
    # YaRN against PI beyond the fine-tuning length, at the largest K
    beyond = [f * L for f in eval_factors if f > factor]
    if not ks or not beyond or not _enough(sel, "yarn", "pi", [max(ks)]):
        add("yarn_beyond", UNTESTABLE, "needs YaRN and PI at the largest K on at least 2 seeds and an evaluation "
                                       f"length above {factor}x L")
    else:
        k = max(ks)
        ivs = {n: _interval(sel, ("yarn", k), ("pi", k), n) for n in beyond}
        bad = [n for n, iv in ivs.items() if not iv.hi < 0]
        txt = "; ".join(f"{n // L}x: {iv.est:+.4f} [{iv.lo:+.4f}, {iv.hi:+.4f}]" for n, iv in ivs.items())
        add("yarn_beyond", HOLDS if not bad else FAILS, f"YaRN minus PI at K = {k}, test loss (nats): {txt}")
    return out


def _f(v, d=3) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{d}f}"


def tables(sel: dict, grid: list[int], L: int, factor: int, eval_factors, recipes: list[str]) -> dict:
    """``{"ratio": markdown, "loss_at_L": markdown, "steps": markdown, "target": float, "curves": {...}}``."""
    far = [f for f in eval_factors if f > 1]
    head = "| recipe | K | " + " | ".join(f"far {f}x/1x [vs direct]" for f in far) + f" | loss {factor}x | seeds |"
    lines = [head, "|" + "---|" * (len(far) + 4)]
    curves: dict = {}
    for rec in recipes:
        for k in grid:
            got = sel.get((rec, k))
            if not got:
                continue
            cells = []
            for f in far:
                v = _mean(_ratio(r, f * L, L) for r in got.values())
                curves.setdefault(rec, {}).setdefault(f, []).append((k, v))
                iv = None if rec == "direct" else _interval(sel, (rec, k), ("direct", k), f * L, ratio_of=L)
                cells.append(_f(v, 2) + (f" [{iv.lo:+.2f}, {iv.hi:+.2f}]" if iv is not None else ""))
            lines.append(f"| {rec} | {k} | " + " | ".join(cells) + f" | {_f(_loss(sel, rec, k, factor * L))} | "
                         f"{len(got)} |")
    kmax = max(grid)
    lat = ["| recipe | loss at L, K=0 | loss at L, largest K | change |", "|---|---|---|---|"]
    for rec in recipes:
        ks = [k for k in grid if (rec, k) in sel]
        if not ks:
            continue
        a, b = _loss(sel, rec, 0, L), _loss(sel, rec, max(ks), L)
        lat.append(f"| {rec} | {_f(a)} | {_f(b)} (K={max(ks)}) | {_f(b - a) if max(ks) else '-'} |")
    target = _best_finetuned(sel, grid, "direct", factor * L)
    st = [f"Target: plain RoPE's best fine-tuned test loss at {factor}x L = {_f(target, 4)} nats.", "",
          "| recipe | steps to match |", "|---|---|"]
    for rec in recipes:
        k = steps_to_match(sel, grid, factor * L, target, rec) if math.isfinite(target) else None
        st.append(f"| {rec} | {k if k is not None else f'not within K <= {kmax}'} |")
    return {"ratio": "\n".join(lines), "loss_at_L": "\n".join(lat), "steps": "\n".join(st), "target": target,
            "curves": curves}


def _plot(curves: dict, factor_col: int, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for rec, by in curves.items():
        pts = by.get(factor_col) or []
        if pts:
            ax.plot([k for k, _ in pts], [v for _, v in pts], marker="o", label=rec)
    ax.set_xlabel("fine-tuning steps K")
    ax.set_ylabel(f"far-position ratio at {factor_col}x L")
    ax.axhline(1.0, color="grey", lw=0.5)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_report(rows: list[dict], p, out: Path, *, plots: bool = True) -> dict:
    """Write ``report.md``, ``results.json`` (the kept rows without per-window arrays) and ``extend.png``;
    returns ``{"text", "claims", "tables"}``."""
    from relpos.outdir import write_json_atomic, write_text_atomic

    L, f, ef = p.source.train_len, p.spec.factor, p.spec.eval_factors
    sel = select(rows)
    names = [r.name for r in p.recipes]
    t = tables(sel, p.grid, L, f, ef, names)
    fitted = all(m.fitted for m in p.source.models)
    cl = claims(sel, p.grid, L, f, ef, fitted=fitted)
    kept = [{k: v for k, v in r.items() if k != "lengths"}
            | {"lengths": {n: {"loss": x["loss"], "far_loss": x["far_loss"]} for n, x in r["lengths"].items()}}
            for by in sel.values() for r in by.values()]
    write_json_atomic(out / "results.json", {"protocol": p.protocol, "fingerprint": p.fingerprint,
                                             "claims": cl, "kept": kept})
    png = _plot(t["curves"], max(ef), out / "extend.png") if plots else False
    md = [f"# Context extension by fine-tuning ({f}x L, L = {L})", "",
          f"Source: `{p.source.folder}`; recipes {', '.join(names)}; seeds {', '.join(map(str, p.seeds))}; K grid "
          f"{p.grid} ({', '.join(f'{x:.0%}' for x in p.spec.k_fractions)} of {p.source.pretrain_steps()} pretraining "
          f"steps); rates {', '.join(f'{v:g}' for v in p.spec.lr_grid)}, chosen per recipe, seed and K on the "
          f"validation loss at {f}x L; every number below reads the test split.", ""]
    if not fitted:
        md += ["**Some models did not fit: these numbers carry no conclusion.**", ""]
    md += ["## Far-position ratio against K", "", "Mean over seeds; in brackets the 95 % paired bootstrap interval "
           "of the difference from direct fine-tuning at the same K. Each ratio reads a recipe against its own loss "
           "at L: a recipe that costs loss at L (PI before fine-tuning) looks flatter by it, so read it with the "
           f"loss at {f}x and the loss at L below.", "", t["ratio"], ""]
    md += ["## Loss at L before and after", "", t["loss_at_L"], "", "## Steps to match", "", t["steps"], ""]
    cfg = p.source.cfg
    md += ["## Claims", "", f"*Scale tested here:* a {cfg.n_layers}-layer model of width {cfg.d_model} trained "
           f"{p.source.pretrain_steps()} steps at L = {L}, fine-tuned at {f}x L for at most {max(p.grid)} steps, "
           f"{len(p.seeds)} seed(s). *The papers':* Chen et al. (PI) fine-tune LLaMA 7B-65B from 2,048 to up to "
           "32,768 tokens for 1,000 steps; Peng et al. (YaRN) fine-tune Llama 2 7B and 13B to 64k-128k tokens for "
           "about 400 steps. A verdict here says what holds at this scale, not at theirs.", ""]
    md += [f"* **{c['claim']}**: {c['outcome']} -- {c['why']}" for c in cl]
    if png:
        md += ["", "![far-position ratio against K](extend.png)"]
    text = "\n".join(md) + "\n"
    write_text_atomic(out / "report.md", text)
    return {"text": text, "claims": cl, "tables": t}
