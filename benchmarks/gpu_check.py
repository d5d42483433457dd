"""The GPU check behind ``benchmarks/gpu_check.sh`` (see that file for what it runs).

Every step writes into one report (``gpu_check.json`` and ``gpu_check.md``) as soon as
it finishes, and every step has its own time limit, so a step that hangs or crashes
costs only its own share of the 8 minutes and the report still says what ran.

``--dry-run`` runs the same three steps on CPU at tiny sizes: the flex check in
inference only (PyTorch has no CPU FlexAttention backward), the bench on CPU, and
the DDP step skipped. ``tests/bench/test_gpu_check.py`` runs it in CI.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Bench lengths (GPU) and per-length time limits in seconds; the whole script stays under 8 minutes.
GPU_LENGTHS = ((2048, 120), (8192, 80), (32768, 80))
#: Time limits of the flex check (16 schemes compiled forward and backward: 120 s reached 14 on an H200) and the
#: DDP step (seconds); with the bench about 7.5 minutes at most.
FLEX_LIMIT_S, DDP_LIMIT_S = 170, 60
DRY_LENGTHS = ((32, 60), (48, 60))
#: Schemes benched at every length; N = 2048 covers every attention scheme.
LONG_SCHEMES = "nope,alibi,t5,rope,kerple-log,sandwich,shaw"
#: Relative tolerance of the flex check: max |flex - reference| <= TOL * max(1, max |reference|).
TOL = {"float32": 2e-3}


def finite_json(obj):
    """``obj`` with every non-finite float as its name (``"nan"``, ``"inf"``, ``"-inf"``): a NaN from the GPU is a
    result to keep, and relpos's JSON writers refuse NaN rather than write invalid JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="relpos GPU check (see benchmarks/gpu_check.sh)")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes, no CUDA: checks that the script runs")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu"), help="output folder")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"],
                   help="bench dtype on the GPU (default bfloat16, so that SDPA runs FlashAttention)")
    p.add_argument("--ddp-worker", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _err(a, b) -> float:
    return float((a.double() - b.double()).abs().max() / max(1.0, float(b.double().abs().max())))


def flex_check(device: str, grad: bool, limit_s: float = FLEX_LIMIT_S) -> list[dict]:
    """Every attention scheme: flex against the reference (outputs, and with ``grad`` every gradient).

    Schemes not reached within ``limit_s`` seconds (each compiles its own kernels) are listed as not run.
    """
    import torch

    import relpos
    from relpos.attention import UnsupportedError
    from relpos.bench import attention_schemes

    if device == "cuda":  # one compiled kernel per scheme: keep every one compiled (see relpos.bench.memory)
        import torch._dynamo.config as dynamo

        from relpos.bench.memory import RECOMPILE_LIMIT

        dynamo.recompile_limit = max(dynamo.recompile_limit, RECOMPILE_LIMIT)
    rows = []
    B, H, N, D = 2, 4, 80 if device == "cuda" else 16, 32
    t0 = time.monotonic()
    for name in attention_schemes():
        row = {"scheme": name, "N": N, "grad": grad, "status": "ok", "out_err": None, "grad_err": None, "note": None}
        if time.monotonic() - t0 > limit_s:
            row["status"], row["note"] = "not run", f"time limit of the flex check ({limit_s:g} s) reached"
            rows.append(row)
            continue
        try:
            torch.manual_seed(0)
            enc = relpos.make_encoding(name, n_heads=H, head_dim=D, max_len=max(N, 512)).to(device)
            g = torch.Generator().manual_seed(1)
            q, k, v = (torch.randn(B, H, N, D, generator=g).to(device).requires_grad_(grad) for _ in range(3))
            params = [p for p in enc.parameters() if p.requires_grad] if grad else []
            results = []
            for impl in ("flex", "reference"):
                with torch.set_grad_enabled(grad):
                    out = relpos.attention(q, k, v, enc, causal=True, impl=impl)
                    grads = torch.autograd.grad(out.float().square().sum(), [q, k, v, *params]) if grad else []
                results.append((out.detach(), [x.detach() for x in grads]))
            (out, gr), (ref, rgr) = results
            row["out_err"] = _err(out, ref)
            if grad:
                row["grad_err"] = max(_err(a, b) for a, b in zip(gr, rgr))
            bad = row["out_err"] > TOL["float32"] or (row["grad_err"] or 0) > TOL["float32"]
            row["status"] = "fail" if bad else "ok"
        except UnsupportedError as e:
            row["status"], row["note"] = "unsupported", str(e)[:200]
        except Exception as e:  # recorded; the other schemes still run
            row["status"], row["note"] = "error", f"{type(e).__name__}: {e}"[:300]
        rows.append(row)
    return rows


def bench_step(args, out: Path) -> list[dict]:
    """``relpos bench`` once per length, each in its own process with its own time limit."""
    runs = []
    for N, limit in (DRY_LENGTHS if args.dry_run else GPU_LENGTHS):
        name = f"attention-gpu-N{N}" if not args.dry_run else f"attention-dry-N{N}"
        cmd = [sys.executable, "-m", "relpos.cli", "bench", "--lengths", str(N), "--out", str(out), "--name", name,
               "--budget", str(int(limit * 0.5)), "--repeats", "1" if args.dry_run else "3"]
        if args.dry_run:
            cmd += ["--schemes", "t5", "--impls", "auto", "--no-memory", "--modes", "fwd+bwd"]
        else:
            cmd += ["--device", "cuda", "--dtype", args.dtype, "--impls", "flex,auto" if N <= 8192 else "auto"]
            if N > 2048:
                cmd += ["--schemes", LONG_SCHEMES]
        run = {"N": N, "command": " ".join(["relpos", *cmd[3:]]), "limit_s": limit, "status": "ok", "seconds": None,
               "json": f"{name}.json", "ratios": {}}
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit)
            if p.returncode != 0:
                run["status"], run["note"] = "error", (p.stderr.strip().splitlines() or ["failed"])[-1][:300]
        except subprocess.TimeoutExpired:
            run["status"], run["note"] = "timeout", f"stopped after {limit} s"
        run["seconds"] = round(time.monotonic() - t0, 1)
        jpath = out / f"{name}.json"
        if run["status"] == "ok" and jpath.exists():
            doc = json.loads(jpath.read_text())
            for r in doc["records"]:
                if r["ratio"] is not None:
                    run["ratios"][f"{r['scheme']}/{r['impl']}/{r['mode']}"] = r["ratio"]
        runs.append(run)
    return runs


def ddp_worker(out: str) -> None:
    """One rank of the 2-process NCCL step: two training steps, then this rank's losses and weight checksum."""
    import torch

    from relpos.data import ByteLMSource, stdlib_corpus
    from relpos.model import ModelConfig
    from relpos.training.loop import TrainConfig, train

    mc = ModelConfig(d_model=64, n_layers=2, n_heads=4, max_len=128, scheme="t5")
    tc = TrainConfig(steps=2, batch_size=8, seq_len=64, warmup=1, progress=False, device="cuda")
    src = ByteLMSource(stdlib_corpus("train", max_bytes=50_000), batch_size=8, seq_len=64, seed=0)
    res = train(mc, tc, src)
    total = sum(float(p.double().sum()) for p in res.model.parameters())
    rank = int(os.environ.get("RANK", "0"))
    from relpos.outdir import write_json_atomic

    write_json_atomic(Path(out, f"ddp-rank{rank}.json"), finite_json(
        {"losses": res.losses, "checksum": total, "device": str(torch.cuda.current_device())}))


def ddp_step(args, out: Path) -> dict:
    import torch

    n = torch.cuda.device_count() if not args.dry_run else 0
    if n < 2:
        why = "dry run (CPU)" if args.dry_run else f"{n} GPU(s) visible; the NCCL step needs 2"
        return {"status": "skipped", "note": why}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
           "--rdzv_endpoint", "127.0.0.1:0", str(Path(__file__).resolve()), "--ddp-worker", str(out)]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=DDP_LIMIT_S,
                           env=dict(os.environ, MASTER_ADDR="127.0.0.1"))
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "note": f"stopped after {DDP_LIMIT_S} s"}
    res = {"seconds": round(time.monotonic() - t0, 1)}
    if p.returncode != 0:
        return {**res, "status": "error", "note": (p.stderr.strip().splitlines() or ["failed"])[-1][:300]}
    r0, r1 = (json.loads(Path(out, f"ddp-rank{r}.json").read_text()) for r in (0, 1))
    same = r0["losses"] == r1["losses"] and abs(r0["checksum"] - r1["checksum"]) <= 1e-6 * max(1, abs(r0["checksum"]))
    return {**res, "status": "ok" if same else "fail", "losses": r0["losses"],
            "note": "both replicas agree" if same else f"replicas differ: {r0} vs {r1}"}


def markdown(doc: dict) -> str:
    dry = " --dry-run" if doc["dry_run"] else ""
    lines = [f"# relpos GPU check{' (dry run, CPU)' if dry else ''}", "",
             f"Device: {doc['machine'].get('gpu', 'none')}; torch {doc['machine']['torch']}; "
             f"{doc['seconds']:.0f} s in all. Command: `benchmarks/gpu_check.sh{dry}`.",
             "", "## 1. flex against the reference", "",
             f"Max error relative to max(1, max |reference|); fails above {TOL['float32']}.", "",
             "| scheme | N | backward | status | output error | gradient error | note |",
             "|---|---|---|---|---|---|---|"]
    for r in doc["flex"]:
        fmt = lambda x: "-" if x is None else f"{x:.1e}"  # noqa: E731
        lines.append(f"| {r['scheme']} | {r['N']} | {'yes' if r['grad'] else 'no'} | {r['status']} | "
                     f"{fmt(r['out_err'])} | {fmt(r['grad_err'])} | {r['note'] or ''} |")
    lines += ["", "## 2. relpos bench (ratio to SDPA without bias, same run)", ""]
    for run in doc["bench"]:
        lines += [f"- N = {run['N']}: {run['status']} in {run['seconds']} s (`{run['command']}`; "
                  f"`{run['json']}`){': ' + run['note'] if run.get('note') else ''}"]
    lines += ["", "| case | " + " | ".join(f"N={r['N']}" for r in doc["bench"]) + " |",
              "|---|" + "---|" * len(doc["bench"])]
    keys = list(dict.fromkeys(k for r in doc["bench"] for k in r["ratios"]))
    for k in keys:
        lines.append(f"| {k} | " + " | ".join("" if k not in r["ratios"] else f"x{r['ratios'][k]:.2f}"
                                              for r in doc["bench"]) + " |")
    d = doc["ddp"]
    lines += ["", "## 3. NCCL DDP step (2 processes)", "", f"{d['status']}: {d.get('note', '')}", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.ddp_worker:
        ddp_worker(args.ddp_worker)
        return 0
    import torch

    from relpos.bench import machine_info

    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_check: no CUDA device on this machine (use --dry-run to check the script on CPU)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    device = "cpu" if args.dry_run else "cuda"
    doc = {"kind": "relpos-gpu-check", "version": 1, "dry_run": args.dry_run, "machine": machine_info(),
           "python": platform.python_version(), "flex": [], "bench": [], "ddp": {"status": "not run"}, "seconds": 0}

    def write() -> None:
        from relpos.bench.results import write_results

        doc["seconds"] = round(time.monotonic() - t0, 1)
        write_results(out, "gpu_check", finite_json(doc), markdown(doc), echo=False)

    print("gpu_check: 1/3 flex against the reference", file=sys.stderr, flush=True)
    doc["flex"] = flex_check(device, grad=not args.dry_run)
    write()
    print("gpu_check: 2/3 relpos bench", file=sys.stderr, flush=True)
    doc["bench"] = bench_step(args, out)
    write()
    print("gpu_check: 3/3 NCCL DDP step", file=sys.stderr, flush=True)
    doc["ddp"] = ddp_step(args, out)
    write()
    print(markdown(doc))
    bad = [r["scheme"] for r in doc["flex"] if r["status"] in ("fail", "error", "not run")]
    bad += [f"bench N={r['N']}" for r in doc["bench"] if r["status"] != "ok"]
    bad += ["ddp"] if doc["ddp"]["status"] in ("fail", "error", "timeout") else []
    print(f"gpu_check: {'FAILED: ' + ', '.join(bad) if bad else 'all checks passed'}; wrote {out}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
