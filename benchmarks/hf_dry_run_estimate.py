"""The ``relpos compare --hf-model ... --dry-run`` time estimate against the measured run of the same command.

Runs the dry run, then the command itself under ``/usr/bin/time -v`` (``nice -n 10``, ``OMP_NUM_THREADS`` set
to ``--threads``, a fresh ``RELPOS_CACHE`` so the corpus and a GGUF file's tokenizer are built as on a first
run), samples ``/proc/loadavg`` every 10 s, and records the estimate, the measured wall-clock and CPU seconds
(user + system) and their ratios into ``--json`` (one entry per ``--label``, other labels kept) and a table
in ``--md``. The estimate is wall-clock at ``--threads`` threads on the machine as loaded at the dry run, so
the ratio that tests it is measured wall / estimate; CPU seconds are shown beside it (with two threads on
an idle machine they are about twice the wall time).

Usage (the issue's run on the SmolLM2 GGUF; the corpus here: the top-level ``*.py`` files of the standard
library)::

    python benchmarks/hf_dry_run_estimate.py --model SmolLM2-135M-Instruct.Q4_1.gguf \\
        --corpus "$(python -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')" --corpus-glob '*.py' \\
        --label after --json benchmarks/results/hf_dry_run_estimate.json \\
        --md benchmarks/results/hf_dry_run_estimate.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["--hf-context", "64", "--hf-factors", "1,2,4", "--eval-tokens", "256", "--passkey", "1"]
CLI = "import sys; from relpos.cli import main; sys.exit(main())"


def _loads(stop: threading.Event, out: list) -> None:
    while not stop.is_set():
        out.append(float(Path("/proc/loadavg").read_text().split()[0]))
        stop.wait(10)


def _time_v(path: Path) -> dict:
    got = {}
    for line in path.read_text().splitlines():
        k, _, v = line.strip().rpartition(": ")
        got[k] = v
    return {"user_s": float(got["User time (seconds)"]), "sys_s": float(got["System time (seconds)"]),
            "max_rss_kb": int(got["Maximum resident set size (kbytes)"])}


def measure(a) -> dict:
    work = Path(tempfile.mkdtemp(prefix="hf_estimate_"))
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "RELPOS_CACHE": str(work / "cache"),
           "PYTHONPATH": str(Path(a.src).resolve())}
    cmd = ["compare", "--hf-model", a.model, "--corpus", a.corpus, *(["--corpus-glob", a.corpus_glob]
                                                                  if a.corpus_glob else []), *FLAGS,
           "--no-progress", "--out", str(work / "out")]
    nice = ["nice", "-n", str(a.nice)]
    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    dry = subprocess.run(nice + [sys.executable, "-c", CLI, *cmd, "--dry-run"], env=env, capture_output=True,
                         text=True, check=True)
    dry_s = time.perf_counter() - t
    m = re.search(r"estimated time: ~([\d,]+) s", dry.stdout)
    if not m:
        raise SystemExit(f"no estimate in the dry run's output:\n{dry.stdout}\n{dry.stderr}")
    est = float(m.group(1).replace(",", ""))
    print(dry.stdout)
    samples: list[float] = []
    stop = threading.Event()
    th = threading.Thread(target=_loads, args=(stop, samples), daemon=True)
    th.start()
    t = time.perf_counter()
    run = subprocess.run(nice + ["/usr/bin/time", "-v", "-o", str(work / "time.txt"), sys.executable, "-c", CLI,
                                 *cmd], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    stop.set()
    th.join()
    if run.returncode:
        raise SystemExit(f"the run failed ({run.returncode}):\n{run.stderr[-3000:]}")
    tv = _time_v(work / "time.txt")
    cpu = tv["user_s"] + tv["sys_s"]
    jobs = [ln for ln in run.stderr.splitlines() if re.match(r"hf/.*: [\d.]+s$", ln)]
    return {"command": "relpos " + " ".join(cmd[:-1] + ["OUT"]), "threads": a.threads, "nice": a.nice,
            "cpus": os.cpu_count(), "estimate_s": est, "dry_run_s": round(dry_s, 1),
            "dry_run_output": dry.stdout.splitlines(),
            "measured": {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), **tv}, "jobs": jobs,
            "load": {"at_dry_run": load0, "during_run_mean": round(sum(samples) / max(1, len(samples)), 2),
                     "during_run_min": min(samples, default=None), "during_run_max": max(samples, default=None),
                     "samples": len(samples)},
            "ratio_wall_to_estimate": round(wall / est, 3), "ratio_cpu_to_estimate": round(cpu / est, 3),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "code": _code(Path(a.src))}


def _code(src: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def table(entries: dict) -> str:
    rows = ["| label | estimate (s) | measured wall (s) | wall / estimate | measured CPU (s) | CPU / estimate | "
            "load avg (dry run; run mean, min-max) |", "|---|---|---|---|---|---|---|"]
    for label, e in entries.items():
        if "measured" not in e:  # a stopped run kept for the record (its "stopped" says why)
            continue
        ld = e["load"]
        rows.append(f"| {label} | {e['estimate_s']:,.0f} | {e['measured']['wall_s']:,.0f} | "
                    f"{e['ratio_wall_to_estimate']:.2f} | {e['measured']['cpu_s']:,.0f} | "
                    f"{e['ratio_cpu_to_estimate']:.2f} | {ld['at_dry_run']:.1f}; {ld['during_run_mean']:.1f}, "
                    f"{ld['during_run_min']}-{ld['during_run_max']} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--corpus-glob", default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--nice", type=int, default=10)
    p.add_argument("--src", default=str(ROOT / "src"), help="the relpos source tree to run (default this one)")
    p.add_argument("--label", default="run")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--md", type=Path, default=None)
    a = p.parse_args(argv)
    e = measure(a)
    print(json.dumps({k: v for k, v in e.items() if k != "dry_run_output"}, indent=1))
    from relpos.outdir import write_json_atomic, write_text_atomic

    entries = {}
    if a.json:
        if a.json.is_file():
            entries = json.loads(a.json.read_text())
        entries[a.label] = e
        write_json_atomic(a.json, entries)
    else:
        entries = {a.label: e}
    if a.md:
        write_text_atomic(a.md, "# `--hf-model --dry-run`: estimate against the measured run\n\n"
                          f"Command: `{e['command']}` (`nice -n {a.nice}`, `OMP_NUM_THREADS={a.threads}`, a "
                          "fresh `RELPOS_CACHE`), by `benchmarks/hf_dry_run_estimate.py`.\n\n" + table(entries) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
