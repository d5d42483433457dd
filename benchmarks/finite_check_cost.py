"""Cost of the NaN/inf check on q and k (issue 29 item 15) in ``relpos.attention``.

``reference``, ``dense`` and ``chunked`` refuse non-finite q or k: one sum over
each (an exact ``aminmax`` pass only when that sum is not finite). This times ``impl="dense"`` and ``impl="chunked"``
with the check and with it replaced by a no-op, interleaved, in a full causal
forward (N = 2048) and in one decoding step (Nq = 1 over a 2048-token cache), on
CPU with one thread (process CPU time, median of the rounds).

Usage::

    nice -n 10 python benchmarks/finite_check_cost.py

Prints the table (nothing is written).
"""

from __future__ import annotations

import statistics
import time

import torch

import relpos


def main() -> None:
    import importlib

    mod = importlib.import_module("relpos.attention")
    dense = importlib.import_module("relpos.attention.dense")
    chunked = importlib.import_module("relpos.attention.chunked")
    real = mod.check_finite
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    B, H, Hkv, D, N = 1, 8, 2, 64, 2048
    cases = []
    for scheme in ("rope", "alibi"):
        enc = relpos.make_encoding(scheme, n_heads=H, head_dim=D)
        for label, Nq in (("forward N=2048", N), ("decode step, 2048 cached", 1)):
            q = torch.randn(B, H, Nq, D, generator=g)
            k, v = (torch.randn(B, Hkv, N, D, generator=g) for _ in range(2))
            for impl in ("dense", "chunked"):
                cases.append((scheme, label, impl, q, k, v, enc))
    rows = []
    with torch.no_grad():
        for scheme, label, impl, q, k, v, enc in cases:
            times = {"check": [], "none": []}
            for r in range(9):
                for mode in (("check", "none") if r % 2 else ("none", "check")):
                    fn = real if mode == "check" else (lambda req: None)
                    mod.check_finite = dense.check_finite = fn
                    t0 = time.process_time()
                    relpos.attention(q, k, v, enc, causal=True, q_offset=N - q.shape[2], impl=impl)
                    times[mode].append(time.process_time() - t0)
            mod.check_finite = dense.check_finite = real
            a, b = statistics.median(times["check"]), statistics.median(times["none"])
            rows.append((scheme, label, impl, b * 1000, a * 1000, (a / b - 1) * 100))
    print("| scheme | call | impl | ms without check | ms with check | extra % |")
    print("|---|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:+.1f} |")
    del chunked


if __name__ == "__main__":
    main()
