"""Train-step time of TransformerLM for every scheme against NoPE, at the shapes ``relpos compare`` trains.

Issue 13, part 3: at short lengths per-call overhead, not attention FLOPs, may
dominate a model's step, so kernels that are fast at N = 2048 do not settle it.
For each shape every registered scheme gets its own :class:`relpos.training.loop.Trainer`
(same model size, same data, ``attn_impl="auto"`` as ``ModelConfig``'s default);
after one warm-up step each, timed steps run in interleaved rounds (order rotated
every round), so drifts in machine load hit every scheme alike. A step is one full
optimizer step (forward, backward, clipping, AdamW); the clock is process CPU time
with one thread (steady on a shared machine). Ratios are to NoPE in the same run: the median over rounds
of the ratio within each round (a ratio of two medians can take them from rounds of different host speed).

``--compile`` adds, at the compare shapes, a ``torch.compile``'d trainer
(``TrainConfig(compile=True)``) beside the eager one for the schemes in
``--compile-schemes``, timed in the same rounds.

Usage::

    python benchmarks/train_step.py                      # every shape, every scheme, with --compile
    python benchmarks/train_step.py --shapes default-lm --rounds 5 --no-compile

Writes ``benchmarks/results/train_step.json`` and ``.md`` and prints the table.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

#: name -> (what it is, model fields, batch, sequence length). The compare shapes come from
#: relpos.compare.config's presets (LM: train_len; copy: the task's padded width at train_len 8).
SHAPES: dict[str, tuple[str, dict, int, int]] = {
    "ci-lm": ("`relpos compare --preset ci`, LM task", {"d_model": 32, "n_layers": 2, "n_heads": 2}, 8, 32),
    "default-lm": ("`relpos compare` (default preset), LM task", {"d_model": 64, "n_layers": 2, "n_heads": 4}, 16, 64),
    "default-copy": ("`relpos compare` (default preset), copy task", {"d_model": 64, "n_layers": 2, "n_heads": 4},
                     32, 17),
    "full-lm": ("`relpos compare --preset full`, LM task", {"d_model": 64, "n_layers": 3, "n_heads": 4}, 16, 64),
    "small-1024": ("`ModelConfig.preset('small')`, sequence 1024", {"preset": "small"}, 4, 1024),
}
COMPARE_SHAPES = ("ci-lm", "default-lm", "default-copy", "full-lm")
#: Targets (time per step as a multiple of NoPE's): 1.3x, and 2x for the content-dependent
#: schemes the issue names. Data, keyed by registry name.
TARGET, CONTENT_TARGETS = 1.3, {"deberta": 2.0, "cope": 2.0, "fox": 2.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES), help="shapes (default all)")
    p.add_argument("--schemes", nargs="*", default=None, help="schemes (default: every registered one)")
    p.add_argument("--rounds", type=int, default=None,
                   help="timed interleaved rounds (default 7 at the compare shapes, 3 at small-1024)")
    p.add_argument("--compile", dest="compile", action="store_true", default=True,
                   help="also time torch.compile'd trainers at the compare shapes (default on)")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="skip the compiled trainers")
    p.add_argument("--compile-schemes", nargs="*", default=["nope", "rope", "alibi", "t5", "deberta"],
                   help="schemes compiled with --compile (default nope rope alibi t5 deberta)")
    p.add_argument("--compile-shapes", nargs="*", default=["default-lm"], choices=list(COMPARE_SHAPES),
                   help="compare shapes where --compile runs (default default-lm; each compile takes 10-40 s)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"), help="results folder")
    p.add_argument("--name", default="train_step", help="output file stem (default train_step)")
    return p.parse_args(argv)


def _trainer(shape: str, scheme: str, compiled: bool, corpus: bytes):
    from relpos.data import ByteLMSource
    from relpos.training.distributed import DistContext
    from relpos.model import ModelConfig
    from relpos.training.loop import TrainConfig, Trainer

    _, fields, B, N = SHAPES[shape]
    fields = dict(fields)
    preset = fields.pop("preset", None)
    if preset is not None:
        mc = ModelConfig.preset(preset, scheme=scheme, **fields)
    else:
        mc = ModelConfig(scheme=scheme, max_len=max(N, 64), **fields)
    tc = TrainConfig(steps=10**6, batch_size=B, seq_len=N, warmup=1, progress=False, device="cpu", compile=compiled)
    return Trainer(mc, tc, ByteLMSource(corpus, B, N, seed=0), ctx=DistContext())


def attention_times(shape: str, schemes: list[str], model, rounds: int) -> dict[str, float]:
    """The attention call alone at the shape's ``(B, H, N, D)``: ``relpos.attention(impl="auto")`` forward and
    backward per scheme, and position-free SDPA (key ``"sdpa"``), interleaved; median CPU ms per call."""
    from relpos.bench import BenchSpec, Case, build_step
    from relpos.bench.steps import timed

    cfg = model.cfg
    _, _, B, N = SHAPES[shape]
    spec = BenchSpec(batch=B, heads=cfg.n_heads, head_dim=cfg.d_model // cfg.n_heads, memory=False)
    cases = {"sdpa": Case("none", "sdpa", N, "fwd+bwd")}
    cases.update({s: Case(s, "auto", N, "fwd+bwd") for s in schemes})
    steps = {k: build_step(c, spec)[0] for k, c in cases.items()}
    for st in steps.values():
        st()
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(max(rounds, 3)):
        for k, st in steps.items():
            times[k].append(timed(st, spec)[1])
    return {k: statistics.median(v) for k, v in times.items()}


def run_shape(shape: str, schemes: list[str], rounds: int, compiled: list[str], corpus: bytes, log) -> dict:
    """Time every scheme (and the compiled ones) at one shape, interleaved; ratios to NoPE's eager step."""
    import torch

    from relpos.bench.results import per_round_ratio

    entries = [(s, False) for s in schemes] + [(s, True) for s in compiled]
    trainers, warm = {}, {}
    for key in entries:
        trainers[key] = _trainer(shape, key[0], key[1], corpus)
        t0 = time.perf_counter()
        trainers[key].step()  # warm-up (and the compile, for a compiled trainer)
        if key[1]:
            trainers[key].step()
        warm[key] = time.perf_counter() - t0
    log(f"{shape}: {len(entries)} trainers warmed up")
    times: dict[tuple, list[float]] = {k: [] for k in entries}
    for r in range(rounds):
        order = entries[r % len(entries):] + entries[: r % len(entries)]
        for key in order:
            t0 = time.process_time()
            trainers[key].step()
            times[key].append(time.process_time() - t0)
    base = statistics.median(times[("nope", False)])
    model = trainers[("nope", False)].model
    attn = attention_times(shape, [s for s in schemes if _in_attention(s)], model, rounds)
    layers = model.cfg.n_layers
    rows = []
    for s in schemes:
        med = statistics.median(times[(s, False)])
        target = CONTENT_TARGETS.get(s, TARGET)
        vs = per_round_ratio(times[(s, False)], times[("nope", False)])
        row = {"scheme": s, "step_ms": 1000 * med, "vs_nope": vs, "target": target,
               "met": vs <= target, "params": trainers[(s, False)].model.num_params(),
               "extra_step_ms": 1000 * (med - base)}
        if s in attn:  # the attention calls' share of the extra time: n_layers x (scheme's call - SDPA's call)
            row["extra_attention_ms"] = layers * (attn[s] - attn["sdpa"])
        if (s, True) in times:
            cmed = statistics.median(times[(s, True)])
            row.update({"compiled_step_ms": 1000 * cmed, "compiled_vs_nope": per_round_ratio(times[(s, True)], times[("nope", False)]),
                        "compile_speedup": per_round_ratio(times[(s, False)], times[(s, True)]), "compile_warmup_s": warm[(s, True)]})
        rows.append(row)
    _, fields, B, N = SHAPES[shape]
    return {"shape": shape, "what": SHAPES[shape][0], "model": fields, "batch": B, "seq_len": N, "rounds": rounds,
            "nope_step_ms": 1000 * base, "torch_threads": torch.get_num_threads(), "rows": rows}


def _in_attention(scheme: str) -> bool:
    """True if the scheme acts inside attention (not only on the input embedding)."""
    from relpos.encodings import get_scheme

    return bool(set(get_scheme(scheme)[0].acts_on) - {"embedding"})


def markdown(doc: dict) -> str:
    lines = ["# TransformerLM train-step time per scheme, against NoPE", "",
             f"Command: `{doc['command']}`", "",
             f"CPU ({doc['machine']}), torch {doc['torch']}, {doc['threads']} thread(s), relpos kernels "
             f"{doc.get('relpos_kernels', 'not recorded')}; process CPU time per "
             "optimizer step (forward, backward, clipping, AdamW), median of interleaved rounds after a warm-up "
             "step (ratios: the median of the per-round ratios);"
             f" `attn_impl='auto'`. Run took {doc['seconds']:.0f} s. Targets: <= {TARGET}x NoPE, "
             "<= 2x for DeBERTa, CoPE and FoX.", "",
             "*extra ms*: the step's time over NoPE's. *of which attention*: the attention calls alone, measured "
             "in the same run at the shape's (B, H, N, D) -- `relpos.attention(impl='auto')` forward+backward minus "
             "position-free SDPA's, times the number of layers; the rest is the model around them (rotations, "
             "position terms built per layer, per-call overhead) and the noise of a shared machine.", ""]
    for sh in doc["shapes"]:
        comp = any("compiled_step_ms" in r for r in sh["rows"])
        lines += [f"## {sh['shape']}: {sh['what']}", "",
                  f"Model {sh['model']}, batch {sh['batch']} x {sh['seq_len']} tokens, {sh['rounds']} rounds; "
                  f"NoPE step {sh['nope_step_ms']:.1f} ms.", "",
                  "| scheme | step ms | vs NoPE | target | met | extra ms | of which attention |"
                  + (" compiled ms | compiled vs NoPE | compile speed-up |" if comp else ""),
                  "|---|---|---|---|---|---|---|" + ("---|---|---|" if comp else "")]
        for r in sh["rows"]:
            att = r.get("extra_attention_ms")
            line = (f"| {r['scheme']} | {r['step_ms']:.1f} | {r['vs_nope']:.2f}x | <= {r['target']} | "
                    f"{'yes' if r['met'] else '**no**'} | {r['extra_step_ms']:.1f} | "
                    f"{'' if att is None else f'{att:.1f}'} |")
            if comp:
                line += (f" {r['compiled_step_ms']:.1f} | {r['compiled_vs_nope']:.2f}x | {r['compile_speedup']:.2f}x |"
                         if "compiled_step_ms" in r else " | | |")
            lines.append(line)
        missed = [r["scheme"] for r in sh["rows"] if not r["met"]]
        lines += ["", f"Over target: {', '.join(missed)}." if missed else "Every scheme meets its target.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from relpos import kernels
    from relpos.data import stdlib_corpus
    from relpos.encodings import scheme_names

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    schemes = args.schemes or scheme_names()
    schemes = ["nope"] + [s for s in schemes if s != "nope"]
    corpus = stdlib_corpus("train", max_bytes=1_000_000)
    t0 = time.monotonic()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    shapes = []
    for shape in args.shapes:
        rounds = args.rounds or (3 if shape == "small-1024" else 7)
        compiled = []
        if args.compile and shape in args.compile_shapes:
            compiled = [s for s in args.compile_schemes if s in schemes]
            compiled = ["nope"] + [s for s in compiled if s != "nope"]
        shapes.append(run_shape(shape, schemes, rounds, compiled, corpus, log))
        log(f"{shape}: done at {time.monotonic() - t0:.0f} s")
    doc = {"benchmark": "train_step", "command": "python benchmarks/train_step.py " + " ".join(sys.argv[1:]),
           "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
           "relpos_kernels": kernels.status(), "threads": args.threads, "seconds": round(time.monotonic() - t0, 1), "shapes": shapes}
    from relpos.bench.results import write_results
    write_results(args.out, args.name, doc, markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
