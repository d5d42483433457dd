"""One training step of the compare model with a setting off and on, alternating step by step in one process.

Two settings, each a change whose effect on the step this measured:

* ``causal-blocks`` -- ``relpos.attention.dense`` runs a causal call with a trained term (T5, FIRE, KERPLE,
  Transformer-XL, DeBERTa) of at least ``CAUSAL_BLOCK_ROWS`` query rows by row blocks that skip the keys no
  row of the block sees (``_CausalTermAttention``); *whole*: the threshold raised out of reach, so one ``bmm``
  covers the whole square; *blocks*: as shipped. Default shapes: the scale preset's ``4 x 256`` cells.
* ``relkey-blocks`` -- Transformer-XL's causal self-attention (:mod:`relpos.attention.dense_relkey`) runs by
  row blocks from its ``RELKEY_BLOCK_ROWS`` (64) query rows on, as many as its ``relkey_blocks`` picks; *whole*:
  that threshold at ``CAUSAL_BLOCK_ROWS`` (256), as before; *picked*: as shipped. Default shapes: the LM
  presets' ``16 x 64`` at d_model 64, 128 and 256, and ``8 x 128``.
* ``relkey-compiled`` -- Transformer-XL's causal row blocks run their loops from C++ where the kernels are built
  (``relpos/kernels/relkey.cpp``); *pytorch*: the module's PyTorch loops (``_forward_blocks``,
  ``_backward_blocks``), *compiled*: as shipped. Default shapes: the scale preset's ``4 x 256`` at d_model 64 and
  128, the LM presets' ``16 x 64`` and ``8 x 128``.
* ``fire-mlp`` -- FIRE's bias below its threshold (training lengths) evaluates its MLP on the offsets in one C++
  call each way where the kernels are built (``relpos/kernels/fire_mlp.cpp``); *pytorch*: the encoding's PyTorch
  path (about twenty small operations and their autograd nodes), *compiled*: as shipped. Default shapes: the LM
  presets' ``16 x 64`` at d_model 64 and 128, the scale preset's ``4 x 256`` and the copy task's ``64 x 33``.
* ``flush-denormal`` -- ``relpos.training.loop.Trainer.step`` runs with ``torch.set_flush_denormal(True)``
  (:mod:`relpos.training.denormals`); *kept*: subnormal floats kept, *flushed*: flushed to zero. Default
  shapes: a scale cell's and the default preset's.

Each step is forward, backward and AdamW at initialisation, timed by process CPU time with one thread; medians
after warm-up rounds, and the ratio on / off.

    python benchmarks/ab_step.py causal-blocks --out benchmarks/results     # results/causal_blocks.json
    python benchmarks/ab_step.py flush-denormal --out benchmarks/results    # results/flush_denormal.json
    python benchmarks/ab_step.py relkey-blocks --out benchmarks/results     # results/relkey_blocks_step.json
    python benchmarks/ab_step.py relkey-compiled --out benchmarks/results   # results/relkey_compiled_step.json
    python benchmarks/ab_step.py fire-mlp --out benchmarks/results          # results/fire_mlp_step.json
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

import torch

from relpos import kernels
from relpos.model import ModelConfig, TransformerLM

dense = importlib.import_module("relpos.attention.dense")
relkey = importlib.import_module("relpos.attention.dense_relkey")
fire = importlib.import_module("relpos.encodings.fire")


class Setting(NamedTuple):
    name: str  # the command line's name for it (its key in SETTINGS)
    off: str  # the variant's name without the change (the ratio's denominator)
    on: str
    schemes: tuple[str, ...]
    shapes: tuple[str, ...]  # B x N x d_model
    steps: int
    result: str  # the results file's stem
    how: str

    def apply(self, on: bool) -> None:
        if self.name == "causal-blocks":
            dense.CAUSAL_BLOCK_ROWS = _BLOCK_ROWS if on else 1 << 30
        elif self.name == "relkey-blocks":
            relkey.RELKEY_BLOCK_ROWS = _RELKEY_ROWS if on else _BLOCK_ROWS
        elif self.name == "relkey-compiled":
            relkey.relkey_kernel.usable = _USABLE if on else (lambda *t: False)
        elif self.name == "fire-mlp":
            fire.fire_kernels.usable = _USABLE_FIRE if on else (lambda *t: False)
        else:
            torch.set_flush_denormal(on)

    def restore(self) -> None:
        if self.name == "causal-blocks":
            dense.CAUSAL_BLOCK_ROWS = _BLOCK_ROWS
        elif self.name == "relkey-blocks":
            relkey.RELKEY_BLOCK_ROWS = _RELKEY_ROWS
        elif self.name == "relkey-compiled":
            relkey.relkey_kernel.usable = _USABLE
        elif self.name == "fire-mlp":
            fire.fire_kernels.usable = _USABLE_FIRE
        else:
            torch.set_flush_denormal(False)


_BLOCK_ROWS = dense.CAUSAL_BLOCK_ROWS
_RELKEY_ROWS = relkey.RELKEY_BLOCK_ROWS
_USABLE = relkey.relkey_kernel.usable
_USABLE_FIRE = fire.fire_kernels.usable
SETTINGS = {s.name: s for s in (
    Setting("causal-blocks", "whole", "blocks", ("t5", "kerple-log", "fire", "transformer-xl", "deberta"),
            ("4x256x64", "4x256x128"), 10, "causal_blocks",
            "process CPU time per training step, medians, whole square and row blocks alternating step by step"),
    Setting("relkey-blocks", "whole", "picked", ("transformer-xl",),
            ("16x64x64", "16x64x128", "16x64x256", "8x128x64"), 30, "relkey_blocks_step",
            "process CPU time per training step, medians, whole square and picked row blocks alternating step by step"),
    Setting("relkey-compiled", "pytorch", "compiled", ("transformer-xl",),
            ("4x256x64", "4x256x128", "16x64x64", "8x128x64"), 30, "relkey_compiled_step",
            "process CPU time per training step, medians, PyTorch and C++ block loops alternating step by step"),
    Setting("fire-mlp", "pytorch", "compiled", ("fire",), ("16x64x64", "16x64x128", "4x256x64", "64x33x64"), 30,
            "fire_mlp_step",
            "process CPU time per training step, medians, FIRE's PyTorch MLP path and its C++ call alternating step by step"),
    Setting("flush-denormal", "kept", "flushed", ("nope", "t5", "transformer-xl", "fire", "deberta", "cope"),
            ("4x256x64", "16x64x64"), 8, "flush_denormal",
            "process CPU time per training step at initialisation, medians, kept and flushed alternating"),
)}


def measure(setting: str, scheme: str, B: int, N: int, d: int, steps: int, warmup: int) -> dict:
    """Medians of one training step with ``setting`` off and on: ``{scheme, batch, seq, d_model, <off>_ms, <on>_ms,
    ratio}`` (on / off)."""
    st = SETTINGS[setting]
    torch.manual_seed(0)
    m = TransformerLM(ModelConfig(d_model=d, n_layers=2, n_heads=4, max_len=max(1024, N), scheme=scheme,
                                  vocab_size=256))
    opt = torch.optim.AdamW(m.parameters(), 1e-3)
    x, y = torch.randint(0, 256, (B, N)), torch.randint(0, 256, (B, N))
    times: dict[bool, list[float]] = {False: [], True: []}
    try:
        for r in range(warmup + steps):
            for on in (False, True):
                st.apply(on)
                t = time.process_time()
                loss = torch.nn.functional.cross_entropy(m(x).view(-1, 256), y.view(-1))
                opt.zero_grad()
                loss.backward()
                opt.step()
                if r >= warmup:
                    times[on].append(time.process_time() - t)
    finally:
        st.restore()
    off, on = statistics.median(times[False]), statistics.median(times[True])
    return {"scheme": scheme, "batch": B, "seq": N, "d_model": d, f"{st.off}_ms": round(off * 1e3, 2),
            f"{st.on}_ms": round(on * 1e3, 2), "ratio": round(on / off, 3)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("setting", choices=sorted(SETTINGS))
    p.add_argument("--schemes", nargs="*", default=None, help="default: the setting's")
    p.add_argument("--shapes", nargs="*", default=None, help="BxNxd_model (default: the setting's)")
    p.add_argument("--steps", type=int, default=None, help="timed rounds (default: the setting's)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    st = SETTINGS[a.setting]
    torch.set_num_threads(1)
    rows = []
    for shape in a.shapes or st.shapes:
        B, N, d = (int(v) for v in shape.split("x"))
        for s in a.schemes or st.schemes:
            r = measure(a.setting, s, B, N, d, a.steps or st.steps, a.warmup)
            rows.append(r)
            print(f"{s:15s} {B}x{N} d{d}: {st.off} {r[f'{st.off}_ms']:.1f} ms, {st.on} {r[f'{st.on}_ms']:.1f} ms, "
                  f"{st.on} / {st.off} {r['ratio']:.2f}", flush=True)
    if a.out:
        from relpos.outdir import write_json_atomic

        a.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(a.out / f"{st.result}.json", {
            "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
            "torch": torch.__version__, "kernels": kernels.status(), "threads": 1, "load_avg_end": os.getloadavg(), "how": st.how, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
