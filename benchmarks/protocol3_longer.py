"""Train the schemes that do not fit a task again, on twice the budget, so the page can show their curves far enough.

Issue 49 asks that a scheme which fits fewer than 2 of its 3 seeds on a task shows each seed's validation curve
to at least twice the step at which the other schemes fit. The ranked runs stop at the task's budget (6,000 steps
for copy, copy-distinct and MQAR; 8,000 for reverse), which can be shorter than that. This script reads a
finished task of the full preset's store, picks the schemes (plain or randomized) that fitted fewer than
``MIN_SEEDS`` seeds and whose ranked curves stop short of twice the fitted runs' median gate step (where they
reach it, or no run fitted, the ranked runs already say what they can), and trains every seed of them once more
in a folder of its own, with

- the same preset, model, data, validation and gate as the ranked runs,
- a budget of twice the task's (every such budget is at least twice the median gate step of the fitted runs,
  which never exceeds the budget),
- the learning rate that every seed's grid kept in the ranked runs when they all kept the same one (no grid:
  each longer run costs one try), else the task's grid.

These runs are never ranked: the page shows them beside the ranked runs as "the same recipe on twice the budget".
Nothing is chosen on test data: which schemes run is decided by the fit gate (validation), the rate by the
ranked runs' validation choice.

    python benchmarks/protocol3_longer.py FULL_FOLDER OUT TASK [TASK ...] [--workers 2] [--snapshot DIR] [--dry-run]

Each task trains into ``OUT/<task>`` (resumable: rerun the same command, finished runs are kept); with
``--snapshot DIR`` a task whose folder has no store yet is first restored from ``DIR/<task>`` (a snapshot committed
by an earlier session), and each store is copied back to ``DIR/<task>`` every ``--snapshot-every`` seconds while
it trains (default 1,800: the finished runs travel with a session's commit) and after it finishes
(benchmarks/store_snapshot.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from relpos.report.stats import MIN_SEEDS  # the page's threshold (the frozen rerun code has the same)

SEEDS = 3  # the full preset's seeds


def unfitted(store: Path, task: str) -> tuple[dict[str, dict], int, list[float]]:
    """``label -> {"fitted": k, "seeds": n, "lrs": {...}, "end": e}`` of the labels of ``task`` that fitted fewer
    than MIN_SEEDS of SEEDS seeds (``end``: the last step of their unfitted seeds' shortest curve), the task's step
    budget, the learning-rate grid of its runs, and the median step at which its fitted runs first passed the gate
    (None when none did). Refuses a task whose runs are not all in (a label with fewer than SEEDS
    seeds)."""
    if not store.is_file():
        raise SystemExit(f"{store}: no such store (the full preset's folder holds results.sqlite)")
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT scheme, randomized, info FROM jobs WHERE task = ?", (task,)).fetchall()
    finally:
        con.close()
    if not rows:
        raise SystemExit(f"task {task!r}: no finished runs in {store}")
    per: dict[str, dict] = defaultdict(lambda: {"fitted": 0, "seeds": 0, "lrs": set(), "end": None})
    budgets, grid = set(), set()
    for scheme, randomized, info in rows:
        train = json.loads(info)["train"]
        fit = train["fit"]
        p = per[scheme + ("+rand" if randomized else "")]
        p["fitted"] += bool(fit.get("fitted"))
        p["seeds"] += 1
        p["lrs"].add(fit.get("lr"))
        if fit.get("fitted") and fit.get("first_pass_step"):
            p.setdefault("passes", []).append(fit["first_pass_step"])
        if not fit.get("fitted"):  # a seed that fitted needs no longer curve
            end = train.get("steps") or 0
            p["end"] = end if p["end"] is None else min(p["end"], end)
        budgets.add(fit.get("budget"))
        grid.update(t["lr"] for t in fit.get("lr_tries") or [])
    short = [lab for lab, p in per.items() if p["seeds"] < SEEDS]
    if short:
        raise SystemExit(f"task {task!r} is not finished: {', '.join(sorted(short))} have fewer than {SEEDS} seeds")
    if len(budgets) != 1:
        raise SystemExit(f"task {task!r}: runs with different budgets {sorted(budgets)}")
    passes = sorted(x for p in per.values() for x in p.pop("passes", []))
    return ({lab: p for lab, p in per.items() if p["fitted"] < MIN_SEEDS}, budgets.pop(), sorted(grid),
            statistics.median(passes) if passes else None)


def short(labels: dict[str, dict], gate: float | None) -> dict[str, dict]:
    """The unfitted labels whose shortest ranked curve stops before twice the median gate step (none when no
    run fitted: there is no step to reach)."""
    return {} if gate is None else {lab: p for lab, p in labels.items() if p["end"] < 2 * gate}


def command(task: str, labels: dict[str, dict], budget: int, grid: list[float], out: Path, workers: int,
            relpos: str) -> list[str]:
    plain = [lab for lab in labels if not lab.endswith("+rand")]
    rand = [lab[:-len("+rand")] for lab in labels if lab.endswith("+rand")]
    if not plain:  # `--schemes` cannot be empty: the plain scheme of a randomized one trains again too
        plain = list(rand)
    lrs = set().union(*(p["lrs"] for p in labels.values()))
    rate = (["--lr", f"{lrs.pop():g}", "--lr-grid", "none"] if len(lrs) == 1
            else ["--lr-grid", ",".join(f"{x:g}" for x in grid)])
    return [relpos, "compare", "--preset", "full", "--tasks", task, "--schemes", ",".join(plain),
            "--randomized", ",".join(rand) or "none", "--steps", str(2 * budget), *rate,
            "--workers", str(workers), "--no-progress", "--out", str(out / task)]


def run_with_snapshots(cmd: list[str], env: dict, copy: list[str] | None, store: Path, every: float) -> int:
    """Run ``cmd`` to its end; every ``every`` seconds meanwhile, run ``copy`` (a store snapshot) once ``store``
    exists. Returns ``cmd``'s exit status."""
    p = subprocess.Popen(cmd, env=env)
    while True:
        try:
            return p.wait(timeout=every)
        except subprocess.TimeoutExpired:
            if copy and store.exists():
                subprocess.call(copy)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("full", type=Path, help="the full preset's folder (its results.sqlite)")
    ap.add_argument("out", type=Path, help="folder of the longer runs, one subfolder per task")
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--snapshot", type=Path, help="copy each task's store into SNAPSHOT/<task> while it trains and "
                                                  "when it finishes")
    ap.add_argument("--snapshot-every", type=float, default=1800.0, help="seconds between those copies (default 1800)")
    ap.add_argument("--relpos", default=os.environ.get("RELPOS", ".venv/bin/relpos"))
    ap.add_argument("--dry-run", action="store_true", help="print the commands, train nothing")
    a = ap.parse_args(argv)
    for task in a.tasks:
        labels, budget, grid, gate = unfitted(a.full / "results.sqlite", task)
        if not labels:
            print(f"{task}: every scheme fitted at least {MIN_SEEDS} of {SEEDS} seeds; nothing to run")
            continue
        if not short(labels, gate):
            print(f"{task}: the unfitted schemes' ranked curves already reach twice the median gate step"
                  if gate is not None else f"{task}: no run fitted, no gate step to reach; nothing to run")
            continue
        labels = short(labels, gate)
        cmd = command(task, labels, budget, grid, a.out, a.workers, a.relpos)
        which = ", ".join(f"{k} ({p['fitted']}/{p['seeds']} fitted)" for k, p in labels.items())
        print(f"{task}: {which}; {' '.join(cmd)}", flush=True)
        if a.dry_run:
            continue
        snap = [sys.executable, str(Path(__file__).with_name("store_snapshot.py"))]
        if a.snapshot and not (a.out / task / "results.sqlite").exists() and (a.snapshot / task / "results.sqlite").exists():
            subprocess.check_call([*snap, "--restore", str(a.snapshot / task), str(a.out / task)])
        copy = [*snap, str(a.out / task), str(a.snapshot / task)] if a.snapshot else None
        rc = run_with_snapshots(["nice", "-n", "19", *cmd], {**os.environ, "OMP_NUM_THREADS": "1"}, copy,
                                a.out / task / "results.sqlite", a.snapshot_every)
        if rc:
            return rc
        if a.snapshot:
            subprocess.check_call([*snap, str(a.out / task), str(a.snapshot / task)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
