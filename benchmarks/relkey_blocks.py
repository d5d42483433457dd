"""Transformer-XL's causal attention call, forward and backward, by 2, 3 or 4 row blocks against the whole square.

The measurement behind :func:`relpos.attention.dense_relkey.relkey_blocks`, which picks how many row blocks
:mod:`relpos.attention.dense_relkey` runs (0: the whole skewed term through ``_TermAttention``). Each variant is
the same ``relpos.attention(..., impl="dense", causal=True)`` call with the pick forced; NoPE's causal SDPA call
is timed beside them as a yardstick. Process CPU time, one thread, variants interleaved round by round; medians,
and ratios as medians of the per-round ratios against the whole square. The gradient of the output is dense
(a fixed random tensor), as a model's is.

    python benchmarks/relkey_blocks.py --out benchmarks/results     # results/relkey_blocks.{json,md}
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from pathlib import Path

import torch

import relpos
from relpos.encodings.transformer_xl import TransformerXL

relkey = importlib.import_module("relpos.attention.dense_relkey")

#: (B, H, N, D): the compare presets' causal shapes and the sizes between them and 256 rows
SHAPES = ((32, 4, 32, 16), (21, 4, 48, 16), (4, 4, 64, 16), (16, 4, 64, 16), (64, 4, 64, 16), (4, 4, 64, 32),
          (16, 4, 64, 32), (16, 4, 64, 64), (12, 4, 80, 16), (6, 4, 80, 16), (10, 4, 96, 16), (10, 4, 96, 64), (8, 4, 128, 16),
          (8, 4, 128, 32), (8, 4, 128, 64), (5, 4, 192, 16), (4, 4, 256, 16))
VARIANTS = ("nope", "whole", "b2", "b3", "b4")


def _forced(n: int):
    return lambda B, H, N, D: n


def measure(B: int, H: int, N: int, D: int, rounds: int, warmup: int = 3) -> dict:
    torch.manual_seed(0)
    enc = TransformerXL(n_heads=H, head_dim=D)
    x = torch.randn(B, N, 3, H, D, requires_grad=True)  # (B, N, 3, H, D): q, k, v as a projection makes them
    gout = torch.randn(B, H, N, D)
    rule = relkey.relkey_blocks

    def call(kind: str) -> None:
        relkey.relkey_blocks = _forced(0 if kind == "whole" else int(kind[1:])) if kind != "nope" else rule
        q, k, v = (t.transpose(1, 2) for t in x.unbind(2))  # (B, H, N, D)
        if kind == "nope":
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            o = relpos.attention(q, k, v, enc, causal=True, impl="dense")
        o.backward(gout)

    times: dict[str, list[float]] = {k: [] for k in VARIANTS}
    try:
        for r in range(warmup + rounds):
            for kind in VARIANTS:
                t = time.process_time()
                call(kind)
                if r >= warmup:
                    times[kind].append(time.process_time() - t)
    finally:
        relkey.relkey_blocks = rule
    row = {"B": B, "H": H, "N": N, "D": D, "rule_picks": rule(B, H, N, D)}
    for kind in VARIANTS:
        row[f"{kind}_ms"] = round(statistics.median(times[kind]) * 1e3, 3)
    for kind in ("b2", "b3", "b4"):
        row[f"{kind}_over_whole"] = round(statistics.median(a / b for a, b in zip(times[kind], times["whole"])), 3)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.time()
    rows = []
    lines = ["| B x H x N x D | NoPE ms | whole ms | 2 blocks | 3 blocks | 4 blocks | relkey_blocks picks |",
             "|---|---|---|---|---|---|---|"]
    for shape in SHAPES:
        r = measure(*shape, rounds=a.rounds)
        rows.append(r)
        best = min(("whole", 1.0), *((k, r[f"{k}_over_whole"]) for k in ("b2", "b3", "b4")), key=lambda kv: kv[1])
        lines.append(f"| {' x '.join(map(str, shape))} | {r['nope_ms']:.2f} | {r['whole_ms']:.2f} | "
                     + " | ".join(f"{r[f'{k}_over_whole']:.2f}x" for k in ("b2", "b3", "b4"))
                     + f" | {r['rule_picks'] or 'whole'} (fastest here: {best[0]}) |")
        print(lines[-1], flush=True)
    if a.out:
        from relpos.outdir import write_json_atomic, write_text_atomic

        a.out.mkdir(parents=True, exist_ok=True)
        command = "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])
        write_json_atomic(a.out / "relkey_blocks.json", {
            "command": command, "torch": torch.__version__, "threads": 1, "seconds": round(time.time() - t0),
            "load_avg_end": os.getloadavg(), "rows": rows})
        write_text_atomic(a.out / "relkey_blocks.md", "\n".join([
            "# Transformer-XL's causal attention call by row blocks", "", f"Command: `{command}`", "",
            "Forward and backward, process CPU time, one thread, interleaved rounds; block columns: medians of the "
            "per-round ratios to the whole square (*whole*: the skewed term through `_TermAttention`, or by "
            "`_CausalTermAttention`'s 4 row blocks from 256 rows).", "", *lines, ""]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
