"""``relpos bench``: every scheme and attention implementation side by side, against
position-free ``scaled_dot_product_attention``; median time, ratio and peak memory."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HELP = "benchmark every scheme and attention implementation against position-free SDPA"


def _csv(kind):
    def parse(s: str):
        items = [x.strip() for x in s.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError("expected a comma-separated list")
        if kind is int:
            try:
                vals = [int(x) for x in items]
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected integers, got {s!r}") from None
            if any(v < 1 for v in vals):
                raise argparse.ArgumentTypeError(f"lengths must be >= 1, got {s!r}")
            return vals
        return items

    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--schemes", type=_csv(str), help="comma-separated schemes (default: every attention scheme)")
    p.add_argument("--impls", type=_csv(str),
                   help="comma-separated implementations: dense, chunked, flex, auto, and 'peers' "
                        "(default: dense,chunked,auto on CPU; flex too on CUDA)")
    p.add_argument("--lengths", type=_csv(int), help="comma-separated sequence lengths N (default plan: "
                   "N=2048 for every scheme, a 256..8192 sweep for core schemes, 16384 for chunked)")
    p.add_argument("--modes", type=_csv(str), help="fwd, fwd+bwd (default both)")
    p.add_argument("--peers", action="store_true",
                   help="also run the peers, causal and bidirectional (Hugging Face T5 with sdpa/eager, Hugging "
                        "Face DeBERTa-v2 DisentangledSelfAttention, x-transformers Decoder/Encoder with ALiBi, T5, "
                        "dynamic position bias and rotary, with and without attn_flash, rotary-embedding-torch, a "
                        "FlexAttention score_mod, Shaw as N x N x d tensors and as an i, j loop, CoPE as the paper's "
                        "code), each against the same relpos layer")
    p.add_argument("--peer-names", type=_csv(str), default=None,
                   help="comma-separated peers to run with --peers or --impls peers (default: all; see "
                        "relpos.bench.PEERS)")
    p.add_argument("--quick", action="store_true", help="tiny smoke run (N=64,128; 1 repeat) for tests")
    p.add_argument("--out", default="benchmarks/results",
                   help="output folder for <name>.json and <name>.md (default benchmarks/results)")
    p.add_argument("--name", default=None, help="output file stem (default 'attention', 'attention-quick' with --quick)")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds per case, median kept (default 3; 1 quick)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (default 1: steadier ratios on a shared machine; 0 = torch's default)")
    p.add_argument("--clock", choices=["auto", "cpu", "wall"], default="auto",
                   help="what median_ms measures: process CPU time (steady on a shared machine; used by default "
                        "with one thread) or wall-clock time (default with several threads); both are recorded")
    p.add_argument("--no-settle", action="store_true",
                   help="time each case right after whatever ran before it (default: an untimed run of the same "
                        "case first, so every timed run follows a run of the same case)")
    p.add_argument("--no-flush-denormal", action="store_true",
                   help="keep subnormal floats (default flushes them: torch.set_flush_denormal(True))")
    p.add_argument("--no-memory", action="store_true", help="skip the per-configuration peak-memory subprocesses")
    p.add_argument("--memory-jobs", type=int, default=3, help="memory subprocesses at a time (default 3)")
    p.add_argument("--budget", type=float, default=None, help="seconds after which timing rounds are cut short")
    p.add_argument("--batch", type=int, default=1, help="batch B (default 1)")
    p.add_argument("--heads", type=int, default=8, help="heads H (default 8)")
    p.add_argument("--head-dim", type=int, default=64, help="head dimension D (default 64)")
    p.add_argument("--bidirectional", action="store_true", help="bidirectional attention only (same as --masks "
                   "bidirectional)")
    p.add_argument("--masks", type=_csv(str), default=None,
                   help="comma-separated masks, each a run of its own in one document: causal, bidirectional "
                        "(default both for the default plan and --peers, causal for a --schemes/--lengths grid)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"])
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--merge", type=_csv(str), default=None,
                   help="comma-separated JSON documents of earlier runs (say one per mask, run side by side) to "
                        "merge into <name>.json/.md instead of running anything")
    p.add_argument("--json", action="store_true", help="print the JSON document instead of the markdown report")


def _spec(args: argparse.Namespace):
    import torch

    from relpos import bench
    from relpos.validation import check_choice, check_int

    check_choice("--device", args.device, ("cpu", "cuda"))
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available on this machine")
    for name in ("batch", "heads", "head_dim", "memory_jobs"):
        check_int(f"--{name.replace('_', '-')}", getattr(args, name), lo=1)
    check_int("--threads", args.threads, lo=0)
    repeats = check_int("--repeats", args.repeats if args.repeats is not None else (1 if args.quick else 3), lo=1)
    spec = bench.BenchSpec(
        batch=args.batch, heads=args.heads, head_dim=args.head_dim, causal=not args.bidirectional,
        dtype=args.dtype, repeats=repeats, threads=args.threads, flush_denormal=not args.no_flush_denormal,
        memory=not args.no_memory and args.device == "cpu", memory_jobs=args.memory_jobs, device=args.device,
        clock=args.clock if args.clock != "auto" else ("cpu" if args.threads == 1 and args.device == "cpu" else "wall"),
        settle=not args.no_settle,
    )
    spec.torch_dtype()  # validates
    return spec


def _masks(args: argparse.Namespace) -> list[bool]:
    """The runs to make, as ``causal`` flags."""
    if args.bidirectional:
        if args.masks and args.masks != ["bidirectional"]:
            raise ValueError("--bidirectional and --masks disagree; pass one of them")
        return [False]
    if args.masks is not None:
        for m in args.masks:
            if m not in ("causal", "bidirectional"):
                raise ValueError(f"--masks: unknown mask {m!r}; choose from causal, bidirectional")
        return [m == "causal" for m in dict.fromkeys(args.masks)]
    grid = args.quick or any(x is not None for x in (args.schemes, args.impls, args.lengths, args.modes))
    return [True] if grid and not args.peers else [True, False]


def _cases(args: argparse.Namespace, causal: bool = True) -> list:
    from relpos import bench
    from relpos.attention import available_impls
    from relpos.encodings import get_scheme, normalise_name

    schemes = args.schemes
    if schemes is not None:
        for s in schemes:
            get_scheme(s)  # ValueError naming the known schemes
        schemes = [normalise_name(s) for s in schemes]
    impls = args.impls
    ok = set(available_impls()) - {"reference"} | {"peers"}
    for i in impls or ():
        if i not in ok:
            raise ValueError(f"--impls: unknown implementation {i!r}; choose from {', '.join(sorted(ok))}")
    for m in args.modes or ():
        if m not in bench.MODES:
            raise ValueError(f"--modes: unknown mode {m!r}; choose from {', '.join(bench.MODES)}")
    names = args.peer_names
    if names is not None:
        bench.peer_cases([1], names=names)  # ValueError naming the known peers
    if args.quick or any(x is not None for x in (schemes, impls, args.lengths, args.modes)):
        lengths = args.lengths or ([64, 128] if args.quick else [bench.MAIN_N])
        grid_impls = [i for i in (impls or bench.default_impls(args.device)) if i != "peers"]
        cases = bench.grid_cases(schemes or bench.attention_schemes(), grid_impls, lengths,
                                 args.modes or list(bench.MODES), causal=causal)
        if args.peers or "peers" in (impls or []):
            cases += bench.peer_cases(args.lengths or ([64] if args.quick else [bench.MAIN_N]),
                                      args.modes or bench.MODES, names, causal=causal)
        return cases
    cases = bench.default_cases(args.device, causal=causal)
    if args.peers:
        cases += bench.peer_cases([bench.MAIN_N], names=names, causal=causal)
    return cases


def main(args: argparse.Namespace) -> int:
    import torch

    from relpos import bench

    import dataclasses

    from relpos.outdir import refuse_special_files, write_text_atomic  # regular files, never through a link

    spec = _spec(args)
    stem = args.name or ("attention-quick" if args.quick else "attention")
    refuse_special_files(args.out, [f"{stem}.json", f"{stem}.md"])  # before the run, not after it
    bench.apply_process_settings(spec)
    masks = _masks(args)
    plans = [(c, _cases(args, c)) for c in masks]

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t0 = time.monotonic()
    docs = []
    if args.merge:
        plans = []
        for path in args.merge:
            try:
                with open(path) as f:
                    docs.append(json.load(f))
            except (OSError, ValueError) as e:
                raise ValueError(f"--merge: cannot read {path!r}: {e}") from None
    for causal, cases in plans:
        sp = dataclasses.replace(spec, causal=causal)
        log(f"relpos bench: {len(cases)} cases, {sp.batch}x{sp.heads}x{sp.head_dim} {sp.dtype} "
            f"{'causal' if causal else 'bidirectional'}, {torch.get_num_threads()} thread(s), device {sp.device}")
        budget = None if args.budget is None else max(args.budget - (time.monotonic() - t0), 0.0)
        docs.append(bench.run_bench(cases, sp, log=log, time_budget=budget))
    command = "relpos bench " + " ".join(sys.argv[2:] if len(sys.argv) > 2 and sys.argv[1] == "bench" else [])
    if args.merge:
        doc = dict(docs[0])
        doc["records"] = [r for d in docs for r in d["records"]]
        doc["peers"] = [p for d in docs for p in d.get("peers", [])]
        doc["masks"] = [m for d in docs for m in d.get("masks", [])]
        doc["merged_from"] = [{"file": os.path.basename(p), "command": d.get("command"),
                               "total_seconds": d.get("total_seconds")} for p, d in zip(args.merge, docs)]
        doc["shape"] = doc["shape"].split(", causal")[0].split(", bidirectional")[0] + ", " + " and ".join(
            dict.fromkeys("causal" if m["causal"] else "bidirectional" for m in doc["masks"]))
        doc["total_seconds"] = round(sum(d.get("total_seconds", 0) for d in docs), 1)
    else:
        doc = bench.merge_docs(docs)
    from relpos.bench.report import auto_rows

    doc["auto_vs_fastest"] = auto_rows(doc["records"])
    doc["command"] = command
    md = bench.markdown(doc)
    os.makedirs(args.out, exist_ok=True)
    jpath = os.path.join(args.out, f"{stem}.json")
    mpath = os.path.join(args.out, f"{stem}.md")
    write_text_atomic(jpath, json.dumps(doc, indent=1))
    write_text_atomic(mpath, f"# relpos bench\n\nCommand: `{doc['command'].strip()}`\n\n"
                      f"Machine: {doc['machine']['cpu']} ({doc['machine']['cpu_count']} CPUs), torch "
                      f"{doc['machine']['torch']}, {doc['machine']['torch_threads']} thread(s), relpos kernels "
                      f"{doc['machine'].get('relpos_kernels', 'not recorded')}; "
                      + (f"merged from {', '.join(m['command'] for m in doc['merged_from'])}; "
                         if doc.get("merged_from") else "")
                      + f"run took {doc['total_seconds']:.0f} s; load average at the start of each mask's run: "
                      + ", ".join(f"{'causal' if m['causal'] else 'bidirectional'} {m['loadavg_start']}"
                                  for m in doc["masks"]) + f".\n\n{md}\n")
    print(json.dumps(doc, indent=1) if args.json else md)
    log(f"wrote {jpath} and {mpath} in {time.monotonic() - t0:.0f} s")
    return 0
