"""The published findings ``docs/results.md`` tests, each as a rule on a results document.

Press et al. 2022 (ALiBi, https://arxiv.org/abs/2108.12409), Kazemnejad et al. 2023 (NoPE,
https://arxiv.org/abs/2305.19466), Ruoss et al. 2023 (randomized positions, https://arxiv.org/abs/2305.16843)
and Deletang et al. 2023 (the Chomsky hierarchy, https://arxiv.org/abs/2207.02098). Each claim is stated, the
rule that tests it on our data is stated (which score, which threshold: the named constants below), and the
rule returns "holds", "does not hold" or "not testable here" with the numbers and intervals it read, and the
scale it was tested at beside the paper's (:func:`scale_here`, :data:`PAPER_SCALE`).

Not testable here: the claim's own tasks lack :data:`~relpos.report.stats.MIN_SEEDS` fitted seeds on both
sides of a comparison, or fewer than :data:`MIN_TASKS` tasks compare (claims about algorithmic tasks in
general). A task where the reference scheme is at chance (parity: :func:`at_chance`) is never evidence for or
against an improvement. A sub-claim compares like with like: the same tasks on both sides.

Every number comes from the results by the same machinery as the ranking (:mod:`relpos.report.ranking`):
fitted rows only (:func:`~relpos.compare.fitting.fitted_views`), the same per-seed scores
(:func:`~relpos.report.ranking.seed_inputs`), paired bootstrap intervals over seeds and test examples
(:func:`~relpos.report.stats.paired_bootstrap`), a tie when an interval does not clear 0 by more than
:data:`~relpos.report.stats.BORDERLINE`, and no row with fewer
than :data:`~relpos.report.stats.MIN_SEEDS` fitted seeds in any comparison.

The old page's verdict table (protocol 2) against the new results: :mod:`relpos.report.claim_changes`.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

import numpy as np

from relpos.report.claim_scale import PAPER_SCALE, scale_here
from relpos.compare.fitting import metric_at
from relpos.report.model import ResultsModel, as_model
from relpos.report.ranking import BORDERLINE_MARK, CHANCE, N_BOOT_REPORT, PARITY_CHANCE, chance_reached
from relpos.report.stats import BORDERLINE, MIN_SEEDS, Interval, decided_bootstrap, paired_bootstrap
from relpos.report.verdict import HOLD_ACC, HOLD_RATIO

__all__ = ["Claim", "Finding", "CLAIMS", "press", "kazemnejad", "ruoss", "deletang", "findings", "HOLDS", "FAILS", "NOT_TESTABLE", "UNMEASURED", "PARITY_CHANCE", "CHANCE",
           "MIN_TASKS", "PAPER_SCALE", "at_chance", "scale_here"]

HOLDS, FAILS, NOT_TESTABLE = "holds", "does not hold", "not testable here"
UNMEASURED = NOT_TESTABLE  # the third outcome's older name
#: A claim about algorithmic tasks in general is tested on at least this many tasks (fewer: not testable here).
MIN_TASKS = 3

#: Press et al.: a language model "stays flat" when its far-position ratio at the longest length is at most
#: the verdict's threshold (:data:`relpos.report.verdict.HOLD_RATIO`, 1.05: at most 5 % more loss far away).
FLAT_RATIO = HOLD_RATIO
#: Deletang et al.: a scheme "generalises" on a task when its exact match at 2L keeps at least this fraction of
#: its exact match at L (the verdict's held rule, :data:`relpos.report.verdict.HOLD_ACC`, 0.9).
GENERALISES = HOLD_ACC
#: Kazemnejad et al. and Ruoss et al. are claims about the algorithmic tasks: every task but these.
NOT_ALGORITHMIC = ("lm", "passkey")
@dataclasses.dataclass(frozen=True)
class Claim:
    key: str
    who: str
    url: str
    claim: str
    rule: str


@dataclasses.dataclass
class Finding:
    claim: Claim
    verdict: str  # HOLDS | FAILS | NOT_TESTABLE
    evidence: list[str]
    numbers: dict = dataclasses.field(default_factory=dict)  # what the evidence lines quote, for tables
    scale: str = ""  # the scale tested here beside the paper's


CLAIMS = {
    "press": Claim(
        "press", "Press et al. 2022 (ALiBi)", "https://arxiv.org/abs/2108.12409",
        "ALiBi's language-modelling loss stays flat past the training length, while sinusoidal and RoPE degrade.",
        f"on language modelling, ALiBi's mean far-position ratio at the longest length is <= {FLAT_RATIO}, and "
        f"sinusoidal's and RoPE's are each > {FLAT_RATIO} with a paired difference from ALiBi whose interval "
        f"lies above {BORDERLINE}."),
    "kazemnejad": Claim(
        "kazemnejad", "Kazemnejad et al. 2023 (NoPE)", "https://arxiv.org/abs/2305.19466",
        "Without position encoding (NoPE) a decoder length-generalises on algorithmic tasks at least as well as "
        "with the explicit schemes; T5's relative bias comes second.",
        f"on every algorithmic task where NoPE and another scheme are ranked ({MIN_SEEDS} fitted seeds each) and "
        "the task's best scheme is above chance, NoPE has rank 1 (no scheme's paired interval against it excludes "
        "0 in that scheme's favour); and T5's mean reciprocal rank is at least every other scheme's over the same "
        "tasks (those of these on which T5 and every scheme it is compared with are ranked). Not testable with "
        f"fewer than {MIN_TASKS} such tasks."),
    "ruoss": Claim(
        "ruoss", "Ruoss et al. 2023 (randomized positions)", "https://arxiv.org/abs/2305.16843",
        "Training with randomized positions improves length generalisation on algorithmic tasks over the same "
        "scheme trained without them.",
        "per algorithmic task, the randomized model evaluated as trained (sampled positions, `X+rand-sampled`) "
        "minus plain `X` on the same seeds (per-token accuracy at 2L): an improvement when the interval lies "
        f"above {BORDERLINE}. A task compares when both share {MIN_SEEDS} fitted seeds and plain `X` is above "
        "chance there. "
        f"The claim holds when it improves on more than half of the tasks compared; not testable with fewer "
        f"than {MIN_TASKS}."),
    "deletang": Claim(
        "deletang", "Deletang et al. 2023 (Neural Networks and the Chomsky Hierarchy)",
        "https://arxiv.org/abs/2207.02098",
        "No position encoding lets a Transformer generalise in length on parity (a task above its place in the "
        "hierarchy), nor on string duplication (copy) and reversal.",
        f"a scheme generalises on a task when its mean exact match at 2L is >= {GENERALISES:.0%} of its exact "
        f"match at L (fitted seeds, at least {MIN_SEEDS}); the claim holds when no scheme generalises on parity, "
        "copy or reverse, and is not testable unless each of the three has at least two schemes so scored. "
        f"Chance on parity is {PARITY_CHANCE} (balanced labels)."),
}


# ------------------------------------------------------------------ shared reading of the results


def _base(results: dict) -> set[str]:
    return set((results.get("config") or {}).get("schemes") or []) or {r["scheme"] for r in results["runs"]}


def _model(results: dict | ResultsModel | None) -> tuple[ResultsModel | None, dict | None]:
    """``(model, results document)`` of a claim rule's argument; ``(None, results)`` for no results."""
    if results is None or isinstance(results, dict) and not results:
        return None, results
    model = as_model(results)
    return model, model.results


def seeds_of(results: dict | ResultsModel, task: str, lab: str) -> dict[int, dict]:
    """seed -> ranking inputs of the fitted rows of one label on one task (the ranking's per-seed scores, kept
    in the model; a learned table read past its trained rows has none)."""
    return as_model(results).seeds(task, lab)


def _stat(task: str):
    return (lambda m: m["far"] / m["base"]) if task == "lm" else None


def score(task: str, inp: dict) -> float:
    """One seed's ranking score: the LM far-position ratio, or the mean per-token accuracy at 2L."""
    if task == "lm":
        return float(np.mean(inp["far"]) / np.mean(inp["base"]))
    return float(np.mean(inp["v"]))


def diff(results: dict | ResultsModel, task: str, a: str, b: str, seed: int = 0) -> tuple[Interval | None, int]:
    """Paired bootstrap interval of ``a - b`` on one task over the seeds both fitted (None below MIN_SEEDS;
    ``seed``: the bootstrap's); kept in the model, so each is computed once."""
    model = as_model(results)
    return model.interval(("diff", task, a, b, seed), lambda: _diff(model, task, a, b, seed))


def _diff(results: ResultsModel, task: str, a: str, b: str, seed: int) -> tuple[Interval | None, int]:
    sa, sb = seeds_of(results, task, a), seeds_of(results, task, b)
    common = sorted(set(sa) & set(sb))
    if len(common) < MIN_SEEDS:
        return None, len(common)
    try:
        return decided_bootstrap([sa[s] for s in common], [sb[s] for s in common], _stat(task),
                                 n_boot=N_BOOT_REPORT, seed=seed), len(common)
    except ValueError:
        return None, len(common)


def value(results: dict | ResultsModel, task: str, lab: str, seed: int = 0) -> tuple[Interval | None, int]:
    """One label's own score with a bootstrap interval (over its fitted seeds and test examples), by pairing
    it with a constant: windows of loss 1 at both lengths (a ratio of 1), or accuracies of 0. Kept in the
    model, so each is computed once."""
    model = as_model(results)
    return model.interval(("value", task, lab, seed), lambda: _value(model, task, lab, seed))


def _value(results: ResultsModel, task: str, lab: str, seed: int) -> tuple[Interval | None, int]:
    s = seeds_of(results, task, lab)
    if len(s) < MIN_SEEDS:
        return (Interval(statistics.fmean(score(task, v) for v in s.values()), math.nan, math.nan)
                if s else None), len(s)
    a = [s[k] for k in sorted(s)]
    if task == "lm":
        ref = [{k: np.ones(np.shape(v[k])) for k in ("far", "base")} for v in a]
        iv = paired_bootstrap(a, ref, _stat(task), n_boot=N_BOOT_REPORT, seed=seed)
        return Interval(iv.est + 1, iv.lo + 1, iv.hi + 1), len(s)
    ref = [{"v": np.zeros_like(np.asarray(v["v"], dtype=float))} for v in a]
    return paired_bootstrap(a, ref, None, n_boot=N_BOOT_REPORT, seed=seed), len(s)


def fmt_iv(iv: Interval | None, d: int = 2, sign: bool = False) -> str:
    if iv is None:
        return "-"
    f = f"{{:{'+' if sign else ''}.{d}f}}"
    if not math.isfinite(iv.lo):
        return f.format(iv.est) + " (one seed: no interval)"
    near = f" {BORDERLINE_MARK}" if sign and iv.borderline else ""  # a difference whose bound is near 0
    return f"{f.format(iv.est)} [{f.format(iv.lo)}, {f.format(iv.hi)}]{near}"


def _algo_tasks(rk: dict) -> list[str]:
    return [t for t in rk["tasks"] if t not in NOT_ALGORITHMIC]


def _accuracy(results: dict | ResultsModel, task: str, lab: str, n_of_L: float) -> tuple[float, int]:
    """Mean exact match over fitted seeds at ``n_of_L`` x L, and the number of those seeds."""
    xs = []
    model = as_model(results)
    for r, ok in zip(model.results["runs"], model.fitted):
        if ok and r["task"] == task and r["label"] == lab:
            v = metric_at(r, int(round(n_of_L * r["train_len"])), "accuracy")
            if v is not None:
                xs.append(v)
    return (statistics.fmean(xs) if xs else math.nan), len(xs)


def at_chance(results: dict | ResultsModel, task: str, lab: str, seed: int = 0) -> bool:
    """Whether ``lab``'s score at 2L on ``task`` is at chance: its interval (:func:`value`, kept in the model)
    reaches the chance level (:func:`relpos.report.ranking.chance_reached`, the ranking's rule). False on a task
    without a chance level or where ``lab`` has no fitted seed."""
    if task not in CHANCE:
        return False
    iv, _ = value(results, task, lab, seed=seed)
    return iv is not None and chance_reached(task, iv)


# ------------------------------------------------------------------ the four claims


def press(results: dict | ResultsModel | None, seed: int = 0) -> Finding:
    c = CLAIMS["press"]
    model, results = _model(results)
    if not results or not any(r["task"] == "lm" for r in results["runs"]):
        return Finding(c, NOT_TESTABLE, ["no language-modelling runs in these results."],
                       scale=f"Scale: the paper: {PAPER_SCALE['press']}.")
    scale = scale_here(model, ("lm",), "press")
    need = ("alibi", "sinusoidal", "rope")
    vals = {s: value(model, "lm", s, seed) for s in need}
    short = [f"{s} ({n} fitted seed{'s' if n != 1 else ''})" for s, (_, n) in vals.items() if n < MIN_SEEDS]
    if short:
        return Finding(c, NOT_TESTABLE, [f"needs {MIN_SEEDS} fitted seeds of each of ALiBi, sinusoidal and RoPE; "
                                         f"short: {', '.join(short)}."]
                       + [f"far-position ratio {s}: {fmt_iv(iv)}" for s, (iv, _) in vals.items() if iv], scale=scale)
    alibi = vals["alibi"][0]
    nums = {"alibi": alibi}
    ev = [f"ALiBi's far-position ratio {fmt_iv(alibi)} ({vals['alibi'][1]} seeds): "
          + ("flat" if alibi.est <= FLAT_RATIO else "not flat") + f" (<= {FLAT_RATIO})."]
    ok = alibi.est <= FLAT_RATIO
    for s in ("sinusoidal", "rope"):
        iv, n = vals[s]
        d, shared = diff(model, "lm", s, "alibi", seed)
        worse = iv.est > FLAT_RATIO and d is not None and d.above
        ok &= worse
        nums[s], nums[f"{s}-alibi"] = iv, d
        ev.append(f"{s}: {fmt_iv(iv)}; minus ALiBi {fmt_iv(d, 3, sign=True)} ({shared} seeds shared): "
                  + ("degrades, and more than ALiBi." if worse else "not compared (fewer than "
                     f"{MIN_SEEDS} seeds shared with ALiBi)." if d is None
                     else "does not degrade beyond ALiBi by this rule."))
    fails = not alibi.est <= FLAT_RATIO or any(nums[f"{x}-alibi"] is not None and not (nums[x].est > FLAT_RATIO
                                                   and nums[f"{x}-alibi"].above) for x in ("sinusoidal", "rope"))
    verdict = FAILS if fails else HOLDS if ok else NOT_TESTABLE
    return Finding(c, verdict, ev, nums, scale=scale)


def _ranked_on(rk: dict, t: str, lab: str) -> bool:
    return lab in rk["per_task"][t]["rank"]


def kazemnejad(results: dict | ResultsModel | None, rk: dict | None, seed: int = 0,
               longer: dict | None = None) -> Finding:
    """``longer``: task -> results of the runs on twice the budget; on a task where NoPE is not ranked but fits
    there, its evidence says how NoPE compares with the schemes that ran there, without counting it."""
    c = CLAIMS["kazemnejad"]
    model, results = _model(results)
    tasks = [t for t in _algo_tasks(rk) if t in rk["compared"]] if rk else []
    # a task counts when NoPE and another scheme are ranked there (both sides fitted) and its best is above
    # chance (a tie at chance says nothing about generalising)
    chance = [t for t in tasks if t in rk["at_chance"]]  # the ranking's rule: the best's interval reaches chance
    own = [t for t in tasks if _ranked_on(rk, t, "nope") and t not in chance]
    scale = scale_here(model, own or _algo_tasks(rk) if rk else (), "kazemnejad") if results else \
        f"Scale: the paper: {PAPER_SCALE['kazemnejad']}."
    fits = [f"{t} {k}/{n}" for t in (_algo_tasks(rk) if rk else []) for k, n in [rk["fitted"].get((t, "nope"), (0, 0))]
            if n]
    ev = []
    if chance:
        ev.append(f"at chance (the best scheme's interval reaches chance), so no evidence either way: "
                  f"{', '.join(chance)}.")
    for t in own:
        pt = rk["per_task"][t]
        r = pt["rank"]["nope"]
        iv = pt["vs_best"].get("nope")
        where = "best" if pt["best"] == "nope" else f"minus the best ({pt['best']}) {fmt_iv(iv, 2, sign=True)}"
        ev.append(f"{t}: NoPE rank {r} ({where}; per-token accuracy at 2L {pt['scores']['nope']:.2f}).")
    for t in (_algo_tasks(rk) if rk else []):
        if t not in own and t not in chance:
            more = _on_twice_the_budget(longer, t, "nope", None, seed, note=", and only the schemes that did not fit "
                                        "the ranked budget ran there")
            ev += [more] if more else []
    if len(own) < MIN_TASKS:
        ev.append(f"NoPE is compared on {len(own)} algorithmic task(s) above chance ({', '.join(own) or 'none'}), "
                  f"fewer than {MIN_TASKS}" + (f"; its fitted seeds: {', '.join(fits)}" if fits else "")
                  + ". It did not learn the others at L within the budget at any rate of the grid: a finding about "
                  "trainability at this size, not about length generalisation.")
        return Finding(c, NOT_TESTABLE, ev, scale=scale)
    nope_ok = all(rk["per_task"][t]["rank"]["nope"] == 1 for t in own)
    if not nope_ok:
        return Finding(c, FAILS, ev + ["NoPE is behind the best on at least one task: the first part fails."],
                       scale=scale)
    # T5 second, like with like: the tasks of these on which T5 is ranked, the schemes ranked on all of them
    t5 = [t for t in own if _ranked_on(rk, t, "t5")]
    others = sorted({lab for t in t5 for lab in rk["per_task"][t]["rank"]} - {"nope", "t5"})
    peers = [lab for lab in others if all(_ranked_on(rk, t, lab) for t in t5)]
    if len(t5) < MIN_TASKS or not peers:
        ev.append(f"NoPE has rank 1 on every task compared; T5 is ranked on {len(t5)} of them"
                  + ("" if peers else " with no other scheme ranked on all of them")
                  + f": its place is not testable (fewer than {MIN_TASKS} tasks, or no scheme to compare).")
        return Finding(c, NOT_TESTABLE, ev, scale=scale)
    mrr = {lab: statistics.fmean(1 / rk["per_task"][t]["rank"][lab] for t in t5) for lab in ["t5", *peers]}
    top = max(mrr.values())
    leaders = sorted(lab for lab, m in mrr.items() if m >= top - 1e-12)
    ev.append(f"mean reciprocal rank over the same {len(t5)} tasks ({', '.join(t5)}): T5 {mrr['t5']:.2f}, the best of "
              f"the {len(peers)} other scheme(s) ranked on all of them {max(mrr[p] for p in peers):.2f} "
              f"({', '.join(lab for lab in leaders if lab != 't5') or 'below T5'}).")
    return Finding(c, HOLDS if mrr["t5"] >= top - 1e-12 else FAILS, ev, scale=scale)


def _on_twice_the_budget(longer: dict | None, t: str, a: str, bs: list[str] | None, seed: int,
                         note: str = "") -> str | None:
    """``a`` minus each of ``bs`` (None: every base scheme there but ``a``) on ``t`` in the runs on twice the budget
    (``longer``: task -> their results), where the ranked runs could not compare them: never counted (another
    budget), only said; None where nothing compares there either."""
    res = (longer or {}).get(t)
    if not res or not res.get("runs"):
        return None
    model = as_model(res)  # once: its fit gates, seeds and intervals are kept for every comparison below
    if bs is None:
        bs = sorted({r["label"] for r in res["runs"] if r.get("variant") is None and r["task"] == t} - {a})
    parts = []
    for b in bs:
        d, n = diff(model, t, a, b, seed)
        if d is None or at_chance(model, t, b, seed):
            continue
        word = "better" if d.above else ("worse" if d.below else "tie")
        parts.append(f"{a} minus {b} {fmt_iv(d, 2, sign=True)} ({word}; {n} seeds both fitted there)")
    return (f"{t} on twice the budget (not ranked, not counted: another budget{note}): " + "; ".join(parts) + "."
            if parts else None)


def ruoss(results: dict | ResultsModel | None, rk: dict | None, seed: int = 0, longer: dict | None = None) -> Finding:
    """``longer``: task -> results of the runs on twice the budget; where a task does not compare in the ranked
    runs but does there, its evidence says so, without counting it."""
    c = CLAIMS["ruoss"]
    model, results = _model(results)
    rand = list((results or {}).get("config", {}).get("randomized") or [])
    if not results or not rand:
        return Finding(c, NOT_TESTABLE, ["no scheme was trained with randomized positions in these results."],
                       scale=f"Scale: the paper: {PAPER_SCALE['ruoss']}.")
    tasks = _algo_tasks(rk) if rk else []
    ev, better, compared, used = [], 0, 0, set()
    for s in rand:
        for t in tasks:
            d, n = diff(model, t, f"{s}+rand-sampled", s, seed)
            if d is None:
                fr = {lab: "{}/{}".format(*rk["fitted"].get((t, lab), (0, 0))) for lab in (f"{s}+rand-sampled", s)}
                ev.append(f"{t}: {s}+rand-sampled and {s} share {n} fitted seed{'s' if n != 1 else ''}: not "
                          f"compared ({s}+rand-sampled fitted {fr[s + '+rand-sampled']}, {s} {fr[s]}).")
                ev += [x for x in [_on_twice_the_budget(longer, t, f"{s}+rand-sampled", [s], seed)] if x]
                continue
            if at_chance(model, t, s, seed):
                ev.append(f"{t}: plain {s} is at chance ({CHANCE[t]}), so an improvement there is no evidence "
                          f"either way: not compared ({s}+rand-sampled minus {s} {fmt_iv(d, 2, sign=True)}).")
                continue
            d0, _ = diff(model, t, f"{s}+rand", s, seed)
            compared += 1
            used.add(t)
            better += d.above
            word = "better" if d.above else ("worse" if d.below else "tie")
            ev.append(f"{t}: {s}+rand-sampled minus {s} {fmt_iv(d, 2, sign=True)} ({word}); at positions 0..N-1 "
                      f"({s}+rand) {fmt_iv(d0, 2, sign=True) if d0 else 'not compared'}.")
    scale = scale_here(model, used or tasks, "ruoss")
    if compared < MIN_TASKS:
        ev.append(f"{compared} task(s) compared, fewer than {MIN_TASKS}: not testable at this size and budget.")
        return Finding(c, NOT_TESTABLE, ev, scale=scale)
    ev.append(f"better on {better} of {compared} task(s) compared.")
    return Finding(c, HOLDS if better * 2 > compared else FAILS, ev, scale=scale)


def deletang(results: dict | ResultsModel | None) -> Finding:
    c = CLAIMS["deletang"]
    model, results = _model(results)
    own = ("parity", "copy", "reverse")
    present = {r["task"] for r in (results or {}).get("runs", [])}
    ev, tested, gen_any = [], 0, False
    for t in own:
        if t not in present:
            ev.append(f"{t}: not in these results.")
            continue
        gen, scored, best = [], 0, None
        for lab in sorted({r["label"] for r in results["runs"] if r["task"] == t}):  # scalings are encodings too
            at_L, n = _accuracy(model, t, lab, 1.0)
            at_2L, n2 = _accuracy(model, t, lab, 2.0)
            if min(n, n2) < MIN_SEEDS or not math.isfinite(at_L):
                continue
            scored += 1
            if at_2L >= GENERALISES * at_L:
                gen.append(f"{lab} {at_2L:.2f}")
            if best is None or at_2L > best[1]:
                best = (lab, at_2L)
        if scored < 2:
            ev.append(f"{t}: {scored} scheme(s) with {MIN_SEEDS} fitted seeds: not tested.")
            continue
        tested += 1
        gen_any |= bool(gen)
        iv, _ = value(model, t, best[0])
        top = (f"best exact match at 2L {best[0]} {best[1]:.2f} (its per-token accuracy {fmt_iv(iv)})"
               if best[1] > 0 else "every one scores 0.00 exact match at 2L")
        ev.append(f"{t}: {scored} scheme(s) scored; " + (f"generalise: {', '.join(gen)}" if gen else "none generalises")
                  + f"; {top}" + (f"; chance {PARITY_CHANCE}." if t == "parity" else "."))
    scale = scale_here(model, own, "deletang") if results else f"Scale: the paper: {PAPER_SCALE['deletang']}."
    if gen_any:  # one scheme that generalises contradicts the claim, whatever the other tasks show
        return Finding(c, FAILS, ev, scale=scale)
    if tested < len(own):
        ev.append(f"{tested} of its {len(own)} tasks tested: not testable as a whole.")
        return Finding(c, NOT_TESTABLE, ev, scale=scale)
    return Finding(c, HOLDS, ev, scale=scale)


def findings(results: dict | ResultsModel | None, rk: dict | None, seed: int = 0,
             longer: dict | None = None) -> list[Finding]:
    results = _model(results)[0] or results  # one model for the four rules
    return [press(results, seed), kazemnejad(results, rk, seed, longer), ruoss(results, rk, seed, longer),
            deletang(results)]


def lm_press_cells(cells: dict[str, dict]) -> list[tuple[str, Finding]]:
    """Press et al.'s rule on each scale cell (three seeds each): does the claim hold at every size?"""
    return [(name, press(res)) for name, res in cells.items()]
