"""SmolLM2-135M-Instruct (its GGUF, as shipped) from its native 8,192-token context to 4x, per RoPE scaling.

A reduced, resumable version of ``relpos compare --hf-model GGUF --hf-context
8192 --hf-factors 1,2,4`` for a shared CPU. That command scores, per scaling, 4,
2 and 1 windows at 8k, 16k and 32k, 16 fixed-target blocks per length and 10
passkey examples x 5 depths per length, and stores a scaling only when all of it
is done: ~150 CPU-hours here. This driver scores, through the same library calls
(:func:`relpos.pretrained.evaluate.load_hf_model`,
:class:`relpos.corpus.lm.CorpusLanguageModelling`,
:class:`relpos.tasks.passkey.Passkey`):

* **one language-modelling window per length** (``--factors`` x ``--context``),
  the window protocol's own window (``evaluate_windows`` of a task whose only
  length is that one and whose ``eval_tokens`` is one window: every length's
  window starts at the middle of the test split, so the shorter windows are the
  beginnings of the longer ones). Recorded: the window loss (nats per token, bits
  per byte), the 16 position buckets and the far-position loss (the last quarter
  of the window, :func:`relpos.tasks.lm.far_loss`).
* **one passkey example per depth** at ``--passkey-length`` (16,384), each its
  own cell (one forward pass of 16k tokens).

Cells (one JSON file each under ``OUT/cells/``, written atomically the moment a
cell finishes; a rerun skips the cells already there, so a killed run loses at
most the cell in progress). At the native length every scaling has factor 1: a
scaling whose rotary embedding (cos, sin and attention factor at every position
up to the context) is bit-for-bit the checkpoint's own shares the ``native`` cell
instead of recomputing it, and its cell says so (``same_as``); any difference,
however small, and it is run. Order: native length, then 16k for every scaling,
32k for every scaling, then passkey depth by depth across scalings -- so a run
stopped early has whole lengths and whole passkey rounds.

``OUT/protocol.json`` holds the settings and the model and corpus fingerprints;
a rerun with other settings is refused (one line) instead of mixing cells.
``--plan`` prints the cells left and an estimate from the cells already timed,
loading nothing. ``none`` (plain RoPE, no scaling) equals ``native`` for a
checkpoint whose ``rope_type`` is ``default``: it is not a default scaling here.

Run (nice it; background; resumable -- run the same command again to go on)::

    OMP_NUM_THREADS=2 nohup nice -n 19 python benchmarks/smollm2_context.py \\
        --model SmolLM2-135M-Instruct.Q4_1.gguf --corpus /path/to/lib/python3.11 --glob '[a-r]*/*.py' \\
        --out /work/smollm/run >> /work/smollm/run/nohup.log 2>&1 &

The corpus: the ``.py`` files one folder down in Python 3.11.7's standard library, packages ``a`` to ``r``
(asyncio, email, json, logging, ...); the top-level modules alone (``*.py``) leave a test split of 64,772 tokens,
short of the 65,537 that one 32k window and its context need.

``benchmarks/smollm2_context_table.py OUT`` turns the finished cells into the
Markdown section and JSON of ``benchmarks/results/smollm2_context.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

SCALINGS = ("native", "linear", "dynamic", "yarn", "llama3")
#: passkey depths in the order they are run (each round covers every scaling)
DEPTHS = (0.5, 0.25, 0.75)
#: seconds per window assumed by --plan for a length with no timed cell yet (float32, this 2-core machine at
#: load ~4-5: docs/your-data.md, "Long windows on a CPU"), scaled as tokens**1.3 between the measured points
FALLBACK_SECONDS = {8192: 133.0, 16384: 370.0, 32768: 868.0}


def cell_name(kind: str, scaling: str, length: int, depth: float | None = None) -> str:
    """``lm-native-8192`` or ``passkey-yarn-16384-d50``: a cell's file stem."""
    base = f"{kind}-{scaling}-{length}"
    return base if depth is None else f"{base}-d{round(depth * 100)}"


def plan_cells(scalings, lengths, passkey_length: int | None, depths) -> list[dict]:
    """Every cell in run order (see the module docstring)."""
    cells = [{"kind": "lm", "scaling": s, "length": L} for L in sorted(lengths) for s in scalings]
    if passkey_length:
        cells += [{"kind": "passkey", "scaling": s, "length": passkey_length, "depth": float(d)}
                  for d in depths for s in scalings]
    for c in cells:
        c["name"] = cell_name(c["kind"], c["scaling"], c["length"], c.get("depth"))
    return cells


def write_json_atomic(path: Path, obj) -> None:
    """Write ``obj`` as JSON to ``path`` (sorted keys) with relpos's checked atomic writer: a regular file, never
    through a link, whole or not at all."""
    from relpos.outdir import write_bytes_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, json.dumps(obj, indent=1, sort_keys=True).encode())


def done_cells(out: Path) -> dict[str, dict]:
    """The finished cells of ``out`` by name (files that do not parse are ignored and rerun)."""
    got = {}
    for p in sorted((out / "cells").glob("*.json")):
        try:
            c = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(c, dict) and c.get("name") == p.stem:
            got[p.stem] = c
    return got


def _log(out: Path, msg: str) -> None:
    line = f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC  {msg}"
    print(line, flush=True)
    log = out / "progress.log"
    if log.is_symlink() or (log.exists() and not log.is_file()):
        raise ValueError(f"{log} is not a regular file; refusing to write through it")
    with open(log, "a") as f:
        f.write(line + "\n")


def estimate(cells: list[dict], done: dict[str, dict]) -> tuple[float, dict[int, float]]:
    """Seconds left for the cells not done, and the measured mean seconds per language-modelling window by length.

    A cell is charged the mean of the finished cells of its kind and length; a passkey cell with none, a window of
    its length; else the nearest measured window length scaled as ``tokens**1.3``, else :data:`FALLBACK_SECONDS`.
    Cells that shared native's window are not timings.
    """
    per: dict[tuple[str, int], list[float]] = {}
    for c in done.values():
        if not c.get("same_as") and c.get("seconds") is not None:
            per.setdefault((c.get("kind", "lm"), int(c["length"])), []).append(float(c["seconds"]))
    mean = {k: sum(v) / len(v) for k, v in per.items()}
    lm = {L: v for (kind, L), v in mean.items() if kind == "lm"}

    def secs(kind: str, L: int) -> float:
        if (kind, L) in mean:
            return mean[(kind, L)]
        table = lm or FALLBACK_SECONDS
        L1 = min(table, key=lambda m: abs(m - L))
        return table[L1] * (L / L1) ** 1.3

    left = [c for c in cells if c["name"] not in done]
    return sum(secs(c["kind"], c["length"]) for c in left), lm


# ------------------------------------------------------------------ the run


def _rotary_signature(model, scaling: str, length: int):
    """``(cos, sin)`` of ``model`` under ``scaling`` at factor ``max(1, length / L0)`` for positions ``[0, length)``."""
    import torch

    model.set_scaling(scaling, max(1.0, length / model.original))
    rot = model.hf.model.rotary_emb
    x = torch.zeros(1, 1, 1, dtype=torch.float32)
    pos = torch.arange(length)[None]
    with torch.no_grad():
        cos, sin = rot(x, pos)
    return cos, sin


def same_rotary(model, scaling: str, length: int) -> bool:
    """Whether ``scaling`` at this length gives bit-for-bit the checkpoint's own rotary embedding."""
    import torch

    a = _rotary_signature(model, "native", length)
    b = _rotary_signature(model, scaling, length)
    return all(torch.equal(u, v) for u, v in zip(a, b))


def run_lm_cell(model, corpus, scaling: str, length: int, context: int, max_eval_tokens: int) -> dict:
    """One window of ``length`` tokens under ``scaling``: window loss, bits per byte, positions, far loss."""
    import torch

    from relpos.corpus.lm import CorpusLanguageModelling
    from relpos.tasks.lm import FAR_FRACTION, far_loss

    task = CorpusLanguageModelling(corpus, train_len=context, eval_lengths=[length], eval_tokens=length, blocks=1,
                                   target_len=1, n_val=1, max_eval_tokens=max_eval_tokens)
    model.set_scaling(scaling, max(1.0, length / model.original))
    with torch.no_grad():
        ms = task.evaluate_windows(model, length)
    rows = [m.to_dict() for m in ms]
    win = next(r for r in rows if r["protocol"] == "window")
    far = far_loss(rows, length)
    d = corpus.tensor("test").numel()
    # the window's first token in the test split (where LanguageModelling._chunks puts one chunk)
    start = (d - (2 * length + 1)) // 2 + length
    return {"window_loss": win["loss"], "window_bpb": corpus.bits_per_byte(win["loss"]) if corpus.tokenized else None,
            "far_loss": far, "far_bpb": corpus.bits_per_byte(far) if corpus.tokenized and far is not None else None,
            "far_fraction": FAR_FRACTION, "tokens": win["count"], "windows": 1, "test_offset": start,
            "measurements": rows}


def run_passkey_cell(model, tok, scaling: str, length: int, depth: float, max_eval_tokens: int) -> dict:
    """One passkey example (index 0) at ``length`` and ``depth`` under ``scaling``."""
    import torch

    from relpos.pretrained.evaluate import _bos
    from relpos.tasks.passkey import Passkey

    pk = Passkey([length], depths=[depth], n=1, encode=lambda s: tok.encode(s, add_special_tokens=False).ids,
                 bos=_bos(model.config), max_tokens=max_eval_tokens)
    ex = pk.example(length, depth, 0)
    model.set_scaling(scaling, max(1.0, length / model.original))
    with torch.no_grad():
        m = pk.score(model, length, depth).to_dict()
    return {"accuracy": m["accuracy"], "answer_loss": m["loss"], "token_accuracy": m["token_accuracy"],
            "examples": m["count"], "key": ex.key, "needle_start": ex.needle_start,
            "needle_distance": length - ex.needle_start, "measurements": [m]}


def protocol_of(a, model_fp: str, corpus_options: dict | None) -> dict:
    return {"model": str(Path(a.model).name), "model_fingerprint": model_fp, "context": a.context,
            "lengths": lengths_of(a), "scalings": list(a.scalings), "passkey_length": a.passkey_length,
            "passkey_depths": list(a.depths), "passkey_examples_per_depth": 1, "dtype": a.dtype,
            "corpus": corpus_options, "corpus_glob": a.glob, "windows_per_length": 1,
            "max_eval_tokens": a.max_eval_tokens}


def lengths_of(a) -> list[int]:
    return sorted({int(round(a.context * f)) for f in a.factors})


def check_protocol(out: Path, proto: dict) -> None:
    """Store ``proto`` in a new folder; refuse a folder that holds another protocol's cells."""
    p = out / "protocol.json"
    if p.exists():
        old = json.loads(p.read_text())
        diff = sorted(k for k in set(old) | set(proto) if old.get(k) != proto.get(k))
        if diff:
            raise ValueError(f"--out {out} holds cells of another protocol (differs in {', '.join(diff)}); "
                             "use another --out")
    else:
        write_json_atomic(p, proto)


def run(a) -> int:
    import platform

    import torch

    from relpos.corpus import cached_corpus, load_tokenizer, lm_requirement
    from relpos.pretrained.evaluate import load_hf_model
    from relpos.pretrained.load import model_fingerprint, tokenizer_file

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(a.threads)
    lengths = lengths_of(a)
    cells = plan_cells(a.scalings, lengths, a.passkey_length, a.depths)
    if a.max_cells is not None:
        cells = cells[: a.max_cells]
    done = done_cells(out)
    left = [c for c in cells if c["name"] not in done]
    _log(out, f"start: {len(cells) - len(left)} of {len(cells)} cells done; pid {os.getpid()}; "
              f"threads {a.threads}; load average {os.getloadavg()[0]:.1f}")
    if not left:
        return 0
    cache = str(out / "cache")
    t0 = time.perf_counter()
    tokfile = tokenizer_file(a.model, None, cache)
    spec = {"path": a.corpus, "glob": a.glob, "tokenizer": tokfile}
    need = lm_requirement(a.context, [max(lengths)], max(lengths), 1, n_val=1)
    corpus = cached_corpus(spec, cache, require=need)
    check_protocol(out, protocol_of(a, model_fingerprint(a.model), corpus.options()))
    write_json_atomic(out / "corpus_report.json", dict(corpus.report()))
    _log(out, f"corpus {corpus} ready in {time.perf_counter() - t0:.0f}s")
    t0 = time.perf_counter()
    model = load_hf_model(a.model, device="cpu", dtype=a.dtype, original=a.context)
    tok = load_tokenizer(tokfile)
    _log(out, f"model loaded in {time.perf_counter() - t0:.0f}s (rope_type {model.rope_type}, L0 {model.original})")
    env = {"torch": torch.__version__, "python": platform.python_version(), "threads": a.threads,
           "cpu_count": os.cpu_count()}
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover
        pass
    for c in left:
        done = done_cells(out)
        if c["name"] in done:
            continue
        rec = {**{k: v for k, v in c.items()}, "env": env}
        if c["kind"] == "lm" and c["scaling"] != "native" and c["length"] <= model.original:
            nat = done.get(cell_name("lm", "native", c["length"]))
            if nat is not None and same_rotary(model, c["scaling"], c["length"]):
                rec.update({k: nat[k] for k in ("window_loss", "window_bpb", "far_loss", "far_bpb", "far_fraction",
                                                "tokens", "windows", "test_offset", "measurements")})
                rec.update(same_as="native", seconds=0.0, cpu_seconds=0.0,
                           why=f"factor 1: cos, sin at positions 0..{c['length'] - 1} bit-for-bit equal to native")
                write_json_atomic(out / "cells" / f"{c['name']}.json", rec)
                _log(out, f"{c['name']}: same rotary embedding as native at factor 1, shares its cell")
                continue
        load0 = os.getloadavg()[0]
        w0, p0 = time.perf_counter(), time.process_time()
        rec["started"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        if c["kind"] == "lm":
            rec.update(run_lm_cell(model, corpus, c["scaling"], c["length"], a.context, a.max_eval_tokens))
        else:
            rec.update(run_passkey_cell(model, tok, c["scaling"], c["length"], c["depth"], a.max_eval_tokens))
        rec.update(seconds=round(time.perf_counter() - w0, 1), cpu_seconds=round(time.process_time() - p0, 1),
                   finished=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                   loadavg=[round(load0, 1), round(os.getloadavg()[0], 1)])
        write_json_atomic(out / "cells" / f"{c['name']}.json", rec)
        what = (f"window {rec['window_loss']:.4f} far {rec['far_loss']:.4f}" if c["kind"] == "lm"
                else f"accuracy {rec['accuracy']:.0f} (key {rec['key']}, needle {rec['needle_distance']} back)")
        done = done_cells(out)
        secs, _ = estimate(cells, done)
        _log(out, f"{c['name']}: {what}; {rec['seconds']:.0f}s wall, {rec['cpu_seconds']:.0f}s CPU; "
                  f"{len(done)}/{len(cells)} done, ~{secs / 3600:.1f} h left at the measured rates")
    _log(out, "all cells done")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the .gguf file (or a checkpoint folder)")
    p.add_argument("--corpus", required=True, help="corpus folder or file (e.g. Python's standard library)")
    p.add_argument("--glob", default="[a-r]*/*.py",
                   help="files of a folder corpus (default '[a-r]*/*.py': with Python's standard library as "
                        "--corpus, the .py files of its packages a to r)")
    p.add_argument("--out", required=True, help="results folder (cells/, protocol.json, progress.log, cache/)")
    p.add_argument("--context", type=int, default=8192, help="the model's native context L0 (default 8192)")
    p.add_argument("--factors", type=lambda s: [float(x) for x in s.split(",")], default=[1.0, 2.0, 4.0])
    p.add_argument("--scalings", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                   default=list(SCALINGS))
    p.add_argument("--passkey-length", type=int, default=16384, help="0 for no passkey")
    p.add_argument("--depths", type=lambda s: [float(x) for x in s.split(",")], default=list(DEPTHS),
                   help="passkey depths, one example each, in run order")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    p.add_argument("--max-eval-tokens", type=int, default=32768)
    p.add_argument("--max-cells", type=int, default=None, help="only the first N cells (a smoke test)")
    p.add_argument("--plan", action="store_true", help="print the cells left and an estimate; load nothing")
    return p


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    from relpos.pretrained.scalings import HF_SCALINGS

    bad = [s for s in a.scalings if s not in HF_SCALINGS]
    if bad or not a.scalings:
        print(f"smollm2_context: error: --scalings must name some of {', '.join(HF_SCALINGS)}, got {bad}",
              file=sys.stderr)
        return 2
    if any(not 1 <= f <= 64 for f in a.factors) or any(not 0 <= d <= 1 for d in a.depths):
        print("smollm2_context: error: --factors must be in [1, 64] and --depths in [0, 1]", file=sys.stderr)
        return 2
    if a.plan:
        out = Path(a.out)
        cells = plan_cells(a.scalings, lengths_of(a), a.passkey_length, a.depths)
        done = done_cells(out) if out.exists() else {}
        secs, mean = estimate(cells, done)
        for c in cells:
            print(("done  " if c["name"] in done else "to do ") + c["name"])
        print(f"{len(done)}/{len(cells)} cells done; measured seconds per window by length: "
              + (", ".join(f"{L}: {s:.0f}" for L, s in sorted(mean.items())) or "none yet")
              + f"; ~{secs / 3600:.1f} h left at those rates (a factor-1 cell that will share native's window is "
              "counted as a full window)")
        return 0
    try:
        return run(a)
    except ValueError as e:
        print(f"smollm2_context: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
