"""One training step of a ``relpos compare`` job, against a bare PyTorch loop, at every preset's shapes.

For each cell (a preset's task at its shapes: the default preset's LM and copy; the full preset's LM, copy,
MQAR, reverse and parity; the six scale cells) this times, side by side in one process and interleaved
(one step of every variant per round, the order rotated every round):

* **job** -- relpos's compare job step as the job runs it: :class:`relpos.training.loop.Trainer` built from the
  job's own configs (:func:`~relpos.compare.job.model_config_for`,
  :func:`~relpos.compare.job.train_config_for` at the job's first learning rate, the task's training
  batches), the per-step work of :func:`relpos.training.loop.train`'s loop and the
  :class:`~relpos.compare.fitting.FitMonitor` callback, plus the monitor's **amortised validation**: a
  validation (``FitMonitor.score``) is timed in every round too and counts ``1 / val_every`` of it per step;
* **bare** -- a bare PyTorch loop written here: the same width, depth, heads, MLP, vocabulary, batch and
  sequence, tied embeddings, plain ``F.scaled_dot_product_attention(is_causal=True)``, AdamW with the job's
  betas and weight-decay groups and the job's gradient clipping (the recipe's, so both do the same maths),
  on pre-made batches; no data generation, checks, schedules, seeds or monitor;
* **data** -- the task's own batch generator (the job's ``trainer.data.batch``), timed alone: a bare loop that
  trains on the task must draw the same batches (their random stream is fixed by the task), so NoPE's job is
  also compared with *bare + data*;
* **compiled** -- the job's trainer with ``TrainConfig(compile=True)`` (``torch.compile`` of the whole
  model) for the schemes in ``--compile-schemes`` at the cells in ``--compile-cells``; its compile time
  (the first steps) is recorded.

The clock is process CPU time with one thread; each variant gets warm-up steps first. ``--settle N`` runs N
untimed steps of a variant right before each of its timed ones, so a timed step follows a step of the same
model, as in a job, and not another variant's (whose weights and optimizer state it evicts from the caches).
``--sample-ms MS`` makes each timed sample the mean of as many consecutive calls of the variant as fill MS
(counted once after the warm-up, kept in the JSON as ``calls_per_sample``): at the LM cells one step takes about
15 ms, and single-step samples of one scheme against NoPE ranged over 0.85-2.1x within one quiet run.
Reported per cell: medians, NoPE's job step against the bare loop and against the bare loop plus the task's batch
generation (the target, <= 1.15x, is read on the latter), each scheme's job step against NoPE's
(target <= 1.3x; 2x for DeBERTa, CoPE and FoX), and the compiled step's speed-up. Times are medians over rounds;
every ratio is the median over rounds of the ratio within one round, whose variants ran back to back, so a slower
stretch of a shared host moves both sides of it (each round's times are kept in the JSON, ``round_ms``).

``--predict STORE`` also predicts a finished sweep's training CPU-hours from this run's per-step figures:
for every job in the store, its steps (all learning-rate tries) times the job-step median of its task's cell
and scheme, plus its evaluation seconds.

Usage::

    python benchmarks/job_step.py                       # every cell, the presets' schemes
    python benchmarks/job_step.py --cells full-mqar --schemes nope rope --rounds 5
    python benchmarks/job_step.py --quick               # a tiny smoke run (seconds)
    python benchmarks/job_step.py --predict docs/results/protocol3/full/results.sqlite

Writes ``benchmarks/results/job_step.json`` and ``.md`` (``--name``) and prints the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its other half, job_step_report.py, beside it
from job_step_report import BARE_TARGET, CONTENT_TARGETS, TARGET, markdown, predict  # noqa: E402

#: cell -> (what, preset, task, scale cell (d_model, train_len) or None).
CELLS: dict[str, tuple[str, str, str, tuple[int, int] | None]] = {
    "default-lm": ("`relpos compare` (default preset), LM", "default", "lm", None),
    "full-lm": ("full preset, LM (default-lm's shapes; its validation reads 512 windows, 32 KB, not 32)", "full", "lm",
                None),
    "default-copy": ("default preset, copy (L = 8)", "default", "copy", None),
    "full-copy": ("full preset, copy (L = 16; copy-distinct has the same shapes)", "full", "copy", None),
    "full-mqar": ("full preset, MQAR (3 layers, batch 256)", "full", "mqar", None),
    "full-reverse": ("full preset, reverse (L = 16)", "full", "reverse", None),
    "full-parity": ("full preset, parity (L = 16)", "full", "parity", None),
    **{f"scale-d{d}-n{n}": (f"scale preset, d_model {d}, training length {n}", "scale", "lm", (d, n))
       for d in (64, 128, 256) for n in (64, 256)},
    "ci-lm": ("`relpos compare --preset ci`, LM (the --quick cell)", "ci", "lm", None),
}
DEFAULT_CELLS = tuple(c for c in CELLS if c != "ci-lm")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", nargs="*", default=None, choices=list(CELLS), help="cells (default: all but ci-lm)")
    p.add_argument("--schemes", nargs="*", default=None,
                   help="schemes (default: each cell's preset's schemes; NoPE always runs)")
    p.add_argument("--rounds", type=int, default=7, help="timed interleaved rounds (default 7)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per variant first (default 2)")
    p.add_argument("--settle", type=int, default=0,
                   help="untimed steps of the same variant right before each timed one, as a job runs its steps one "
                        "after another (default 0: each timed step follows another variant's)")
    p.add_argument("--sample-ms", type=float, default=0.0,
                   help="each timed sample runs as many consecutive calls of a variant as fill this many ms (from a "
                        "timing after the warm-up) and counts their mean, so a 15 ms step is not one interrupt away "
                        "from an outlier (default 0: one call per sample)")
    p.add_argument("--compile-schemes", nargs="*", default=["nope", "rope", "alibi", "t5"],
                   help="schemes also timed compiled (default nope rope alibi t5; none: --no-compile)")
    p.add_argument("--compile-cells", nargs="*", default=["default-lm", "full-copy", "full-mqar", "scale-d256-n256"],
                   choices=list(CELLS), help="cells where the compiled trainers run (each compile takes 5-60 s)")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="no compiled trainers")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: cell ci-lm, schemes nope and alibi, 1 round, no compile (unless named)")
    p.add_argument("--predict", default=None, metavar="STORE",
                   help="a sweep's results.sqlite: predict its CPU-hours from this run's per-step figures")
    p.add_argument("--provisional", action="store_true",
                   help="mark the results provisional (measured on shared cores, not the committed measurement)")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"), help="results folder")
    p.add_argument("--name", default="job_step", help="output file stem (default job_step)")
    args = p.parse_args(argv)
    if args.quick:
        args.cells = args.cells or ["ci-lm"]
        args.schemes = args.schemes or ["nope", "alibi"]
        given = argv or sys.argv[1:]
        args.rounds = args.rounds if "--rounds" in given else 1
        args.warmup = 1
        if "--compile-schemes" not in given:
            args.compile = False
    if args.rounds < 1 or args.warmup < 1 or args.settle < 0 or not 0 <= args.sample_ms <= 10_000:
        p.error("--rounds and --warmup must be >= 1, --settle >= 0, --sample-ms in [0, 10000]")
    args.cells = args.cells or list(DEFAULT_CELLS)
    return args


def cell_schemes(cell: str) -> list[str]:
    """The schemes a cell's preset trains."""
    return list(cell_config(cell)[0].schemes)


def cell_config(cell: str):
    """The :class:`~relpos.compare.config.ExperimentConfig` a cell's jobs run with, and its task name."""
    from relpos.compare.presets import preset, scale_cell

    _, name, task, sc = CELLS[cell]
    return (scale_cell(*sc) if sc else preset(name)), task


# ------------------------------------------------------------------ (a) the job step


class JobStep:
    """One compare job's training, stepped: the trainer of :func:`relpos.training.loop.train` with the job's configs
    and the per-step work of its loop (throughput, :class:`~relpos.training.config.StepInfo`, the
    :class:`~relpos.compare.fitting.FitMonitor` call). The monitor here never validates inside
    :meth:`step` (its interval is set past the run); :meth:`validate` runs its validation alone, so the
    caller can count ``1 / val_every`` of it per step."""

    def __init__(self, cell: str, scheme: str, *, compiled: bool = False, seed: int = 0) -> None:
        from relpos.training.distributed import DistContext
        from relpos.compare.fitting import DEFAULT_COOLDOWN, FitMonitor
        from relpos.compare.job import Job, model_config_for, train_config_for
        from relpos.training.loop import Trainer
        from relpos.training.malloc import keep_freed_memory

        keep_freed_memory()  # as run_job does in a job's process
        cfg, task_name = cell_config(cell)
        task = cfg.make_task(task_name)
        job = Job(task_name, scheme, seed)
        self.mcfg = model_config_for(job, cfg, task)
        self.tcfg = dataclasses.replace(train_config_for(job, cfg, task, lr=cfg.lr_tries(task_name)[0]),
                                        compile=compiled)
        self.val_every = cfg.fit.val_every
        self.trainer = Trainer(self.mcfg, self.tcfg, task.train_source(self.tcfg.batch_size, seed),
                               ctx=DistContext())
        settings = cfg.train_settings(task_name)
        quiet = dataclasses.replace(cfg.fit, val_every=10**9)  # validation is timed by validate()
        self.monitor = FitMonitor(task, quiet, self.tcfg.steps, cooldown_at=settings.get("cooldown_at"),
                                  cooldown=settings.get("cooldown", DEFAULT_COOLDOWN))
        self.t0, self.tokens0 = time.perf_counter(), 0

    def step(self) -> float:
        """One optimizer step and the loop's per-step work, as :func:`relpos.training.loop.train` runs them."""
        from relpos.training.schedule import lr_at
        from relpos.training.config import StepInfo

        tr = self.trainer
        loss = tr.step()
        elapsed = time.perf_counter() - self.t0
        tps = (tr.tokens - self.tokens0) / elapsed if elapsed > 0 else 0.0
        info = StepInfo(tr.step_count, loss, lr_at(tr.step_count - 1, self.tcfg, tr.cooldown), tps, elapsed,
                        tr.model)
        self.monitor(info)
        return loss

    def validate(self) -> dict:
        """The fit monitor's validation of the current model (one in every ``val_every`` steps of a job)."""
        return self.monitor.score(self.trainer.model)


# ------------------------------------------------------------------ (b) the bare loop


def bare_model(vocab: int, d_model: int, n_layers: int, n_heads: int, d_ff: int):
    """A plain pre-LayerNorm decoder: tied embeddings, fused qkv, ``F.scaled_dot_product_attention``."""
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
            self.mlp = d_ff > 0
            if self.mlp:
                self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

        def forward(self, h):
            B, N, C = h.shape
            q, k, v = self.qkv(self.ln1(h)).view(B, N, 3, n_heads, C // n_heads).permute(2, 0, 3, 1, 4)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, N, D)
            h = h + self.proj(o.transpose(1, 2).reshape(B, N, C))
            return h + self.fc2(F.gelu(self.fc1(self.ln2(h)))) if self.mlp else h

    class Bare(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(n_layers))
            self.ln = nn.LayerNorm(d_model)

        def forward(self, x):
            h = self.emb(x)
            for b in self.blocks:
                h = b(h)
            return F.linear(self.ln(h), self.emb.weight)  # (B, N, V)

    return Bare()


class BareStep:
    """The bare loop at a job's shapes (its model and train configs), on a few pre-made batches of the task."""

    def __init__(self, job: JobStep) -> None:
        import torch
        import torch.nn.functional as F

        mc, tc = job.mcfg, job.tcfg
        d_ff = 4 * mc.d_model if mc.d_ff is None else mc.d_ff
        self.model = m = bare_model(mc.vocab_size, mc.d_model, mc.n_layers, mc.n_heads, d_ff)
        decay = [p for p in m.parameters() if p.dim() >= 2 or tc.decay == "all"]
        rest = [p for p in m.parameters() if not (p.dim() >= 2 or tc.decay == "all")]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                                 {"params": rest, "weight_decay": 0.0}], lr=tc.lr, betas=(tc.beta1, tc.beta2))
        self.batches = [job.trainer.data.batch(10**6 + i, 0) for i in range(4)]
        self.i = 0
        V, clip = mc.vocab_size, tc.grad_clip

        def step() -> float:
            x, y = self.batches[self.i % len(self.batches)]
            self.i += 1
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(m(x).reshape(-1, V), y.reshape(-1), ignore_index=-100)
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
            opt.step()
            return float(loss.detach())

        self.step = step
        self.val_x, self.val_y, self.lm = job.monitor.x, job.monitor.y, job.monitor.kind == "lm"

    def validate(self) -> float:
        """The bare loop's own validation of the job's validation set, as any loop that had to gate on it would
        run it: eval, no autograd, the monitor's chunks of ``VALIDATION_TOKENS`` tokens; the summed loss (LM) or
        the exact match of argmax predictions (algorithmic tasks)."""
        import torch
        import torch.nn.functional as F

        from relpos.tasks.base import VALIDATION_TOKENS

        x, y, m = self.val_x, self.val_y, self.model
        rows = max(1, VALIDATION_TOKENS // max(x.shape[1], 1))
        m.eval()
        try:
            with torch.no_grad():
                if self.lm:
                    return float(sum(F.cross_entropy(m(x[s:s + rows]).float().flatten(0, 1), y[s:s + rows].reshape(-1),
                                                     reduction="sum") for s in range(0, x.shape[0], rows)))
                preds = torch.cat([m(x[s:s + rows]).argmax(-1) for s in range(0, x.shape[0], rows)])
                return float(((preds == y) | (y == -100)).all(dim=1).double().mean())
        finally:
            m.train()


# ------------------------------------------------------------------ timing


def ratios(times: dict, schemes: list[str], val_every: int) -> dict:
    """The cell's ratios from each round's times (``times[(kind, scheme)][r]``, seconds; round ``r`` ran every
    variant back to back): each is the median over rounds of the ratio within a round, so a slower stretch of a
    shared host moves both of its sides. A job's round counts ``1 / val_every`` of that round's validation."""

    from relpos.bench.results import per_round_ratio as med

    job = {s: [a + b / val_every for a, b in zip(times[("job", s)], times[("validate", s)], strict=True)]
           for s in schemes}
    bare = times[("bare", "nope")]
    base = [a + b for a, b in zip(bare, times[("data", "nope")], strict=True)]
    out = {"nope_vs_bare": med(job["nope"], bare), "nope_vs_bare_data": med(job["nope"], base),
           # like for like: a bare loop that validates the same set as often (absent in results from before it)
           "nope_vs_bare_data_val": (med(job["nope"], [a + b / val_every for a, b in zip(
               base, times[("bare_validate", "nope")], strict=True)]) if ("bare_validate", "nope") in times else None),
           "vs_nope": {s: med(job[s], job["nope"]) for s in schemes}, "vs_bare": {s: med(job[s], bare) for s in schemes},
           "step_vs_bare_data": {s: med(times[("job", s)], base) for s in schemes}, "compile_speedup": {}}
    for s in schemes:
        if ("compiled", s) in times:
            comp = [a + b / val_every for a, b in zip(times[("compiled", s)], times[("validate", s)], strict=True)]
            out["compile_speedup"][s] = med(job[s], comp)
    return out


def run_cell(cell: str, schemes: list[str], compiled: list[str], rounds: int, warmup: int, log,
             settle: int = 0, sample_ms: float = 0.0) -> dict:
    """Every variant of one cell, interleaved (``settle`` untimed calls of a variant before each timed one; each
    timed sample the mean of as many consecutive calls as fill ``sample_ms``, at least one); medians and ratios."""
    import torch

    jobs = {s: JobStep(cell, s) for s in schemes}
    nope = jobs["nope"]
    bare_loop = BareStep(nope)
    drawn = iter(range(2 * 10**6, 10**9))  # training batches no timed job step draws
    variants: dict[tuple[str, str], object] = {("bare", "nope"): bare_loop.step,
                                               ("bare_validate", "nope"): bare_loop.validate,
                                               ("data", "nope"): lambda: nope.trainer.data.batch(next(drawn), 0)}
    for s, j in jobs.items():
        variants[("job", s)] = j.step
        variants[("validate", s)] = j.validate
    compile_s, compile_errors = {}, {}
    for s in compiled:
        torch._dynamo.reset()  # a fresh compile per model: another cell's shapes would make it dynamic
        c = JobStep(cell, s, compiled=True)
        t0, w0 = time.process_time(), time.perf_counter()
        try:
            for _ in range(warmup + 1):  # the compile (and any recompile) before the timed rounds
                c.step()
        except Exception as e:  # a compiler failure is a result of this row, not the end of the run
            compile_errors[s] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            log(f"{cell}: compiling {s} failed: {compile_errors[s]}")
            continue
        # this process's CPU time and the wall time (the compiler also works in worker processes)
        compile_s[s] = (time.process_time() - t0, time.perf_counter() - w0)
        variants[("compiled", s)] = c.step
    for key, fn in variants.items():
        for _ in range(warmup if key[0] != "compiled" else 0):
            fn()
    keys = list(variants)
    reps = {k: 1 for k in keys}
    if sample_ms > 0:
        for k in keys:
            t0 = time.process_time()
            variants[k]()
            reps[k] = max(1, math.ceil(sample_ms / max(1000 * (time.process_time() - t0), 1e-3)))
    log(f"{cell}: {len(variants)} variants warmed up")
    times: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
    for r in range(rounds):
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:
            for _ in range(settle):
                variants[k]()
            t0 = time.process_time()
            for _ in range(reps[k]):
                variants[k]()
            times[k].append((time.process_time() - t0) / reps[k])
    med = {k: 1000 * statistics.median(v) for k, v in times.items()}
    val_every = nope.val_every
    job_ms = {s: med[("job", s)] + med[("validate", s)] / val_every for s in schemes}
    bare, data = med[("bare", "nope")], med[("data", "nope")]
    r = ratios(times, schemes, val_every)
    rows = []
    for s in schemes:
        target = CONTENT_TARGETS.get(s, TARGET)
        vs_nope = r["vs_nope"][s]
        row = {"scheme": s, "job_step_ms": job_ms[s], "step_ms": med[("job", s)],
               "validation_ms": med[("validate", s)], "vs_nope": vs_nope, "vs_bare": r["vs_bare"][s],
               "step_vs_bare_data": r["step_vs_bare_data"][s], "target": target, "met": vs_nope <= target}
        if s in compile_errors:
            row["compile_error"] = compile_errors[s]
        if ("compiled", s) in med:
            row.update({"compiled_job_step_ms": med[("compiled", s)] + med[("validate", s)] / val_every,
                        "compile_speedup": r["compile_speedup"][s], "compile_cpu_s": compile_s[s][0],
                        "compile_wall_s": compile_s[s][1]})
        rows.append(row)
    mc, tc = nope.mcfg, nope.tcfg
    return {"cell": cell, "what": CELLS[cell][0], "rounds": rounds, "warmup": warmup, "settle": settle,
            "sample_ms": sample_ms, "calls_per_sample": {f"{k[0]}/{k[1]}": n for k, n in reps.items()},
            "val_every": val_every,
            "model": {"d_model": mc.d_model, "n_layers": mc.n_layers, "n_heads": mc.n_heads, "d_ff": mc.d_ff,
                      "vocab_size": mc.vocab_size},
            "batch": tc.batch_size, "seq_len": tc.seq_len, "bare_step_ms": bare, "data_ms": data,
            "nope_vs_bare": r["nope_vs_bare"], "nope_vs_bare_data": r["nope_vs_bare_data"],
            "bare_validation_ms": med[("bare_validate", "nope")], "nope_vs_bare_data_val": r["nope_vs_bare_data_val"],
            "bare_target": BARE_TARGET, "bare_met": r["nope_vs_bare_data"] <= BARE_TARGET,
            "round_ms": {f"{k[0]}/{k[1]}": [round(1000 * t, 4) for t in v] for k, v in times.items()},
            "torch_threads": torch.get_num_threads(),
            "bare_params": sum(p.numel() for p in bare_loop.model.parameters()),
            "job_params": nope.trainer.model.num_params(), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from relpos import kernels

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    t0 = time.monotonic()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    cells = []
    for cell in args.cells:
        schemes = list(args.schemes or cell_schemes(cell))
        schemes = ["nope"] + [s for s in dict.fromkeys(schemes) if s != "nope"]
        compiled = []
        if args.compile and cell in args.compile_cells:
            compiled = [s for s in args.compile_schemes if s in schemes]
        cells.append(run_cell(cell, schemes, compiled, args.rounds, args.warmup, log, settle=args.settle,
                              sample_ms=args.sample_ms))
        log(f"{cell}: done at {time.monotonic() - t0:.0f} s")
    doc = {"benchmark": "job_step", "command": "python benchmarks/job_step.py " + " ".join(argv or sys.argv[1:]),
           "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
           "relpos_kernels": kernels.status(), "seconds": round(time.monotonic() - t0, 1), "cells": cells}
    if args.provisional:
        doc["provisional"] = ("measured on a shared 2-core machine under load (other processes running); the "
                              "committed measurement is to be rerun on quiet cores")
    if args.predict:
        doc["prediction"] = predict(args.predict, cells)
    from relpos.bench.results import write_results
    write_results(args.out, args.name, doc, markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
