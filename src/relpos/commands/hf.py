"""The command line of a pretrained checkpoint's evaluation (``relpos compare --hf-model`` and
``python -m relpos.commands.hf``): its flags, their checks, and the typed spec they become.

Nothing below this module sees the flags: :func:`spec_from_args` turns them into an
:class:`~relpos.pretrained.evaluate.HFEvalSpec` and :func:`relpos.pretrained.sweep.run_hf` takes that.
"""

from __future__ import annotations

import argparse
import sys

from relpos.pretrained.sweep import run_hf

__all__ = ["add_hf_arguments", "check_hf_flags", "spec_from_args", "run_from_args", "build_parser", "main"]




def _factors(s: str) -> list[float]:
    from relpos.commands._common import comma_list

    return comma_list(float)(str(s))


def _scalings(s: str) -> list[str]:
    out = [t.strip() for t in str(s).split(",") if t.strip()]
    twice = sorted({t for t in out if out.count(t) > 1})
    if twice:  # it would be evaluated (and reported) twice
        raise argparse.ArgumentTypeError(f"{', '.join(twice)} given more than once; name each scaling once")
    return out


def add_hf_arguments(g, *, module: bool = False) -> None:
    """The flags of an HF evaluation (``relpos compare --hf-model`` and the module entry point)."""
    g.add_argument("--hf-model", default=None, required=module, metavar="PATH",
                   help="a local LLaMA-family checkpoint (folder with config.json, or a .gguf file): evaluated "
                        "zero-shot as shipped and under each RoPE scaling (needs --corpus; no training)")
    g.add_argument("--hf-factors", type=_factors, default=None, metavar="F,F,...",
                   help="evaluation lengths as multiples of the model's original context (default 1,2,4,8)")
    g.add_argument("--hf-context", type=int, default=None, metavar="N",
                   help="the model's original context L0 (default: original_max_position_embeddings, else "
                        "max_position_embeddings of its config)")
    g.add_argument("--scalings", type=_scalings, default=None, metavar="S,S,...",
                   help="rows: native (the checkpoint as shipped), none, linear, dynamic, yarn, llama3 "
                        "(default: all)")
    g.add_argument("--max-eval-tokens", type=int, default=None, metavar="M",
                   help="longest evaluated length and tokens per forward pass (default 32768); longer lengths "
                        "are left out and listed")
    g.add_argument("--dtype", default=None, metavar="DTYPE",
                   help="float32 (default), bfloat16 or float16 weights; GGUF files are dequantised to it")
    g.add_argument("--hf-blocks", type=int, default=None, metavar="N",
                   help="fixed-target blocks per length (default max(16, eval tokens / longest length)); with "
                        "the passkey depths, what dominates the cost")
    g.add_argument("--passkey-depths", type=_factors, default=None, metavar="D,D,...",
                   help="needle depths as fractions in [0, 1] (default 0,0.25,0.5,0.75,1); --passkey N examples "
                        "per length and depth")
    if module:
        g.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")


_HF_ONLY = ("hf_factors", "hf_context", "scalings", "max_eval_tokens", "dtype", "hf_blocks", "passkey_depths")


def check_hf_flags(args) -> None:
    """HF-only flags without ``--hf-model`` are refused by name (never silently ignored)."""
    if getattr(args, "hf_model", None):
        return
    given = [f for f in _HF_ONLY if getattr(args, f, None) is not None]
    if given:
        raise ValueError(f"--{given[0].replace('_', '-')} needs --hf-model PATH")


def spec_from_args(args) -> dict:
    from relpos.commands.corpus_flags import corpus_spec_from_args

    corpus = corpus_spec_from_args(args)
    if corpus is None:
        raise ValueError("--hf-model needs --corpus PATH")
    corpus.pop("tokenizer", None)  # the model's tokenizer (or --tokenizer) is set by the spec
    spec = {"model": args.hf_model, "corpus": corpus, "tokenizer": args.tokenizer, "device": args.device}
    for key, flag in (("factors", "hf_factors"), ("context", "hf_context"), ("scalings", "scalings"),
                      ("max_eval_tokens", "max_eval_tokens"), ("dtype", "dtype"), ("eval_tokens", "eval_tokens"),
                      ("passkey_n", "passkey"), ("blocks", "hf_blocks"), ("passkey_depths", "passkey_depths")):
        v = getattr(args, flag, None)
        if v is not None:
            spec[key] = v
    return spec


def run_from_args(args: argparse.Namespace) -> int:
    """``--hf-model``'s flags to the library call (``--dry-run``: the plan only)."""
    return run_hf(spec_from_args(args), args.out, dry_run=bool(getattr(args, "dry_run", False)),
                  progress=getattr(args, "progress", None), force=bool(getattr(args, "force", False)),
                  plots=not getattr(args, "no_plots", False))


def build_parser() -> argparse.ArgumentParser:
    from relpos.commands.corpus_flags import add_corpus_arguments

    p = argparse.ArgumentParser(prog="python -m relpos.commands.hf",
                                description="zero-shot RoPE-scaling evaluation of a local Hugging Face causal LM")
    add_hf_arguments(p, module=True)
    add_corpus_arguments(p)
    p.add_argument("--out", default=None, help="results folder (default runs/hf-<model>)")
    p.add_argument("--eval-tokens", type=int, default=None, help="validation tokens per length (default 16384)")
    p.add_argument("--passkey", type=int, default=None, metavar="N",
                   help="passkey examples per cell, 0 for none (default 10)")
    p.add_argument("--force", action="store_true", help="move the results of another evaluation aside")
    p.add_argument("--dry-run", action="store_true", help="print what would be evaluated; write nothing")
    p.add_argument("--no-plots", action="store_true", help="no heatmaps")
    p.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show bars")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="never show bars")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run_from_args(args)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"relpos hf: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
