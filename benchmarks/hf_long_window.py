"""Peak memory and time of one long evaluation window of a random Llama, as ``relpos compare --hf-model`` runs it.

Issue 31: the loss of a window is computed without materialising its full
``(N, vocab)`` logits (:meth:`relpos.experiments.hf_eval.HFCausalLM.token_losses`
runs the last hidden states through the output layer and the cross-entropy in
chunks). This script builds a random LLaMA-family model (default ~100M
parameters: 10 layers, width 768, vocabulary 32,000), then, in a fresh process
per case, scores one window of ``N`` tokens both ways -- ``chunked`` (relpos) and
``full`` (``log_softmax`` of the whole float64 logits, what
``relpos.tasks.base.token_losses`` did before) -- and records wall time, the
resident memory with the model loaded, and the window's own peak (``VmHWM``,
reset after loading through ``/proc/self/clear_refs``; ``ru_maxrss`` elsewhere).

Usage (nice it on a shared machine)::

    nice -n 10 python benchmarks/hf_long_window.py --tokens 8192 --dtypes float32,bfloat16 \\
        --json benchmarks/results/hf_long_window.json

Prints a Markdown table and writes JSON. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build(folder: Path, layers: int, width: int, vocab: int, context: int) -> int:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=width, intermediate_size=int(width * 8 / 3) // 64 * 64,
                      num_hidden_layers=layers, num_attention_heads=width // 64, num_key_value_heads=width // 64,
                      max_position_embeddings=context, rope_parameters={"rope_type": "default", "rope_theta": 5e5},
                      tie_word_embeddings=False)
    m = LlamaForCausalLM(cfg)
    m.save_pretrained(str(folder))
    return sum(p.numel() for p in m.parameters())


def case(folder: str, n: int, dtype: str, how: str, threads: int) -> dict:
    """One window in this process: seconds and peak RSS (MiB) before and after."""
    import torch

    from relpos.experiments.hf_eval import load_hf_model

    torch.set_num_threads(threads)
    model = load_hf_model(folder, device="cpu", dtype=dtype)
    x = torch.randint(0, int(model.config.vocab_size), (1, n + 1), generator=torch.Generator().manual_seed(0))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    reset = _reset_peak()  # Linux: the window's own peak, not the loader's
    rss = _rss_mib() if reset else before
    t0 = time.perf_counter()
    with torch.no_grad():
        if how == "chunked":
            loss = model.token_losses(x[:, :-1], x[:, 1:]).mean()
        else:
            lp = torch.log_softmax(model(x[:, :-1]).double(), dim=-1)
            loss = -lp.gather(-1, x[:, 1:, None]).mean()
    secs = time.perf_counter() - t0
    peak = _hwm_mib() if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"tokens": n, "dtype": dtype, "how": how, "seconds": round(secs, 2), "loss": float(loss),
            "rss_model_mib": round(rss), "rss_peak_mib": round(peak), "window_mib": round(peak - rss)}


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise OSError("no VmRSS")


def _hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise OSError("no VmHWM")


def _reset_peak() -> bool:
    """Reset the peak resident size to the current one (``/proc/self/clear_refs``); False where unsupported."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        _hwm_mib()
        return True
    except OSError:
        return False


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", default="8192", help="comma-separated window lengths")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--how", default="chunked,full", help="chunked (relpos) and/or full (all logits)")
    p.add_argument("--layers", type=int, default=10)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument("--_case", nargs=5, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a._case:
        folder, n, dtype, how, threads = a._case
        print(json.dumps(case(folder, int(n), dtype, how, int(threads))))
        return 0
    tokens = [int(t) for t in a.tokens.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        params = build(Path(tmp) / "m", a.layers, a.width, a.vocab, max(tokens))
        rows = []
        for n in tokens:
            for dtype in a.dtypes.split(","):
                for how in a.how.split(","):
                    r = subprocess.run([sys.executable, __file__, "--_case", str(Path(tmp) / "m"), str(n), dtype, how,
                                        str(a.threads)], capture_output=True, text=True,
                                       env={**os.environ, "OMP_NUM_THREADS": str(a.threads)})
                    if r.returncode != 0:
                        rows.append({"tokens": n, "dtype": dtype, "how": how, "error": r.stderr.strip()[-300:]})
                    else:
                        rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
                    print(rows[-1], file=sys.stderr, flush=True)
    meta = {"params": params, "layers": a.layers, "width": a.width, "vocab": a.vocab, "threads": a.threads,
            "cpu_count": os.cpu_count()}
    lines = [f"Random Llama, {params / 1e6:.0f}M parameters ({a.layers} layers, width {a.width}, vocabulary "
             f"{a.vocab}), {a.threads} threads, sdpa attention, one window per process", "",
             "| tokens | dtype | loss computed | seconds | RSS with model (MiB) | peak RSS in the window (MiB) | window adds (MiB) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['tokens']} | {r['dtype']} | {r['how']} | failed: {r['error'][-80:]} | | | |")
        else:
            lines.append(f"| {r['tokens']} | {r['dtype']} | {r['how']} | {r['seconds']} | {r['rss_model_mib']} | "
                         f"{r['rss_peak_mib']} | {r['window_mib']} |")
    print("\n".join(lines))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
