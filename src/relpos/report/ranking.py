"""The ranking of ``relpos compare`` (protocol 3): base schemes only, paired bootstrap intervals, ties.

Per task, each base scheme (a scheme as trained: no RoPE scaling, no randomized positions) gets one
score per fitted seed:

* language modelling: the far-position ratio (lower is better): the loss on the last quarter of each test
  window at the longest evaluation length over the loss on the last quarter of windows of the training
  length (:func:`relpos.tasks.lm.far_loss`), from the per-window losses of those quarters;
* an algorithmic task: per-token accuracy at 2L on the test examples (higher is better; exact match where a
  task records no per-token accuracy).

The best scheme of a task is the one with the best mean score over its fitted seeds. Every other scheme is
compared with it by :func:`relpos.report.stats.paired_bootstrap` (over the seeds both fitted, and the
evaluation examples within each seed); a **tie** when the interval of the difference contains 0 or has a bound
within :data:`~relpos.report.stats.BORDERLINE` of it (:attr:`~relpos.report.stats.Interval.tie`). A scheme's
rank on a task is 1 when it ties with the best, else 1 plus the number of schemes whose interval against it
excludes 0 in their favour. A scheme with fewer than :data:`~relpos.report.stats.MIN_SEEDS` fitted seeds on a
task is not ranked on it (its fitted fraction is its own column, never a score of 0).

The overall order compares like with like: it is the mean reciprocal rank over the **common tasks**, a set of
compared tasks on which every scheme of the order is ranked (:func:`common_block`: the largest such block of
the scheme x task table). The mean reciprocal rank over each scheme's own tasks (different task sets) is
kept beside it, labelled as such. A task whose best scheme is **at chance** at 2L (:data:`CHANCE`: parity's
balanced answer bit; the best's interval reaches the chance level, :func:`at_chance_rows`) keeps its per-task
ranks but enters no mean reciprocal rank: a rank among schemes that all guess says nothing about generalising.

RoPE's scalings and randomized positions get their own table, each compared with plain RoPE the same way.

Results from before protocol 3 carry no per-example scores: their intervals then resample the seeds only.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict

import numpy as np

from relpos.compare.fitting import metric_at
from relpos.report.model import ResultsModel, as_model, results_of
from relpos.report.stats import BORDERLINE, CONFIDENCE, MIN_SEEDS, Interval, decided_bootstrap, \
    paired_bootstrap, per_example_key, rank_against_best

__all__ = ["ranking", "ranking_markdown", "tries_markdown", "lm_far_losses", "lm_ratio", "seed_inputs",
           "INTERVALS_NOTE", "N_BOOT_REPORT", "common_block", "borderline_decisions", "BORDERLINE_MARK", "CHANCE",
           "PARITY_CHANCE", "at_chance_rows", "chance_reached"]

#: Parity's chance level: validation and test labels are balanced at every length (protocol 3).
PARITY_CHANCE = 0.5
#: Chance level of a task's ranking score at 2L, where it has one that no training can beat by guessing:
#: parity's single answer bit.
CHANCE = {"parity": PARITY_CHANCE}

#: Bootstrap resamples of the report's intervals. At 1,000, three decisions of the protocol-3 page moved when
#: the bootstrap was reseeded (bounds within 0.0007 of 0); benchmarks/bootstrap_stability.py checks that no
#: rank, tie or verdict moves across five bootstrap seeds at this count.
N_BOOT_REPORT = 10000
#: How a borderline decision is marked in the tables (an interval bound within BORDERLINE of 0).
BORDERLINE_MARK = "~"

#: What the intervals cover and what they do not (the report and docs/results.md say it).
INTERVALS_NOTE = (
    f"Intervals are {CONFIDENCE:.0%} paired bootstrap intervals of the difference from the best scheme "
    "(resampling the seeds both schemes fitted, then the test examples within each seed; every scheme of a "
    "seed shares data order, non-position initialisation and test examples). They cover seed-to-seed "
    "variation and the finite test set. They do not cover other model sizes, step budgets, learning-rate "
    "grids, tasks or corpora, and with three seeds the seed variation itself is known only roughly. "
    f"A difference whose interval contains 0, or has a bound within {BORDERLINE} of 0 (borderline: reseeding the "
    "bootstrap moves such a bound across 0), is a tie. Per-token accuracies lie on a lattice (multiples of "
    "1/tokens), where a sampled bound lands on one of two neighbouring lattice points by chance: their "
    "intervals are computed from the exact bootstrap distribution, not sampled, so no tie or rank of an "
    "algorithmic task depends on the bootstrap's seed (LM ratios are sampled). A scheme needs "
    f"{MIN_SEEDS} fitted seeds to be ranked on a task."
)


def lm_far_losses(run: dict, L: int, n: int) -> tuple[float | None, float | None, bool]:
    """The two losses behind one run's LM far-position ratio at evaluation length ``n``: bits per byte on the last
    quarter of each window of ``n`` bytes and on the last quarter of windows of the training length ``L``
    (:func:`relpos.tasks.lm.far_loss`), and True; or, for results without position buckets, the whole-window
    bits per byte at ``n`` and at ``L``, and False. A loss is None where its length was not measured.

    The one place that chooses between the far positions and the whole-window fallback: :func:`lm_ratio` (the
    verdict) and :func:`seed_inputs` (the ranking, for results without per-window scores) both read it.
    """
    from relpos.tasks.lm import far_loss

    rows = run.get("position_loss") or []
    f = far_loss(rows, n, field="bpb")
    b = f if L == n else far_loss(rows, L, field="bpb")
    if f is not None and b is not None:
        return f, b, True
    return metric_at(run, n, "bpb"), metric_at(run, L, "bpb"), False


def lm_ratio(run: dict, L: int, n: int, *, far_losses=None) -> tuple[float, bool]:
    """The verdict's LM number of one run at evaluation length ``n``: bits per byte on the last quarter of each
    window of ``n`` bytes over bits per byte on the last quarter of windows of the training length ``L``
    (:func:`relpos.tasks.lm.far_loss`), and True; or the whole-window ratio and False for results without
    position buckets (:func:`lm_far_losses`). NaN where a length was not measured (or was read through
    untrained table rows).

    The whole-window ratio is biased toward 1: most bytes of a long window sit at distances seen in training.
    ``far_losses``: :func:`lm_far_losses` or a model's kept copy of it
    (:meth:`~relpos.report.model.ResultsModel.far_losses`).

    >>> rows = [{"eval_len": n, "bucket_start": s, "bucket_end": s + n // 4, "bpb": b}
    ...         for n, bs in ((4, (1, 1, 1, 2)), (16, (1, 1, 1, 4))) for s, b in zip(range(0, n, n // 4), bs)]
    >>> run = {"metrics": [{"eval_len": 4, "bpb": 1.25}, {"eval_len": 16, "bpb": 1.75}], "position_loss": rows}
    >>> lm_ratio(run, 4, 16)
    (2.0, True)
    """
    f, b, far = (far_losses or lm_far_losses)(run, L, n)
    if f is None or b is None or not b:
        return math.nan, far
    return f / b, far


def _algo_key(run: dict, n: int) -> tuple[str, str]:
    """(field, per-example field) of an algorithmic run's ranking score at length ``n``."""
    if metric_at(run, n, "token_accuracy") is not None:
        return "token_accuracy", "token"
    return "accuracy", "value"


def seed_inputs(run: dict, task: str, *, far_losses=None) -> tuple[dict | None, bool]:
    """The per-example arrays of one run's ranking score (a dict for :func:`paired_bootstrap`) and whether
    they are real per-example scores (False: the run's mean, for results without them). None when the run
    lacks the measurement. ``far_losses``: :func:`lm_far_losses` or a model's kept copy of it
    (:meth:`~relpos.report.model.ResultsModel.far_losses`)."""
    L = run["train_len"]
    per = run.get("per_example") or {}
    if task == "lm":
        lens = sorted(m["eval_len"] for m in run.get("metrics") or [])
        if not lens or lens[-1] == L:
            return None, False
        far, base = lens[-1], L
        rows = [*(run.get("metrics") or []), *(run.get("position_loss") or [])]
        if any(r.get("untrained_rows") and r.get("eval_len") == far for r in rows):
            return None, False  # read through a learned table's untrained rows: no score (per-window ones stay)
        fw, bw = _far_windows(run, far), _far_windows(run, base)
        if fw is not None and bw is not None:
            return {"far": fw, "base": bw, "_far": far}, True
        f, b, _ = (far_losses or lm_far_losses)(run, base, far)
        if f is None or b is None:
            return None, False
        return {"far": [f], "base": [b], "_far": far}, False
    n = 2 * L
    field, pfield = _algo_key(run, n)
    k = per_example_key("accuracy", n, field=pfield)
    if k in per:
        return {"v": per[k]}, True
    v = metric_at(run, n, field)
    return ({"v": [v]}, False) if v is not None else (None, False)


def _far_windows(run: dict, n: int):
    """Each test window's mean loss over its last quarter at length ``n`` (the far-position buckets' per-window
    losses, weighted by the width each shares with the quarter), or None without them."""
    import numpy as np

    from relpos.tasks.lm import FAR_FRACTION

    lo = round((1 - FAR_FRACTION) * n)
    per = run.get("per_example") or {}
    num, den = None, 0
    for p in run.get("position_loss") or []:
        if p["eval_len"] != n or p["bucket_end"] <= lo:
            continue
        v = per.get(per_example_key("position", n, p["bucket_start"]))
        if v is None:
            return None
        w = p["bucket_end"] - max(p["bucket_start"], lo)
        num = w * np.asarray(v, dtype=float) + (0 if num is None else num)
        den += w
    return None if num is None else num / den


def _ratio(m):
    return m["far"] / m["base"]


def _collect(model: ResultsModel, labels_ok) -> dict:
    """task -> label -> [per-seed inputs with "_seed"] over fitted runs whose label passes ``labels_ok``."""
    out: dict = defaultdict(lambda: defaultdict(list))
    for r, ok in zip(model.results["runs"], model.fitted):
        if not ok or r["task"] == "passkey" or not labels_ok(r):
            continue
        inp = model.inputs[id(r)]
        if inp is None:
            continue
        out[r["task"]][r["label"]].append({**inp, "_seed": r["seed"]})
    for t in out:
        for lab in out[t]:
            out[t][lab].sort(key=lambda s: s["_seed"])
    return out


def _fitted_fraction(model: ResultsModel) -> dict:
    """(task, label) -> (fitted seeds, seeds)."""
    c: dict = defaultdict(lambda: [0, 0])
    for r, ok in zip(model.results["runs"], model.fitted):
        c[(r["task"], r["label"])][0] += int(ok)
        c[(r["task"], r["label"])][1] += 1
    return {k: tuple(v) for k, v in c.items()}


def common_block(ranked: dict[str, set[str]], tasks: list[str]) -> tuple[list[str], list[str]]:
    """``(tasks, schemes)``: the largest block of the scheme x task table in which every scheme is ranked on
    every task (``ranked``: scheme -> the tasks it is ranked on; ``tasks``: the compared tasks, in order).
    Largest: the most scheme-task cells, then the most schemes, then the most tasks, then the earliest tasks.
    At least two schemes; ``([], [])`` when no task ranks two.

    >>> common_block({"a": {"x", "y"}, "b": {"x", "y"}, "c": {"x"}}, ["x", "y"])
    (['x', 'y'], ['a', 'b'])
    >>> common_block({"a": {"x"}, "b": {"x"}, "c": {"x"}, "d": {"y"}}, ["x", "y"])
    (['x'], ['a', 'b', 'c'])
    """
    best, key = ([], []), None
    for k in range(1, len(tasks) + 1):
        for ts in itertools.combinations(tasks, k):
            labs = sorted(lab for lab, got in ranked.items() if set(ts) <= got)
            if len(labs) < 2:
                continue
            kk = (len(ts) * len(labs), len(labs), len(ts), [-tasks.index(t) for t in ts])
            if key is None or kk > key:
                best, key = (list(ts), labs), kk
    return best


def chance_reached(task: str, iv: Interval) -> bool:
    """Whether a score's interval reaches ``task``'s chance level (:data:`CHANCE`): its lower end (its estimate
    when it has none, one seed) is at or below the chance level plus :data:`~relpos.report.stats.BORDERLINE`.
    False on a task without a chance level."""
    if task not in CHANCE:
        return False
    return (iv.lo if math.isfinite(iv.lo) else iv.est) <= CHANCE[task] + BORDERLINE


def at_chance_rows(task: str, rows: list[dict], *, n_boot: int, seed: int = 0) -> bool:
    """Whether one scheme's score at 2L on ``task`` is at chance (:func:`chance_reached`), its interval over
    ``rows`` (its fitted seeds' per-example scores) and their test examples; with one seed, its mean. False on a
    task without a chance level or without rows.

    >>> rows = [{"v": np.array([1.0, 0.0] * 50), "_seed": s} for s in range(3)]
    >>> at_chance_rows("parity", rows, n_boot=200), at_chance_rows("copy", rows, n_boot=200)
    (True, False)
    """
    if task not in CHANCE or not rows:
        return False
    a = [{k: v for k, v in r.items() if k != "_seed"} for r in rows]
    if len(a) < MIN_SEEDS:  # no interval: the mean
        mean = statistics.fmean(float(np.mean(v)) for r in a for v in r.values())
        return chance_reached(task, Interval(mean, math.nan, math.nan))
    zero = [{k: np.zeros(np.shape(v)) for k, v in r.items()} for r in a]
    return chance_reached(task, paired_bootstrap(a, zero, None, n_boot=n_boot, seed=seed))  # the score minus 0


def ranking(results: dict | ResultsModel, *, seed: int = 0, n_boot: int | None = None) -> dict:
    """The protocol-3 ranking of a results document or its model (``seed``: the bootstrap's; ``n_boot``: its
    resamples, :data:`N_BOOT_REPORT` by default). A model keeps its own at the defaults
    (:attr:`~relpos.report.model.ResultsModel.ranking`).

    Returns ``{"tasks": [...], "compared": the tasks on which at least two schemes are ranked, "per_task":
    {task: rank_against_best(...)}, "common": the compared tasks of the overall order (every scheme of it is
    ranked on each), "order": [(label, MRR over the common tasks, number of them)] for the schemes of the
    overall order, best first, then every other base scheme with NaN, "own": {label: (MRR over the compared
    tasks it is ranked on, their number)} (different task sets), "at_chance": the compared tasks whose best
    scheme is at chance (in no MRR), "variants": {task: {label: (Interval | None, seeds)}}, "fitted":
    {(task, label): (k, n)}, "per_example": bool}``.
    """
    n_boot = N_BOOT_REPORT if n_boot is None else n_boot
    model = as_model(results)
    results = model.results
    base = set((results.get("config") or {}).get("schemes") or []) or {r["scheme"] for r in results["runs"]}
    is_base = lambda r: not r.get("variant") and r["scheme"] in base  # noqa: E731
    data = _collect(model, is_base)
    tasks = sorted(data, key=lambda t: (t != "lm", t))
    per_task = {}
    for t in tasks:
        per_task[t] = rank_against_best(dict(data[t]), _ratio if t == "lm" else None, higher_is_better=t != "lm",
                                        n_boot=n_boot, seed=seed)
    labels = sorted({lab for t in tasks for lab in data[t]} | {r["label"] for r in results["runs"] if is_base(r)})
    # the tasks in an MRR: at least two schemes ranked. A scheme ranked alone (every other fitted fewer than
    # MIN_SEEDS seeds) is first by default, not by comparison, so that task says nothing about its place
    compared = [t for t in tasks if len(per_task[t]["rank"]) >= 2]
    # a task whose best scheme only guesses (parity at chance) ranks noise: its ranks stay, in no MRR
    at_chance = [t for t in compared if at_chance_rows(t, data[t][per_task[t]["best"]], n_boot=n_boot, seed=seed)]
    scored = [t for t in compared if t not in at_chance]
    own = {}
    for lab in labels:
        rks = [per_task[t]["rank"][lab] for t in scored if lab in per_task[t]["rank"]]
        own[lab] = (statistics.fmean(1.0 / r for r in rks) if rks else math.nan, len(rks))
    # like with like: the overall order reads the same tasks for every scheme in it
    same_tasks, block = common_block({lab: {t for t in scored if lab in per_task[t]["rank"]} for lab in labels},
                                     scored)
    order = sorted(((lab, statistics.fmean(1.0 / per_task[t]["rank"][lab] for t in same_tasks), len(same_tasks))
                    for lab in block), key=lambda x: (-x[1], x[0]))
    order += sorted(((lab, math.nan, 0) for lab in labels if lab not in block),
                    key=lambda x: (-(own[x[0]][0] if math.isfinite(own[x[0]][0]) else -1.0), x[0]))
    # the views of RoPE and randomized positions against plain RoPE
    variants: dict = {}
    views = _collect(model, lambda r: bool(r.get("variant")) or r["scheme"] not in base)
    for t in tasks:
        ref = {s["_seed"]: s for s in data[t].get("rope", [])}
        if not ref:
            continue  # no fitted plain RoPE on this task: nothing to compare the views with
        for lab, seeds in sorted(views.get(t, {}).items()):
            common = [s for s in seeds if s["_seed"] in ref]
            iv = None
            if len(common) >= MIN_SEEDS:
                a = [{k: v for k, v in s.items() if k != "_seed"} for s in common]
                b = [{k: v for k, v in ref[s["_seed"]].items() if k != "_seed"} for s in common]
                try:
                    iv = decided_bootstrap(a, b, _ratio if t == "lm" else None, n_boot=n_boot, seed=seed)
                except ValueError:
                    iv = None
            variants.setdefault(t, {})[lab] = (iv, len(common))
    per_ex = any(r.get("per_example") for r in results["runs"])
    out = {"tasks": tasks, "compared": compared, "common": same_tasks, "per_task": per_task, "order": order,
           "own": own, "at_chance": at_chance, "variants": variants, "fitted": _fitted_fraction(model),
           "per_example": per_ex}
    return out


def borderline_decisions(rk: dict) -> dict:
    """The ranking's decisions whose interval has a bound within :data:`~relpos.report.stats.BORDERLINE`
    of 0: ``{"vs_best": {(task, label)}, "rank": {(task, label)}, "variants": {(task, label)}, "n": borderline
    count, "of": every decision counted}``. A rank is borderline when any pairwise interval it was counted
    from is (``rank_against_best``'s ``pairs``: the label's against the best and against each scheme with a
    better score); each interval counts once."""
    vs, rank, var = set(), set(), set()
    seen, n = set(), 0
    for t, pt in rk["per_task"].items():
        for lab, iv in pt["vs_best"].items():
            if lab == pt["best"] or iv is None:
                continue
            seen.add((t, pt["best"], lab))
            if iv.borderline:
                vs.add((t, lab))
                rank.add((t, lab))
        for (a, b), iv in pt.get("pairs", {}).items():
            if a == pt["best"]:
                continue  # the interval against the best, counted above (its sign the other way)
            seen.add((t, a, b))
            if iv.borderline:
                rank.add((t, b))
                n += 1
    n += len(vs)
    for t, d in rk["variants"].items():
        for lab, (iv, _) in d.items():
            if iv is None or not math.isfinite(iv.lo):
                continue
            seen.add((t, "rope", lab))
            if iv.borderline:
                var.add((t, lab))
                n += 1
    return {"vs_best": vs, "rank": rank, "variants": var, "n": n, "of": len(seen)}


def _iv(iv: Interval | None, digits: int = 2) -> str:
    if iv is None or not math.isfinite(iv.est):
        return "-"
    if not math.isfinite(iv.lo):
        return f"{iv.est:+.{digits}f}"
    return (f"{iv.est:+.{digits}f} [{iv.lo:+.{digits}f}, {iv.hi:+.{digits}f}]" + (" tie" if iv.tie else "")
            + (f" {BORDERLINE_MARK}" if iv.borderline else ""))


def _score_name(task: str) -> str:
    return "LM far-position ratio: loss on the last quarter of windows at the longest length / at L (lower is " \
        "better)" if task == "lm" else \
        f"{task}: per-token accuracy at 2L (higher is better)"


def _no_score(results: dict, task: str, label: str) -> str:
    """Why a fitted row has no ranking score on a task."""
    rows = [r for r in results["runs"] if r["task"] == task and r["label"] == label]
    if any(p.get("untrained_rows") for r in rows for p in [*(r.get("metrics") or []), *(r.get("position_loss") or [])]):
        return "untrained rows: no number"
    return "no score measured"


def ranking_markdown(results: dict | ResultsModel, rk: dict | None = None) -> str:
    """The ranking table (base schemes), the difference-from-best table and the variants-vs-RoPE table
    (``rk``: :func:`ranking` of ``results`` when the caller has it; a model's own otherwise)."""
    rk = rk or as_model(results).ranking
    results = results_of(results)
    tasks = rk["tasks"]
    if not tasks:
        return ""
    out = ["## Ranking (base schemes, paired bootstrap)", ""]
    alone = [t for t in tasks if t not in rk["compared"] and rk["per_task"][t]["rank"]]  # one scheme ranked
    near = borderline_decisions(rk)
    header = (["scheme", "MRR (common tasks)", "MRR (own tasks: different sets)", "tasks ranked"]
              + [f"{t} rank" for t in tasks] + [f"{t} fitted" for t in tasks])
    out += ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    own = rk.get("own") or {}
    for lab, mrr, _ in rk["order"]:
        om, on = own.get(lab, (math.nan, 0))
        cells = [lab, "-" if not math.isfinite(mrr) else f"{mrr:.2f}", "-" if not math.isfinite(om) else f"{om:.2f}",
                 str(on)]
        cells += [str(rk["per_task"][t]["rank"].get(lab, "-")) + (" (alone)" if t in alone
                  and lab in rk["per_task"][t]["rank"] else "")
                  + (f" {BORDERLINE_MARK}" if (t, lab) in near["rank"] else "") for t in tasks]
        cells += ["{}/{}".format(*rk["fitted"].get((t, lab), (0, 0))) for t in tasks]
        out.append("| " + " | ".join(cells) + " |")
    common = rk.get("common") or []
    out += ["", "MRR (common tasks): the mean reciprocal rank over " + (", ".join(common) or "no task")
            + ", the compared tasks on which every scheme with this MRR is ranked (the largest such block of the "
            "table): like with like, the overall order. MRR (own tasks): over the compared tasks each scheme is "
            "ranked on, which differ from scheme to scheme; shown for reference, not an order."]
    if alone:
        out += ["", f"Ranked alone (every other scheme fitted fewer than {MIN_SEEDS} seeds), so left out of the "
                "MRR: " + ", ".join(alone) + "."]
    if rk.get("at_chance"):
        out += ["", "At chance at 2L (the best scheme's interval reaches the chance level, so every rank there is "
                "among guesses), so left out of both MRRs, ranks shown: " + ", ".join(rk["at_chance"]) + "."]
    out += ["", f"Borderline decisions (`{BORDERLINE_MARK}`: an interval bound within {BORDERLINE} of 0, against "
            f"the best or against a scheme with a better score; decided a tie): {near['n']} of {near['of']} intervals."]
    out += ["", "Difference from the best scheme of each task (score of the row minus the best's; "
            f"{CONFIDENCE:.0%} interval; `tie`: it contains 0 or a bound is within {BORDERLINE} of 0, "
            f"`{BORDERLINE_MARK}`: "
            "the latter, a borderline decision):", ""]
    header = ["scheme"] + [f"{t} (best: {rk['per_task'][t]['best'] or '-'})" for t in tasks]
    out += ["| " + " | ".join(header) + " |", "|---|" + "---|" * len(tasks)]
    for lab, _, _ in rk["order"]:
        cells = [lab]
        for t in tasks:
            pt = rk["per_task"][t]
            d = 3 if t == "lm" else 2  # LM ratios differ in the third digit
            if lab == pt["best"]:
                cells.append(f"best ({pt['scores'][lab]:.{d}f})")
            elif lab in pt["vs_best"]:
                cells.append(_iv(pt["vs_best"][lab], d))
            else:
                k, n = rk["fitted"].get((t, lab), (0, 0))
                cells.append("-" if not n else f"not ranked ({k}/{n} fitted)" if k < MIN_SEEDS
                             else f"not ranked ({_no_score(results, t, lab)})")
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "Scores: " + "; ".join(_score_name(t) for t in tasks) + ". " + INTERVALS_NOTE
            + ("" if rk["per_example"] else " These results carry no per-example scores (made before protocol 3): "
               "the intervals resample seeds only."), ""]
    if any(rk["variants"].values()):
        vt = [t for t in tasks if rk["variants"].get(t)]
        labs = sorted({lab for t in vt for lab in rk["variants"][t]})
        out += ["### RoPE scalings and randomized positions against plain RoPE", "",
                "Each row minus plain `rope` on the same seeds (same score and interval as above; not part of "
                "the ranking):", "", "| view | " + " | ".join(vt) + " |", "|---|" + "---|" * len(vt)]
        for lab in labs:
            cells = [lab]
            for t in vt:
                iv, n = rk["variants"][t].get(lab, (None, 0))
                cells.append(_iv(iv, 3 if t == "lm" else 2) if iv is not None
                             else ("-" if not n else f"{n} seed(s): not compared"))
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def tries_markdown(results: dict | ResultsModel) -> str:
    """Every learning-rate try of every job: per task and scheme, each rate's fitted tries, mean validation
    score and how often it was kept."""
    results = results_of(results)
    runs = [r for r in results["runs"] if r.get("variant") in (None, "randomized")]
    rows: dict = defaultdict(lambda: defaultdict(list))  # (task, label) -> lr -> [try]
    for r in runs:
        fit = (r.get("train") or {}).get("fit") or {}
        for t in fit.get("lr_tries") or []:
            # records from before protocol 3 name the kept rate only in the fit record
            rows[(r["task"], r["label"])][t["lr"]].append({**t, "chosen": t.get("chosen", t["lr"] == fit.get("lr"))})
    if not rows:
        return ""
    out = ["## Learning-rate tries", "",
           "Every job trains at every rate of its task's grid (the same for every scheme) and keeps the try with "
           "the best validation score at L (fitted first); the test set is read only afterwards. A cell: "
           "fitted tries / tries, the mean validation score (exact match at L, or minus the validation loss for "
           "language modelling), and `kept` xN where that rate was chosen.", ""]
    for task in sorted({t for t, _ in rows}, key=lambda t: (t != "lm", t)):
        lrs = sorted({lr for (t, _), d in rows.items() if t == task for lr in d})
        out += [f"**{task}**", "", "| scheme | " + " | ".join(f"{lr:g}" for lr in lrs) + " |",
                "|---|" + "---|" * len(lrs)]
        for (t, lab), d in sorted(rows.items()):
            if t != task:
                continue
            cells = [lab]
            for lr in lrs:
                ts = d.get(lr, [])
                if not ts:
                    cells.append("-")
                    continue
                sc = [x["score"] for x in ts if isinstance(x.get("score"), (int, float))]
                kept = sum(bool(x.get("chosen")) for x in ts)
                cells.append(f"{sum(bool(x.get('fitted')) for x in ts)}/{len(ts)}"
                             + (f", {statistics.fmean(sc):.2f}" if sc else "") + (f", kept x{kept}" if kept else ""))
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)
