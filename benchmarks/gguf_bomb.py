"""Time and peak memory of reading GGUF metadata bombs: refused (or loaded) how fast, holding how much.

Builds, from a tiny random Llama, a plain GGUF file and files with one extra
metadata key holding N empty strings (the "metadata bomb"; by default N = 60k,
200k and 1M, i.e. up to an 8 MB file), then in a fresh process per file runs
what ``relpos compare --hf-model FILE`` does before evaluating -- the config,
the tokenizer, the model -- and records the wall time, the outcome (loaded, or
the first line of the refusal) and the peak RSS growth over the process after
its imports (``VmHWM`` minus ``VmRSS``). A last file has a Llama-3-sized
tokenizer (128Ki tokens, 280k merges, 10 MB of metadata; its merges are not a
working tokenizer): only its config is read, as ``--dry-run`` reads it.
``--src`` picks the relpos source tree,
so the same files can be measured against an older checkout; ``--timeout``
stops a run that takes too long (recorded as such).

Usage::

    python benchmarks/gguf_bomb.py --out /tmp/gguf_bomb.json
    python benchmarks/gguf_bomb.py --src /tmp/old/src --sizes 200000,1000000 --timeout 150
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import sys, time
def status(k):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(k + ":"))
import torch, transformers, gguf  # imports are not the file's cost
from relpos.pretrained.evaluate import load_hf_model
from relpos.pretrained.load import load_config, model_source, tokenizer_file
base = status("VmRSS")
t = time.perf_counter()
try:
    load_config(model_source(sys.argv[1]))
    if sys.argv[3] == "all":
        tokenizer_file(sys.argv[1], cache_dir=sys.argv[2])
        load_hf_model(sys.argv[1], device="cpu")
    out = "loaded" if sys.argv[3] == "all" else "config read"
except ValueError as e:
    out = "refused: " + str(e).splitlines()[0]
print(repr((time.perf_counter() - t, status("VmHWM") - base, out)))
"""


def build(folder: Path, sizes: list[int]) -> list[Path]:
    sys.path[:0] = [str(ROOT), str(ROOT / "src")]
    from tests.data_helpers import tiny_llama
    from tests.faults.test_gguf_round3 import inject
    from tests.test_hf_gguf import write_gguf

    src = tiny_llama(folder / "tiny", max_pos=64)
    plain = write_gguf(src, folder / "plain.gguf")
    return [plain] + [inject(plain, folder / f"bomb{n}.gguf", "general.unused", n) for n in sizes] + \
        [large_vocab(folder / "vocab128k.gguf")]


def large_vocab(dest: Path, n_tok: int = 131072, n_merges: int = 280_000) -> Path:
    """A one-layer Llama GGUF whose metadata is the size of Llama 3's tokenizer (tied embeddings, float16)."""
    import gguf
    import numpy as np

    H, ff = 32, 64
    w = gguf.GGUFWriter(str(dest), "llama")
    for add, v in ((w.add_context_length, 64), (w.add_embedding_length, H), (w.add_block_count, 1),
                   (w.add_feed_forward_length, ff), (w.add_head_count, 4), (w.add_head_count_kv, 2),
                   (w.add_rope_dimension_count, 8), (w.add_vocab_size, n_tok)):
        add(v)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"<t{i}>" for i in range(n_tok)])
    w.add_token_types([1] * n_tok)
    w.add_token_merges([f"<t{i % 977}> <t{i % 991}>" for i in range(n_merges)])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((n_tok, H)).astype(np.float16))
    for name, shape in (("attn_q", (H, H)), ("attn_k", (16, H)), ("attn_v", (16, H)), ("attn_output", (H, H)),
                        ("ffn_gate", (ff, H)), ("ffn_up", (ff, H)), ("ffn_down", (H, ff))):
        w.add_tensor(f"blk.0.{name}.weight", rng.standard_normal(shape).astype(np.float16))
    for name in ("blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"):
        w.add_tensor(name, np.ones(H, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=str(ROOT / "src"), help="the relpos source tree to measure")
    ap.add_argument("--sizes", default="60000,200000,1000000", help="strings in the bomb key, comma-separated")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds before a run is stopped")
    ap.add_argument("--out", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files = build(Path(tmp), [int(s) for s in args.sizes.split(",") if s])
        env = {**os.environ, "PYTHONPATH": args.src, "OMP_NUM_THREADS": "1"}
        print(f"{'file':>16} {'read':>6} {'MB':>6} {'seconds':>8} {'peak MiB':>9}  outcome")
        runs = [(f, "config" if f.name.startswith("vocab") else "all") for f in files] + [(files[0], "config")]
        for f, what in runs:
            t0 = time.perf_counter()
            try:
                r = subprocess.run([sys.executable, "-c", CHILD, str(f), str(Path(tmp) / "cache" / "corpora"), what],
                                   capture_output=True, text=True, env=env, timeout=args.timeout)
                secs, peak, out = eval(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else \
                    (time.perf_counter() - t0, None, "crashed: " + (r.stderr.strip().splitlines() or ["?"])[-1])
            except subprocess.TimeoutExpired:
                secs, peak, out = args.timeout, None, f"still running after {args.timeout:.0f} s (stopped)"
            row = {"file": f.name, "read": what, "bytes": f.stat().st_size, "seconds": round(secs, 2),
                   "peak_growth_mib": None if peak is None else round(peak / 2**20, 1), "outcome": out}
            rows.append(row)
            pk = "-" if peak is None else f"{peak / 2**20:.0f}"
            print(f"{f.name:>16} {what:>6} {f.stat().st_size / 1e6:6.1f} {secs:8.1f} {pk:>9}  {out[:100]}", flush=True)
    if args.out:
        from relpos.outdir import write_text_atomic  # a regular file, never through a link

        write_text_atomic(args.out, json.dumps({"src": args.src, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
