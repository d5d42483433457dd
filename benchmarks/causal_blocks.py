"""A training step with dense attention's causal row blocks against the whole square, interleaved in one process.

``relpos.attention.dense`` runs a causal call with a trained term (T5, FIRE, KERPLE, Transformer-XL, DeBERTa) of at
least ``CAUSAL_BLOCK_ROWS`` query rows by row blocks that skip the keys no row of the block sees
(``_CausalTermAttention``); below it, or with the threshold raised out of reach, one ``bmm`` covers the whole
square (``_TermAttention``). This script times one training step (forward, backward, AdamW) of the compare
model at a scale preset's shapes both ways, alternating step by step in one process, and prints the medians.

    python benchmarks/causal_blocks.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from relpos.model import ModelConfig, TransformerLM

dense = importlib.import_module("relpos.attention.dense")


def measure(scheme: str, B: int, N: int, d: int, steps: int, warmup: int) -> dict:
    torch.manual_seed(0)
    m = TransformerLM(ModelConfig(d_model=d, n_layers=2, n_heads=4, max_len=max(1024, N), scheme=scheme,
                                  vocab_size=256))
    opt = torch.optim.AdamW(m.parameters(), 1e-3)
    x, y = torch.randint(0, 256, (B, N)), torch.randint(0, 256, (B, N))

    def step():
        loss = torch.nn.functional.cross_entropy(m(x).view(-1, 256), y.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    times: dict[str, list[float]] = {"whole": [], "blocks": []}
    keep = dense.CAUSAL_BLOCK_ROWS
    try:
        for r in range(warmup + steps):
            for name, rows in (("whole", 1 << 30), ("blocks", keep)):
                dense.CAUSAL_BLOCK_ROWS = rows
                t = time.process_time()
                step()
                if r >= warmup:
                    times[name].append(time.process_time() - t)
    finally:
        dense.CAUSAL_BLOCK_ROWS = keep
    w, b = statistics.median(times["whole"]), statistics.median(times["blocks"])
    return {"scheme": scheme, "batch": B, "seq": N, "d_model": d, "whole_ms": round(w * 1e3, 2),
            "blocks_ms": round(b * 1e3, 2), "ratio": round(b / w, 3)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schemes", nargs="*", default=["t5", "kerple-log", "fire", "transformer-xl", "deberta"])
    p.add_argument("--shapes", nargs="*", default=["4x256x64", "4x256x128"], help="BxNxd_model (scale preset cells)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for shape in a.shapes:
        B, N, d = (int(v) for v in shape.split("x"))
        for s in a.schemes:
            rows.append(measure(s, B, N, d, a.steps, a.warmup))
            r = rows[-1]
            print(f"{s:15s} {B}x{N} d{d}: whole {r['whole_ms']:.1f} ms, blocks {r['blocks_ms']:.1f} ms, "
                  f"blocks / whole {r['ratio']:.2f}", flush=True)
    if a.out:
        from relpos.outdir import write_json_atomic

        a.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(a.out / "causal_blocks.json", {
            "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
            "torch": torch.__version__, "threads": 1, "load_avg_end": os.getloadavg(),
            "how": "process CPU time per training step, medians, whole square and row blocks alternating step by step",
            "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
