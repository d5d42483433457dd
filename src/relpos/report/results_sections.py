"""Sections of the results page (:mod:`relpos.report.results_page`) that read the run folders' bookkeeping
rather than the rankings: the scale check, the time each preset took (from the stores shipped beside the page)
and what is missing."""

from __future__ import annotations

import math

from relpos.compare.presets import preset_tasks
from relpos.report import results_claims as claims
from relpos.report.fit_curves import awaiting_longer, longer_pending
from relpos.report.model import ResultsModel
from relpos.report.results_inputs import PageInputs
from relpos.report.stats import CONFIDENCE, MIN_SEEDS

__all__ = ["SCALE_HOLDS_RHO"]

#: The scale check calls the ranking "held" between two sizes when the lower end of the interval of Spearman's
#: rho is above this (a rank correlation that is clearly positive: most pairs of schemes keep their order).
SCALE_HOLDS_RHO = 0.5


#: What the time table says for results whose store does not ship beside the page.
_NO_STORE = "store not shipped: CPU time not recorded"


def _n(x: float) -> str:
    return f"{x:,}"


def _partial_cells(inp: PageInputs) -> list[str]:
    out = []
    for name, res in inp.scale_cells.items():
        want = len(res["config"].get("schemes") or []) * len(res["config"].get("seeds") or [])
        have = len([r for r in res["runs"] if not r.get("variant")])
        if have < want:
            out.append(f"{name} has {have} of its {want} runs")
    return out


def _scale(inp: PageInputs) -> list[str]:
    s = inp.scale_summary
    if not s:
        return ["No scale-check results yet (`relpos compare --preset scale`)."]
    from relpos.compare.scale import scale_markdown

    from relpos.compare.scale import cells as all_cells

    body = scale_markdown(s).split("\n", 2)[2].splitlines()  # without its title
    part = _partial_cells(inp)
    out = [f"Cells with results: {len(s['cells'])} of {len(all_cells())}" + (f" ({'; '.join(part)})" if part else "")
           + "." + ("" if s.get("complete") and not part else " The check is not complete: read it as provisional."),
           ""]
    for r in s["rho"]:
        if "error" in r:
            out.append(f"- L = {r['train_len']}, d{r['a']} against d{r['b']}: {r['error']}")
            continue
        held = math.isfinite(r["lo"]) and r["lo"] > SCALE_HOLDS_RHO
        mv = ", ".join(f"{k} {a}->{b}" for k, (a, b) in sorted(r["moved"].items())) or "none"
        out.append(f"- L = {r['train_len']}, d{r['a']} against d{r['b']} ({r['schemes']} schemes): rho {r['rho']:.2f} "
                   f"[{r['lo']:.2f}, {r['hi']:.2f}]: the order "
                   + ("holds" if held else "is not shown to hold") + f" (lower end {'>' if held else '<='} "
                   f"{SCALE_HOLDS_RHO}); moved by >= 2 places: {mv}.")
    press = claims.lm_press_cells(inp.scale_cells)
    if press:
        f = claims.fmt_iv
        out += ["", "Press et al.'s language-modelling claim in each cell, by the rule under [Comparison with the "
                "published findings](#comparison-with-the-published-findings) (far-position ratio at 8x, "
                f"{CONFIDENCE:.0%} intervals):", "",
                "| cell | ALiBi | sinusoidal minus ALiBi | RoPE minus ALiBi | claim |", "|---|---|---|---|---|"]
        out += [f"| {n} | {f(x.numbers.get('alibi'))} | {f(x.numbers.get('sinusoidal-alibi'), 3, True)} | "
                f"{f(x.numbers.get('rope-alibi'), 3, True)} | {x.verdict} |" for n, x in press]
    return out + [""] + body + [""]


def _time(inp: PageInputs) -> list[str]:
    rows = []
    for name in ("default", "full"):
        t = inp.times.get(name)
        res = getattr(inp, name)
        if res is None:
            rows.append(f"| {name} | - | - | - | no results |")
        elif t is None:
            rows.append(f"| {name} | {len(res['runs'])} | - | - | {_NO_STORE} |")
        else:
            sp = t.get("wall_seconds")  # a times.json of before 2026-12-04 has only a first-to-last span: not shown
            per = ", ".join(f"{k} {v['cpu_seconds'] / 3600:.2f} ({v['jobs']} job{'s' if v['jobs'] != 1 else ''})"
                            for k, v in (t.get("by_task") or {}).items())
            rows.append(f"| {name} (`{t['fingerprint']}`) | {t['jobs']} | {t['cpu_seconds'] / 3600:.2f} | "
                        + ("-" if sp is None else f"{sp / 60:.1f} min" if sp < 7200 else f"{sp / 3600:.1f} h")
                        + f" | {per} |")
    sc = {k: v for k, v in inp.times.items() if k.startswith("scale/")}
    if sc:
        tot = sum(v["cpu_seconds"] or 0 for v in sc.values())
        rows.append(f"| scale ({len(sc)} of 6 cells) | {sum(v['jobs'] for v in sc.values())} | {tot / 3600:.2f} | - | "
                    + ", ".join(f"{k[6:]} {v['cpu_seconds'] / 3600:.2f}" for k, v in sc.items()) + " |")
    elif inp.scale_cells:
        rows.append(f"| scale ({len(inp.scale_cells)} of 6 cells) | "
                    f"{sum(len(r['runs']) for r in inp.scale_cells.values())} | - | - | {_NO_STORE} |")
    else:
        rows.append("| scale | - | - | - | no results |")
    for task, res in sorted(inp.longer.items()):  # the unfitted schemes on twice the budget (not ranked)
        t = inp.times.get(f"longer/{task}")
        jobs = sum(r.get("variant") in (None, "randomized") for r in res["runs"])  # trained, not a view of one
        rows.append(f"| {task} on twice the budget, not ranked | {jobs} | " + (
            f"{t['cpu_seconds'] / 3600:.2f} | - | `{t['fingerprint']}` |" if t else f"- | - | {_NO_STORE} |"))
    return ["Process CPU time of every job (each training try and its evaluation), summed from the store that "
            "ships beside this page (`full/results.sqlite` for the full preset; `cpu_seconds`, recorded in "
            "`times.json`); results whose store was not shipped show no time: none is typed in. Wall: the hours "
            "during which at least one job ran (the union of the "
            "jobs' own intervals, each from its end back over every training try and its evaluation; the gaps "
            "between working sessions are left out, and a job copied by `--reuse` counts when it was trained).", "",
            "| preset | jobs | CPU-hours | wall | per task or cell (CPU-hours) |", "|---|---:|---:|---:|---|", *rows, ""]


def _missing(inp: PageInputs, models: dict[str, ResultsModel | None]) -> list[str]:
    out = []
    for name in ("full", "default"):
        res = getattr(inp, name)
        if res is None:
            out.append(f"- the `{name}` preset: no results.")
            continue
        want = set(res["config"].get("tasks") or []) | preset_tasks(res["config"].get("preset"))
        have = {r["task"] for r in res["runs"]}
        if want - have:
            out.append(f"- `{name}`: tasks without results yet: {', '.join(sorted(want - have))}.")
        pairs = len(res["config"].get("schemes") or []) * len(res["config"].get("seeds") or [])
        for t in sorted(have):
            got = len({(r["scheme"], r["seed"]) for r in res["runs"] if r["task"] == t and not r.get("variant")})
            if got < pairs:
                out.append(f"- `{name}`: {t} has {got} of its {pairs} scheme-seed runs; the rest are not run yet, "
                           "so its ranks and intervals are provisional.")
        seeds = res["config"].get("seeds") or []
        if len(seeds) < MIN_SEEDS:
            out.append(f"- `{name}`: {len(seeds)} seed(s): nothing in it is ranked or has an interval.")
        elif len(seeds) < 3:
            out.append(f"- `{name}`: {len(seeds)} seeds, fewer than the three the protocol asks for.")
        before: dict = {}
        for r in res["runs"]:
            vb = ((r.get("train") or {}).get("fit") or {}).get("validated_before")
            if vb and r.get("variant") in (None, "randomized"):
                before.setdefault((r["task"], vb.get("fingerprint"), "; ".join(vb.get("differs") or [])), []).append(r)
        for (t, fp, diff), rs in sorted(before.items()):
            out.append(f"- `{name}`: {len(rs)} {t} run(s) copied from a folder of fingerprint `{fp}` keep the "
                       f"validation they were trained with there, not this preset's ({diff}).")
        if name == "full":
            for t, labs in awaiting_longer(res, inp.longer or None).items():
                out.append(f"- `full`: {t}: the curves of {', '.join(labs)} stop before twice the fitted runs' gate "
                           "step, and their runs on twice the budget (`benchmarks/protocol3_longer.py`) are not in "
                           "these results: whether they fit later is open.")
            for t, rows in longer_pending(res, inp.longer or None).items():
                out.append(f"- `full`: {t} on twice the budget: " + ", ".join(
                    f"{lab} {run} of {of} seeds" for lab, run, of in rows) + " have run; the rest are not in yet.")
        unfit = list(models[name].fitted).count(False)
        if unfit:
            out.append(f"- `{name}`: {unfit} of {len(res['runs'])} rows not fitted (left out of every ranking).")
        if res.get("failures"):
            out.append(f"- `{name}`: {len(res['failures'])} failed run(s): "
                       + ", ".join(f"`{f['job']}`" for f in res["failures"]) + ".")
    if inp.scale_summary and not inp.scale_summary.get("complete"):
        from relpos.compare.scale import cells as all_cells

        out.append(f"- the scale check: {len(all_cells()) - len(inp.scale_summary['cells'])} of {len(all_cells())} "
                   "cells without results.")
    out += [f"- the scale check: {p}." for p in _partial_cells(inp)]
    return (out or ["- nothing the generator can detect."]) + [""]
