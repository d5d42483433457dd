"""Forward time of a Llama through the relpos bridge (``relpos.hf.use_scheme``) against the original.

Issue 32: the overhead of a bridged Llama forward at N = 2048 on CPU. One small
random Llama (no download) is copied per variant: the original (transformers'
``sdpa`` attention with its own RoPE), the bridge with ``"rope"`` (the same maths
through relpos: the overhead of the bridge itself), and the bridge with ``"alibi"``
and ``"t5"`` (schemes the original cannot run). Forwards run under
``torch.no_grad()`` in interleaved rounds (order rotated every round) so drifts in
machine load hit every variant alike; the clock is process CPU time with one
thread. Ratios are to the original in the same run.

Usage::

    nice -n 10 python benchmarks/hf_bridge_overhead.py            # N = 2048, 7 rounds
    python benchmarks/hf_bridge_overhead.py --n 512 --rounds 3

Writes ``benchmarks/results/hf_bridge_overhead.json`` and ``.md`` and prints the table.
"""

from __future__ import annotations

import argparse
import copy
import platform
import statistics
import time
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parent / "results"


def build(d_model: int, layers: int, heads: int, kv_heads: int, vocab: int, n: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=d_model, intermediate_size=4 * d_model, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max(n, 2048),
                      attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).eval()


def main(argv: list[str] | None = None) -> dict:
    import relpos.hf

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--schemes", default="rope,alibi,t5")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    base = build(args.d_model, args.layers, args.heads, args.kv_heads, 1024, args.n)
    variants = {"original": base}
    for s in args.schemes.split(","):
        variants[f"bridge:{s}"] = relpos.hf.use_scheme(copy.deepcopy(base), s)
    ids = torch.randint(0, 1024, (1, args.n), generator=torch.Generator().manual_seed(1))
    times: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    with torch.no_grad():
        ref = variants["original"](ids).logits
        if "bridge:rope" in variants:  # the bridge with the model's own RoPE must be the same model
            diff = (variants["bridge:rope"](ids).logits - ref).abs().max().item()
            assert diff < 1e-3, f"bridge:rope differs from the original by {diff}"
        for k in names:  # warm-up
            variants[k](ids)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for k in order:
                t0 = time.process_time()
                variants[k](ids)
                times[k].append(time.process_time() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    rows = [{"variant": k, "median_s": med[k], "min_s": min(times[k]), "max_s": max(times[k]),
             "ratio_to_original": med[k] / med["original"]} for k in names]
    doc = {"n": args.n, "rounds": args.rounds, "d_model": args.d_model, "layers": args.layers, "heads": args.heads,
           "kv_heads": args.kv_heads, "torch": torch.__version__, "threads": 1, "machine": platform.machine(),
           "clock": "process CPU time, one thread, interleaved rounds", "rows": rows}
    import transformers

    doc["transformers"] = transformers.__version__
    lines = [f"# Bridged Llama forward vs the original (CPU, N = {args.n})", "",
             f"Random Llama: d_model {args.d_model}, {args.layers} layers, {args.heads} query heads, "
             f"{args.kv_heads} key/value heads, batch 1, `torch.no_grad()`; torch {torch.__version__}, transformers "
             f"{doc['transformers']}; one thread, process CPU time, median of {args.rounds} interleaved rounds. "
             "`bridge:rope` is the same model through relpos (the bridge's own overhead).", "",
             "| variant | median s | min s | max s | x original |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['median_s']:.3f} | {r['min_s']:.3f} | {r['max_s']:.3f} | "
                     f"{r['ratio_to_original']:.2f} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if not args.no_write:
        from relpos.bench.results import write_results

        write_results(OUT, "hf_bridge_overhead", doc, table, echo=False)
    return doc


if __name__ == "__main__":
    main()
