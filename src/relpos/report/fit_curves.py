"""The validation curves of the schemes that do not fit a task: the figure and the page's words for them.

A scheme that fits fewer than :data:`~relpos.report.stats.MIN_SEEDS` of its seeds on a task is not ranked on
it. The page then shows why in the open: each seed's validation curve (the score the fit gate reads, at every
check of the learning-rate try the job kept) against the training step, beside the step at which the schemes
that did fit first passed the gate (the median over their runs), and says in words that the scheme does not
fit this task at this size, and whether its curves ran to at least twice that step (if not, the page cannot
tell a scheme that never fits from one that fits late).

Where the ranked runs' budget is too short for that, ``benchmarks/protocol3_longer.py`` trains every seed of
such a scheme once more with the same recipe on twice the budget, in a folder of its own (``longer``: task ->
that folder's ``results.json``). Those runs are never ranked; the page shows their curves (solid in the figure,
the ranked runs' faded) and says whether they fit on the longer budget.

The curves come from ``train.fit.val_curve`` of ``results.json`` (``[step, score]`` per check, written by
:func:`relpos.report.results_doc.results_dict` from the stored fit history). Results made before it was
written carry no curve: the page says "curves not recorded in this run" for them.

>>> never_fit({"runs": []})
{}
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from relpos.report.stats import MIN_SEEDS

__all__ = ["FIT_CURVES_PLOT", "NOT_RECORDED", "DOES_NOT_FIT", "FITS_LATER", "never_fit", "gate_step", "seed_curves",
           "longer_pending", "fit_curves_figure", "fit_curves_markdown", "longer_tables_markdown",
           "longer_verdict"]

#: The figure's file name in a results folder (``full-fit_curves.png`` beside the page).
FIT_CURVES_PLOT = "fit_curves.png"
#: What the page says for a scheme whose results carry no validation curve.
NOT_RECORDED = "curves not recorded in this run"
#: The words for a scheme that fits fewer than MIN_SEEDS seeds of a task.
DOES_NOT_FIT = "does not fit this task at this size"
#: ... and where its seeds fit on twice the budget (``benchmarks/protocol3_longer.py``): late, not never.
FITS_LATER = "does not fit within the ranked budget; it fits on twice the budget"


def _trained(r: dict) -> bool:
    """A row of a trained model as trained (not a RoPE scaling or a sampled view of it)."""
    return r.get("variant") in (None, "randomized") and r["task"] != "passkey"


def _fit(r: dict) -> dict:
    return (r.get("train") or {}).get("fit") or {}


def never_fit(results: dict) -> dict[str, list[str]]:
    """``task -> [label]``: the trained rows (as trained, or with randomized positions) that fitted fewer than
    :data:`~relpos.report.stats.MIN_SEEDS` of their seeds by the fit gate (``train.fit.fitted``), in task and
    label order. While a folder is still filling, a row is named only once its seeds still to come (the
    config's ``seeds``) could not bring it to ``MIN_SEEDS``.

    >>> run = lambda seed, fitted: {"task": "copy", "label": "t5", "seed": seed, "train": {"fit": {"fitted": fitted}}}
    >>> never_fit({"config": {"seeds": [0, 1, 2]}, "runs": [run(0, True)]}), never_fit({"runs": [run(0, True)]})
    ({}, {'copy': ['t5']})
    """
    count: dict = defaultdict(lambda: [0, 0])
    for r in results["runs"]:
        if _trained(r):
            c = count[(r["task"], r["label"])]
            c[0] += bool(_fit(r).get("fitted"))
            c[1] += 1
    expected = len((results.get("config") or {}).get("seeds") or [])
    out: dict[str, list[str]] = {}
    for (t, lab), (k, n) in sorted(count.items(), key=lambda kv: ((kv[0][0] != "lm", kv[0][0]), kv[0][1])):
        if k + max(0, expected - n) < MIN_SEEDS:
            out.setdefault(t, []).append(lab)
    return out


def gate_step(results: dict, task: str) -> tuple[float | None, int]:
    """The median step at which the fitted trained runs of ``task`` first passed the gate
    (``first_pass_step``), and how many runs it is the median of; ``(None, 0)`` when none recorded one."""
    steps = [_fit(r)["first_pass_step"] for r in results["runs"]
             if _trained(r) and r["task"] == task and _fit(r).get("fitted") and _fit(r).get("first_pass_step")]
    return (statistics.median(steps) if steps else None), len(steps)


def seed_curves(results: dict, task: str, label: str) -> dict[int, list[list[float]] | None]:
    """``seed -> [[step, score], ...]`` of one trained row (None for a seed whose results carry no curve)."""
    out = {}
    for r in sorted(results["runs"], key=lambda r: r["seed"]):
        if _trained(r) and r["task"] == task and r["label"] == label:
            c = _fit(r).get("val_curve")
            out[r["seed"]] = [list(p) for p in c] if c else None
    return out


def _longer_rows(longer: dict | None, task: str, label: str) -> list[dict]:
    """The trained rows of ``label`` on ``task`` in the longer runs (``[]`` when there are none)."""
    res = (longer or {}).get(task)
    return [r for r in (res or {}).get("runs", []) if _trained(r) and r["task"] == task and r["label"] == label]


def _longer_fits(longer: dict | None, task: str, label: str) -> list[bool]:
    """Whether each seed of ``label`` on ``task`` fitted in the longer runs (``[]`` when it has none there)."""
    return [bool(_fit(r).get("fitted")) for r in _longer_rows(longer, task, label)]


def awaiting_longer(results: dict, longer: dict | None) -> dict[str, list[str]]:
    """``task -> [label]``: the rows that do not fit (:func:`never_fit`) whose ranked curves stop before twice the
    fitted runs' median gate step (so a later fit is not ruled out) and which have no runs on twice the budget in
    ``longer``: the page's open questions.

    >>> run = lambda lab, seed, fitted, end: {"task": "copy", "label": lab, "seed": seed, "train": {"fit": {
    ...     "fitted": fitted, "first_pass_step": end if fitted else None, "val_curve": [[end, 0.5]]}}}
    >>> res = {"runs": [run("alibi", 0, True, 3000), run("alibi", 1, True, 3000), run("nope", 0, False, 4000)]}
    >>> awaiting_longer(res, None), awaiting_longer(res, {"copy": {"runs": [run("nope", 0, False, 8000)]}})
    ({'copy': ['nope']}, {})
    """
    out: dict[str, list[str]] = {}
    for t, labs in never_fit(results).items():
        med, _ = gate_step(results, t)
        if med is None:
            continue
        for lab in labs:
            ends = {s: e for s, (_, e) in _bests(t, seed_curves(results, t, lab)).items()}
            if _stop_early(ends, med) and not _longer_rows(longer, t, lab):
                out.setdefault(t, []).append(lab)
    return out


def longer_pending(results: dict, longer: dict | None) -> dict[str, list[tuple[str, int, int]]]:
    """``task -> [(label, run, of)]``: the rows that do not fit (:func:`never_fit`) whose runs on twice the budget
    have begun but cover ``run`` of their ``of`` ranked seeds: their outcome there is not final yet.

    >>> run = lambda lab, seed, fitted: {"task": "copy", "label": lab, "seed": seed, "train": {"fit": {
    ...     "fitted": fitted, "first_pass_step": 3000 if fitted else None, "val_curve": [[4000, 0.5]]}}}
    >>> res = {"runs": [run("alibi", 0, True), run("alibi", 1, True), run("nope", 0, False), run("nope", 1, False)]}
    >>> longer_pending(res, {"copy": {"runs": [run("nope", 0, True)]}})
    {'copy': [('nope', 1, 2)]}
    """
    out: dict[str, list[tuple[str, int, int]]] = {}
    for t, labs in never_fit(results).items():
        for lab in labs:
            want = {r["seed"] for r in results["runs"] if _trained(r) and r["task"] == t and r["label"] == lab}
            have = {r["seed"] for r in _longer_rows(longer, t, lab)} & want
            if have and have != want:
                out.setdefault(t, []).append((lab, len(have), len(want)))
    return out


def _stop_early(ends: dict[int, float], med: float) -> list[int]:
    """The seeds whose curve stops (last step ``ends[seed]``) before twice the fitted runs' median gate step."""
    return [s for s, e in ends.items() if e < 2 * med]


def _has_curve(results: dict, longer: dict | None, task: str, label: str) -> bool:
    """Whether any seed of ``label`` on ``task`` has a recorded curve, ranked or in the longer runs."""
    return (any(seed_curves(results, task, label).values())
            or any(_fit(r).get("val_curve") for r in _longer_rows(longer, task, label)))


def _bests(task: str, curves: dict[int, list | None]) -> dict[int, tuple[float, float]]:
    """``seed -> (best score, last step)`` of the seeds with a curve (best: the lowest loss, the highest exact
    match)."""
    return {s: ((min if task == "lm" else max)(p[1] for p in c), c[-1][0]) for s, c in curves.items() if c}


def _bests_text(bests: dict[int, tuple[float, float]]) -> str:
    return "; ".join(f"seed {s} {b:.3f} (to step {e:,.0f})" for s, (b, e) in sorted(bests.items()))


def _score_name(task: str) -> str:
    return "validation loss at L (nats)" if task == "lm" else "validation exact match at L"


def fit_curves_figure(results: dict, path: str | Path, longer: dict | None = None) -> bool:
    """Write the figure (one panel per task with a scheme that does not fit, one line per seed of each such
    scheme; dotted: the fitted schemes' median gate step and twice it; dashed: the gate's target; with
    ``longer`` runs of a scheme, their curves solid and the ranked runs' faded). Returns False, writing
    nothing, when no such scheme has a recorded curve."""
    todo = {t: [lab for lab in labs if _has_curve(results, longer, t, lab)] for t, labs in never_fit(results).items()}
    todo = {t: labs for t, labs in todo.items() if labs}
    if not todo:
        return False
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from relpos.outdir import save_figure

    styles = ["-", "--", ":", "-."]
    cmap = matplotlib.colormaps["tab10"]
    cols = min(3, len(todo))
    rows = -(-len(todo) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(7.0, 5.0 * cols + 0.5), 4.0 * rows), squeeze=False)
    for ax in axes.flat[len(todo):]:
        ax.set_visible(False)
    for ax, (t, labs) in zip(axes.flat, todo.items()):
        for i, lab in enumerate(labs):
            more = {r["seed"]: _fit(r).get("val_curve") for r in _longer_rows(longer, t, lab)}
            ranked = seed_curves(results, t, lab)
            for j, (seed, c) in enumerate(ranked.items()):
                if c:
                    ax.plot([p[0] for p in c], [p[1] for p in c], color=cmap(i % 10), ls=styles[j % len(styles)],
                            lw=1.1, alpha=0.35 if any(more.values()) else 1.0,
                            label=(lab if not any(more.values()) else f"{lab} (ranked runs)") if j == 0 else None)
            for j, (seed, c) in enumerate(more.items()):
                if c:
                    ax.plot([p[0] for p in c], [p[1] for p in c], color=cmap(i % 10), ls=styles[j % len(styles)],
                            lw=1.3, label=f"{lab} (twice the budget)" if j == 0 else None)
        med, n = gate_step(results, t)
        if med is not None:
            ax.axvline(med, color="grey", lw=0.9, ls=":")
            ax.axvline(2 * med, color="grey", lw=0.9, ls=":")
        target = next((_fit(r).get("target") for r in results["runs"] if r["task"] == t and _fit(r).get("target")),
                      None)
        if t != "lm" and target is not None:
            ax.axhline(target, color="black", lw=0.8, ls="--")
            ax.set_ylim(-0.03, 1.03)
        ax.set_title(f"{t}: " + (f"the fitted passed the gate at step {med:,.0f} (median)" if med is not None
                                 else "no scheme passed the gate"), fontsize=8)
        ax.set_xlabel("training step")
        ax.set_ylabel(_score_name(t))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper left")
    fig.suptitle("Schemes that do not fit: validation curves of every seed (line style: seed 0 solid, 1 dashed, "
                 "2 dotted; grey dotted: the median gate step and twice it; dashed: the gate's target"
                 + ("; faded: the ranked runs, beside the same recipe on twice the budget" if longer else "") + ")",
                 fontsize=8)
    fig.tight_layout()
    save_figure(fig, Path(path), dpi=100, pil_kwargs={"optimize": True})
    plt.close(fig)
    return True


def _size(results: dict, task: str, label: str) -> str:
    rows = [r for r in results["runs"] if _trained(r) and r["task"] == task and r["label"] == label]
    params = sorted({(r.get("train") or {}).get("params") for r in rows} - {None})
    budget = sorted({_fit(r).get("budget") for r in rows} - {None})
    bits = ([f"{params[0]:,} parameters" if len(params) == 1 else f"{params[0]:,}-{params[-1]:,} parameters"]
            if params else []) + ([f"a budget of {budget[-1]:,} steps"] if budget else [])
    return f" ({', '.join(bits)})" if bits else ""


def _longer_sentence(longer: dict | None, task: str, label: str, med: float | None, seeds: int = 0) -> str:
    """What the longer runs of one scheme show: how many seeds fitted on twice the budget, when they first
    passed the gate, each seed's best score and how far its curve runs (``""`` without longer runs); ``seeds``:
    how many seeds the ranked runs trained (while fewer have run on twice the budget, a verdict the missing
    seeds could still change is left open)."""
    rows = sorted(_longer_rows(longer, task, label), key=lambda r: r["seed"])
    if not rows:
        return ""
    k = sum(bool(_fit(r).get("fitted")) for r in rows)
    pending = max(0, seeds - len(rows))
    budget = max((_fit(r).get("budget") or 0) for r in rows)
    lrs = sorted({_fit(r).get("lr") for r in rows} - {None})
    passed = [f"seed {r['seed']} at step {_fit(r)['first_pass_step']:,}" for r in rows
              if _fit(r).get("fitted") and _fit(r).get("first_pass_step")]
    bests = _bests(task, {r["seed"]: _fit(r).get("val_curve") for r in rows})
    short = [str(r["seed"]) for r in rows if not _fit(r).get("fitted")
             and (r["seed"] not in bests or (med is not None and bests[r["seed"]][1] < 2 * med))]
    reach = ""
    if med is not None and k < MIN_SEEDS and k < len(rows):  # only where an unfitted seed's curve is shown
        reach = (f" Every unfitted seed's curve there runs to at least twice the fitted schemes' gate step "
                 f"({2 * med:,.0f})." if not short else
                 f" Seed(s) {', '.join(short)} stop short of twice the fitted schemes' gate step ({2 * med:,.0f}).")
    if k >= MIN_SEEDS:
        outcome = ": the ranked budget was too short for it, not the task too hard at this size"
    elif k + pending >= MIN_SEEDS:
        outcome = (f"; {pending} of its {seeds} seeds have not run there yet, so whether it fits on twice the "
                   "budget is open")
    else:
        outcome = ": it does not fit this task at this size on twice the budget either"
    open_ = k < MIN_SEEDS <= k + pending  # the outcome itself says the seeds to come
    notes = passed + ([f"{pending} of {seeds} not run yet"] if pending and not open_ else [])
    verdict = f"it fits {k} of {len(rows)} seeds there" + (f" ({'; '.join(notes)})" if notes else "") + outcome
    return (f" **On twice the budget** ({budget:,} steps, the same recipe"
            + (f" at learning rate {', '.join(f'{x:g}' for x in lrs)}" if lrs else "")
            + f"; not ranked): {verdict}." + (f" Best {_score_name(task)}: {_bests_text(bests)}." if bests else "")
            + reach)


def fit_curves_markdown(results: dict, figure: str | None = None, longer: dict | None = None) -> list[str]:
    """The page's section on the schemes that do not fit (``[]`` when every trained row fitted at least
    :data:`~relpos.report.stats.MIN_SEEDS` seeds): per task and scheme, the words "does not fit this task at
    this size", the fitted schemes' median gate step, and whether every seed's curve runs to at least twice
    that step; ``figure``: the figure's link (None: no figure, e.g. no curve recorded); ``longer``: task ->
    ``results.json`` of the same recipe on twice the budget (``benchmarks/protocol3_longer.py``), whose
    outcome each scheme's line adds."""
    nf = never_fit(results)
    if not nf:
        return []
    out = ["### Schemes that do not fit", "",
           f"A scheme that fitted fewer than {MIN_SEEDS} of its seeds on a task is not ranked on it. Below, each "
           "seed's validation curve (the score the fit gate reads, at every check of the learning-rate try the job "
           "kept) against the training step, beside the step at which the schemes that did fit first passed the "
           "gate (their median).", ""]
    if longer:
        out[2] += (" Where the ranked runs stop too early to tell, every seed of such a scheme was trained once "
                   "more with the same recipe on twice the task's budget (`benchmarks/protocol3_longer.py`); those "
                   "runs are not ranked.")
    if figure and any(_has_curve(results, longer, t, lab) for t, labs in nf.items() for lab in labs):
        out += [f"![validation curves of the schemes that do not fit]({figure})", ""]
    for t, labs in nf.items():
        med, n = gate_step(results, t)
        for lab in labs:
            rows = [r for r in results["runs"] if _trained(r) and r["task"] == t and r["label"] == lab]
            k = sum(bool(_fit(r).get("fitted")) for r in rows)
            later = sum(_longer_fits(longer, t, lab)) >= MIN_SEEDS
            head = (f"- **{t}, {lab}** ({k} of {len(rows)} seeds fitted): {FITS_LATER if later else DOES_NOT_FIT}"
                    f"{_size(results, t, lab)}.")
            gate = (f" The fitted schemes first passed the gate at step {med:,.0f} (median of {n} run"
                    f"{'s' if n != 1 else ''})." if med is not None else
                    " No scheme passed the gate on this task, so there is no step to compare with.")
            curves = seed_curves(results, t, lab)
            more = _longer_sentence(longer, t, lab, med, len({r["seed"] for r in rows}))
            if not any(curves.values()):
                out.append(head + gate + f" Validation {NOT_RECORDED}." + more)
                continue
            bests = _bests(t, curves)
            ends, best = {s: e for s, (_, e) in bests.items()}, {s: b for s, (b, _) in bests.items()}
            reach = ""
            if med is not None:
                short = _stop_early(ends, med)
                reach = (f" Every seed's curve runs to at least twice that step ({2 * med:,.0f})." if not short else
                         f" {'No seed' if len(short) == len(ends) else 'Not every seed'}'s curve reaches twice "
                         f"that step ({2 * med:,.0f}): seed"
                         f"{'s' if len(short) > 1 else ''} {', '.join(map(str, short))} stop"
                         f"{'' if len(short) > 1 else 's'} at step "
                         f"{', '.join(f'{ends[s]:,.0f}' for s in short)}, so a later fit is not ruled out.")
            missing = [s for s, c in curves.items() if not c]
            target = {r["seed"]: _fit(r).get("target") for r in rows if not _fit(r).get("fitted")}
            late = [s for s in sorted(best) if t != "lm" and target.get(s) is not None and best[s] >= target[s]]
            out.append(head + gate + reach + f" Best {_score_name(t)}: {_bests_text(bests)}."
                       + (f" Seed(s) {', '.join(map(str, late))} reached the target ({target[late[0]]:g}) at some "
                          "check without being fitted: the gate read another check (the last one, in results made "
                          "before the best check was kept)." if late else "")
                       + (f" Seed(s) {', '.join(map(str, missing))}: {NOT_RECORDED}." if missing else "") + more)
    return out + [""]


def longer_tables_markdown(longer: dict | None) -> list[str]:
    """The runs on twice the budget (``longer``: task -> their ``results.json``), per task: the same accuracy-by-
    length tables as the ranked runs', from those runs alone, so a scheme that fits only there still shows how far
    past L it holds (``[]`` without such runs). Never ranked: their budget differs from the ranked runs'.

    >>> longer_tables_markdown(None), longer_tables_markdown({"copy": {"runs": []}})
    ([], [])
    """
    from relpos.report.tables import markdown_tables

    tasks = [t for t, res in sorted((longer or {}).items()) if any(_trained(r) for r in (res or {}).get("runs", []))]
    if not tasks:
        return []
    out = ["### The schemes that do not fit, on twice the budget: accuracy by length", "",
           "The runs on twice the budget above, read like the tables by task (`fitted`: seeds that fitted there; "
           "mean and standard deviation over those seeds, over every seed where none fitted). Not ranked and in no "
           "verdict: their budget is not the ranked runs', and only the schemes that did not fit the ranked budget "
           "ran it.", ""]
    for t in tasks:
        md = markdown_tables(longer[t], t).replace(f"**{t}: ", f"**{t} on twice the budget (not ranked): ")
        out += md.splitlines() + [""]
    return out


def longer_verdict(results: dict, longer: dict | None) -> list[str]:
    """The verdict's line on the runs on twice the budget: per task, which of the schemes that do not fit the
    ranked budget fit there (at least :data:`~relpos.report.stats.MIN_SEEDS` seeds) and which still do not (``[]``
    without such runs). Said, never ranked.

    >>> run = lambda lab, seed, fitted: {"task": "copy", "label": lab, "seed": seed, "train": {"fit": {
    ...     "fitted": fitted}}}
    >>> res = {"runs": [run("alibi", s, True) for s in range(3)] + [run("nope", s, False) for s in range(3)]}
    >>> longer_verdict(res, {"copy": {"runs": [run("nope", s, s > 0) for s in range(3)]}})
    ['- **On twice the budget** (the schemes that do not fit, trained again with the same recipe; not ranked): fit there: copy: nope 2/3.']
    """
    fit, still = [], []
    for t, labs in never_fit(results).items():
        got = {lab: _longer_fits(longer, t, lab) for lab in labs}
        yes = [f"{lab} {sum(v)}/{len(v)}" for lab, v in got.items() if sum(v) >= MIN_SEEDS]
        no = [lab for lab, v in got.items() if v and sum(v) < MIN_SEEDS]
        fit += [f"{t}: {', '.join(yes)}"] if yes else []
        still += [f"{t}: {', '.join(no)}"] if no else []
    if not fit and not still:
        return []
    return ["- **On twice the budget** (the schemes that do not fit, trained again with the same recipe; not ranked): "
            + "; ".join(([f"fit there: {'; '.join(fit)}"] if fit else [])
                        + ([f"still not: {'; '.join(still)}"] if still else [])) + "."]
