"""A training step with subnormal floats kept against flushed to zero, alternating in one process.

``relpos.training.loop.Trainer.step`` runs with ``torch.set_flush_denormal(True)``
(:mod:`relpos.training.denormals`). This script times one training step (forward, backward, AdamW; process CPU
time, one thread) of the compare model both ways, step by step alternating, at a scale preset's and the
default preset's shapes, and prints the medians.

    python benchmarks/flush_denormal.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from relpos.model import ModelConfig, TransformerLM


def measure(scheme: str, B: int, N: int, d: int, steps: int, warmup: int) -> dict:
    torch.manual_seed(0)
    m = TransformerLM(ModelConfig(d_model=d, n_layers=2, n_heads=4, max_len=max(1024, N), scheme=scheme,
                                  vocab_size=256))
    opt = torch.optim.AdamW(m.parameters(), 1e-3)
    x, y = torch.randint(0, 256, (B, N)), torch.randint(0, 256, (B, N))
    times: dict[bool, list[float]] = {False: [], True: []}
    try:
        for r in range(warmup + steps):
            for flush in (False, True):
                torch.set_flush_denormal(flush)
                t = time.process_time()
                loss = torch.nn.functional.cross_entropy(m(x).view(-1, 256), y.view(-1))
                opt.zero_grad()
                loss.backward()
                opt.step()
                if r >= warmup:
                    times[flush].append(time.process_time() - t)
    finally:
        torch.set_flush_denormal(False)
    kept, flushed = statistics.median(times[False]), statistics.median(times[True])
    return {"scheme": scheme, "batch": B, "seq": N, "d_model": d, "kept_ms": round(kept * 1e3, 2),
            "flushed_ms": round(flushed * 1e3, 2), "ratio": round(flushed / kept, 3)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schemes", nargs="*", default=["nope", "t5", "transformer-xl", "fire", "deberta", "cope"])
    p.add_argument("--shapes", nargs="*", default=["4x256x64", "16x64x64"], help="BxNxd_model")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for shape in a.shapes:
        B, N, d = (int(v) for v in shape.split("x"))
        for s in a.schemes:
            r = measure(s, B, N, d, a.steps, a.warmup)
            rows.append(r)
            print(f"{s:15s} {B}x{N} d{d}: subnormals kept {r['kept_ms']:.1f} ms, flushed {r['flushed_ms']:.1f} ms, "
                  f"flushed / kept {r['ratio']:.2f}", flush=True)
    if a.out:
        from relpos.outdir import write_json_atomic

        a.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(a.out / "flush_denormal.json", {
            "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
            "torch": torch.__version__, "threads": 1, "load_avg_end": os.getloadavg(),
            "how": "process CPU time per training step at initialisation, medians, kept and flushed alternating",
            "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
