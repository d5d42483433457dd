"""The run: time every case interleaved per N, measure its memory, and assemble the JSON document.

For each sequence length ``N`` the configurations of that ``N`` -- position-free
``scaled_dot_product_attention`` (the baseline), every ``(scheme, impl)`` and the
peers -- are timed *interleaved* (``repeats`` rounds after the
warm-up, in a new seeded order every round), so drifts in machine load and the
effects of what ran just before hit all of them alike; each record keeps the
median, and its ``ratio`` is the median of its per-round ratios to the same
round's baseline (a case timed once: its time over the baseline's median).
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import random
import statistics
import time
from collections.abc import Callable

import torch

from relpos.bench.spec import AUTO_CHOICES, AUTO_TOLERANCE, BenchSpec, Case
from relpos.bench.memory import measure_memory
from relpos.bench.results import per_round_ratio
from relpos.bench.steps import build_step, timed

__all__ = ["Record", "run_bench", "merge_docs", "machine_info", "SLOW_S", "peer_summary"]

#: A case whose warm-up run takes longer than this many seconds is timed by that run alone.
SLOW_S = 2.0
#: Short cases get more rounds: a length's round robin repeats until about this many seconds
#: of timed work (at most ``MORE_ROUNDS`` x ``repeats`` rounds), so the medians of small, noisy
#: cells (N = 256: a few ms each) rest on many samples.
GROUP_S, MORE_ROUNDS = 20.0, 5
#: An ``auto`` pick slower than the fastest implementation by more than ``AUTO_TOLERANCE`` in the round robin
#: is re-timed against it pairwise (this many settled pairs, alternating which goes first): the round robin's
#: medians of two near-equal cases move by 10-25 % with what ran before them (allocator state).
RETIME_ROUNDS = 7

_ROUND = ("median_ms", "baseline_ms", "ratio", "peak_mib", "baseline_peak_mib", "warmup_ms", "wall_ms", "cpu_ms",
          "baseline_wall_ms", "wall_ratio")


@dataclasses.dataclass
class Record:
    """The result of one case (one row of the JSON document's ``records``).

    Times are medians in milliseconds; ``median_ms`` and ``ratio`` use the run's
    clock (process CPU time or wall time), ``cpu_ms``/``wall_ms``/``wall_ratio``
    keep both. ``status`` is ``ok``, ``unsupported`` or ``error`` (then ``note``
    says why). ``chosen`` is what ``auto`` picked.
    """

    scheme: str
    impl: str
    N: int
    mode: str
    status: str = "ok"
    note: str | None = None
    chosen: str | None = None
    median_ms: float | None = None
    wall_ms: float | None = None
    cpu_ms: float | None = None
    runs: int = 0
    warmup_ms: float | None = None
    baseline_ms: float | None = None
    baseline_wall_ms: float | None = None
    ratio: float | None = None
    wall_ratio: float | None = None
    peak_mib: float | None = None
    baseline_peak_mib: float | None = None
    memory_note: str | None = None
    #: ``auto`` only, when its pick looked slow: the pairwise re-time (see ``RETIME_ROUNDS``):
    #: ``{"picked", "fastest", "picked_ms", "fastest_ms", "rounds"}``.
    retime: dict | None = None
    #: the timed runs, in round order, and the same rounds' baseline runs (``ratio`` re-derives from them)
    times_ms: list[float] | None = None
    baseline_times_ms: list[float] | None = None

    @property
    def key(self) -> tuple:
        return (self.scheme, self.impl, self.N, self.mode)

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        for k in _ROUND:
            if out[k] is not None:
                out[k] = round(float(out[k]), 3)
        for k in ("times_ms", "baseline_times_ms"):
            if out[k] is not None:
                out[k] = [round(float(t), 3) for t in out[k]]
        return out


def machine_info(spec: BenchSpec | None = None) -> dict:
    """A JSON-able description of this machine and software."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": getattr(torch.backends.cpu, "get_cpu_capability", lambda: "?")(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "relpos_kernels": _kernels_status(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    if spec is not None:
        info["flush_denormal"] = spec.flush_denormal
    try:
        info["loadavg_start"] = os.getloadavg()
    except OSError:
        pass
    return info


def _kernels_status() -> str:
    from relpos import kernels

    return kernels.status()


def _peer(impl: str):
    from relpos.bench.peers import PEERS

    return PEERS[impl.split(":", 1)[1]] if impl.startswith("peer:") else None


def _warmups(case: Case, spec: BenchSpec) -> int:
    """Untimed runs before timing: a peer's own count; 2 where relpos compiles (the first run compiles).

    ``flex`` compiles on CUDA and ``auto`` may pick it there; a slow case is timed by its last warm-up
    (:data:`SLOW_S`), which must not be the one that compiled (the first GPU check timed 2-12 s compiles
    as flex's step time).
    """
    peer = _peer(case.impl)
    if peer is not None:
        return peer.warmups
    return 2 if case.impl in ("flex", "auto") and spec.device != "cpu" else 1


def _time_group(N: int, group: list[Case], spec: BenchSpec, records: dict, log, deadline: float | None) -> None:
    """Warm up and time the cases of one N (and the baseline) round robin; fill their records."""
    from relpos.attention import UnsupportedError

    modes = sorted({c.mode for c in group})
    runnable: list[tuple[Case, Callable]] = []
    for m in modes:
        base = Case("none", "sdpa", N, m)
        runnable.append((base, build_step(base, spec)[0]))
    slow: dict[tuple, tuple[float, float]] = {}  # timed once: their (last) warm-up took longer than SLOW_S
    for c in group:
        rec = records[c.key] = Record(c.scheme, c.impl, N, c.mode)
        try:
            step, info = build_step(c, spec)
            for _ in range(_warmups(c, spec)):  # raises UnsupportedError for unsupported cases
                w, cpu = timed(step, spec)
            rec.warmup_ms, rec.chosen = w, info()
            runnable.append((c, step))
            if w > SLOW_S * 1000:
                slow[c.key] = (w, cpu)
        except UnsupportedError as e:
            rec.status, rec.note = "unsupported", str(e)
        except Exception as e:  # a broken case must not sink the run
            rec.status, rec.note = "error", f"{type(e).__name__}: {e}"[:300]
            log(f"  error {c.scheme}/{c.impl} N={N} {c.mode}: {rec.note}")
    for c, step in runnable[: len(modes)]:  # baseline warm-up
        w, cpu = timed(step, spec)
        if w > SLOW_S * 1000:
            slow[c.key] = (w, cpu)
    walls = {c.key: [] for c, _ in runnable}
    cpus = {c.key: [] for c, _ in runnable}
    round_s = sum(records[c.key].warmup_ms or 0.0 for c, _ in runnable[len(modes):] if c.key not in slow) / 1000
    rounds = spec.repeats
    if round_s > 0 and deadline is None:
        rounds = max(spec.repeats, min(MORE_ROUNDS * spec.repeats, math.ceil(GROUP_S / round_s)))
    log(f"N={N}: {len(runnable)} cases, {len(slow)} timed once (over {SLOW_S:g} s), {rounds} rounds for the rest")
    for key, (w, cpu) in slow.items():
        walls[key].append(w)
        cpus[key].append(cpu)
    for r in range(rounds):
        if r > 0 and deadline is not None and time.monotonic() > deadline:
            log(f"  time budget reached: N={N} keeps {r} round(s)")
            break
        # a new order every round (seeded, so runs repeat): each case follows different predecessors (what ran
        # just before -- another implementation's allocations, its cache footprint -- shifted a case by up to
        # 20 % when one implementation always ran right after another)
        order = list(runnable)
        if r:
            random.Random(r).shuffle(order)
        for c, step in order:
            if c.key not in slow:
                if spec.settle:
                    step()  # untimed: the timed run follows a run of the same case
                w, cpu = timed(step, spec)
                walls[c.key].append(w)
                cpus[c.key].append(cpu)
    clock = cpus if spec.clock == "cpu" else walls
    base = {m: (statistics.median(clock[("none", "sdpa", N, m)]), statistics.median(walls[("none", "sdpa", N, m)]))
            for m in modes}
    for c, _ in runnable[len(modes):]:
        rec = records[c.key]
        rec.median_ms, rec.wall_ms = statistics.median(clock[c.key]), statistics.median(walls[c.key])
        rec.cpu_ms, rec.runs = statistics.median(cpus[c.key]), len(clock[c.key])
    steps = {c.key: step for c, step in runnable}
    for c in group:
        if c.impl == "auto":
            _retime_pick(records[c.key], records, steps, spec, log)
    for c in group:
        rec = records[c.key]
        rec.baseline_ms, rec.baseline_wall_ms = base[c.mode]
        if rec.median_ms is not None:
            b = ("none", "sdpa", N, c.mode)
            rec.times_ms, rec.baseline_times_ms = list(clock[c.key]), list(clock[b])
            rec.ratio = _ratio(clock[c.key], clock[b], rec.median_ms, rec.baseline_ms)
            rec.wall_ratio = _ratio(walls[c.key], walls[b], rec.wall_ms, rec.baseline_wall_ms)
        log(f"N={N:<6} {c.mode:<8} {c.scheme:<15} {c.impl:<16} "
            + (f"{rec.median_ms:9.1f} ms  x{rec.ratio:.2f} (wall x{rec.wall_ratio:.2f})"
               if rec.median_ms is not None else rec.status)
            + (f"  -> {rec.chosen}" if rec.chosen else ""))


def _ratio(times: list[float], base: list[float], median_ms: float, base_ms: float) -> float:
    """A case's multiple of the baseline: the median of its per-round ratios when both were timed in every round
    (a change of the host's speed between rounds cancels), else its median over the baseline's (a case timed once)."""
    if len(times) == len(base) > 1:
        return per_round_ratio(times, base)
    return median_ms / base_ms


def _retime_pick(rec: Record, records: dict, steps: dict, spec: BenchSpec, log) -> None:
    """Re-time ``auto``'s pick against the fastest implementation pairwise when the round robin put it over
    ``AUTO_TOLERANCE`` (the same steps, settled, alternating order); store both medians in ``rec.retime``."""
    timed_impls = {i: r for i in AUTO_CHOICES
                   if (r := records.get((rec.scheme, i, rec.N, rec.mode))) is not None and r.median_ms is not None}
    if rec.chosen not in timed_impls or len(timed_impls) < 2:
        return
    fastest = min(timed_impls, key=lambda i: timed_impls[i].median_ms)
    if fastest == rec.chosen or timed_impls[rec.chosen].median_ms <= AUTO_TOLERANCE * timed_impls[fastest].median_ms:
        return
    pair = {i: steps[(rec.scheme, i, rec.N, rec.mode)] for i in (rec.chosen, fastest)}
    clock = 1 if spec.clock == "cpu" else 0
    times: dict[str, list[float]] = {i: [] for i in pair}
    for r in range(RETIME_ROUNDS):
        for i in (list(pair) if r % 2 == 0 else list(pair)[::-1]):
            pair[i]()  # untimed: settle
            times[i].append(timed(pair[i], spec)[clock])
    rec.retime = {"picked": rec.chosen, "fastest": fastest, "rounds": RETIME_ROUNDS,
                  "picked_ms": round(statistics.median(times[rec.chosen]), 3),
                  "fastest_ms": round(statistics.median(times[fastest]), 3)}
    log(f"  re-timed auto's pick {rec.scheme} N={rec.N} {rec.mode}: {rec.chosen} {rec.retime['picked_ms']} ms, "
        f"{fastest} {rec.retime['fastest_ms']} ms")


def _memory(records: dict, lengths, spec: BenchSpec, log) -> None:
    """Peak memory of every ok configuration (auto is measured where it ran: the implementation it picked)."""
    items: dict[tuple, tuple[Case, bool]] = {}
    for rec in records.values():
        if rec.status != "ok" or (rec.impl == "auto" and rec.chosen):
            continue
        peer = _peer(rec.impl)
        if peer is not None and not peer.memory:
            rec.memory_note = "not measured (compiled code)"
            continue
        key = (rec.scheme, rec.impl, rec.N)
        train = any(r.mode == "fwd+bwd" and r.status == "ok" for r in records.values()
                    if (r.scheme, r.impl, r.N) == key)
        items.setdefault(key, (Case(rec.scheme, rec.impl, rec.N, "fwd"), train))
    for N in lengths:
        items[("none", "sdpa", N)] = (Case("none", "sdpa", N, "fwd"), True)
    log(f"memory: {len(items)} fresh subprocesses, {spec.memory_jobs} at a time")
    mem = measure_memory(list(items.values()), spec, log=log)
    for rec in records.values():
        impl = rec.chosen if rec.impl == "auto" and rec.chosen else rec.impl
        m = mem.get((rec.scheme, impl, rec.N))
        if m is None:
            continue
        field = "train_mib" if rec.mode == "fwd+bwd" else "fwd_mib"
        rec.peak_mib = m[field]
        rec.baseline_peak_mib = mem.get(("none", "sdpa", rec.N), {}).get(field)
        rec.memory_note = m.get("error")


def run_bench(cases: list[Case], spec: BenchSpec, *, log: Callable[[str], None] | None = None,
              time_budget: float | None = None) -> dict:
    """Time every case (interleaved per N) and measure its memory; return the JSON document (version 1).

    Args:
        cases: configurations (see :func:`relpos.bench.default_cases`, :func:`relpos.bench.grid_cases`).
        spec: shapes and process settings (apply them with
            :func:`relpos.bench.apply_process_settings` first; the CLI does).
        log: progress callback (one line per event).
        time_budget: seconds after which remaining timing rounds are cut short
            (each case keeps at least one timed run).
    """
    log = log or (lambda s: None)
    t_start = time.monotonic()
    deadline = None if time_budget is None else t_start + time_budget
    by_n: dict[int, list[Case]] = {}
    for c in cases:
        by_n.setdefault(c.N, []).append(c)
    records: dict[tuple, Record] = {}
    for N in sorted(by_n):
        _time_group(N, by_n[N], spec, records, log, deadline)
    timing_s = time.monotonic() - t_start
    if spec.memory:
        _memory(records, list(by_n), spec, log)
    recs = [r.to_json() for r in records.values()]
    peers = peer_summary(records)
    for row in recs + peers:
        row["causal"] = spec.causal
    return {
        "version": 1,
        "kind": "relpos-attention-bench",
        "machine": machine_info(spec),
        "spec": dataclasses.asdict(spec),
        "shape": f"B={spec.batch}, H={spec.heads}, D={spec.head_dim}, {spec.dtype}, "
                 f"{'causal' if spec.causal else 'bidirectional'}",
        "baseline": "torch.nn.functional.scaled_dot_product_attention without position terms"
                    + (" (is_causal=True)" if spec.causal else ""),
        "clock": ("process CPU time" if spec.clock == "cpu" else "wall-clock time") + " (median_ms, ratio); "
                 "both clocks are in every record (cpu_ms, wall_ms, wall_ratio); ratio and wall_ratio are medians of "
                 "per-round ratios to the same round's baseline",
        "timing_seconds": round(timing_s, 1),
        "total_seconds": round(time.monotonic() - t_start, 1),
        "records": recs,
        "peers": peers,
    }


def merge_docs(docs: list[dict]) -> dict:
    """One document from runs of the same plan with different masks (every record and peer row keeps
    its ``causal`` flag; ``masks`` lists the runs in order, with their own timing and load)."""
    if len(docs) == 1:
        out = dict(docs[0])
    else:
        out = dict(docs[0])
        out["shape"] = docs[0]["shape"].rsplit(", ", 1)[0] + ", " + " and ".join(
            "causal" if d["spec"]["causal"] else "bidirectional" for d in docs)
        out["baseline"] = ("torch.nn.functional.scaled_dot_product_attention without position terms, with the "
                           "run's mask (is_causal=True in causal runs)")
        out["records"] = [r for d in docs for r in d["records"]]
        out["peers"] = [p for d in docs for p in d["peers"]]
        out["timing_seconds"] = round(sum(d["timing_seconds"] for d in docs), 1)
        out["total_seconds"] = round(sum(d["total_seconds"] for d in docs), 1)
    out["masks"] = [{"causal": d["spec"]["causal"], "timing_seconds": d["timing_seconds"],
                     "loadavg_start": d["machine"].get("loadavg_start")} for d in docs]
    return out


def peer_summary(records: dict[tuple, Record]) -> list[dict]:
    """One row per peer configuration against the relpos layer of its scheme (same N, same mode).

    ``best`` marks the fastest configuration of each peer family per (N, mode).
    """
    from relpos.bench.peers import PEERS

    out = []
    for (scheme, impl, N, mode), rec in records.items():
        if not impl.startswith("peer:"):
            continue
        name = impl.split(":", 1)[1]
        peer = PEERS[name]
        mine = records.get((scheme, f"layer:{scheme}", N, mode))
        row = {"peer": name, "family": peer.family, "config": peer.config, "description": peer.description,
               "scheme": scheme, "N": N, "mode": mode, "peer_ms": rec.median_ms, "peer_peak_mib": rec.peak_mib,
               "relpos_ms": None, "relpos_peak_mib": None, "relpos_impl": None, "speedup": None,
               "memory_fraction": None, "status": rec.status, "note": rec.note, "best": False}
        if mine is not None:
            row["relpos_ms"], row["relpos_peak_mib"], row["relpos_impl"] = mine.median_ms, mine.peak_mib, mine.chosen
            if row["peer_ms"] and row["relpos_ms"]:
                row["speedup"] = round(row["peer_ms"] / row["relpos_ms"], 2)
            if row["peer_peak_mib"] and row["relpos_peak_mib"] is not None:
                row["memory_fraction"] = round(row["relpos_peak_mib"] / row["peer_peak_mib"], 3)
        for k in ("peer_ms", "relpos_ms", "peer_peak_mib", "relpos_peak_mib"):
            if row[k] is not None:
                row[k] = round(float(row[k]), 1)
        out.append(row)
    order = {name: i for i, name in enumerate(PEERS)}
    out.sort(key=lambda r: (order[r["peer"]], r["N"], r["mode"]))
    fastest: dict[tuple, dict] = {}
    for row in out:
        k = (row["family"], row["N"], row["mode"])
        if row["peer_ms"] is not None and (k not in fastest or row["peer_ms"] < fastest[k]["peer_ms"]):
            fastest[k] = row
    for row in fastest.values():
        row["best"] = True
    return out
