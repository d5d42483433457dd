"""``relpos extend``: context extension by fine-tuning.

Two modes, one command:

* ``relpos extend --from COMPARE_FOLDER --out DIR``: the ``extend`` benchmark on the fitted language models of a
  finished ``relpos compare`` folder (every recipe and seed fine-tuned at ``factor x L`` for K steps, evaluated at
  1x, 4x, 8x, 16x L; :mod:`relpos.extend.bench`);
* ``relpos extend --hf-model PATH_OR_GGUF --corpus C --scaling yarn --factor 4 --steps N --out DIR``: a Hugging
  Face checkpoint evaluated as shipped, zero-shot under the scaling (or with ``--scheme`` swapped in), fine-tuned
  at ``factor x`` its context and evaluated again (:mod:`relpos.extend.hf`).

Flags become the typed specs :class:`relpos.extend.spec.ExtendSpec` and :class:`relpos.extend.hf_spec.HFExtendSpec`
here; nothing below this module reads them.
"""

from __future__ import annotations

import argparse
import sys

from relpos.commands._common import comma_list as _csv

HELP = "extend a model's context by fine-tuning: the extend benchmark (--from) or your checkpoint (--hf-model)"




def add_arguments(p: argparse.ArgumentParser) -> None:
    from relpos.commands.corpus_flags import add_corpus_arguments

    g = p.add_argument_group("where from (one of)")
    g.add_argument("--from", dest="source", default=None, metavar="DIR",
                   help="a finished relpos compare --out folder: run the extend benchmark on its language models")
    g.add_argument("--hf-model", default=None, metavar="PATH",
                   help="a local LLaMA-family checkpoint (folder with config.json, or a .gguf file)")
    g = p.add_argument_group("both")
    g.add_argument("--out", required=True, metavar="DIR", help="output folder (new, empty, or this command's own)")
    g.add_argument("--factor", type=float, default=4, help="fine-tuning length as a multiple of L (default 4)")
    g.add_argument("--batch-size", type=int, default=None, help="rows per fine-tuning step")
    g.add_argument("--warmup", type=int, default=None, help="linear warm-up steps of fine-tuning")
    g.add_argument("--force", action="store_true", help="move the results of other settings aside in --out")
    g.add_argument("--dry-run", action="store_true", help="state the work and its estimated cost; run nothing")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar (default: on a terminal)")
    g = p.add_argument_group("the benchmark (--from)")
    g.add_argument("--recipes", type=_csv(str), default=None,
                   help="comma-separated: direct, pi, ntk, yarn, dynamic, alibi, kerple-log, nope (default: all)")
    g.add_argument("--seeds", type=_csv(int), default=None, help="seeds of the folder (default: all)")
    g.add_argument("--eval-factors", type=_csv(int), default=None, help="evaluation lengths in L (default 1,4,8,16)")
    g.add_argument("--k-fractions", type=_csv(float), default=None,
                   help="fine-tuning steps as fractions of the pretraining steps (default 0.01,0.03,0.1)")
    g.add_argument("--lr-grid", type=_csv(float), default=None,
                   help="fine-tuning rates, the same for every recipe, chosen on validation (default 3e-4,1e-3,3e-3)")
    g.add_argument("--allow-unfitted", action="store_true",
                   help="also use models the folder marks as not fitted (no conclusion is drawn from them)")
    g.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    g = p.add_argument_group("your checkpoint (--hf-model)")
    g.add_argument("--scaling", default=None, help="RoPE scaling: none, linear, dynamic, yarn (default), llama3")
    g.add_argument("--scheme", default=None, help="swap this relpos scheme in instead (relpos.hf.use_scheme)")
    g.add_argument("--steps", type=int, default=None, help="fine-tuning steps (default 100)")
    g.add_argument("--lr", type=float, default=None, help="peak fine-tuning rate (default 2e-5)")
    g.add_argument("--hf-context", type=int, default=None, help="the model's original context L0 (default: config)")
    g.add_argument("--hf-eval-factors", type=_csv(float), default=None,
                   help="evaluation lengths as multiples of L0 (default 1 and --factor)")
    g.add_argument("--eval-tokens", type=int, default=None, help="test tokens scored at each length (default 16384)")
    g.add_argument("--blocks", type=int, default=None, help="fixed-target blocks of the evaluation")
    g.add_argument("--max-eval-tokens", type=int, default=None, help="longest forward pass (default 32768)")
    g.add_argument("--passkey", type=int, default=None, help="passkey examples per depth (default 0: none)")
    g.add_argument("--ckpt-every", type=int, default=None, help="steps between training checkpoints")
    g.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    g.add_argument("--dtype", default=None, help="float32 (default), bfloat16 or float16")
    add_corpus_arguments(p)


_BENCH = ("recipes", "seeds", "eval_factors", "k_fractions", "lr_grid", "allow_unfitted")
_HF = ("scaling", "scheme", "steps", "lr", "hf_context", "hf_eval_factors", "eval_tokens", "blocks", "max_eval_tokens",
       "passkey", "ckpt_every", "device", "dtype", "corpus")


def _refuse(args, names, mode: str) -> None:
    for n in names:
        v = getattr(args, n, None)
        if v not in (None, False):
            raise ValueError(f"--{n.replace('_', '-')} is a flag of {mode}; it does nothing here")


def bench_spec(args):
    from relpos.extend.spec import ExtendSpec

    _refuse(args, _HF, "relpos extend --hf-model")
    kw = {k: tuple(getattr(args, k)) for k in ("recipes", "seeds", "eval_factors", "k_fractions", "lr_grid")
          if getattr(args, k) is not None}
    if args.factor != int(args.factor):
        raise ValueError(f"--factor must be an integer with --from, got {args.factor}")
    return ExtendSpec(source=args.source, out=args.out, factor=int(args.factor), warmup=args.warmup,
                      batch_size=args.batch_size, allow_unfitted=args.allow_unfitted, threads=args.threads,
                      force=args.force, **kw)


def hf_spec(args):
    from relpos.commands._common import check_device
    from relpos.commands.corpus_flags import corpus_spec_from_args
    from relpos.extend.hf_spec import HFExtendSpec

    _refuse(args, _BENCH, "relpos extend --from")
    corpus = corpus_spec_from_args(args)
    if corpus is None:
        raise ValueError("--hf-model needs --corpus PATH")
    corpus.pop("tokenizer", None)  # the model's tokenizer (or --tokenizer) is set by the spec
    check_device(args.device)
    if args.scheme is not None and args.scaling is not None:
        raise ValueError("--scaling and --scheme exclude each other: a RoPE scaling, or another scheme swapped in")
    kw = {k: v for k, v in (("scaling", args.scaling), ("steps", args.steps), ("lr", args.lr),
                            ("batch_size", args.batch_size), ("eval_tokens", args.eval_tokens), ("blocks", args.blocks),
                            ("max_eval_tokens", args.max_eval_tokens), ("passkey_n", args.passkey),
                            ("dtype", args.dtype)) if v is not None}
    ef = tuple(args.hf_eval_factors) if args.hf_eval_factors is not None else None
    return HFExtendSpec(model=args.hf_model, corpus=corpus, out=args.out, scheme=args.scheme, factor=args.factor,
                        warmup=args.warmup, context=args.hf_context, eval_factors=ef, tokenizer=args.tokenizer,
                        device=args.device, ckpt_every=args.ckpt_every, force=args.force, **kw)


def main(args: argparse.Namespace) -> int:
    if bool(args.source) == bool(args.hf_model):
        raise ValueError("name exactly one of --from COMPARE_FOLDER (the benchmark) and --hf-model PATH")
    from relpos.training.malloc import keep_freed_memory

    keep_freed_memory()  # this process trains: keep freed buffers (relpos.training.malloc)
    if args.source:
        from relpos.extend.bench import run_extend

        spec = bench_spec(args)
        res = run_extend(spec, progress=args.progress, dry_run=args.dry_run)
        if args.dry_run:
            print("\n".join(res["lines"]))
            return 0
        print(res["report"]["text"])
        print(f"results: {res['out']}/report.md, {res['out']}/extend.sqlite ({res['seconds'] / 60:.1f} min)")
        return 0
    from relpos.extend.hf import hf_dry_run_lines, run_hf_extend

    spec = hf_spec(args)
    if args.dry_run:
        print("\n".join(hf_dry_run_lines(spec)))
        return 0
    data = run_hf_extend(spec, progress=args.progress)
    print(data["report"])
    print(f"model: {spec.out}/model (see its README.md); report: {spec.out}/report.md", file=sys.stderr)
    return 0
