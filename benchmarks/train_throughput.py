"""Training throughput of TransformerLM per position scheme, relative to NoPE.

Every scheme gets its own model (same preset, same data) and optimizer; after
warm-up steps the timed steps run in interleaved rounds (scheme order rotated
each round), so machine-load drift hits every scheme alike. The reported time is
the median over rounds of one full optimizer step (forward, backward, clipping,
AdamW) on CPU.

Usage::

    python benchmarks/train_throughput.py                 # preset small, seq 256
    python benchmarks/train_throughput.py --schemes nope t5 rope --rounds 3

Writes ``benchmarks/results/train_throughput.json`` and ``.md`` and prints the table.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

LIMIT = 1.5  # a scheme should not need more than this many times NoPE's step time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="small", help="model preset (default small)")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per row (default 256)")
    p.add_argument("--batch-size", type=int, default=4, help="rows per step (default 4)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps per scheme (default 1)")
    p.add_argument("--rounds", type=int, default=4, help="timed steps per scheme, interleaved (default 4)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--schemes", nargs="*", default=None, help="schemes to run (default: every available one)")
    p.add_argument("--impl", default="auto", help="attention implementation (default auto, as ModelConfig)")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"), help="results folder")
    return p.parse_args(argv)


def explain(scheme: str) -> str:
    """Why a scheme costs what it does (the work it adds to plain attention)."""
    from relpos.encodings import get_scheme

    cls, opts = get_scheme(scheme)
    sites = set(cls.acts_on)
    if not sites:
        return "fused causal SDPA, nothing added"
    if sites == {"embedding"}:
        return "one addition at the input"
    notes = []
    if "qk" in sites:
        notes.append("rotates q and k in every layer (elementwise, plus backward)")
    if "bias" in sites:
        if cls.toeplitz:
            notes.append("bias from the N+M-1 distinct offsets expanded to an (H, N, N) additive mask: SDPA runs "
                         "with a float mask instead of its plain causal kernel")
        else:
            notes.append("bias evaluated for every (i, j) pair, then an additive mask")
    if "score" in sites:
        notes.append("content-dependent (B, H, N, N) score term formed outside SDPA, plus its backward")
    if "value" in sites:
        notes.append("explicit softmax and a value-side term (no fused SDPA)")
    return "; ".join(notes)


def run(args: argparse.Namespace) -> dict:
    import torch

    from relpos.data import ByteLMSource, stdlib_corpus
    from relpos.training.distributed import DistContext
    from relpos.encodings import scheme_names
    from relpos.model import ModelConfig
    from relpos.training.loop import TrainConfig, Trainer

    torch.set_num_threads(args.threads)
    names = args.schemes or scheme_names()
    if "nope" not in names:
        names = ["nope"] + list(names)
    corpus = stdlib_corpus("train", max_bytes=2_000_000)
    src = ByteLMSource(corpus, args.batch_size, args.seq_len, seed=0)
    tcfg = TrainConfig(steps=args.warmup + args.rounds, batch_size=args.batch_size, seq_len=args.seq_len,
                       warmup=1, progress=False, device="cpu")
    trainers = {}
    for name in names:
        mcfg = ModelConfig.preset(args.preset, scheme=name, attn_impl=args.impl,
                                  max_len=max(args.seq_len, ModelConfig.preset(args.preset, scheme="nope").max_len))
        trainers[name] = Trainer(mcfg, tcfg, src, ctx=DistContext())
    params = {n: t.model.num_params() for n, t in trainers.items()}
    for name, tr in trainers.items():
        for _ in range(args.warmup):
            tr.step()
        print(f"warmed up {name}", file=sys.stderr)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            t0 = time.perf_counter()
            trainers[name].step()
            times[name].append(time.perf_counter() - t0)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    tokens = args.batch_size * args.seq_len
    base = statistics.median(times["nope"])
    rows = []
    for name in names:
        med = statistics.median(times[name])
        rows.append({
            "scheme": name,
            "step_s": med,
            "tokens_per_s": tokens / med,
            "time_vs_nope": med / base,
            "tokens_per_s_vs_nope": base / med,
            "params": params[name],
            "over_limit": med / base > LIMIT,
            "why": explain(name),
            "all_step_s": times[name],
        })
    return {
        "benchmark": "train_throughput",
        "command": "python benchmarks/train_throughput.py " + " ".join(sys.argv[1:]),
        "preset": args.preset,
        "seq_len": args.seq_len,
        "batch_size": args.batch_size,
        "tokens_per_step": tokens,
        "warmup_steps": args.warmup,
        "timed_rounds": args.rounds,
        "threads": args.threads,
        "attn_impl": args.impl,
        "limit_time_vs_nope": LIMIT,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "rows": rows,
    }


def markdown(res: dict) -> str:
    lines = [
        f"# Training throughput per scheme (TransformerLM preset `{res['preset']}`, sequence {res['seq_len']})",
        "",
        f"Command: `{res['command'].strip()}`",
        "",
        f"CPU, {res['threads']} thread(s), torch {res['torch']}, batch {res['batch_size']} x {res['seq_len']} = "
        f"{res['tokens_per_step']} tokens per optimizer step, attention impl `{res['attn_impl']}`; median of "
        f"{res['timed_rounds']} interleaved timed steps per scheme after {res['warmup_steps']} warm-up step(s).",
        "",
        "| scheme | params | step (s) | tokens/s | tokens/s vs NoPE | time vs NoPE | what it adds |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in res["rows"]:
        flag = " **over 1.5x**" if r["over_limit"] else ""
        lines.append(
            f"| {r['scheme']} | {r['params']:,} | {r['step_s']:.3f} | {r['tokens_per_s']:,.0f} | "
            f"{r['tokens_per_s_vs_nope']:.2f} | {r['time_vs_nope']:.2f}x{flag} | {r['why']} |"
        )
    over = [r["scheme"] for r in res["rows"] if r["over_limit"]]
    lines.append("")
    if over:
        lines.append(f"Over the {res['limit_time_vs_nope']}x limit: {', '.join(over)} (see 'what it adds').")
    else:
        lines.append(f"Every scheme stays within {res['limit_time_vs_nope']}x of NoPE's step time.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    res = run(args)
    from relpos.bench.results import write_results

    write_results(args.out, "train_throughput", res, markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
