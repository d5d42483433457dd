"""The measurements behind ``impl="auto"``: ``dense`` against ``chunked`` per scheme, masking, length and mode.

``benchmarks/auto_table.py`` runs :func:`calibrate` and writes the result to
``src/relpos/data/auto_table.json``, which :mod:`relpos.attention.auto` reads.
Every cell is keyed ``"<scheme>/<engine>/<causal|bidirectional>/<fwd|fwd+bwd>"``
(the scheme's registry name and the chunked engine its capabilities select) and
maps each measured length ``N`` to the faster implementation. Engine-level rows
(``"*/<engine>/..."``) take the majority over the schemes of that engine, for a
scheme or request (padding, explicit positions) that has no row of its own.

How one cell is measured (process CPU time, one thread, B = 1, H = 8, D = 64,
float32 unless the spec says otherwise): both implementations once untimed, then
interleaved timed runs (dense, chunked, chunked, dense, ...). A cell whose first two
timed pairs both have the same side more than :data:`CLEAR` times slower is decided
(one pair alone was fooled by a slow first call); other cells get up to ``rounds``
pairs and the medians decide. From
:data:`DENSE_SKIP_N` on, ``dense`` (``N x N`` memory) is measured only where it
won at the previous length, and never where one ``(B, H, N, N)`` tensor exceeds
:data:`DENSE_MAX_BYTES`; such cells are ``chunked``, with ``"dense_skipped"``
saying why in the record (nothing is timed there).

The table is *not* the data a report reads: ``relpos bench`` times ``auto`` in a
separate run against both implementations.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable

from relpos.bench.spec import BenchSpec, Case
from relpos.bench.steps import build_step, make_encoding, timed

__all__ = ["calibrate", "cells_from_records", "records_from_log", "LENGTHS", "CLEAR", "DENSE_SKIP_N", "DENSE_MAX_BYTES", "cell_key", "engine_of"]

#: Lengths measured by default (the table's N buckets).
LENGTHS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
#: A cell whose first two timed pairs both differ by more than this factor (same winner) is decided.
CLEAR = 1.5
#: From this N on, dense is timed only where it won at the previous length.
DENSE_SKIP_N = 4096


def cell_key(scheme: str, engine: str, causal: bool, mode: str) -> str:
    return f"{scheme}/{engine}/{'causal' if causal else 'bidirectional'}/{mode}"


def engine_of(scheme: str, spec: BenchSpec, N: int) -> str:
    """The chunked engine the scheme's capabilities select for a plain request of length N."""
    import torch

    from relpos.attention import request
    from relpos.attention.chunked import engine_for

    enc = make_encoding(scheme, spec, N)
    q = torch.zeros(1, spec.heads, N, spec.head_dim)
    return engine_for(request(q, q, q, enc, causal=spec.causal))


#: Dense is not timed where one ``(B, H, N, N)`` float32 tensor would exceed this many bytes
#: (it forms several); such cells are ``chunked``.
DENSE_MAX_BYTES = 2**30


def _pair(scheme: str, N: int, mode: str, spec: BenchSpec, rounds: int, skip: str | None) -> dict:
    if skip is not None:
        return {"N": N, "pick": "chunked", "runs": 0, "chunked_ms": None, "dense_ms": None, "dense_skipped": skip}
    clock = 1 if spec.clock == "cpu" else 0
    steps = {name: build_step(Case(scheme, name, N, mode), spec)[0] for name in ("dense", "chunked")}
    for s in steps.values():  # untimed warm-up
        s()
    times: dict[str, list[float]] = {k: [] for k in steps}
    for r in range(rounds):
        for name in (("dense", "chunked") if r % 2 == 0 else ("chunked", "dense")):
            if spec.settle:
                steps[name]()  # untimed: the timed run follows a run of the same implementation
            times[name].append(timed(steps[name], spec)[clock])
        if r == 1 and all(max(d, c) > CLEAR * min(d, c) for d, c in zip(times["dense"], times["chunked"])) \
                and (times["dense"][0] < times["chunked"][0]) == (times["dense"][1] < times["chunked"][1]):
            break  # two pairs agree by a clear margin (one pair alone can be a slow first call)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"N": N, "pick": min(med, key=med.get), "runs": len(times["chunked"]),
            "chunked_ms": round(med["chunked"], 2), "dense_ms": round(med["dense"], 2)}


def calibrate(schemes: list[str], spec: BenchSpec, *, lengths=LENGTHS, modes=("fwd", "fwd+bwd"),
              causals=(True, False), rounds: int = 5, log: Callable[[str], None] | None = None,
              on_record: Callable[[list[dict]], None] | None = None) -> dict:
    """Measure every cell; return ``{"cells": {key: {N: impl}}, "records": [...], "seconds": s}``.

    Causal-only schemes are measured causal only.

    Args:
        schemes: registry names (schemes with a term inside attention).
        spec: shape and process settings (``causal`` is overridden per cell).
        lengths: the N buckets, ascending.
        modes: ``fwd`` and/or ``fwd+bwd``.
        causals: masks to measure.
        rounds: most timed pairs per close cell.
        log: progress callback.
        on_record: called with every record so far after each cell (to save partial results).
    """
    import dataclasses

    from relpos.bench.spec import runs_with_mask

    log = log or (lambda s: None)
    t0 = time.monotonic()
    records: list[dict] = []
    for causal in causals:
        sp = dataclasses.replace(spec, causal=causal)
        for scheme in schemes:
            if not runs_with_mask(scheme, causal):
                continue
            for mode in modes:
                dense_won, prev = True, None
                for N in lengths:  # the engine can depend on N (FIRE is Toeplitz below its threshold only)
                    key = cell_key(scheme, engine_of(scheme, sp, N), causal, mode)
                    skip = None
                    if N >= DENSE_SKIP_N and not dense_won:
                        skip = f"dense lost at N={prev}; its N x N terms only grow"
                    elif sp.batch * sp.heads * N * N * 4 > DENSE_MAX_BYTES:
                        skip = f"one (B, H, N, N) float32 tensor is over {DENSE_MAX_BYTES // 2**20} MiB"
                    rec = _pair(scheme, N, mode, sp, rounds, skip)
                    prev = N
                    dense_won = rec["pick"] == "dense"
                    records.append({"key": key, **rec})
                    log(f"{key:<45} N={N:<5} dense {rec['dense_ms']} ms, chunked {rec['chunked_ms']} ms "
                        f"-> {rec['pick']} ({rec['runs']} runs, {time.monotonic() - t0:.0f} s)")
                    if on_record is not None:
                        on_record(records)
    return {"cells": cells_from_records(records), "records": records, "seconds": round(time.monotonic() - t0, 1)}


def cells_from_records(records: list[dict]) -> dict[str, dict[str, str]]:
    """The table's cells from its records (a later record of the same key and N wins), plus the
    engine-level rows: the majority over the schemes of that engine (ties go to chunked: O(N) memory)."""
    cells: dict[str, dict[str, str]] = {}
    for r in records:
        cells.setdefault(r["key"], {})[str(r["N"])] = r["pick"]
    for row in cells.values():
        row_sorted = dict(sorted(row.items(), key=lambda kv: int(kv[0])))
        row.clear()
        row.update(row_sorted)
    by_engine: dict[str, list[dict[str, str]]] = {}
    for key, row in cells.items():
        _, engine, mask, mode = key.split("/")
        by_engine.setdefault(f"*/{engine}/{mask}/{mode}", []).append(row)
    for key, rows in by_engine.items():
        out = {}
        for N in sorted({n for r in rows for n in r}, key=int):
            votes = [r[N] for r in rows if N in r]
            dense = votes.count("dense")
            out[N] = "dense" if dense > len(votes) - dense else "chunked"
        cells[key] = out
    return cells


_LOG_LINE = re.compile(r"^(?P<key>\S+/\S+/\S+/\S+)\s+N=(?P<N>\d+)\s+dense (?P<d>[\d.]+|None) ms, chunked "
                       r"(?P<c>[\d.]+|None) ms -> (?P<pick>dense|chunked) \((?P<runs>\d+) runs")


def records_from_log(text: str) -> list[dict]:
    """Records recovered from the progress lines :func:`calibrate` logs (for a run that stopped early)."""
    out = []
    for line in text.splitlines():
        m = _LOG_LINE.match(line)
        if not m:
            continue
        d, c = (None if x == "None" else float(x) for x in (m["d"], m["c"]))
        rec = {"key": m["key"], "N": int(m["N"]), "pick": m["pick"], "runs": int(m["runs"]), "chunked_ms": c,
               "dense_ms": d, "from_log": True}
        if d is None:
            rec["dense_skipped"] = ("dense lost at the previous length; its N x N terms only grow"
                                    if int(m["N"]) >= DENSE_SKIP_N else "N x N memory")
        out.append(rec)
    return out
