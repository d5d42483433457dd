"""The ``extend`` benchmark: fine-tune a compare folder's language models at ``factor x L`` by every recipe.

:func:`plan` reads the source folder (:mod:`relpos.extend.source`) and lists the work: per seed and recipe, the
zero-shot measurement (K = 0) and one fine-tuning run per rate of the grid that passes every K of the recipe.
:func:`estimate` states its cost (``--dry-run``); :func:`run_extend` does it, skipping what the store holds
(resumable after a kill), and writes the report (:mod:`relpos.extend.report`).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Callable

from relpos.extend.recipes import Recipe, recipe
from relpos.extend.spec import ExtendSpec, k_grid

__all__ = ["Plan", "Unit", "plan", "estimate", "estimate_lines", "run_extend"]

#: A fine-tuning step at ``factor x L`` against a pretraining step at ``L`` (same rows, ``factor`` times the
#: tokens, longer attention): the rough multiplier of :func:`estimate`, beside ``factor`` itself.
STEP_OVERHEAD = 1.3


@dataclasses.dataclass(frozen=True)
class Unit:
    """One unit of work: a recipe on a seed at a rate (0 for the zero-shot measurement) through ``ks``."""

    recipe: str
    seed: int
    lr: float
    ks: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"{self.recipe} seed{self.seed}" + (f" lr {self.lr:g}" if self.lr else " zero-shot")


@dataclasses.dataclass
class Plan:
    spec: ExtendSpec
    source: object
    recipes: list[Recipe]
    seeds: list[int]
    grid: list[int]
    batch_size: int
    units: list[Unit]
    notes: list[str]
    protocol: dict
    fingerprint: str
    pretrain_steps: int = 0  # what the K grid is a fraction of (Source.pretrain_steps of the studied schemes)


def plan(spec: ExtendSpec) -> Plan:
    """The work of ``spec`` (reads the source folder; writes nothing).

    Raises:
        FileNotFoundError, ValueError: see :func:`relpos.extend.source.read_source`; a seed the folder lacks.
    """
    from relpos.extend.source import read_source
    from relpos.extend.store import fingerprint_of

    src = read_source(spec.source, allow_unfitted=spec.allow_unfitted)
    have = sorted({m.seed for m in src.models})
    seeds = list(spec.seeds) if spec.seeds is not None else have
    if missing := [s for s in seeds if s not in have]:
        raise ValueError(f"--seeds {','.join(map(str, missing))}: the folder {src.folder} has no language model of "
                         f"that seed (its seeds: {', '.join(map(str, have))})")
    notes, recipes = [], []
    for name in spec.recipes:
        r = recipe(name)
        lacking = [s for s in seeds if src.model(r.scheme, s) is None]
        if lacking == seeds:
            notes.append(f"recipe {r.name} left out: the folder has no {'fitted ' if not spec.allow_unfitted else ''}"
                         f"{r.scheme} language model")
            continue
        if lacking:
            notes.append(f"recipe {r.name}: no {r.scheme} model of seed(s) {', '.join(map(str, lacking))}; measured "
                         f"on the others")
        recipes.append(r)
    if not recipes:
        raise ValueError(f"--from {src.folder}: none of the recipes {', '.join(spec.recipes)} has a model there")
    studied = {r.scheme for r in recipes if not r.reference} or None  # the references follow their grid
    grid = k_grid(src.pretrain_steps(studied), spec.k_fractions)
    bs = spec.batch_size or int(src.cfg.train_settings("lm")["batch_size"])
    units = []
    for s in seeds:
        for r in recipes:
            if src.model(r.scheme, s) is None:
                continue
            units.append(Unit(r.name, s, 0.0, (0,)))
            ks = tuple(k for k in r.ks(grid) if k > 0)
            if ks:
                units += [Unit(r.name, s, lr, ks) for lr in spec.lr_grid]
    protocol = spec.protocol(src.fingerprint, grid, bs)
    return Plan(spec, src, recipes, seeds, grid, bs, units, notes, protocol, fingerprint_of(protocol),
                src.pretrain_steps(studied))


def _ms_per_step(p: Plan) -> float:
    xs = [m.ms_per_step for m in p.source.models if m.ms_per_step]
    return sum(xs) / len(xs) if xs else 40.0


def estimate(p: Plan, done: set | None = None) -> dict:
    """Rough cost of the plan's units not in ``done`` (keys ``(recipe, seed, lr)``): fine-tuning steps, tokens,
    evaluations and CPU-seconds. From the folder's pretraining cost per step (its jobs' ``ms_per_step``, on the
    machine that trained them) times ``factor x`` :data:`STEP_OVERHEAD`; an evaluation is costed as forward passes
    over its tokens at a third of a training step's cost per token, doubled for the longer windows."""
    done = done or set()
    L, f = p.source.train_len, p.spec.factor
    ms = _ms_per_step(p)
    step_s = ms / 1000 * f * STEP_OVERHEAD
    task_tokens = int(p.source.cfg.lm.get("eval_tokens", 16384)) * len(p.spec.eval_factors)
    bs_L = int(p.source.cfg.train_settings("lm")["batch_size"]) * L
    eval_s = task_tokens * (ms / 1000 / bs_L) / 3 * 2
    todo = [u for u in p.units if (u.recipe, u.seed, u.lr) not in done]
    steps = sum(max(u.ks) for u in todo)
    evals = sum(len(u.ks) for u in todo)
    secs = steps * step_s + evals * eval_s
    return {"units": len(todo), "units_total": len(p.units), "steps": steps, "tokens": steps * p.batch_size * L * f,
            "evaluations": evals, "seconds": secs, "step_seconds": step_s, "eval_seconds": eval_s}


def estimate_lines(p: Plan, done: set | None = None) -> list[str]:
    e = estimate(p, done)
    L = p.source.train_len
    lines = [f"source: {p.source.folder} (fingerprint {p.source.fingerprint}), L = {L}, pretraining steps "
             f"{p.pretrain_steps} (mean of the models the studied recipes start from)",
             f"recipes: {', '.join(r.name for r in p.recipes)}; seeds: {', '.join(map(str, p.seeds))}",
             f"fine-tuning at {p.spec.factor * L} tokens ({p.spec.factor}x L), K grid {p.grid}, rates "
             f"{', '.join(f'{v:g}' for v in p.spec.lr_grid)} (chosen on validation), batch {p.batch_size}; "
             f"evaluated at {', '.join(f'{f}x' for f in p.spec.eval_factors)} L on the test split",
             f"to do: {e['units']} of {len(p.units)} runs, {e['steps']:,} fine-tuning steps ({e['tokens']:,} tokens), "
             f"{e['evaluations']} evaluations",
             f"estimate: about {e['seconds'] / 3600:.2f} hours ({e['step_seconds'] * 1000:.0f} ms a step, "
             f"{e['eval_seconds']:.1f} s an evaluation; rough, from the wall time per step of the folder's own "
             f"pretraining, on the machine and under the load it had then)"]
    return [*lines, *p.notes]


def run_extend(spec: ExtendSpec, *, log: Callable[[str], None] | None = None, progress: bool | None = None,
               dry_run: bool = False, plots: bool = True) -> dict:
    """Run (or resume) the benchmark; returns ``{"plan", "rows", "report", "out", "seconds"}`` (``dry_run``:
    ``{"plan", "lines"}``, nothing written).

    Raises:
        relpos.outdir.OutputDirError, ValueError, FileNotFoundError: bad ``--from`` / ``--out`` (before any work).
    """
    from relpos.extend.finetune import eval_task, finetune_run, finetune_task, load_source_model, measure
    from relpos.extend.report import write_report
    from relpos.extend.store import ExtendStore, prepare_out

    if log is None:
        def log(s: str) -> None:
            print(s, file=sys.stderr, flush=True)

    p = plan(spec)
    if dry_run:
        from relpos.outdir import check_output_dir
        from relpos.extend.store import FILES, owns

        check_output_dir(spec.out, owns=owns, what="extend results", files=FILES)
        return {"plan": p, "lines": estimate_lines(p)}
    out = prepare_out(spec.out, p.fingerprint, force=spec.force, log=log)
    for n in p.notes:
        log(n)
    t0 = time.perf_counter()
    src, L, f = p.source, p.source.train_len, spec.factor
    task = eval_task(src.cfg, L, spec.eval_factors)
    ft = finetune_task(src.cfg, L, f)
    longest = L * max(spec.eval_factors)
    settings = src.cfg.train_settings("lm")
    with ExtendStore(out / "extend.sqlite", p.fingerprint, p.protocol) as store:
        todo = [u for u in p.units if not store.has(u.recipe, u.seed, u.lr, u.ks)]
        if len(todo) < len(p.units):
            log(f"{len(p.units) - len(todo)} of {len(p.units)} runs already in {out}/extend.sqlite; skipping them")
        bar = _bar(len(p.units), len(p.units) - len(todo), progress)
        try:
            for i, u in enumerate(todo):
                r = recipe(u.recipe)
                sm = src.model(r.scheme, u.seed)
                model, mcfg = load_source_model(sm.path, longest)
                t1 = time.perf_counter()
                if u.lr == 0.0:
                    from relpos.extend.recipes import apply_recipe

                    apply_recipe(model, r, L, f)
                    store.put(u.recipe, u.seed, 0.0, 0, measure(model, task, ft), time.perf_counter() - t1)
                else:
                    def on_k(k, m, secs, u=u):
                        store.put(u.recipe, u.seed, u.lr, k, {**measure(m, task, ft), "train_seconds": secs},
                                  time.perf_counter() - t1)

                    finetune_run(model, mcfg, r, train_len=L, factor=f, lr=u.lr, ks=list(u.ks),
                                 warmup=spec.warmup_for(p.grid), batch_size=p.batch_size,
                                 weight_decay=float(settings["weight_decay"]), seed=u.seed,
                                 source=ft.train_source(p.batch_size, u.seed), on_k=on_k, threads=spec.threads)
                msg = f"[{len(p.units) - len(todo) + i + 1}/{len(p.units)}] {u.label}: {time.perf_counter() - t1:.1f} s"
                bar.write(msg) if bar is not None else log(msg)
                if bar is not None:
                    bar.update(1)
        except KeyboardInterrupt:
            log("interrupted: finished runs are saved; rerun the same command to resume")
            raise
        finally:
            if bar is not None:
                bar.close()
        rows = store.rows()
    rep = write_report(rows, p, out, plots=plots)
    return {"plan": p, "rows": rows, "report": rep, "out": out, "seconds": time.perf_counter() - t0}


def _bar(total: int, initial: int, enabled: bool | None):
    on = sys.stderr.isatty() if enabled is None else enabled
    if not on:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit="run", dynamic_ncols=True, file=sys.stderr)
