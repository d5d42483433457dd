"""Tables and heatmaps of the Hugging Face evaluation, and its command line.

``relpos compare --hf-model PATH --corpus CORPUS`` (and the module entry point
``python -m relpos.pretrained.sweep`` with the same flags) runs
:func:`relpos.pretrained.evaluate.run_hf_sweep` (resumable: run it again to
finish an interrupted sweep; a new ``--scalings`` entry adds only its job) and
writes ``OUT/hf_report.md`` (first line :data:`~relpos.pretrained.evaluate.HF_MARK`;
a report without it is never overwritten) and one passkey heatmap per scaling,
``OUT/passkey_<model>_<scaling>.png``. ``--dry-run`` prints what would be
evaluated (lengths, tokens, a time estimate) and writes nothing.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Sequence

from relpos.corpus.summary import corpus_lines  # re-exported: hf_report.py was its home
from relpos.tasks.passkey import FEW_EXAMPLES, passkey_table

__all__ = ["hf_report", "passkey_heatmap", "corpus_lines", "add_hf_arguments", "run_hf", "main"]


def _metric(run: dict, protocol: str, L: int, key: str):
    for m in run["measurements"]:
        if m["protocol"] == protocol and m["eval_len"] == L and m.get("bucket_start", -1) == -1:
            return m.get(key)
    return None


def _fmt(v) -> str:
    return "" if v is None else f"{v:.3f}"


#: a table cell that rests on fewer examples (windows, blocks, passkey prompts) than this shows its count.
FEW = FEW_EXAMPLES


def _few(run: dict, protocol: str, L: int) -> str:
    """`` (n=K)`` when the cell rests on ``K < FEW`` examples: its per-example scores where the run has them,
    else its token count over the tokens each example scores (``L`` per window; the fixed-target protocol's
    ``train_len // 2`` final tokens per block)."""
    per = _metric(run, protocol, L, "per_example")
    if per is not None:
        n = len(per)
    else:
        count = _metric(run, protocol, L, "count")
        if count is None:
            return ""
        n = int(count) // (L if protocol == "window" else max(1, int(run["train_len"]) // 2))
    return f" (n={n})" if n < FEW else ""


def _order(variant) -> int:
    from relpos.pretrained.scalings import HF_SCALINGS

    v = variant or "none"
    return HF_SCALINGS.index(v) if v in HF_SCALINGS else len(HF_SCALINGS)


def _label(r: dict) -> str:
    v = r["variant"] or "none"
    if v == "native":
        rt = r.get("info", {}).get("hf", {}).get("rope_type", "?")
        return f"native ({rt}, as shipped)"
    return v


def hf_report(runs: Sequence[dict]) -> str:
    """Markdown: per model, the corpus, then loss per token and bits per byte by scaling and length, then passkey."""
    lines: list[str] = []
    models = sorted({r["scheme"] for r in runs})
    for model in models:
        lm = sorted((r for r in runs if r["scheme"] == model and r["task"] == "lm"), key=lambda r: _order(r["variant"]))
        if not lm:
            continue
        info = lm[0].get("info", {}).get("hf", {})
        L0 = lm[0]["train_len"]
        unit = info.get("units", "tokens")
        lengths = sorted({m["eval_len"] for r in lm for m in r["measurements"] if m["protocol"] == "window"})
        lines += [f"## {model}", "",
                  f"Original context L0 = {L0} {unit}; the checkpoint's own rope_type: "
                  f"{info.get('rope_type', '?')}; dtype {info.get('dtype', '?')}. `native` is the checkpoint exactly "
                  "as its config says; every other row replaces its RoPE scaling with that one at factor "
                  f"max(1, L / L0) on its base RoPE. A cell resting on fewer than {FEW} examples (windows, "
                  "blocks or prompts) shows their count, (n=K).", ""]
        if info.get("left_out"):
            lines += [f"Lengths left out (above --max-eval-tokens {info.get('max_eval_tokens')}): "
                      + ", ".join(str(L) for L in info["left_out"]) + ".", ""]
        if info.get("corpus_report"):
            lines += ["Corpus:", "", "```", *corpus_lines(info["corpus_report"]), "```", ""]
        for proto, what in (("window", "Window loss (nats per token) / bits per byte"),
                            ("fixed_target", "Fixed-target loss (nats per token) on the same final tokens")):
            lines += [f"**{what}**, by context length:", "",
                      "| scaling | " + " | ".join(f"{L} ({L / L0:g}x)" for L in lengths) + " |",
                      "|---|" + "---|" * len(lengths)]
            for r in lm:
                cells = []
                for L in lengths:
                    loss = _metric(r, proto, L, "loss")
                    cells.append(_fmt(loss) + (f" / {_fmt(_metric(r, proto, L, 'bpb'))}" if proto == "window" else "")
                                 + _few(r, proto, L))
                lines.append(f"| {_label(r)} | " + " | ".join(cells) + " |")
            lines.append("")
        for r in sorted((r for r in runs if r["scheme"] == model and r["task"] == "passkey"),
                        key=lambda r: _order(r["variant"])):
            lines += [passkey_table(r["measurements"], title=f"passkey, {_label(r)}"), ""]
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
    from relpos.outdir import save_figure

    save_figure(fig, path, dpi=110)  # never through a link
    plt.close(fig)
    return Path(path)


def dry_run_lines(spec: dict, out: Path) -> list[str]:
    """What an evaluation would do, and how long it would take here (:mod:`relpos.pretrained.estimate`: each part
    timed on a sample of its work); reads the model's config and tokenizer (never its weights), writes nothing."""
    from relpos.pretrained.estimate import calibrate, estimate, forward_passes, process_age

    startup = process_age()  # what the evaluation's own start (imports, flags) costs, before this dry run's work
    from relpos.pretrained.evaluate import HFEvalSpec, _bos, _device, _passkey, _stored_fingerprint, \
        check_hf_output_dir, plan
    from relpos.pretrained.load import estimate_params, load_config, model_source, model_tokenizer
    from relpos.pretrained.scalings import rope_params

    spec = HFEvalSpec(**spec)
    src = model_source(spec["model"])
    check_hf_output_dir(out)
    if not Path(spec["corpus"]["path"]).exists():
        raise ValueError(f"--corpus {spec['corpus']['path']!r} does not exist")
    cfg = load_config(src, dtype=spec["dtype"])
    p = plan(spec, cfg)
    n = estimate_params(cfg.to_dict())
    L0 = p["original"]
    where = "--hf-context" if spec["context"] else "the config"
    per = p["tokens"]["lm"] + p["tokens"]["passkey"]
    total = per * len(p["scalings"])
    dev = _device(spec["device"])
    lines = [f"--hf-model {src.path}: {cfg.model_type}, ~{n / 1e6:,.1f}M parameters, native rope_type "
             f"{p['rope_type']} {rope_params(cfg) if p['rope_type'] != 'default' else ''}".rstrip(),
             f"original context L0 = {L0} (from {where}); lengths " +
             ", ".join(f"{L} ({L / L0:g}x)" for L in p["lengths"]),
             f"scalings: {', '.join(p['scalings'])}; dtype {spec['dtype']}; device {dev.split(':')[0]}"]
    if p["left_out"]:
        lines.append(f"left out (above --max-eval-tokens {spec['max_eval_tokens']}): "
                     + ", ".join(map(str, p["left_out"])))
    lines.append(f"tokens per scaling: {p['tokens']['lm']:,} language modelling + {p['tokens']['passkey']:,} "
                 f"passkey; {total:,} in all")
    t = time.perf_counter()
    tok, built = model_tokenizer(spec["model"], spec["tokenizer"], spec["cache_dir"])
    first = time.perf_counter() - t
    read = first
    if built:  # a GGUF file's tokenizer, not cached yet: built here in memory; later reads are of its file
        from tokenizers import Tokenizer

        text = tok.to_str()
        t = time.perf_counter()
        Tokenizer.from_str(text)
        read = time.perf_counter() - t
    pk = _passkey(spec, p["lengths"], tok, _bos(cfg))
    passes = forward_passes(spec, p, pk)
    cal = calibrate(spec, cfg, p, passes, src=src, tok=tok, tokenizer_seconds=(first if built else 0.0, read),
                    startup=startup, device=dev)
    lines += estimate(spec, p, passes, cal, device=dev.split(":")[0]).lines()
    old = _stored_fingerprint(out) if out.exists() else None
    lines.append(f"--out {out}: " + ("new folder" if not out.exists() else
                                     f"holds evaluation {old}" if old else "empty folder"))
    lines.append("dry run: nothing evaluated, nothing written")
    return lines


def run_hf(spec, out: str | os.PathLike | None = None, *, dry_run: bool = False, progress: bool | None = None,
           force: bool = False, plots: bool = True) -> int:
    """``relpos compare --hf-model`` without its command line: evaluate the checkpoint of ``spec`` (an
    :class:`~relpos.pretrained.evaluate.HFEvalSpec` or its dict) into ``out`` (default ``runs/hf-<model>``),
    then write ``hf_report.md`` and the passkey heatmaps. ``dry_run``: print the plan only, write nothing.

    Returns:
        0 (errors are raised, for the command line to print in one line).
    """
    from relpos.pretrained.evaluate import HF_MARK, HFEvalSpec, check_hf_output_dir, run_hf_sweep

    spec = HFEvalSpec(**spec)
    from relpos.pretrained.load import model_source

    name = model_source(spec["model"]).name
    if out is not None and str(out) == "":
        from relpos.outdir import OutputDirError

        raise OutputDirError("--out is empty; name a new folder")
    out = Path(out if out is not None else os.path.join("runs", f"hf-{name}"))
    if dry_run:
        print("\n".join(dry_run_lines(spec, out)))
        return 0
    t0 = time.perf_counter()
    runs = run_hf_sweep(out, spec, progress=progress, force=force, log=lambda s: print(s, file=sys.stderr))
    check_hf_output_dir(out)  # the report beside the database is still relpos's own
    text = hf_report(runs)
    from relpos.outdir import write_text_atomic

    write_text_atomic(out / "hf_report.md", HF_MARK + "\n\n" + text + "\n")
    if plots:
        for r in runs:
            if r["task"] == "passkey":
                model = r["scheme"].split(":", 1)[-1]
                passkey_heatmap(r["measurements"], out / f"passkey_{model}_{r['variant'] or 'none'}.png",
                                title=f"{model}, {r['variant'] or 'none'}")
    print(text)
    print(f"\n{len(runs)} runs in {out} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    return 0
