"""A compare job's training step with glibc's default malloc thresholds against relpos's (page faults, kernel time).

A compare worker process trains one model. With glibc's dynamic thresholds many of a step's freed buffers go back
to the kernel and return as fresh zeroed pages on the next step (minor page faults);
:func:`relpos.training.malloc.keep_freed_memory`, which :func:`relpos.compare.job.run_job` calls, keeps them in
the heap. ``job_step.py`` cannot show this: it keeps every variant's model alive in one process, whose heap then
stays large (no faults either way). So here each measurement is a fresh process that trains one job, as a worker
does: the job's trainer and fit monitor at a ``job_step.py`` cell, ``--warmup`` steps and a validation, then
``--steps`` steps with the monitor's validation every ``val_every`` steps, timed by process CPU time (user and
kernel) and counted in minor page faults. Each round runs the default and the set process back to back, the
order alternating.

    python benchmarks/malloc_faults.py --cells full-copy full-mqar --schemes nope shaw transformer-xl --rounds 2

Writes ``benchmarks/results/malloc_faults.{json,md}`` (``--out``, ``--name``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(cell: str, scheme: str, warmup: int, steps: int) -> dict:
    import torch

    sys.path.insert(0, str(HERE))
    from job_step import JobStep  # calls keep_freed_memory (a no-op under RELPOS_MALLOC_DEFAULTS=1)
    from relpos.training.malloc import keep_freed_memory

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    job = JobStep(cell, scheme)
    for _ in range(warmup):
        job.step()
    job.validate()
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    for i in range(1, steps + 1):
        job.step()
        if i % job.val_every == 0:
            job.validate()
    r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    return {"malloc": keep_freed_memory(), "cpu_ms": (t1 - t0) / steps * 1e3,
            "kernel_ms": (r1.ru_stime - r0.ru_stime) / steps * 1e3, "faults": (r1.ru_minflt - r0.ru_minflt) / steps}


def run_child(cell: str, scheme: str, default: bool, args) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES" and not k.startswith("MALLOC_")}
    env.update(OMP_NUM_THREADS="1", RELPOS_MALLOC_DEFAULTS="1" if default else "0")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", cell, scheme, str(args.warmup), str(args.steps)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def markdown(doc: dict) -> str:
    lines = ["# A compare job's step: glibc's default malloc thresholds against relpos's", "",
             f"Command: `{doc['command']}`", "",
             f"CPU ({doc['machine']}), torch {doc['torch']}, 1 thread. Each figure is the median over {doc['rounds']} "
             f"fresh processes, each training one job ({doc['warmup']} warm-up steps, then {doc['steps']} steps with the "
             "fit monitor's validation every `val_every` steps), per step: process CPU time (user + kernel), "
             "kernel time, minor page faults. *default*: glibc's dynamic thresholds (`RELPOS_MALLOC_DEFAULTS=1`); "
             "*set*: `keep_freed_memory()` (mmap threshold 32 MB, trim threshold 512 MB). Run took "
             f"{doc['seconds']:.0f} s.", "",
             "| cell | scheme | default ms | set ms | default / set | kernel ms default / set | faults default / set |",
             "|---|---|---|---|---|---|---|"]
    if doc.get("note"):
        lines[4:4] = [f"**Note**: {doc['note']}", ""]
    for r in doc["rows"]:
        d, s = r["default"], r["set"]
        lines.append(f"| {r['cell']} | {r['scheme']} | {d['cpu_ms']:.1f} | {s['cpu_ms']:.1f} | "
                     f"{d['cpu_ms'] / s['cpu_ms']:.2f}x | {d['kernel_ms']:.2f} / {s['kernel_ms']:.2f} | "
                     f"{d['faults']:.0f} / {s['faults']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        cell, scheme, warmup, steps = argv[1], argv[2], int(argv[3]), int(argv[4])
        print(json.dumps(child(cell, scheme, warmup, steps)))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cells", nargs="+", default=["full-copy", "full-mqar"])
    p.add_argument("--schemes", nargs="+", default=["nope", "shaw", "transformer-xl"])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--out", default=str(HERE / "results"))
    p.add_argument("--name", default="malloc_faults")
    p.add_argument("--note", default="", help="a line for the table's header (e.g. the host's state)")
    args = p.parse_args(argv)
    import torch

    t0 = time.monotonic()
    rows = []
    for cell in args.cells:
        for scheme in args.schemes:
            got: dict[str, list[dict]] = {"default": [], "set": []}
            for r in range(args.rounds):
                for default in ((True, False) if r % 2 == 0 else (False, True)):
                    got["default" if default else "set"].append(run_child(cell, scheme, default, args))
            row = {"cell": cell, "scheme": scheme, "runs": got}
            for k, runs in got.items():
                row[k] = {m: statistics.median(x[m] for x in runs) for m in ("cpu_ms", "kernel_ms", "faults")}
            assert {x["malloc"] for x in got["set"]} == {"set"}, got["set"]
            rows.append(row)
            print(f"{cell} {scheme}: default {row['default']['cpu_ms']:.1f} ms ({row['default']['faults']:.0f} faults), "
                  f"set {row['set']['cpu_ms']:.1f} ms ({row['set']['faults']:.0f})", file=sys.stderr, flush=True)
    doc = {"benchmark": "malloc_faults", "command": "python benchmarks/malloc_faults.py " + " ".join(argv),
           "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
           "rounds": args.rounds, "warmup": args.warmup, "steps": args.steps,
           "seconds": round(time.monotonic() - t0, 1), "rows": rows}
    if args.note:
        doc["note"] = args.note
    from relpos.bench.results import write_results
    write_results(args.out, args.name, doc, markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
