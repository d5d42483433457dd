"""The report half of ``benchmarks/job_step.py``: its targets, its prediction of a finished sweep's CPU-hours
from the measured job steps (``--predict``), and its Markdown tables. See ``job_step.py`` for what is measured."""

from __future__ import annotations

import json
from pathlib import Path

#: Which cell's per-step figures stand for a task of the full preset in ``--predict``.
TASK_CELLS = {"lm": "full-lm", "copy": "full-copy", "copy-distinct": "full-copy", "reverse": "full-reverse",
              "parity": "full-parity", "mqar": "full-mqar"}
#: Targets: NoPE's job step over the bare loop; a scheme's job step over NoPE's (2x for the content-dependent
#: schemes the train-step benchmark names).
BARE_TARGET, TARGET, CONTENT_TARGETS = 1.15, 1.3, {"deberta": 2.0, "cope": 2.0, "fox": 2.0}


# ------------------------------------------------------------------ prediction


def predict(store: str, cells: list[dict]) -> dict:
    """A finished sweep's CPU-hours from this run's job steps: per job, its steps over every learning-rate
    try times its cell's job step for its scheme (randomized runs: the scheme's), plus its evaluation
    seconds; per task, beside the CPU-hours the store measured."""
    import sqlite3

    per = {(c["cell"], r["scheme"]): r["job_step_ms"] for c in cells for r in c["rows"]}
    bare = {c["cell"]: c["bare_step_ms"] for c in cells}
    con = sqlite3.connect(f"file:{Path(store).resolve()}?mode=ro", uri=True)
    try:
        infos = [json.loads(i) for (i,) in con.execute("SELECT info FROM jobs")]
    finally:
        con.close()
    tasks: dict[str, dict] = {}
    missing = set()
    for d in infos:
        t = d["train"]
        tries = ((t.get("fit") or {}).get("lr_tries")) or [{"steps": t["steps"]}]
        steps = sum(int(x["steps"]) for x in tries)
        cell = TASK_CELLS.get(d["task"])
        ms = per.get((cell, d["scheme"]))
        agg = tasks.setdefault(d["task"], {"jobs": 0, "measured_cpu_h": 0.0, "predicted_cpu_h": 0.0,
                                           "bare_cpu_h": 0.0, "steps": 0, "eval_h": 0.0})
        agg["jobs"] += 1
        agg["steps"] += steps
        agg["measured_cpu_h"] += float(d.get("cpu_seconds") or 0.0) / 3600
        agg["eval_h"] += float(d.get("eval_seconds") or 0.0) / 3600
        if ms is None:
            missing.add((cell, d["scheme"]))
            continue
        agg["predicted_cpu_h"] += (steps * ms / 1000 + float(d.get("eval_seconds") or 0.0)) / 3600
        agg["bare_cpu_h"] += (steps * bare[cell] / 1000 + float(d.get("eval_seconds") or 0.0)) / 3600
    total = {k: sum(a[k] for a in tasks.values()) for k in ("measured_cpu_h", "predicted_cpu_h", "bare_cpu_h")}
    return {"store": str(store), "tasks": tasks, "total": total,
            "missing": sorted(f"{c}/{s}" for c, s in missing)}


# ------------------------------------------------------------------ output


def _x(v) -> str:
    return "" if v is None else f"{v:.2f}x"


def markdown(doc: dict) -> str:
    lines = ["# One compare job step against a bare PyTorch loop", ""]
    if doc.get("provisional"):
        lines += [f"**Provisional**: {doc['provisional']}", ""]
    lines += [f"Command: `{doc['command']}`", "",
              f"CPU ({doc['machine']}), torch {doc['torch']}, 1 thread, process CPU time; medians of interleaved "
              "rounds after warm-up steps; ratios: medians of the ratios within each round. "
              f"Run took {doc['seconds']:.0f} s. *job*: the compare job's step "
              "(data, checks, schedule, monitor) plus 1/val_every of its validation; *bare*: a plain PyTorch loop "
              "at the same shapes (SDPA, AdamW, the job's clipping) on pre-made batches; *data*: the task's own batch "
              "generator, which any loop training on the task runs (its random stream is the task's). Targets: NoPE's "
              f"job <= {BARE_TARGET}x bare + data; each scheme <= {TARGET}x NoPE (2x DeBERTa, CoPE, FoX).", "",
              "| cell | batch x seq | bare ms | data ms | NoPE job ms | of it, validation | NoPE / bare | "
              "NoPE / (bare + data) | the same, without validation | met | NoPE / (bare + data + bare validation) |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in doc["cells"]:
        nope = c["rows"][0]
        val = nope["validation_ms"] / c["val_every"]  # the monitor's validation, amortised over val_every steps
        data = c.get("data_ms")  # results written before the data column: the old table's cells
        with_data = "" if data is None else f"{c['nope_vs_bare_data']:.2f}x"
        base = c["bare_step_ms"] + (data or 0.0)
        # per-round ratios where the run kept them; older results: the ratio of the medians
        no_val = nope.get("step_vs_bare_data", nope["step_ms"] / base)
        lines.append(f"| {c['cell']} | {c['batch']} x {c['seq_len']} | {c['bare_step_ms']:.1f} | "
                     f"{'' if data is None else f'{data:.1f}'} | {nope['job_step_ms']:.1f} | {val:.2f} ms | "
                     f"{c['nope_vs_bare']:.2f}x | {with_data} | {no_val:.2f}x | "
                     f"{'yes' if c['bare_met'] else '**no**'} | {_x(c.get('nope_vs_bare_data_val'))} |")
    schemes = list(dict.fromkeys(r["scheme"] for c in doc["cells"] for r in c["rows"]))
    lines += ["", "Each scheme's job step as a multiple of NoPE's (target in brackets; **bold**: over it):", "",
              "| scheme | " + " | ".join(c["cell"] for c in doc["cells"]) + " |",
              "|---|" + "---|" * len(doc["cells"])]
    for s in schemes:
        cells = []
        for c in doc["cells"]:
            r = next((r for r in c["rows"] if r["scheme"] == s), None)
            cells.append("" if r is None else (f"{r['vs_nope']:.2f}x" if r["met"] else f"**{r['vs_nope']:.2f}x**"))
        t = CONTENT_TARGETS.get(s, TARGET)
        lines.append(f"| {s} ({t}x) | " + " | ".join(cells) + " |")
    comp = [(c, r) for c in doc["cells"] for r in c["rows"] if "compiled_job_step_ms" in r]
    if comp:
        lines += ["", "`torch.compile` (`TrainConfig(compile=True)`): the compiled job step against the eager one "
                  "(>= 1.2x would make compare compile by default):", "",
                  "| cell | scheme | eager ms | compiled ms | speed-up | first steps: CPU s / wall s |",
                  "|---|---|---|---|---|---|"]
        for c, r in comp:
            lines.append(f"| {c['cell']} | {r['scheme']} | {r['job_step_ms']:.1f} | {r['compiled_job_step_ms']:.1f} | "
                         f"{r['compile_speedup']:.2f}x | {r['compile_cpu_s']:.0f} / {r['compile_wall_s']:.0f} |")
    failed = [(c, r) for c in doc["cells"] for r in c["rows"] if "compile_error" in r]
    if failed:
        lines += ["", "Compilation failed (not timed): " + "; ".join(f"{c['cell']} {r['scheme']}: {r['compile_error']}"
                                                             for c, r in failed)]
    pred = doc.get("prediction")
    if pred:
        lines += ["", f"Predicted CPU-hours of `{pred['store']}` from these per-step figures (steps of every "
                  "try x job step + evaluation seconds):", "",
                  "| task | jobs | measured | predicted | bare loop |", "|---|---|---|---|---|"]
        for t, a in pred["tasks"].items():
            lines.append(f"| {t} | {a['jobs']} | {a['measured_cpu_h']:.2f} | {a['predicted_cpu_h']:.2f} | "
                         f"{a['bare_cpu_h']:.2f} |")
        tot = pred["total"]
        lines.append(f"| all | | {tot['measured_cpu_h']:.2f} | {tot['predicted_cpu_h']:.2f} | {tot['bare_cpu_h']:.2f} |")
        if pred["missing"]:
            lines += ["", "Not measured in this run (left out of the prediction): " + ", ".join(pred["missing"])]
    return "\n".join(lines)
