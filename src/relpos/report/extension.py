"""The ``extend`` benchmark's numbers: the kept rows, three claim rules, the tables, its report and page section.

Pure functions of the rows that :mod:`relpos.extend.store` holds (one per recipe, seed, rate and K) and of the
run's settings (``meta``, see :func:`report_markdown`); no model, no file. ``relpos extend`` writes its
``report.md`` with :func:`report_markdown` and the results page shows :func:`page_section` of the same
``results.json``, so both read one computation.

:func:`select` keeps, for each (recipe, seed, K), the row whose rate has the lowest **validation** loss at the
fine-tuning length (K = 0 has no rate); every number below reads the kept rows' **test** measurements.

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

import math

from relpos.report.stats import MIN_SEEDS, paired_bootstrap

__all__ = ["select", "analyse", "mean_loss", "claims", "tables", "steps_to_match", "report_markdown", "page_section",
           "run_seconds", "HOLDS", "FAILS", "UNTESTABLE", "CLAIM_TEXT", "PAPERS_SCALE"]

HOLDS, FAILS, UNTESTABLE = "holds", "does not hold", "not testable here"


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


def mean_loss(sel, rec, k, n) -> float:
    """Mean over seeds of the kept rows' test loss of ``rec`` after ``k`` steps at length ``n`` (nan: none)."""
    return _mean(r["lengths"][str(n)]["loss"] for r in sel.get((rec, k), {}).values())


def _ratio(row, n, L) -> float:
    a, b = row["lengths"][str(n)], row["lengths"][str(L)]
    return _mean(a["far"]) / _mean(b["far"])


def _common(sel, a, b) -> list[int]:
    return sorted(set(sel.get(a, {})) & set(sel.get(b, {})))


def _interval(sel, a, b, n, *, ratio_of: int | None = None):
    """Paired bootstrap interval of ``a - b`` (keys ``(recipe, k)``) at length ``n``: window loss, or with
    ``ratio_of = L`` the far-position ratio; None with fewer than MIN_SEEDS shared seeds."""
    seeds = _common(sel, a, b)
    if len(seeds) < MIN_SEEDS:
        return None
    if ratio_of is None:
        side = lambda key: [{"v": sel[key][s]["lengths"][str(n)]["windows"]} for s in seeds]  # noqa: E731
        return paired_bootstrap(side(a), side(b))
    side = lambda key: [{"far": sel[key][s]["lengths"][str(n)]["far"],  # noqa: E731
                         "base": sel[key][s]["lengths"][str(ratio_of)]["far"]} for s in seeds]
    return paired_bootstrap(side(a), side(b), lambda m: m["far"] / m["base"])


def steps_to_match(sel, grid, n: int, target: float, rec: str) -> int | None:
    """The fewest K of ``grid`` at which ``rec``'s mean test loss at ``n`` is at most ``target`` (None: never)."""
    for k in sorted(grid):
        v = mean_loss(sel, rec, k, n)
        if math.isfinite(v) and v <= target:
            return k
    return None


def _best_finetuned(sel, grid, rec, n) -> float:
    vals = [mean_loss(sel, rec, k, n) for k in grid if k > 0]
    vals = [v for v in vals if math.isfinite(v)]
    return min(vals) if vals else math.nan


def _enough(sel, a: str, b: str, ks) -> bool:
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
            lines.append(f"| {rec} | {k} | " + " | ".join(cells) + f" | {_f(mean_loss(sel, rec, k, factor * L))} | "
                         f"{len(got)} |")
    lat = ["| recipe | loss at L, K=0 | loss at L, largest K | change |", "|---|---|---|---|"]
    for rec in recipes:
        ks = [k for k in grid if (rec, k) in sel]
        if not ks:
            continue
        a, b = mean_loss(sel, rec, 0, L), mean_loss(sel, rec, max(ks), L)
        lat.append(f"| {rec} | {_f(a)} | {_f(b)} (K={max(ks)}) | {_f(b - a) if max(ks) else '-'} |")
    target = _best_finetuned(sel, grid, "direct", factor * L)
    st = [f"Target: plain RoPE's best fine-tuned test loss at {factor}x L = {_f(target, 4)} nats.", "",
          "| recipe | steps to match |", "|---|---|"]
    for rec in recipes:
        k = steps_to_match(sel, grid, factor * L, target, rec) if math.isfinite(target) else None
        tuned = [x for x in grid if x > 0 and (rec, x) in sel]
        miss = f"not within K <= {max(tuned)}" if tuned else "not reached zero-shot (measured at K = 0 only)"
        st.append(f"| {rec} | {k if k is not None else miss} |")
    return {"ratio": "\n".join(lines), "loss_at_L": "\n".join(lat), "steps": "\n".join(st), "target": target,
            "curves": curves}


#: What each claim says, in words (the page and the report name the claim by this).
CLAIM_TEXT = {
    "pi_beats_direct": "PI (Chen et al. 2023): after fine-tuning, PI at the fine-tuning length beats direct "
                       "fine-tuning of plain RoPE at the same number of steps",
    "yarn_half_steps": "YaRN (Peng et al. 2023): YaRN reaches PI's fine-tuned loss in at most half PI's steps",
    "yarn_beyond": "YaRN (Peng et al. 2023): past the fine-tuning length, YaRN is better than PI",
}
#: The papers' scale, beside which every verdict states its own.
PAPERS_SCALE = ("Chen et al. (PI, arXiv 2306.15595) fine-tune LLaMA 7B-65B from 2,048 to up to 32,768 tokens for "
                "1,000 steps; Peng et al. (YaRN, arXiv 2309.00071) fine-tune Llama 2 7B and 13B to 64k-128k "
                "tokens for about 400 steps")


def run_seconds(rows: list[dict]) -> float:
    """Seconds the runs took: per (recipe, seed, rate) the largest ``seconds`` of its rows (a fine-tuning run
    records, at each K, the time since it started), summed."""
    by: dict = {}
    for r in rows:
        key = (r["recipe"], r["seed"], r["lr"])
        by[key] = max(by.get(key, 0.0), float(r.get("seconds") or 0.0))
    return sum(by.values())


def _summary(sel, grid, L: int, factor: int, eval_factors, recipes) -> list[str]:
    """One line per evaluation length past L: the recipes ordered by their mean test loss there, each at its
    largest K (means only; the intervals are in the tables and claims below)."""
    out = []
    for f in [x for x in eval_factors if x >= factor]:
        got = []
        for rec in recipes:
            ks = [k for k in grid if (rec, k) in sel]
            if ks:
                v = mean_loss(sel, rec, max(ks), f * L)
                if math.isfinite(v):
                    got.append((v, rec, max(ks)))
        if got:
            where = "the fine-tuning length" if f == factor else "past the fine-tuning length"
            out.append(f"- at {f}x L ({where}): " + ", ".join(f"{rec} {v:.3f}" + (f" (K={k})" if k == 0 else "")
                                                             for v, rec, k in sorted(got)))
    if not out:
        return []
    return ["*Test loss (nats per token) at the largest K each recipe was fine-tuned for, lowest first; K=0 marks "
            "a recipe measured zero-shot only:*", "", *out, ""]


def analyse(data: dict) -> dict:
    """``{"sel", "tables", "claims"}`` of a run's ``results.json`` content: the kept rows, the tables and the
    claim rules, computed once for the report, the page and the figure."""
    m = data["meta"]
    sel = select(data["rows"])
    args = (sel, m["grid"], m["train_len"], m["factor"], m["eval_factors"])
    return {"sel": sel, "tables": tables(*args, m["recipes"]), "claims": claims(*args, fitted=m["fitted"])}


def _body(data: dict, h: str, png: str | None, done: dict | None = None) -> list[str]:
    """The report's sections under headings of level ``h`` (``"##"`` or ``"###"``); ``done``: its
    :func:`analyse`, when the caller has it already."""
    m = data["meta"]
    L, f, ef, grid = m["train_len"], m["factor"], m["eval_factors"], m["grid"]
    done = done or analyse(data)
    sel, t, cl = done["sel"], done["tables"], done["claims"]
    md = _summary(sel, grid, L, f, ef, m["recipes"])
    if not m["fitted"]:
        md += ["**Some models did not fit: these numbers carry no conclusion.**", ""]
    md += [f"{h} Far-position ratio against K", "", "Mean over seeds; in brackets the 95 % paired bootstrap "
           "interval of the difference from direct fine-tuning at the same K. Each ratio reads a recipe against its "
           "own loss at L: a recipe that costs loss at L (PI before fine-tuning) looks flatter by it, so read it "
           f"with the loss at {f}x and the loss at L below.", "", t["ratio"], ""]
    md += [f"{h} Loss at L before and after", "", t["loss_at_L"], "", f"{h} Steps to match", "", t["steps"], ""]
    md += [f"{h} Claims", "", f"*Scale tested here:* a {m['n_layers']}-layer model of width {m['d_model']} trained "
           f"{m['pretrain_steps']} steps at L = {L}, fine-tuned at {f}x L for at most {max(grid)} steps, "
           f"{len(m['seeds'])} seed(s). *The papers':* {PAPERS_SCALE}. A verdict here says what holds at this "
           "scale, not at theirs.", ""]
    md += [f"* **{c['claim']}** ({CLAIM_TEXT.get(c['claim'], c['claim'])}): **{c['outcome']}** -- {c['why']}"
           for c in cl]
    if png:
        md += ["", f"![test loss and far-position ratio against K]({png})"]
    return md


def _setup(m: dict) -> str:
    return (f"recipes {', '.join(m['recipes'])}; seeds {', '.join(map(str, m['seeds']))}; K grid {m['grid']} "
            f"({', '.join(f'{x:.0%}' for x in m['k_fractions'])} of {m['pretrain_steps']} pretraining steps); rates "
            f"{', '.join(f'{v:g}' for v in m['lr_grid'])}, chosen per recipe, seed and K on the validation loss at "
            f"{m['factor']}x L; every number below reads the test split.")


def report_markdown(data: dict, *, png: str | None = None, done: dict | None = None) -> str:
    """``report.md`` of an extend run from its ``results.json`` content ``{"meta", "rows"}``.

    ``meta``: ``train_len`` (L), ``factor``, ``eval_factors``, ``grid`` (the K values), ``recipes``, ``seeds``,
    ``k_fractions``, ``lr_grid``, ``pretrain_steps``, ``n_layers``, ``d_model``, ``fitted``, ``source``, and
    optionally ``pretrain_models`` and ``pretrain_cpu_seconds`` (what pretraining the models used cost).
    """
    m = data["meta"]
    md = [f"# Context extension by fine-tuning ({m['factor']}x L, L = {m['train_len']})", "",
          f"Source: `{m['source']}`; {_setup(m)}", ""]
    return "\n".join(md + _body(data, "##", png, done)) + "\n"


def page_section(data: dict | None, *, png: str | None = None) -> list[str]:
    """The results page's section on ``relpos extend --from`` (one line saying so when there is no run)."""
    head = "## Extending the context by fine-tuning (`relpos extend`)"
    if not data:
        return [head, "", "No extend run ships beside this page.", ""]
    m, rows = data["meta"], data["rows"]
    units = {(r["recipe"], r["seed"], r["lr"]) for r in rows}
    secs = run_seconds(rows)
    intro = [head, "",
             f"The RoPE recipes that are meant to be fine-tuned (PI, YaRN, NTK-aware, dynamic NTK) fine-tuned, not "
             f"only applied zero-shot: each language model of the default preset's folder (trained at L = "
             f"{m['train_len']}) is fine-tuned at {m['factor']}x L for K steps and evaluated at "
             f"{', '.join(f'{x}x' for x in m['eval_factors'])} L. Plain RoPE fine-tuned as it is is `direct`; "
             "ALiBi, KERPLE and NoPE are references. " + _setup(m), "",
             f"*Cost:* {len(units)} runs ({len(rows)} rows), {secs / 3600:.2f} hours of fine-tuning and evaluation "
             "summed from the per-run times the store records (one thread each, on a shared 2-core machine)"
             + (f", on top of {m['pretrain_cpu_seconds'] / 3600:.2f} CPU-hours of pretraining the "
                f"{m['pretrain_models']} language models used (the compare folder's store)"
                if m.get("pretrain_cpu_seconds") else
                ", on top of the compare folder's own pretraining")
             + ". Run with `relpos extend --from FOLDER --out DIR` (`benchmarks/extend_run.sh` makes this one).", ""]
    return intro + _body(data, "###", png) + [""]
