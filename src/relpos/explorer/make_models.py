"""Train the small language models the explorer ships (views 0 and 5 open on them).

Command (run from the repository root; it takes about 1-3 minutes per model on one core
of a shared 2-core machine, measured times below and in each model's ``config.json``)::

    nice -n 10 .venv/bin/python -m relpos.explorer.make_models            # nope, t5, alibi, rope, shaw
    nice -n 10 .venv/bin/python -m relpos.explorer.make_models --schemes t5

Each model is ``relpos compare --preset default``'s language model (byte-level, the built-in
corpus -- Python's standard library, the train split of :func:`relpos.data.stdlib_corpus` --,
d_model 64, 2 layers, 4 heads, training windows of 64 bytes, seed 0), trained by the same
recipe and stopped by the same fit gate (:class:`relpos.compare.fitting.FitMonitor`: a
constant rate until the validation loss flattens, then a cooldown). Only a model that passes
the fit gate is written; one that does not is reported and left out. The models land in
``relpos/explorer/data/models/<scheme>/`` as ordinary relpos checkpoints (safetensors + JSON,
loaded by :func:`relpos.training.checkpoint.load`), with what they were trained on, the fit record and
the measured time in ``config.json``'s ``extra``.

Measured (2026-12-02, one thread, shared machine): see docs/explorer.md, "Shipped models".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

__all__ = ["SHIPPED", "MODELS_DIR", "train_one", "main"]

#: The schemes whose trained models the explorer ships, in the order the page offers them.
SHIPPED = ("t5", "alibi", "rope", "shaw", "nope")

#: Where the models are kept inside the package.
MODELS_DIR = Path(__file__).resolve().parent / "data" / "models"


def train_one(scheme: str, out_dir: Path, *, seed: int = 0, threads: int = 1) -> dict:
    """Train one scheme's model with the default preset's LM recipe; save it only if it passes the fit gate.

    Returns:
        A summary ``{"scheme", "fitted", "steps", "seconds", "val_loss", "path"}`` (``path`` is None
        when the model did not fit and was not written).
    """
    import torch

    from relpos.training.checkpoint import save
    from relpos.compare.fitting import FitMonitor
    from relpos.compare.job import Job, model_config_for, train_config_for
    from relpos.compare.presets import preset
    from relpos.training.loop import train

    torch.set_num_threads(threads)
    cfg = preset("default")
    task = cfg.make_task("lm")
    job = Job("lm", scheme, seed)
    mcfg = model_config_for(job, cfg, task)
    tcfg = train_config_for(job, cfg, task)
    mon = FitMonitor(task, cfg.fit, tcfg.steps)
    t0, c0 = time.perf_counter(), time.process_time()
    res = train(mcfg, tcfg, task.train_source(tcfg.batch_size, seed), callback=mon)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    fitted = bool(mon.fitted_by_validation())
    val_loss = mon.history[-1]["val_loss"] if mon.history else None
    from relpos.data import stdlib_corpus

    n_bytes = len(stdlib_corpus("train", None))
    extra = {
        "explorer_model": True,
        "fitted": fitted,
        "trained_on": (f"the built-in corpus: Python {sys.version_info.major}.{sys.version_info.minor}'s "
                       f"standard library, train split ({n_bytes:,} bytes), byte-level, windows of "
                       f"{task.train_len} bytes"),
        "trained_on_bytes": n_bytes,
        "recipe": f"relpos compare --preset default, task lm, seed {seed} (python -m relpos.explorer.make_models)",
        "steps": int(res.steps),
        "seconds": round(seconds, 1),  # wall clock (on a shared machine, mostly waiting)
        "cpu_seconds": round(cpu_seconds, 1),
        "val_loss": val_loss,
        "val_bpb": None if val_loss is None else val_loss / 0.6931471805599453,
        "fit": {k: v for k, v in mon.summary().items() if k != "history"},
        "date": time.strftime("%Y-%m-%d"),
    }
    path = None
    if fitted:
        target = out_dir / scheme
        if target.exists():  # only ever a folder this script wrote (a relpos checkpoint)
            from relpos.training.checkpoint import is_checkpoint_dir

            if not is_checkpoint_dir(target):
                raise SystemExit(f"{target} exists and is not a relpos checkpoint; not touching it")
        path = str(save(target, res.model, extra=extra))
    return {"scheme": scheme, "fitted": fitted, "steps": int(res.steps), "seconds": round(seconds, 1),
            "cpu_seconds": round(cpu_seconds, 1), "val_loss": val_loss, "path": path}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m relpos.explorer.make_models", description=__doc__.splitlines()[0])
    ap.add_argument("--schemes", default=",".join(SHIPPED), help="comma-separated schemes (default: %(default)s)")
    ap.add_argument("--out", default=str(MODELS_DIR), help="models folder (default: the package's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    total = time.perf_counter()
    rows = []
    for s in [x.strip() for x in args.schemes.split(",") if x.strip()]:
        r = train_one(s, out, seed=args.seed, threads=args.threads)
        rows.append(r)
        print(json.dumps(r), flush=True)
    print(f"total {time.perf_counter() - total:.0f} s; fitted: "
          f"{', '.join(r['scheme'] for r in rows if r['fitted']) or 'none'}; not fitted (not written): "
          f"{', '.join(r['scheme'] for r in rows if not r['fitted']) or 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
