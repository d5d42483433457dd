"""Measure ``dense`` against ``chunked`` for every scheme and write the table ``impl="auto"`` reads.

Every attention scheme (``relpos.bench.attention_schemes()`` less those with no
term inside attention, which ``auto`` always sends to the fused SDPA call) x
{causal, bidirectional} x {fwd, fwd+bwd} x N in ``--lengths``; one thread,
process CPU time, the two implementations interleaved per cell (see
:mod:`relpos.bench.calibrate` for the stopping rule). The result goes to
``src/relpos/data/auto_table.json`` with this command, the machine and its
load average at the start and the end.

Usage::

    python benchmarks/auto_table.py                       # the shipped table (~8 min on 2 shared cores)
    python benchmarks/auto_table.py --schemes t5,deberta --lengths 256,1024 --out /tmp/t.json
    python benchmarks/auto_table.py --schemes dpb --masks bidirectional --merge earlier.json,earlier.log
    python benchmarks/auto_table.py --batch 16 --heads 4 --head-dim 16 --lengths 64,128,256,512 \
        --out src/relpos/data/auto_table_d16.json        # the compare presets' head width (~10 min)
    python benchmarks/auto_table.py --batch 4 --heads 4 --head-dim 16 --lengths 64,128,256,512 \
        --out src/relpos/data/auto_table_d16_b4.json     # and their N = 256 cells' batch (~1 min)
    python benchmarks/auto_table.py --schemes fire@half --rounds 9 --batch 4 --heads 4 --head-dim 16 \
        --lengths 64,128,256,512 --merge src/relpos/data/auto_table_d16_b4.json --out src/relpos/data/auto_table_d16_b4.json

``<scheme>@half`` is the scheme configured for a training length of N / 2 and called at N
(:data:`relpos.bench.steps.HALF`): FIRE past its threshold, the ``"piecewise"`` engine's case.

``--merge`` starts from the records of earlier tables (``.json``) or of the progress log
of a run that stopped early (any other file); this run's records win where both measured
a cell. The file is rewritten after every cell, so a stopped run keeps what it measured.

``relpos bench`` then times ``auto`` against both implementations in a separate
run (the table is never judged on the data that made it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "src" / "relpos" / "data" / "auto_table.json"


def main(argv: list[str] | None = None) -> int:
    from relpos import bench
    from relpos.bench.calibrate import LENGTHS, calibrate, cells_from_records, records_from_log

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--schemes", default=None, help="comma-separated schemes (default: every attention scheme)")
    p.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="comma-separated N buckets")
    p.add_argument("--rounds", type=int, default=5, help="most timed pairs per close cell (default 5)")
    p.add_argument("--masks", default="causal,bidirectional", help="causal and/or bidirectional")
    p.add_argument("--merge", default=None,
                   help="comma-separated earlier tables (.json) or progress logs whose records to keep")
    p.add_argument("--no-measure", action="store_true", help="only merge the --merge inputs into --out")
    p.add_argument("--batch", type=int, default=1, help="batch B of the measured shape (default 1)")
    p.add_argument("--heads", type=int, default=8, help="heads H of the measured shape (default 8)")
    p.add_argument("--head-dim", type=int, default=64,
                   help="head width D of the measured shape (default 64; auto reads the table of the nearest D)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help=f"output JSON (default {DEFAULT_OUT.relative_to(ROOT)})")
    args = p.parse_args(argv)
    lengths = sorted(int(x) for x in args.lengths.split(","))
    if any(n < 1 for n in lengths) or args.rounds < 1:
        print("auto_table.py: --lengths must be >= 1 and --rounds >= 1", file=sys.stderr)
        return 2
    spec = bench.BenchSpec(memory=False, batch=args.batch, heads=args.heads, head_dim=args.head_dim)
    bench.apply_process_settings(spec)

    import relpos

    schemes = args.schemes.split(",") if args.schemes else [
        s for s in bench.attention_schemes()
        if relpos.make_encoding(s, n_heads=2, head_dim=8).acts_on - {"embedding", "qk"}]
    masks = args.masks.split(",")
    if not set(masks) <= {"causal", "bidirectional"}:
        print("auto_table.py: --masks takes causal and/or bidirectional", file=sys.stderr)
        return 2
    earlier: list[dict] = []
    commands: list[str] = []
    for path in (args.merge.split(",") if args.merge else []):
        text = Path(path).read_text()
        if path.endswith(".json"):
            old = json.loads(text)
            earlier += old["records"]
            commands += old.get("commands", [old.get("command", "")])
        else:
            earlier += records_from_log(text)
            commands.append(f"(records recovered from the progress log {Path(path).name})")
    command = "python benchmarks/auto_table.py " + " ".join(argv if argv is not None else sys.argv[1:])
    load0 = os.getloadavg()
    t0 = time.monotonic()

    def save(records: list[dict]) -> dict:
        keys = {(r["key"], r["N"]) for r in records}
        allrecs = [r for r in earlier if (r["key"], r["N"]) not in keys] + records
        doc = {
            "version": 1,
            "kind": "relpos-auto-table",
            "command": command,
            "commands": commands + [command],
            "machine": bench.machine_info(spec),
            "load": {"loadavg_start": load0, "loadavg_now": os.getloadavg(),
                     "note": "load averages as measured (the machine may be shared); "
                             "process CPU time, one thread, the two implementations interleaved per cell"},
            "shape": {"batch": spec.batch, "heads": spec.heads, "head_dim": spec.head_dim, "dtype": spec.dtype},
            "lengths": sorted({int(r["N"]) for r in allrecs} | set(lengths)),
            "seconds": round(time.monotonic() - t0, 1),
            "cells": cells_from_records(allrecs),
            "records": allrecs,
        }
        from relpos.outdir import write_text_atomic  # a regular file, never through a link

        write_text_atomic(args.out, json.dumps(doc, indent=1) + "\n")
        return doc

    if args.no_measure:
        schemes = []
    res = calibrate(schemes, spec, lengths=lengths, rounds=args.rounds, causals=[m == "causal" for m in masks],
                    log=lambda s: print(s, file=sys.stderr, flush=True), on_record=save)
    doc = save(res["records"])
    print(f"wrote {args.out} ({len(doc['cells'])} cells, {doc['seconds']:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
