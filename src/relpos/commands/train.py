"""``relpos train``: train a TransformerLM on the embedded corpus (the Python standard library)."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "train a byte-level TransformerLM with any position scheme (checkpoints, --resume, torchrun)"


def _option(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    try:
        val = json.loads(v)
    except json.JSONDecodeError:
        val = v  # a bare string, e.g. scaling=yarn
    return k.strip(), val


def add_arguments(p: argparse.ArgumentParser) -> None:
    from relpos.model import PRESETS

    p.add_argument("--preset", default="tiny", help=f"model preset: {', '.join(PRESETS)} (default tiny)")
    p.add_argument("--scheme", default="rope", help="position scheme (see `relpos schemes`; default rope)")
    p.add_argument("--option", "-o", action="append", type=_option, default=[], metavar="KEY=VALUE",
                   help="scheme option, repeatable, JSON values (e.g. -o num_buckets=16)")
    p.add_argument("--share-encoding", choices=["yes", "no", "default"], default="default",
                   help="one scheme module for all layers (default: the scheme's own default)")
    p.add_argument("--random-positions", type=int, default=None, metavar="L",
                   help="randomized positions: sample training positions from [0, L)")
    p.add_argument("--max-len", type=int, default=None, help="override the preset's max_len")
    p.add_argument("--dropout", type=float, default=None, help="override the preset's dropout")
    p.add_argument("--steps", type=int, default=200, help="optimizer steps (default 200)")
    p.add_argument("--seq-len", type=int, default=128, help="training sequence length (default 128)")
    p.add_argument("--batch-size", type=int, default=16, help="rows per global micro-batch (default 16)")
    p.add_argument("--accum-steps", type=int, default=1, help="micro-batches per optimizer step (default 1)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    p.add_argument("--warmup", type=int, default=20, help="warm-up steps (default 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of init, data and dropout (default 0)")
    p.add_argument("--out", default="runs/train",
                   help="checkpoint folder: new, empty, or holding an earlier relpos checkpoint (default runs/train)")
    p.add_argument("--ckpt-every", type=int, default=0, help="checkpoint every N steps too (default: end only)")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--max-bytes", type=int, default=None, help="use only the first N bytes of the corpus")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    from relpos.commands.corpus_flags import add_corpus_arguments

    add_corpus_arguments(p)
    bar = p.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show a progress bar")
    bar.add_argument("--no-progress", dest="progress", action="store_false", help="never show a progress bar")


def main(args: argparse.Namespace) -> int:
    from relpos.training import distributed as D
    from relpos.training.checkpoint import check_checkpoint_target
    from relpos.commands._common import check_device
    from relpos.data import ByteLMSource, stdlib_corpus
    from relpos.model import ModelConfig
    from relpos.training.loop import TrainConfig, evaluate_loss, train
    from relpos.training.malloc import keep_freed_memory

    keep_freed_memory()  # this process trains: keep freed buffers (relpos.training.malloc)
    overrides: dict = {"scheme": args.scheme, "scheme_options": dict(args.option)}
    if args.share_encoding != "default":
        overrides["share_encoding"] = args.share_encoding == "yes"
    for field, val in (("random_positions", args.random_positions), ("max_len", args.max_len),
                       ("dropout", args.dropout)):
        if val is not None:
            overrides[field] = val
    check_device(args.device)
    check_checkpoint_target(args.out, writable=True)  # a bad or read-only --out fails before anything is built
    mcfg = ModelConfig.preset(args.preset, **overrides)
    tcfg = TrainConfig(
        steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len, accum_steps=args.accum_steps,
        lr=args.lr, warmup=args.warmup, seed=args.seed, ckpt_dir=args.out, ckpt_every=args.ckpt_every,
        resume=args.resume, progress=args.progress, device=args.device,
    )
    if args.seq_len > mcfg.max_len:
        raise ValueError(f"--seq-len ({args.seq_len}) exceeds the model's max_len ({mcfg.max_len})")
    from relpos.corpus import Requirement, TokenLMSource, cached_corpus
    from relpos.commands.corpus_flags import corpus_spec_from_args

    spec = corpus_spec_from_args(args)
    corpus = None
    if spec is not None:
        n = tcfg.seq_len + 1
        corpus = cached_corpus(spec, require=Requirement(n, n, f"windows of {n} {{unit}}"))
        mcfg = ModelConfig.preset(args.preset, **overrides, vocab_size=corpus.vocab_size)
        source = corpus.train_source(tcfg.batch_size, tcfg.seq_len, seed=tcfg.seed, limit=args.max_bytes)
    else:
        source = ByteLMSource(stdlib_corpus("train", args.max_bytes), tcfg.batch_size, tcfg.seq_len, seed=tcfg.seed)
    ctx = D.setup(args.device)  # joins the torchrun group once, for training and the final report
    try:
        result = train(mcfg, tcfg, source)
    except BaseException:
        D.teardown(ctx)
        raise
    if ctx.is_main:
        if corpus is None:
            val = ByteLMSource(stdlib_corpus("val", 2_000_000), 8, tcfg.seq_len, seed=1)
        else:
            val = TokenLMSource(corpus.array("val"), 8, tcfg.seq_len, seed=1, vocab_size=corpus.vocab_size)
        vloss = evaluate_loss(result.model, val, 4)
        bpb = vloss / 0.6931471805599453 if corpus is None else corpus.bits_per_byte(vloss)
        last = result.losses[-1] if result.losses else float("nan")
        print(f"scheme={mcfg.scheme} preset={args.preset} steps={result.steps} train_loss={last:.4f} "
              f"val_loss={vloss:.4f} ({bpb:.3f} bits/byte) "
              f"tokens/s={result.tokens_per_s:,.0f} checkpoint={args.out}", file=sys.stdout)
    D.teardown(ctx)
    return 0
