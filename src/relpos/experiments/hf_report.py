"""Tables and heatmaps of the Hugging Face evaluation, and a command line for it.

``python -m relpos.experiments.hf_report --hf-model DIR --corpus PATH --out OUT``
runs :func:`relpos.experiments.hf_eval.run_hf_sweep` (resumable: run it again to
finish an interrupted sweep) and writes ``OUT/hf_report.md`` and one passkey
heatmap per scaling, ``OUT/passkey_<model>_<scaling>.png``. It is the engine of
``relpos compare --hf-model DIR`` until that flag is wired into compare.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from relpos.tasks.passkey import passkey_table

__all__ = ["hf_report", "passkey_heatmap", "main"]


def _metric(run: dict, protocol: str, L: int, key: str):
    for m in run["measurements"]:
        if m["protocol"] == protocol and m["eval_len"] == L and m.get("bucket_start", -1) == -1:
            return m.get(key)
    return None


def _fmt(v) -> str:
    return "" if v is None else f"{v:.3f}"


def hf_report(runs: Sequence[dict]) -> str:
    """Markdown: per model, loss per token and bits per byte by scaling and length, then passkey tables."""
    lines: list[str] = []
    models = sorted({r["scheme"] for r in runs})
    for model in models:
        lm = [r for r in runs if r["scheme"] == model and r["task"] == "lm"]
        if not lm:
            continue
        info = lm[0].get("info", {}).get("hf", {})
        L0 = lm[0]["train_len"]
        unit = info.get("units", "tokens")
        lengths = sorted({m["eval_len"] for r in lm for m in r["measurements"] if m["protocol"] == "window"})
        lines += [f"## {model}", "",
                  f"Original context L0 = {L0} {unit}; corpus fingerprint "
                  f"{info.get('corpus', {}).get('fingerprint', '?')}.", ""]
        for proto, what in (("window", "Window loss (nats per token) / bits per byte"),
                            ("fixed_target", "Fixed-target loss (nats per token) on the same final tokens")):
            lines += [f"**{what}**, by context length:", "",
                      "| scaling | " + " | ".join(f"{L} ({L / L0:g}x)" for L in lengths) + " |",
                      "|---|" + "---|" * len(lengths)]
            for r in sorted(lm, key=lambda r: r["variant"] or ""):
                cells = []
                for L in lengths:
                    loss = _metric(r, proto, L, "loss")
                    cells.append(_fmt(loss) + (f" / {_fmt(_metric(r, proto, L, 'bpb'))}" if proto == "window" else ""))
                lines.append(f"| {r['variant'] or 'none'} | " + " | ".join(cells) + " |")
            lines.append("")
        for r in sorted((r for r in runs if r["scheme"] == model and r["task"] == "passkey"),
                        key=lambda r: r["variant"] or ""):
            lines += [passkey_table(r["measurements"], title=f"passkey, {r['variant'] or 'none'}"), ""]
    return "\n".join(lines)


def passkey_heatmap(measurements: Sequence[dict], path: str | os.PathLike, *, title: str = "passkey accuracy"):
    """Save a depth x length heatmap of passkey accuracy (``accuracy`` rows with a depth bucket) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = {(int(m["eval_len"]), int(m["bucket_start"])): m["accuracy"] for m in measurements
             if m.get("protocol") == "accuracy" and int(m.get("bucket_start", -1)) >= 0}
    lengths = sorted({k[0] for k in cells})
    depths = sorted({k[1] for k in cells})
    grid = [[cells.get((L, d), float("nan")) for L in lengths] for d in depths]
    fig, ax = plt.subplots(figsize=(1.6 + 0.9 * len(lengths), 1.2 + 0.45 * len(depths)))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
    ax.set_xticks(range(len(lengths)), [str(L) for L in lengths])
    ax.set_yticks(range(len(depths)), [f"{d}%" for d in depths])
    ax.set_xlabel("context length")
    ax.set_ylabel("needle depth")
    ax.set_title(title, fontsize=9)
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if v == v:
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w" if v < 0.5 else "k", fontsize=8)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def build_parser() -> argparse.ArgumentParser:
    from relpos.corpus.cli import add_corpus_arguments
    from relpos.experiments.hf_eval import HF_SCALINGS

    p = argparse.ArgumentParser(prog="python -m relpos.experiments.hf_report",
                                description="zero-shot RoPE-scaling evaluation of a local Hugging Face causal LM")
    p.add_argument("--hf-model", required=True, metavar="DIR", help="a local LLaMA-family checkpoint folder")
    add_corpus_arguments(p)
    p.add_argument("--out", default="runs/hf", help="results folder (default runs/hf)")
    p.add_argument("--scalings", default=",".join(HF_SCALINGS), help="comma-separated (default: all)")
    p.add_argument("--factors", default="1,2,4,8", help="evaluation lengths as multiples of L0 (default 1,2,4,8)")
    p.add_argument("--eval-tokens", type=int, default=16384, help="validation tokens per length (default 16384)")
    p.add_argument("--passkey-n", type=int, default=10, help="passkey examples per cell, 0 for none (default 10)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def main(argv: list[str] | None = None) -> int:
    from relpos.corpus.cli import corpus_spec_from_args
    from relpos.experiments.hf_eval import run_hf_sweep

    args = build_parser().parse_args(argv)
    try:
        corpus = corpus_spec_from_args(args)
        if corpus is None:
            raise ValueError("--hf-model needs --corpus PATH")
        corpus.pop("tokenizer", None)  # the model's tokenizer (or --tokenizer) is set by the spec below
        spec = {"model": args.hf_model, "corpus": corpus, "tokenizer": args.tokenizer,
                "scalings": [s.strip() for s in args.scalings.split(",") if s.strip()],
                "factors": [float(f) for f in args.factors.split(",")], "eval_tokens": args.eval_tokens,
                "passkey_n": args.passkey_n, "device": args.device, "dtype": args.dtype}
        t0 = time.perf_counter()
        runs = run_hf_sweep(args.out, spec, progress=not args.no_progress, log=lambda s: print(s, file=sys.stderr))
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"relpos hf: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    text = hf_report(runs)
    (out / "hf_report.md").write_text(text + "\n")
    for r in runs:
        if r["task"] == "passkey":
            name = r["scheme"].split(":", 1)[-1]
            passkey_heatmap(r["measurements"], out / f"passkey_{name}_{r['variant'] or 'none'}.png",
                            title=f"{name}, {r['variant'] or 'none'}")
    print(text)
    print(f"\n{len(runs)} runs in {out} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
