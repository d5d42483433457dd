"""``relpos generate``: sample text from a checkpoint written by ``relpos train``."""

from __future__ import annotations

import argparse
import sys

HELP = "sample text from a trained checkpoint (KV-cached decoding)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", "-c", required=True, metavar="DIR", help="checkpoint directory (relpos train --out)")
    p.add_argument("--prompt", "-p", default="def ", help="text to continue (default 'def ')")
    p.add_argument("--tokens", "-n", type=int, default=200, help="bytes to generate (default 200)")
    p.add_argument("--greedy", action="store_true", help="always take the most likely byte")
    p.add_argument("--temperature", "-t", type=float, default=0.8, help="sampling temperature (default 0.8)")
    p.add_argument("--top-k", type=int, default=None, help="sample among the k most likely bytes")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: random)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")


def main(args: argparse.Namespace) -> int:
    from relpos.training import checkpoint
    from relpos.commands._common import check_device
    from relpos.data import decode, encode
    from relpos.validation import MAX_POSITIONS, check_float, check_int

    if not args.prompt:
        raise ValueError("--prompt must not be empty")
    check_int("--tokens", args.tokens, 0, MAX_POSITIONS)
    check_float("--temperature", args.temperature, 0.0, lo_open=True)
    if args.top_k is not None:
        check_int("--top-k", args.top_k, 1)
    if args.seed is not None:
        check_int("--seed", args.seed, 0, 2**63 - 1)
    check_device(args.device)
    model, cfg = checkpoint.load(args.checkpoint, map_location=args.device)
    if cfg.vocab_size != 256:
        raise ValueError(f"checkpoint has vocab_size {cfg.vocab_size}; relpos generate works on byte models (256)")
    idx = encode(args.prompt)[None].to(args.device)
    out = model.generate(idx, args.tokens, greedy=args.greedy, temperature=args.temperature, top_k=args.top_k,
                         seed=args.seed)
    sys.stdout.write(decode(out[0]) + "\n")
    return 0
