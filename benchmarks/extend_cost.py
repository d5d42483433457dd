"""The cost of the ``extend`` benchmark on the default LM shape: one fine-tuning step at 4L and one evaluation.

Times (CPU seconds, this process) a fine-tuning step of the default preset's language model (d_model 64, 2
layers, 4 heads, batch 16) at 4 x 64 = 256 bytes for RoPE+YaRN, ALiBi and NoPE, and one evaluation of
:func:`relpos.extend.finetune.measure` (test windows at 1x, 4x, 8x, 16x L, 32,768 bytes each, and the validation
windows at 4L). Then the whole benchmark's cost for three seeds at the default K grid and rate grid, for
pretraining lengths of 2,000 and 2,900 steps (the default preset's RoPE runs stop in that range). Prints a table,
writes JSON (``--json``).

    PYTHONPATH=src python benchmarks/extend_cost.py --json benchmarks/results/extend_cost.json
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    torch.set_num_threads(1)
    from relpos.compare.job import Job, model_config_for
    from relpos.compare.presets import preset
    from relpos.extend.finetune import eval_task, finetune_task, measure
    from relpos.extend.recipes import RECIPES, apply_recipe
    from relpos.extend.spec import DEFAULT_LR_GRID, ExtendSpec, k_grid
    from relpos.training.loop import Trainer, TrainConfig

    cfg = preset("default")
    L = cfg.lm["train_len"]
    task, ft = eval_task(cfg, L, (1, 4, 8, 16)), finetune_task(cfg, L, 4)
    rows = {}
    for name in ("yarn", "alibi", "nope"):
        r = RECIPES[name]
        mcfg = model_config_for(Job("lm", r.scheme, 0), cfg, cfg.make_task("lm"))
        tr = Trainer(mcfg, TrainConfig(steps=a.steps + 1, batch_size=16, seq_len=4 * L, lr=1e-3, warmup=1,
                                       schedule="constant", progress=False), ft.train_source(16, 0))
        apply_recipe(tr.model, r, L, 4)
        tr.step()  # warm-up of the allocator
        c0 = time.process_time()
        for _ in range(a.steps):
            tr.step()
        step = (time.process_time() - c0) / a.steps
        c0 = time.process_time()
        measure(tr.model, task, ft)
        rows[name] = {"step_s": step, "eval_s": time.process_time() - c0}
    print(f"{'recipe':8} {'step (s)':>9} {'eval (s)':>9}")
    for k, v in rows.items():
        print(f"{k:8} {v['step_s']:9.3f} {v['eval_s']:9.2f}")
    step = sum(v["step_s"] for v in rows.values()) / len(rows)
    ev = sum(v["eval_s"] for v in rows.values()) / len(rows)
    spec = ExtendSpec(source="-", out="-")
    totals = {}
    for P in (2000, 2900):
        g = k_grid(P, spec.k_fractions)
        kmax, nk = max(g), len(g) - 1
        steps = evals = 0
        for r in RECIPES.values():
            evals += 1  # K = 0
            if not r.finetuned:
                continue
            steps += len(DEFAULT_LR_GRID) * kmax
            evals += len(DEFAULT_LR_GRID) * (1 if r.reference else nk)
        steps, evals = 3 * steps, 3 * evals
        totals[P] = {"k_grid": g, "steps": steps, "evaluations": evals,
                     "cpu_hours": (steps * step + evals * ev) / 3600}
        print(f"pretraining {P} steps: K grid {g}, 3 seeds: {steps:,} fine-tuning steps, {evals} evaluations, "
              f"about {totals[P]['cpu_hours']:.2f} CPU-hours")
    if a.json:
        from relpos.outdir import write_text_atomic  # a regular file, never through a link

        write_text_atomic(a.json, json.dumps({"per_recipe": rows, "totals": {str(k): v for k, v in totals.items()}},
                                             indent=1))


if __name__ == "__main__":
    main()
