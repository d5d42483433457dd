"""``relpos compare``: train every scheme short, test it long, report how each holds up.

With no arguments it runs the ``default`` preset (eight schemes, one of each
family, on byte-level language modelling of Python's standard library and on
string copying; ``--add-schemes shaw,learned,sandwich`` adds the rest) with two
worker processes, prints the tables and writes ``runs/compare-default/``
(``results.sqlite``, ``results.json``, plots, ``report.md``). Rerunning the same
command skips the runs that are already stored.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shlex
import sys
from pathlib import Path

from relpos.compare.config import ALL_TASKS

HELP = "train each position scheme at a short length, evaluate far past it, and report (the main benchmark)"


def _csv(kind):
    def parse(s: str):
        items = [x.strip() for x in s.split(",") if x.strip()]
        if kind in (int, float):
            if [x.lower() for x in items] in (["none"], ["-"]):
                return []
            out = []
            for x in items:
                try:
                    out.append(kind(x))
                except ValueError:
                    what = "integers" if kind is int else "numbers"
                    raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {x!r}") from None
            return out
        return items

    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("what to run")
    g.add_argument("--preset", default="default",
                   help="default | ci | full | scale (default: default; scale runs its six cells into "
                        "OUT/d<width>-L<length>/ and writes OUT/scale.md)")
    g.add_argument("--schemes", type=_csv(str), help="comma-separated scheme names (see `relpos schemes`)")
    g.add_argument("--add-schemes", type=_csv(str), default=[], help="schemes added to the preset's list")
    g.add_argument("--tasks", type=_csv(str), help="comma-separated: " + ", ".join(ALL_TASKS))
    g.add_argument("--seeds", type=_csv(int), help="comma-separated training seeds, e.g. 0,1,2")
    g.add_argument("--randomized", type=_csv(str),
                   help="schemes also trained with randomized positions (Ruoss et al. 2023); 'none' for none")
    g.add_argument("--rope-variants", type=_csv(str),
                   help="RoPE scalings evaluated on the trained RoPE model: pi,ntk,dynamic,yarn or 'none' "
                        "(added to a finished --out folder, they are evaluated on its saved models: no training)")
    g = p.add_argument_group("model and training")
    g.add_argument("--d-model", type=int, help="model width")
    g.add_argument("--layers", type=int, help="Transformer blocks")
    g.add_argument("--heads", type=int, help="attention heads")
    g.add_argument("--steps", type=int, help="training steps (every task)")
    g.add_argument("--batch-size", type=int, help="batch size (every task)")
    g.add_argument("--lr", type=float, help="peak learning rate (every task)")
    g = p.add_argument_group("fit and fairness")
    g.add_argument("--lr-grid", type=_csv(float),
                   help="learning rates every scheme trains at on every task, language modelling included "
                        "(all of them; the one with the best validation score at L is kept; the full preset: "
                        "2e-3,1e-3,3e-3); 'none' for only --lr")
    g.add_argument("--fit-target", type=float, help="validation exact match at L that counts as fitted (default 0.95)")
    g.add_argument("--val-every", type=int, help="steps between in-distribution validations (default 100)")
    g.add_argument("--no-early-stop", action="store_true",
                   help="train every run for its full step budget (validation and the fit gate still apply)")
    g.add_argument("--scheme-ranges", choices=("train_len", "paper"),
                   help="train_len (default): T5 max_distance, Shaw k, FIRE init_L set from the training length; "
                        "paper: the papers' defaults")
    g.add_argument("--embed-scale", choices=("auto", "sqrt_d", "none"),
                   help="token-embedding scale: auto (default) scales by sqrt(d_model) for absolute schemes only")
    g = p.add_argument_group("lengths")
    g.add_argument("--train-len", type=int, help="language-modelling training length in bytes")
    g.add_argument("--eval-lengths", type=_csv(int),
                   help="language-modelling evaluation lengths in bytes (default 1,2,4,8,16 x --train-len)")
    g.add_argument("--eval-tokens", type=int, help="validation bytes scored at each length")
    g.add_argument("--task-len", type=int, help="longest training problem L of the algorithmic tasks")
    g.add_argument("--task-eval-lengths", type=_csv(int),
                   help="algorithmic problem lengths to evaluate (default 1,2,3,4 x --task-len)")
    from relpos.commands.corpus_flags import add_corpus_arguments

    add_corpus_arguments(p)
    g.add_argument("--passkey", type=int, default=None, metavar="N",
                   help="passkey retrieval on the LM models: N examples per length x depth (default 0: off; "
                        "with --hf-model 10, and 0 turns it off); added to a finished --out folder, it is "
                        "evaluated on the saved models: no training")
    g = p.add_argument_group("your pretrained model")
    from relpos.commands.hf import add_hf_arguments

    add_hf_arguments(g)
    g.add_argument("--device", default=None, help="cpu or cuda for --hf-model (default: cuda when available)")
    g = p.add_argument_group("running")
    g.add_argument("--out", help="output folder (default runs/compare-<preset>)")
    g.add_argument("--runner", default="local", help="local (process pool, default) | serial | ray | torchrun")
    g.add_argument("--workers", type=int, help="worker processes of the local runner (default: CPU count)")
    g.add_argument("--threads", type=int, help="torch threads per worker (default 1)")
    g.add_argument("--ray-address", help="Ray cluster address for --runner ray (default: a local instance)")
    g.add_argument("--nproc", type=int, default=2, help="processes per run for --runner torchrun (default 2)")
    g.add_argument("--force", action="store_true",
                   help="if --out holds results of another configuration, move them aside and start afresh")
    g.add_argument("--reuse", action="append", default=[], metavar="FOLDER",
                   help="copy the runs of another compare folder that would be trained exactly the same here "
                        "(same task settings apart from the learning-rate grid, same tries); repeatable")
    g.add_argument("--reuse-validated-before", default="", metavar="TASKS",
                   help="with --reuse: also copy the runs of these tasks (comma-separated) whose settings differ "
                        "only in how they were validated (validation set size, fit.keep_best); each keeps its "
                        "old gate and records the difference")
    g.add_argument("--no-plots", action="store_true", help="skip the PNG plots and report.md")
    g.add_argument("--no-keep-models", action="store_true",
                   help="do not save the trained models (by default each run's model is kept under OUT/models/)")
    g.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show the bar")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="never show the bar")
    g.add_argument("--dry-run", action="store_true",
                   help="print the plan, the fingerprint and what --out already holds (done, running, failed, "
                        "to run; CPU time so far and left; what --reuse would copy); run nothing")
    g.add_argument("--report-only", action="store_true",
                   help="rewrite results.json, plots and report.md of --out from its database; run nothing "
                        "(--tasks narrows the report to those tasks)")


def _none_or(items):
    if items is None:
        return None
    return [] if [x.lower() for x in items] in (["none"], ["-"]) else items


def build_config(args: argparse.Namespace):
    """The :class:`ExperimentConfig` that the flags describe (validated)."""
    from relpos.compare.presets import preset

    cfg = preset(args.preset)
    if args.schemes is not None:
        cfg.schemes = list(args.schemes)
    cfg.schemes += [s for s in args.add_schemes if s not in cfg.schemes]
    if args.tasks is not None:
        cfg.tasks = list(args.tasks)
    if args.seeds is not None:
        cfg.seeds = list(args.seeds)
    if _none_or(args.randomized) is not None:
        cfg.randomized = _none_or(args.randomized)
    # one concern at a time (relpos.compare.settings): evaluation, model, training, data, tuning
    ev, model, train, data = cfg.evaluation, cfg.model, cfg.training, cfg.data
    if _none_or(args.rope_variants) is not None:
        ev.rope_variants = _none_or(args.rope_variants)
    if args.passkey:
        ev.passkey = {"n": args.passkey}
    for flag, field in (("d_model", "d_model"), ("layers", "n_layers"), ("heads", "n_heads")):
        v = getattr(args, flag)
        if v is not None:
            setattr(model, field, v)
    if args.scheme_ranges is not None:
        model.scheme_ranges = args.scheme_ranges
    if args.embed_scale is not None:
        model.embed_scale = args.embed_scale
    for flag in ("steps", "batch_size", "lr"):
        v = getattr(args, flag)
        if v is not None:
            setattr(train, flag, v)
            for over in train.task_train.values():
                over.pop(flag, None)
    lm, algo = data.lm, data.algorithmic
    if args.train_len is not None:
        lm["train_len"] = args.train_len
    if args.eval_lengths is not None:
        lm["eval_lengths"] = list(args.eval_lengths)
        lm.pop("eval_factors", None)
    if args.eval_tokens is not None:
        lm["eval_tokens"] = args.eval_tokens
    if args.task_len is not None:
        from relpos.tasks.algorithmic import MAX_TRAIN_LEN

        if not 1 <= args.task_len <= MAX_TRAIN_LEN:  # named by its flag, not by the config key it sets
            raise ValueError(f"--task-len must be an integer in [1, {MAX_TRAIN_LEN}], got {args.task_len}")
        algo["train_len"] = args.task_len
        if args.task_eval_lengths is None:  # the preset's lengths were for its own L
            algo["eval_factors"] = [1, 2, 3, 4]
            algo.pop("eval_lengths", None)
    if args.task_eval_lengths is not None:
        algo["eval_lengths"] = list(args.task_eval_lengths)
        algo.pop("eval_factors", None)
    if args.task_len is not None or args.task_eval_lengths is not None:
        for opts in data.task_options.values():  # the lengths asked for hold for every algorithmic task
            for k in ("train_len", "min_len", "eval_lengths"):
                opts.pop(k, None)
    from relpos.commands.corpus_flags import corpus_spec_from_args

    spec = corpus_spec_from_args(args)
    if spec is not None:
        lm["corpus"] = spec
    fit = {}
    if args.lr_grid is not None:
        fit["lr_grid"] = list(args.lr_grid)
        for over in train.task_train.values():  # the grid asked for holds for every task
            over.pop("lr_grid", None)
    if args.fit_target is not None:
        fit["target"] = args.fit_target
    if args.val_every is not None:
        fit["val_every"] = args.val_every
    if args.no_early_stop:
        fit["early_stop"] = False
    if fit:
        from relpos.compare.fitting import FitConfig

        cfg.tuning = FitConfig(**{**dataclasses.asdict(cfg.tuning), **fit})
    cfg.workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    if args.threads is not None:
        cfg.threads = args.threads
    return cfg.validate()


def passkey_warning(cfg) -> str | None:
    """A warning when every passkey length lies beyond the LM training length (the prompt does not fit in it)."""
    if not cfg.passkey:
        return None
    from relpos.tasks.passkey import Passkey

    L = int(cfg.lm["train_len"])
    tokenizer = (cfg.lm.get("corpus") or {}).get("tokenizer")
    encode = None
    if tokenizer:
        from relpos.corpus import load_tokenizer

        tok = load_tokenizer(tokenizer)
        encode = lambda t: tok.encode(t, add_special_tokens=False).ids  # noqa: E731
    need = Passkey([1 << 20], encode=encode, **cfg.passkey).min_length()
    unit = "tokens" if tokenizer else "bytes"
    if "lm" not in cfg.tasks:
        return None
    from relpos.tasks.lm import LanguageModelling

    kw = cfg.task_kwargs("lm")  # the lengths as the task resolves them, without reading the corpus (a dry run)
    longest = max(kw.get("eval_lengths")
                  or LanguageModelling(**{k: v for k, v in kw.items() if k != "corpus"}).eval_lengths)
    if longest < need:  # Passkey.fitting finds no length: nothing would be measured
        return (f"warning: passkey's prompt needs {need} {unit}, more than the longest language-modelling "
                f"evaluation length {longest}: passkey measures nothing; evaluate longer "
                f"(--eval-lengths with one of {need} or more)")
    if need <= L:
        return None
    return (f"warning: passkey's prompt needs {need} {unit}, more than --train-len {L}: every passkey length lies "
            f"beyond the training length, so retrieval is tested only out of distribution (expect 0); "
            f"--train-len {need} or more would test it within the training length")


def main(args: argparse.Namespace) -> int:
    from relpos.compare.sweep import compare, rebuild_report, summary_text
    from relpos.compare.runner import make_runner

    if args.out is not None and not args.out.strip():
        raise ValueError("--out is empty; name a new folder (default: runs/compare-<preset>)")
    if args.report_only:
        if bad := _flags_besides(args, _REPORT_FLAGS):
            print(f"relpos compare: --report-only rebuilds the report from the folder's own config.json; it does "
                  f"not take {bad} (accepted: --out, --preset, --tasks, --no-plots)", file=sys.stderr)
            return 2
        out = args.out or os.path.join("runs", f"compare-{args.preset}")
        print(summary_text(rebuild_report(out, plots=not args.no_plots, tasks=args.tasks)))
        return 0
    from relpos.commands.hf import check_hf_flags, run_from_args

    check_hf_flags(args)
    if args.hf_model:
        return run_from_args(args)
    if args.preset == "scale":
        return _run_scale(args)
    from relpos.corpus.cache_only import cache_only

    with cache_only() if args.dry_run else contextlib.nullcontext():  # a plan reads no corpus that is not cached
        cfg = build_config(args)
    out = args.out or os.path.join("runs", f"compare-{cfg.preset}")
    validated_before = [t.strip() for t in args.reuse_validated_before.split(",") if t.strip()]
    from relpos.compare.config import ALL_TASKS

    bad = sorted(set(validated_before) - set(ALL_TASKS))
    if bad or (validated_before and not args.reuse):
        print("relpos compare: --reuse-validated-before " + (f"names unknown tasks: {', '.join(bad)} "
              f"(known: {', '.join(ALL_TASKS)})" if bad else "needs --reuse FOLDER"), file=sys.stderr)
        return 2
    for folder in args.reuse:
        if not os.path.isfile(os.path.join(folder, "results.sqlite")):
            print(f"relpos compare: --reuse {folder}: no results.sqlite there (give the --out folder of an earlier "
                  "relpos compare)", file=sys.stderr)
            return 2
    if args.dry_run:
        from relpos.corpus.cache_only import CorpusNotCached

        with cache_only():
            try:
                lines = _dry_run_lines(cfg, out, args, validated_before)
            except CorpusNotCached as e:  # the fingerprint hashes the tokenized corpus: settled at run time
                lines = _uncached_lines(cfg, out, args, e)
        try:
            print("\n".join(lines))
        except BrokenPipeError:  # e.g. piped into `head`
            sys.stderr.close()
        return 0
    note = passkey_warning(cfg)
    if note:
        print(note, file=sys.stderr)
    runner = make_runner(args.runner, workers=cfg.workers, threads=cfg.threads, ray_address=args.ray_address,
                         nproc=args.nproc)
    command = "relpos compare " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 1 else ""
    summary = compare(cfg, out, runner=runner, force=args.force, progress=args.progress, plots=not args.no_plots,
                      command=command.strip(), keep_models=not args.no_keep_models, reuse=args.reuse,
                      reuse_validated_before=validated_before)
    print(summary_text(summary))
    if summary.interrupted:
        return 130
    return 1 if summary.failed else 0


def _dry_run_lines(cfg, out: str, args: argparse.Namespace, validated_before: list[str]) -> list[str]:
    """The plan of ``--dry-run``: the fingerprint, the runs and what ``out`` already holds."""
    from relpos.compare.status import folder_status, status_lines
    from relpos.compare.sweep import plan

    from relpos.compare.additions import join_evaluations

    adds = join_evaluations(cfg, out, force=args.force)  # the folder's evaluations joined, as a run would
    jobs = plan(cfg)
    lines = [f"preset {cfg.preset}, fingerprint {cfg.fingerprint()}, {len(jobs)} training runs -> {out}"]
    note = passkey_warning(cfg)
    if note:
        lines.append(note)
    lines += [f"{out} also measures {k} (added earlier): kept" for k in (adds.kept if adds else [])]
    shown = cfg
    if adds is not None and adds.needed:
        from relpos.compare.additions import missing_line

        lines.append(missing_line(adds) if adds.missing() else
                     f"would add {adds.what()} to {out} by evaluating the saved models of {len(adds.jobs)} "
                     "finished runs (no training), then run what is left")
        shown = cfg.replace(rope_variants=list(adds.old_protocol.get("rope_variants") or []),
                            passkey=dict(adds.old_protocol.get("passkey") or {}))
    status = folder_status(shown, out, [j.key for j in jobs])
    lines += status_lines(status)
    if args.reuse:  # after the summary line, before the per-run lines
        from relpos.compare.reuse import reusable

        skip = {j.job for j in status.jobs if j.state in ("done", "running")}
        for i, folder in enumerate(args.reuse):
            got = reusable(cfg, [j.key for j in jobs], folder, skip=skip, validated_before=validated_before)
            skip |= {r["job"] for r in got}
            lines.insert(2 + i, f"--reuse {folder}: {len(got)} runs would be copied "
                            f"({sum(float(r.get('cpu_seconds') or 0) for r in got):,.0f} CPU-seconds)")
    return lines


def _uncached_lines(cfg, out: str, args: argparse.Namespace, why) -> list[str]:
    """The plan of ``--dry-run`` for a corpus not read yet (``why``, a ``CorpusNotCached``): its fingerprint hashes
    the tokenized text, so what depends on it (is ``out`` this configuration's, what ``--reuse`` copies) is said to
    be settled at run time; nothing is read or written."""
    from relpos.compare.status import FolderStatus, JobStatus, status_lines
    from relpos.compare.store import read_store_meta
    from relpos.compare.sweep import plan

    jobs = plan(cfg)
    lines = [f"preset {cfg.preset}, fingerprint computed at run time (it hashes the tokenized corpus), "
             f"{len(jobs)} training runs -> {out}", f"{why}; the dry run tokenized and wrote nothing"]
    note = passkey_warning(cfg)
    if note:
        lines.append(note)
    db = os.path.join(out, "results.sqlite")
    if os.path.isfile(db):
        old = (read_store_meta(db) or {}).get("fingerprint")
        lines.append(f"{out} holds results (fingerprint {old}): whether they are this configuration's is known once "
                     "the corpus is read; a run of another configuration stops without changing them")
        lines += [f"  {j.key}" for j in jobs]
    else:
        lines += status_lines(FolderStatus(Path(out), "", "empty", None, [JobStatus(j.key, "to run") for j in jobs]))
    lines[2:2] = [f"--reuse {folder}: the runs it can give are known once the corpus is read" for folder in args.reuse]
    return lines


#: Flags ``--report-only`` takes (the configuration is the folder's; ``--tasks`` narrows the report).
_REPORT_FLAGS = ("preset", "out", "tasks", "no_plots", "report_only")


def _flags_besides(args: argparse.Namespace, accepted: tuple[str, ...]) -> str:
    """The flags given (set away from their defaults) that are not in ``accepted``, as ``--a, --b``."""
    from relpos.cli import build_parser

    defaults = vars(build_parser().parse_args(["compare"]))
    extra = sorted(k for k, v in vars(args).items() if k in defaults and k not in accepted and v != defaults[k])
    return ", ".join("--" + k.replace("_", "-") for k in extra)


#: Flags the scale check takes (its cells are fixed by the preset).
_SCALE_FLAGS = ("preset", "out", "workers", "threads", "runner", "ray_address", "nproc", "force", "no_plots",
                "no_keep_models", "progress", "report_only", "dry_run")


def _run_scale(args: argparse.Namespace) -> int:
    """``--preset scale``: every cell of the scale check (:mod:`relpos.compare.scale`), resumable."""
    from relpos.cli import build_parser
    from relpos.compare.runner import make_runner
    from relpos.compare.scale import run_scale, scale_markdown

    defaults = vars(build_parser().parse_args(["compare"]))
    extra = sorted(k for k, v in vars(args).items() if k in defaults and k not in _SCALE_FLAGS and v != defaults[k])
    if extra or args.dry_run or args.report_only:
        bad = ", ".join("--" + k.replace("_", "-") for k in extra) or ("--dry-run" if args.dry_run else "--report-only")
        print(f"relpos compare: --preset scale runs its fixed cells; it does not take {bad} "
              "(accepted: --out, --workers, --threads, --runner, --force, --no-plots, --no-keep-models, --progress)",
              file=sys.stderr)
        return 2
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    threads = args.threads or 1
    runner = make_runner(args.runner, workers=workers, threads=threads, ray_address=args.ray_address, nproc=args.nproc)
    summary = run_scale(args.out or os.path.join("runs", "compare-scale"), runner=runner, workers=workers,
                        threads=threads, force=args.force, progress=args.progress, plots=not args.no_plots,
                        keep_models=not args.no_keep_models, command="relpos compare --preset scale")
    print(scale_markdown(summary))
    return 0
