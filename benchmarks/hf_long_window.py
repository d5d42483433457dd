"""Peak memory and time of one long evaluation window of a random Llama, as ``relpos compare --hf-model`` runs it.

Commands of the long-window table in docs/your-data.md (nice them on a shared
machine; all four runs are in ``benchmarks/results/hf_long_window_32k.json``)::

    export OMP_NUM_THREADS=2
    B="nice -n 5 .venv/bin/python benchmarks/hf_long_window.py --shape smollm2 --threads 2"
    $B --tokens 4096 --dtypes float32,bfloat16 --how chunked,full        # full depth, both losses
    $B --layers 2 --tokens 32768 --dtypes float32,bfloat16               # 32k: 2 of 30 layers, projected
    $B --layers 2 --tokens 4096,8192,16384 --dtypes float32 --how chunked
    $B --tokens 4096 --dtypes float32 --how chunked                      # checks the projection

Issue 31: the loss of a window is computed without materialising its full
``(N, vocab)`` logits (:meth:`relpos.pretrained.evaluate.HFCausalLM.token_losses`
runs the last hidden states through the output layer and the cross-entropy in
chunks). This script builds a random LLaMA-family model -- ``--shape smollm2``:
SmolLM2-135M's shape (30 layers, width 576, 9 heads / 3 KV heads, vocabulary
49,152, tied embeddings, ~135M parameters); ``--shape llama120m``: 10 layers,
width 768, vocabulary 32,000 -- saves it, then, in a fresh process per case,
loads it with :func:`relpos.pretrained.evaluate.load_hf_model` (``--dtype``) and
scores one window of ``N`` tokens either

* ``chunked``: through :func:`relpos.tasks.base.token_losses`, the call the LM
  task of ``relpos compare --hf-model`` makes (it dispatches to the chunked
  ``HFCausalLM.token_losses``), or
* ``full``: ``log_softmax`` of the whole float64 logits (what relpos did before
  the chunked loss). Skipped, with the reason recorded, when its logits alone
  (``N x vocab x 20`` bytes: float32 logits, their float64 copy and its
  log-softmax) would not fit in this machine's available memory.

Recorded per case: wall time of the window; resident memory with the model
loaded; the window's own peak (``VmHWM`` after a reset through
``/proc/self/clear_refs``, minus the resident memory before it); and the child
process's peak over its whole life, loading included (the larger of ``VmHWM``
before the reset and after the window; ``ru_maxrss`` where ``/proc`` is missing).

Each decoder layer is timed too (forward hooks). With ``--layers K`` below the
shape's depth, a row also gives ``projected_seconds_full_depth``: the rest of the
window (embedding, output layer, loss) plus the shape's full number of layers at
the measured mean time per layer -- how a window too slow to run whole on a
shared CPU is timed. Its ``window_mib`` is the full-depth model's too: without
gradients only one layer's activations are alive at a time.

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

#: model shapes: (layers, width, heads, kv heads, ffn width, vocabulary, tied embeddings, rope theta)
SHAPES = {"smollm2": (30, 576, 9, 3, 1536, 49152, True, 1e5),
          "llama120m": (10, 768, 12, 12, 2048, 32000, False, 5e5),
          "tiny": (2, 64, 4, 2, 128, 512, False, 1e4)}  # for the script's own test

#: bytes per (token x vocabulary entry) held by the full-logits loss: float32 logits + float64 copy + log-softmax
FULL_BYTES = 20


def build(folder: Path, shape: str, context: int, layers: int | None = None) -> int:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    n_layers, width, heads, kv, ffn, vocab, tied, theta = SHAPES[shape]
    layers = layers or n_layers
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=width, intermediate_size=ffn, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=context,
                      rope_parameters={"rope_type": "default", "rope_theta": theta}, tie_word_embeddings=tied,
                      bos_token_id=0, eos_token_id=1)
    m = LlamaForCausalLM(cfg)
    m.save_pretrained(str(folder))
    return sum(p.numel() for p in m.parameters())


def case(folder: str, n: int, dtype: str, how: str, threads: int) -> dict:
    """One window in this process: seconds, resident memory with the model, the window's peak (MiB)."""
    import torch

    from relpos.pretrained.evaluate import load_hf_model
    from relpos.tasks.base import token_losses

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    model = load_hf_model(folder, device="cpu", dtype=dtype)
    load_s = time.perf_counter() - t0
    x = torch.randint(0, int(model.config.vocab_size), (1, n + 1), generator=torch.Generator().manual_seed(0))
    layer_s: list[float] = []  # wall time of each decoder layer (forward hooks; CPU ops are synchronous)
    for layer in model.hf.model.layers:
        layer.register_forward_pre_hook(lambda *_: layer_s.append(-time.perf_counter()))
        layer.register_forward_hook(lambda *_: layer_s.__setitem__(-1, layer_s[-1] + time.perf_counter()))
    load_peak = _status_mib("VmHWM") if Path("/proc/self/status").exists() else None
    reset = _reset_peak()  # Linux: the window's own peak, not the loader's
    rss = _status_mib("VmRSS") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    with torch.no_grad():
        if how == "chunked":
            loss = token_losses(model, x[:, :-1], x[:, 1:], max_tokens=n).mean()
        else:
            lp = torch.log_softmax(model(x[:, :-1]).double(), dim=-1)
            loss = -lp.gather(-1, x[:, 1:, None]).mean()
    secs = time.perf_counter() - t0
    peak = _status_mib("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"tokens": n, "dtype": dtype, "how": how, "seconds": round(secs, 2), "load_seconds": round(load_s, 2),
            "layer_seconds": [round(t, 3) for t in layer_s], "rest_seconds": round(secs - sum(layer_s), 2),
            "loss": float(loss), "chunked_path": bool(model.chunked) if how == "chunked" else None,
            "rss_model_mib": round(rss), "rss_peak_mib": round(peak), "window_mib": round(peak - rss),
            "process_peak_mib": round(max(peak, load_peak or 0))}


def _status_mib(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise OSError(f"no {key}")


def _reset_peak() -> bool:
    """Reset the peak resident size to the current one (``/proc/self/clear_refs``); False where unsupported."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        _status_mib("VmHWM")
        return True
    except OSError:
        return False


def _available_mib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="smollm2", choices=sorted(SHAPES))
    p.add_argument("--tokens", default="4096", help="comma-separated window lengths")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--how", default="chunked,full", help="chunked (relpos) and/or full (all logits)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--layers", type=int, default=None, help="decoder layers (default: the shape's); a window's "
                   "extra memory does not depend on it (one layer's activations are live at a time)")
    p.add_argument("--json", default=None)
    p.add_argument("--note", default="", help="a line about the machine's load, stored in the JSON")
    p.add_argument("--_case", nargs=5, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a._case:
        folder, n, dtype, how, threads = a._case
        print(json.dumps(case(folder, int(n), dtype, how, int(threads))))
        return 0
    tokens = [int(t) for t in a.tokens.split(",")]
    layers, width, heads, kv, ffn, vocab, tied, theta = SHAPES[a.shape]
    layers = a.layers or layers
    full_layers = SHAPES[a.shape][0]
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    with tempfile.TemporaryDirectory() as tmp:
        params = build(Path(tmp) / "m", a.shape, max(tokens), layers)
        rows = []
        for n in tokens:
            for dtype in a.dtypes.split(","):
                for how in a.how.split(","):
                    row = {"tokens": n, "dtype": dtype, "how": how}
                    need = n * vocab * FULL_BYTES / 2**20
                    avail = _available_mib()
                    if how == "full" and avail is not None and need > 0.8 * avail:
                        row["skipped"] = (f"its logits alone need {need / 1024:.1f} GiB (N x vocab x {FULL_BYTES} "
                                          f"bytes); {avail / 1024:.1f} GiB available")
                        rows.append(row)
                        print(row, file=sys.stderr, flush=True)
                        continue
                    r = subprocess.run([sys.executable, __file__, "--_case", str(Path(tmp) / "m"), str(n), dtype,
                                        how, str(a.threads)], capture_output=True, text=True,
                                       env={**os.environ, "OMP_NUM_THREADS": str(a.threads)})
                    if r.returncode != 0:
                        row["error"] = r.stderr.strip()[-300:]
                    else:
                        row = json.loads(r.stdout.strip().splitlines()[-1])
                        if layers != full_layers and row["layer_seconds"]:
                            # the shape's full depth: the rest (embedding, head, loss) plus its layers at the mean
                            per = sum(row["layer_seconds"]) / len(row["layer_seconds"])
                            row["projected_seconds_full_depth"] = round(row["rest_seconds"] + full_layers * per, 1)
                    rows.append(row)
                    print(row, file=sys.stderr, flush=True)
    meta = {"shape": a.shape, "params": params, "layers": layers, "width": width, "heads": heads, "kv_heads": kv,
            "ffn": ffn, "vocab": vocab, "tied": tied, "threads": a.threads, "cpu_count": os.cpu_count(),
            "started": started, "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "loadavg_at_end": list(os.getloadavg()), "note": a.note,
            "command": " ".join([Path(sys.executable).name, *sys.argv])}
    depth = f"{layers} layers" if layers == full_layers else f"{layers} of the shape's {full_layers} layers"
    lines = [f"Random Llama ({a.shape}), {params / 1e6:.0f}M parameters ({depth}, width {width}, "
             f"vocabulary {vocab}), "
             f"{a.threads} threads, sdpa attention, one window per process", "",
             "| tokens | dtype | loss computed | seconds | RSS with model (MiB) | window adds (MiB) | "
             "process peak (MiB) | seconds per layer | seconds at full depth |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r or "skipped" in r:
            why = f"failed: {r['error'][-80:]}" if "error" in r else f"skipped: {r['skipped']}"
            lines.append(f"| {r['tokens']} | {r['dtype']} | {r['how']} | {why} | | | | | |")
        else:
            lines.append(f"| {r['tokens']} | {r['dtype']} | {r['how']} | {r['seconds']} | {r['rss_model_mib']} | "
                         f"{r['window_mib']} | {r['process_peak_mib']} | "
                         f"{sum(r['layer_seconds']) / max(1, len(r['layer_seconds'])):.2f} | "
                         f"{r.get('projected_seconds_full_depth', r['seconds'])} |")
    print("\n".join(lines))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        from relpos.outdir import write_text_atomic  # a regular file, never through a link

        write_text_atomic(a.json, json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
