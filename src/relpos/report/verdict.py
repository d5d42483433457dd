"""The verdict of a sweep: which schemes hold up past the training length, and how sure we are.

Built from ``results.json`` (:func:`relpos.report.tables.results_dict`),
only from **fitted** runs (see :mod:`relpos.compare.fitting`): a (scheme,
task, seed) whose in-distribution score misses the fit gate is counted in the
"fitted" column and left out of every other number, ranking and verdict.

For each scheme (each label: ``rope-yarn`` is the trained RoPE model evaluated
with YaRN):

* fitted seeds / total, per task;
* language modelling: the far-position ratio at 4x and 16x the training length
  (bits per byte on the last quarter of each window of that length over bits
  per byte on the last quarter of windows of the training length L: like with
  like, :func:`lm_ratio`), mean ± standard deviation over fitted seeds; results
  without position buckets fall back to the whole-window ratio, said in a note;
* each algorithmic task: exact match at 1.5x and 2x the training length;
* effective attention span at the longest evaluated length: the median head and the widest head
  (each the median over seeds;
  "local" when it is below the training length: the loss stays flat because
  the model never looks far, not because it extrapolates);
* training cost: milliseconds per step relative to NoPE on the same task: per task the fastest run
  of the scheme over the fastest run of NoPE (wall time on a machine others share or pause only ever
  adds time, so the minimum is the least disturbed estimate; the mean of all runs read up to 4x),
  then the mean over tasks. ``benchmarks/train_step.py`` measures the same ratio side by side.

**Ranking** (protocol 3, :mod:`relpos.report.ranking`). Base schemes only (RoPE scalings and
randomized positions get their own table against plain RoPE). Per task, one score: the LM ratio at the
longest length (lower is better) or the per-token accuracy at 2x L (exact match where a task reports no
per-token accuracy). Each scheme is compared with the task's best by a paired bootstrap interval over seeds
and test examples; a tie when it contains 0 or has a bound within 0.005 of it. The overall order is the mean
reciprocal rank (Kazemnejad et al. 2023) over the common tasks, those on which every scheme of the order is
ranked (a task whose best scheme is at chance, such as parity where every scheme guesses, keeps its ranks but
counts in no mean reciprocal rank); a scheme with fewer than two fitted seeds on a task is not ranked on it,
and its fitted fraction is shown, never counted as a 0.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from relpos.compare.fitting import metric_at
from relpos.report.model import ResultsModel, as_model, results_of
from relpos.report.ranking import lm_ratio
from relpos.report.results_doc import UNTRAINED

__all__ = ["verdict", "verdict_markdown", "verdict_text", "is_smoke_test", "lm_ratio", "SMOKE_NOTE"]

SMOKE_NOTE = (
    "SMOKE TEST: the `ci` preset trains for a few steps only, so its models have not fitted and its numbers "
    "carry no conclusion. For real numbers run `relpos compare` (the default preset, 10-12 minutes on 2 idle cores) "
    "or `relpos compare --preset full` (an estimated 25-40 CPU-hours; it spreads over `--workers` and resumes "
    "after an interruption)."
)

#: Tasks shown in tables but kept out of the verdict and ranking.
UNRANKED = ("passkey",)

#: LM far-position ratio at the longest length up to which a scheme "holds" its loss.
HOLD_RATIO = 1.05
#: Fraction of its in-distribution accuracy a scheme keeps at 2x L to "hold".
HOLD_ACC = 0.9
#: Multiples of the training length the LM columns show (and the longest measured one when it is neither,
#: e.g. the scale preset's 8x), so the notes and the columns read the length the ranking reads.
LM_FACTORS = (4, 16)


def lm_factors(lens, L: int) -> list[int]:
    """The LM column factors for evaluation lengths ``lens``: those of :data:`LM_FACTORS` that were measured,
    plus the longest measured multiple (all of :data:`LM_FACTORS` when nothing past ``L`` was measured).

    >>> lm_factors([64, 128, 256, 512], 64), lm_factors([64, 256, 1024], 64), lm_factors([64], 64)
    ([4, 8], [4, 16], [4, 16])
    """
    mult = {n // L for n in lens if L and n % L == 0 and n > L}
    if not mult:
        return list(LM_FACTORS)
    return sorted({f for f in LM_FACTORS if f in mult} | {max(mult)})


def is_smoke_test(results: dict) -> bool:
    return (results.get("config") or {}).get("preset") == "ci"


def _ms(xs: list[float]) -> tuple[float, float, int]:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return math.nan, math.nan, 0
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0), len(xs)


def _fastest(xs: list) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x) and x > 0]
    return min(xs) if xs else math.nan


def verdict(results: dict | ResultsModel, rk: dict | None = None) -> dict:
    """``{"rows": {label: {...}}, "tasks": [...], "ranking": [(label, mrr)], "notes": [...]}`` (``rk``: the
    :func:`~relpos.report.ranking.ranking` of ``results`` when the caller has it; a model's own otherwise).
    A model keeps its own verdict (:attr:`~relpos.report.model.ResultsModel.verdict`)."""
    model = as_model(results)
    results = model.results
    runs = results["runs"]
    ok = model.ok
    by = defaultdict(lambda: defaultdict(list))  # label -> task -> runs
    for r in runs:
        if r["task"] not in UNRANKED:
            by[r["label"]][r["task"]].append(r)
    # passkey measures use of far context on the LM models; it is reported in its own table, not ranked
    tasks = sorted({r["task"] for r in runs if r["task"] not in UNRANKED}, key=lambda t: (t != "lm", t))
    # NoPE step time per task, for the cost column (the fastest run: noise on a shared machine only adds)
    nope_ms = {t: _fastest([(r.get("train") or {}).get("ms_per_step") for r in by.get("nope", {}).get(t, [])])
               for t in tasks}
    rows = {}
    for lab, per_task in by.items():
        row: dict = {"fitted": {}, "lm": {}, "lm_provisional": {}, "acc": {}, "tok": {}, "span": None,
                     "span_median": None, "local": None, "cost": None, "lm_window_fallback": False,
                     "lm_na": set()}
        costs = []
        for t, rs in per_task.items():
            fit = [r for r in rs if id(r) in ok]  # the run's gate, and this view at L
            row["fitted"][t] = (len(fit), len(rs))
            L = rs[0]["train_len"]
            ms = _fastest([(r.get("train") or {}).get("ms_per_step") for r in rs])
            if math.isfinite(ms) and ms > 0 and nope_ms.get(t) and math.isfinite(nope_ms[t]):
                costs.append(ms / nope_ms[t])
            if t == "lm":
                # runs that never flattened still show their ratios, in parentheses, unranked
                src = fit or rs
                key = "lm" if fit else "lm_provisional"
                lens = sorted({m["eval_len"] for r in src for m in r["metrics"]})
                for f in lm_factors(lens, L):
                    if L * f not in lens:
                        continue
                    if any(m.get("untrained_rows") for r in src for m in r.get("position_loss") or []
                           if m["eval_len"] == L * f):
                        row["lm_na"].add(f)  # a learned table read past its trained rows: no number
                    else:
                        ratios = [lm_ratio(r, L, L * f, far_losses=model.far_losses) for r in src]
                        row[key][f] = _ms([x for x, _ in ratios])
                        row["lm_window_fallback"] |= not all(far for _, far in ratios)
                spans = []
                for r in src:
                    sp = r.get("span") or {}
                    if sp:
                        longest = sp[max(sp, key=int)]
                        spans.append((longest["max"], longest.get("median", longest["max"])))
                if spans:
                    row["span"] = statistics.median(s for s, _ in spans)
                    row["span_median"] = statistics.median(s for _, s in spans)
                    # local: even the widest head looks back less than the training length
                    row["local"] = row["span"] < L
            else:
                for f, key in ((1.0, "1x"), (1.5, "1.5x"), (2.0, "2x")):
                    n = L * f
                    if n == int(n):
                        row["acc"].setdefault(t, {})[key] = _ms([metric_at(r, int(n), "accuracy") for r in fit])
                        row["tok"].setdefault(t, {})[key] = _ms([metric_at(r, int(n), "token_accuracy") for r in fit])
        row["cost"] = statistics.fmean(costs) if costs else None
        rows[lab] = row
    rk = rk or model.ranking
    ranking = [(lab, mrr, {t: rk["per_task"][t]["rank"].get(lab) for t in rk["tasks"]}) for lab, mrr, _ in rk["order"]]
    lm_lens = sorted({m["eval_len"] for r in results["runs"] if r["task"] == "lm" for m in r.get("metrics") or []})
    lm_L = next((r["train_len"] for r in results["runs"] if r["task"] == "lm"), None)
    return {"rows": rows, "tasks": tasks, "ranking": ranking, "notes": _notes(rows, tasks), "protocol_ranking": rk,
            "lm_factors": lm_factors(lm_lens, lm_L) if lm_L else list(LM_FACTORS)}


def _notes(rows: dict, tasks: list[str]) -> list[str]:
    """One line per task: who held past the training length, who did not (fitted runs only)."""
    out = []
    if "lm" in tasks:
        held, failed = [], []
        for lab, row in sorted(rows.items()):
            if row["lm"]:
                m = row["lm"][max(row["lm"])][0]
                if math.isfinite(m):
                    (held if m <= HOLD_RATIO else failed).append(f"{lab} x{m:.2f}")
        if held or failed:
            out.append(f"LM, far-position ratio at the longest length (last quarter of the window against the same "
                       f"positions at L; holds when <= {HOLD_RATIO}): held: "
                       + (", ".join(held) or "none") + "; degraded: " + (", ".join(failed) or "none") + ".")
        fb = sorted(lab for lab, row in rows.items() if row["lm_window_fallback"])
        if fb:
            out.append("LM rows without position buckets (results from before protocol 3): " + ", ".join(fb)
                       + " show the whole-window ratio, which is biased toward 1.")
        na = sorted(lab for lab, row in rows.items() if row["lm_na"])
        if na:
            out.append("LM rows read past their trained table rows (a learned absolute table beyond L): "
                       + ", ".join(na) + f"; shown as {UNTRAINED}, never as a number, and not ranked on LM.")
        prov = sorted(lab for lab, row in rows.items() if row["lm_provisional"] and not row["lm"])
        if prov:
            out.append("LM rows not fitted (the loss still improving at the end of the step budget, or a view that "
                       "misses the gate at L): " + ", ".join(prov)
                       + "; their ratios are shown in parentheses and are not ranked.")
    for t in tasks:
        if t == "lm":
            continue
        held, best = [], None
        for lab, row in sorted(rows.items()):
            acc = row["acc"].get(t, {})
            base, two = acc.get("1x"), acc.get("2x")
            if not (base and two and base[2] and math.isfinite(base[0]) and base[0] > 0):
                continue
            if two[0] >= HOLD_ACC * base[0]:
                held.append(f"{lab} {two[0]:.2f}")
            if best is None or two[0] > best[1]:
                best = (lab, two[0])
        if best is None:
            out.append(f"{t}: no scheme fitted.")
        elif held:
            out.append(f"{t} at 2L: held (>= {HOLD_ACC:.0%} of its accuracy at L) by " + ", ".join(held) + ".")
        elif best[1] > 0:
            out.append(f"{t} at 2L: no fitted scheme held; best {best[0]} {best[1]:.2f} exact match.")
        else:
            out.append(f"{t} at 2L: no fitted scheme held; every one scores 0.00 exact match.")
    local = sorted(lab for lab, row in rows.items() if row["local"])
    if local:
        out.append("Local window (effective span below the training length; flat loss without using far "
                   "context): " + ", ".join(local) + ".")
    return out


def _f(x: tuple[float, float, int] | None, digits: int = 2) -> str:
    if not x or not x[2] or not math.isfinite(x[0]):
        return "-"
    m, s, n = x
    return f"{m:.{digits}f}" + (f"±{s:.{digits}f}" if n > 1 else "")


def _paren(cell: str) -> str:
    return cell if cell == "-" else f"({cell})"


def _table(results: dict, v: dict) -> tuple[list[str], list[list[str]]]:
    tasks = v["tasks"]
    header = ["scheme", "fitted"]
    factors = v.get("lm_factors") or list(LM_FACTORS)
    if "lm" in tasks:
        header += [f"LM far {f}x/1x" for f in factors] + ["span med/max"]
    algo = [t for t in tasks if t != "lm"]
    for t in algo:
        header += [f"{t} exact 1.5L", f"{t} exact 2L"]
    header += ["cost vs NoPE", "MRR (common tasks)"]
    mrr = {lab: m for lab, m, _ in v["ranking"]}
    rows = []
    from relpos.report.results_doc import label_order as _order

    labels = [lab for lab, _, _ in v["ranking"]] + _order([lab for lab in v["rows"] if lab not in mrr], results)
    for lab in labels:
        row = v["rows"][lab]
        fitted = ", ".join(f"{t} {a}/{b}" for t, (a, b) in sorted(row["fitted"].items()))
        cells = [lab, fitted]
        if "lm" in tasks:
            span = "-" if row["span"] is None else (f"{row['span_median']:.0f}/{row['span']:.0f}"
                                                    + (" (local)" if row["local"] else ""))
            if row["lm_na"]:
                cells += [UNTRAINED if f in row["lm_na"] else _f((row["lm"] or row["lm_provisional"]).get(f))
                          for f in factors] + [span]
            elif row["lm"]:
                cells += [_f(row["lm"].get(f)) for f in factors] + [span]
            else:
                prov = row["lm_provisional"]
                cells += [_paren(_f(prov.get(f))) for f in factors] + [_paren(span)]
        for t in algo:
            acc = row["acc"].get(t, {})
            cells += [_f(acc.get("1.5x")), _f(acc.get("2x"))]
        m = mrr.get(lab)
        cells += ["-" if row["cost"] is None else f"{row['cost']:.2f}x",
                  "-" if m is None or not math.isfinite(m) else f"{m:.2f}"]
        rows.append(cells)
    return header, rows


def verdict_markdown(results: dict | ResultsModel) -> str:
    """The verdict section of ``report.md``."""
    model = as_model(results)
    results, v = model.results, model.verdict
    header, rows = _table(results, v)
    out = ["## Verdict", ""]
    if is_smoke_test(results):
        out += [f"> {SMOKE_NOTE}", ""]
    out += [f"- {n}" for n in v["notes"]] + [""]
    out += ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    out += ["", "Base schemes are ordered by mean reciprocal rank (MRR) over the common tasks, the same for every "
            "scheme with an MRR (a task at chance, where every rank is among guesses, in none; see the ranking below: paired bootstrap intervals, ties when an interval contains "
            "0 or has a bound within 0.005 of it), from fitted runs only; views of RoPE and randomized positions follow, unranked (MRR `-`). `±` is the "
            "standard deviation over fitted seeds. LM columns are far-position ratios: bits per byte on the last quarter of each "
            f"window at {' and '.join(f'{f}x' for f in v['lm_factors'])} the training length over bits per byte on the last quarter of windows at 1x (the "
            "same relative positions; 1.00 = no degradation; the whole-window ratio, biased toward 1, is in the "
            "far-positions table); in parentheses: from runs or views that are not fitted (not ranked). "
            "Algorithmic columns are exact match (every answer token right) on test examples at 1.5x and 2x L; "
            "the ranking reads per-token accuracy at 2L (ranking table below). "
            "`span` is the effective attention span in bytes at the longest "
            "length (mass beyond it < 1%), of the median head / the widest head. Cost is time per training step relative to NoPE on the same task.", ""]
    from relpos.report.ranking import ranking_markdown, tries_markdown

    out += [ranking_markdown(model, v["protocol_ranking"]), _protocol_lines(results), tries_markdown(results)]
    return "\n".join(out)


def _protocol_lines(results: dict) -> str:
    """What protocol 3 fixes, stated in the report: the randomized-position range and the equal grid."""
    cfg = results.get("config") or {}
    lines = []
    if cfg.get("randomized"):
        f = cfg.get("random_positions_factor", 1)
        lines.append(f"- Randomized positions (Ruoss et al. 2023): training positions drawn from [0, {f} x the longest "
                     "evaluated sequence of the task).")
    grid = (cfg.get("fit") or {}).get("lr_grid") or []
    own = {t: o["lr_grid"] for t, o in (cfg.get("task_train") or {}).items() if isinstance(o, dict) and o.get("lr_grid")}
    lines.append("- Learning rates: every scheme of a task trains at every rate of the task's grid ("
                 + (f"{grid}" if grid else "its one rate") + "".join(f"; {t}: {g}" for t, g in sorted(own.items()))
                 + ") and keeps the best by validation at L; the fit gate reads the same validation score.")
    return "\n".join(lines) + "\n"


def verdict_text(model: ResultsModel) -> str:
    """The verdict for the terminal, from the report's one model (``ResultsModel.from_results(results)``)."""
    if not isinstance(model, ResultsModel):
        raise TypeError(f"verdict_text() takes a ResultsModel, got {type(model).__name__}: pass "
                        "ResultsModel.from_results(results)")
    results, v = model.results, model.verdict
    header, rows = _table(results, v)
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = []
    if is_smoke_test(results):
        lines += [SMOKE_NOTE, ""]
    lines.append("Verdict (fitted runs only; ± = spread over seeds; see report.md):")
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    lines += [""] + v["notes"]
    return "\n".join(lines)
