"""Where a relpos ``flex`` call spends its time on a GPU, one part at a time, side by side in one process.

The first GPU run (benchmarks/README.md, "What the first GPU run found") measured flex far behind
FlashAttention at N = 8192 (T5 x11.5, ALiBi x28.5 forward) and ALiBi 2.5 times T5 although both add
``vals[h, j - i - d_min]`` from an ``(H, 2N - 1)`` table. This script separates the parts:

===============  ==========================================================================================
``sdpa``         ``F.scaled_dot_product_attention(is_causal=True)``: FlashAttention, the floor
``flex-mask``    compiled ``flex_attention`` with the causal ``BlockMask`` and no ``score_mod``
``flex-gather``  the same plus relpos's Toeplitz ``score_mod``: ``score + vals[h, kv - q + N - 1]`` (random table)
``flex-inline``  the same plus ``score + slope[h] * (kv - q)`` computed in the kernel (ALiBi with no table)
``relpos-S``     the whole ``relpos.attention(..., impl="flex")`` call for scheme S (t5, alibi, kerple-log)
===============  ==========================================================================================

Each case: two warm-up calls (the compile), then the median of ``--repeats`` timed calls (CUDA events on a
GPU), forward and forward+backward; ratios are to ``sdpa`` of the same run. ``--profile`` adds the ten
kernels with the most device time for one forward of each ``relpos-S`` (``torch.profiler``).

    PYTHONPATH=src python benchmarks/flex_profile.py --out benchmarks/results/gpu      # a GPU machine
    PYTHONPATH=src python benchmarks/flex_profile.py --dry-run --out /tmp/fp             # CPU, tiny, forward only

Writes ``flex_profile.json`` and prints a Markdown table. ``tests/bench/test_flex_profile.py`` runs the dry run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

SCHEMES = ("t5", "alibi", "kerple-log")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="time the parts of a relpos flex call (see the module docstring)")
    p.add_argument("--dry-run", action="store_true", help="CPU, N = 64, forward only, uncompiled")
    p.add_argument("--n", type=int, default=8192, help="sequence length (default 8192)")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--profile", action="store_true", help="add the top kernels of one forward of each relpos-S")
    p.add_argument("--out", required=True, help="output folder (flex_profile.json)")
    return p.parse_args(argv)


def _timer(device: str):
    def timed(fn) -> float:
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            return a.elapsed_time(b)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    return timed


def cases(args, device: str, dtype) -> dict:
    """``{name: (q, k, v) -> out}`` for every case (the tensors are made by the caller)."""
    import relpos
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    N, H = args.n, args.heads
    flex = flex_attention if device == "cpu" else torch.compile(flex_attention, dynamic=False)
    bm = create_block_mask(lambda b, h, q, kv: kv <= q, None, None, N, N, device=device, _compile=device == "cuda")
    table = torch.randn(H, 2 * N - 1, device=device, dtype=dtype)
    slope = torch.rand(H, device=device, dtype=dtype)

    def gather(score, b, h, q, kv):
        return score + table[h, kv - q + N - 1]

    def inline(score, b, h, q, kv):
        return score + slope[h] * (kv - q)

    out = {"sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
           "flex-mask": lambda q, k, v: flex(q, k, v, block_mask=bm),
           "flex-gather": lambda q, k, v: flex(q, k, v, score_mod=gather, block_mask=bm),
           "flex-inline": lambda q, k, v: flex(q, k, v, score_mod=inline, block_mask=bm)}
    for s in SCHEMES:
        enc = relpos.make_encoding(s, n_heads=H, head_dim=args.head_dim).to(device)
        out[f"relpos-{s}"] = (lambda e: lambda q, k, v: relpos.attention(q, k, v, e, causal=True, impl="flex"))(enc)
    return out


def measure(fn, qkv, backward: bool, repeats: int, timed) -> float:
    def call():
        if backward:
            fn(*qkv).float().sum().backward()
        else:
            with torch.no_grad():
                fn(*qkv)
    for _ in range(2):  # the first call compiles
        call()
    return statistics.median(timed(call) for _ in range(repeats))


def top_kernels(fn, qkv, device: str, k: int = 10) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.no_grad(), profile(activities=acts) as prof:
        fn(*qkv)
        if device == "cuda":
            torch.cuda.synchronize()
    attr = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    rows = sorted(prof.key_averages(), key=lambda e: getattr(e, attr, 0.0), reverse=True)[:k]
    return [{"name": e.key[:120], "calls": e.count, "self_us": round(float(getattr(e, attr, 0.0)), 1)} for e in rows]


def main(argv=None) -> int:
    args = parse_args(argv)
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("flex_profile: no CUDA device on this machine (use --dry-run to check the script on CPU)", file=sys.stderr)
        return 2
    if args.dry_run:
        args.n, args.heads, args.head_dim, args.repeats = 64, 2, 16, 2
    dtype = torch.float32 if args.dry_run else getattr(torch, args.dtype)
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(1, args.heads, args.n, args.head_dim, device=device, dtype=dtype, generator=g)
               for _ in range(3))
    timed = _timer(device)
    doc = {"kind": "relpos-flex-profile", "version": 1, "device": torch.cuda.get_device_name() if device == "cuda"
           else "cpu", "torch": torch.__version__, "N": args.n, "heads": args.heads, "head_dim": args.head_dim,
           "dtype": str(dtype).replace("torch.", ""), "repeats": args.repeats, "rows": [], "kernels": {}}
    modes = ("fwd",) if args.dry_run else ("fwd", "fwd+bwd")  # no FlexAttention backward on CPU
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        for name, fn in cases(args, device, dtype).items():
            row = {"case": name}
            for mode in modes:
                qkv = [t.detach().requires_grad_(mode == "fwd+bwd") for t in (q, k, v)]
                try:
                    row[mode] = measure(fn, qkv, mode == "fwd+bwd", args.repeats, timed)
                except Exception as err:  # noqa: BLE001 -- a failing case is reported, the others still run
                    row[mode], row[f"{mode}_error"] = None, str(err).splitlines()[0][:200] if str(err) else repr(err)
            doc["rows"].append(row)
            if args.profile and name.startswith("relpos-"):
                doc["kernels"][name] = top_kernels(fn, (q, k, v), device)
    base = doc["rows"][0]
    lines = [f"flex profile: {doc['device']}, torch {doc['torch']}, N = {args.n}, H = {args.heads}, "
             f"D = {args.head_dim}, {doc['dtype']}, causal, median of {args.repeats}", "",
             "| case | " + " | ".join(f"{m} ms | {m} / sdpa" for m in modes) + " |",
             "|---|" + "---:|---:|" * len(modes)]
    for r in doc["rows"]:
        cells = []
        for m in modes:
            ms, b = r.get(m), base.get(m)
            cells += ["error" if ms is None else f"{ms:.3f}", "-" if ms is None or not b else f"x{ms / b:.2f}"]
        lines.append(f"| {r['case']} | " + " | ".join(cells) + " |")
    for name, ks in doc["kernels"].items():
        lines += ["", f"top kernels, one forward of {name}:", ""] + [f"- {x['self_us']} us x{x['calls']}  {x['name']}"
                                                                     for x in ks]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from relpos.outdir import write_text_atomic  # a regular file, never through a link

    write_text_atomic(out / "flex_profile.json", json.dumps(doc, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
