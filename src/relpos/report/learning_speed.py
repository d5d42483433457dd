"""Learning speed: how many steps each scheme needs to first pass the fit gate on each task, beside its fitted
fraction (the results page's table; which scheme learns a task fastest is a question users ask).

The step is the kept try's first validation check at which the gate passed (``first_pass_step`` of the fit
record: validation exact match at L >= the target, or the language model's validation loss first flat), as
:class:`~relpos.compare.fitting.FitMonitor` records it, or as read from the stored validation curve of
results made before it did (:func:`relpos.report.results_doc.first_pass_step`). Results whose store kept
no curve show ``n/a``.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from relpos.report.stats import MIN_SEEDS

__all__ = ["first_pass_steps", "speed_markdown"]


def first_pass_steps(results: dict) -> dict:
    """``{(task, label): {"steps": [first-pass step of each job that passed], "jobs": n, "fitted": k,
    "recorded": jobs whose record holds the step (passed or not)}}`` over the trained models (base schemes
    and randomized-position models as trained; views of one model share its job)."""
    out: dict = defaultdict(lambda: {"steps": [], "jobs": 0, "fitted": 0, "recorded": 0})
    for r in results["runs"]:
        if r.get("variant") not in (None, "randomized-sampled"):  # a randomized model as validated in training
            continue
        fit = (r.get("train") or {}).get("fit") or {}
        c = out[(r["task"], r["label"])]
        c["jobs"] += 1
        c["fitted"] += bool(fit.get("fitted"))
        if "first_pass_step" in fit:
            c["recorded"] += 1
            if fit["first_pass_step"] is not None:
                c["steps"].append(int(fit["first_pass_step"]))
    return dict(out)


def _cell(c: dict) -> str:
    frac = f"{c['fitted']}/{c['jobs']}"
    if not c["recorded"]:
        return f"n/a ({frac})"
    if not c["steps"]:
        return f"- ({frac})"
    passed = "" if len(c["steps"]) == c["fitted"] else f"; {len(c['steps'])} passed"
    return f"{statistics.median(c['steps']):,.0f} ({frac}{passed})"


def speed_markdown(results: dict, tasks: list[str], labels: list[str]) -> list[str]:
    """The learning-speed table (rows ``labels``, columns ``tasks``) and one line per task naming the fastest
    scheme among those that passed the gate on at least :data:`MIN_SEEDS` seeds."""
    fp = first_pass_steps(results)
    rows = [lab for lab in labels if any((t, lab) in fp for t in tasks)]
    if not rows:
        return []
    out = ["Median training steps to first pass the fit gate (over the seeds that passed it; the kept "
           "learning-rate try), with the fitted fraction in parentheses. Language modelling: the step at which "
           "the validation loss was first flat. `n/a`: not recorded in this store; `-`: never passed; `k passed`: "
           "where some runs passed the gate once and ended below it (a gate that reads the final check).", "",
           "| scheme | " + " | ".join(tasks) + " |", "|---|" + "---:|" * len(tasks)]
    for lab in rows:
        out.append(f"| {lab} | " + " | ".join(_cell(fp[(t, lab)]) if (t, lab) in fp else "-" for t in tasks) + " |")
    out.append("")
    for t in tasks:
        med = {lab: statistics.median(c["steps"]) for (tt, lab), c in fp.items()
               if tt == t and lab in rows and len(c["steps"]) >= MIN_SEEDS}
        if med:
            best = min(med.values())
            who = sorted(lab for lab, m in med.items() if m == best)
            out.append(f"- {t}: fastest to pass the gate: {', '.join(who)} (median {best:,.0f} steps; "
                       f"{len(med)} scheme(s) passed on {MIN_SEEDS}+ seeds).")
    return out + [""]
