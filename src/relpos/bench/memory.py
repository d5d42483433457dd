"""Peak memory of each configuration, each measured in a fresh process.

In-process numbers are not trustworthy for torch on CPU: glibc keeps freed blocks
and later allocations reuse pages that are already resident. On Linux one
"zygote" process (``python -m relpos.bench --memory-zygote``) imports torch and
relpos, runs nothing, and forks one child per configuration, so no child pays for
the imports again yet none inherits a used heap; elsewhere each configuration
gets its own interpreter. The child builds the inputs, runs a tiny warm-up (to
load code), reads its resident set size, runs one forward and then one
forward+backward step, and reports the growth of the peak resident set size
(``VmHWM``) over that starting point, in MiB.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

from relpos.bench.spec import MODES, BenchSpec, Case

__all__ = ["measure_memory", "measure_one", "rss_kib", "child_main", "zygote_main", "apply_process_settings"]


#: torch.compile's recompile limit in a benchmark process on CUDA. The flex path compiles one
#: kernel per score_mod (scheme) and shape; past dynamo's default of 8 recompiles it would fall
#: back to uncompiled FlexAttention and time that instead.
RECOMPILE_LIMIT = 256


def apply_process_settings(spec: BenchSpec) -> None:
    """Denormal flushing, thread count and (on CUDA) the recompile limit; call before any parallel torch work."""
    import torch

    if spec.flush_denormal:
        torch.set_flush_denormal(True)
    if spec.threads and spec.threads > 0:
        torch.set_num_threads(spec.threads)
    if spec.device == "cuda":
        import torch._dynamo.config as dynamo

        dynamo.recompile_limit = max(dynamo.recompile_limit, RECOMPILE_LIMIT)


def rss_kib() -> tuple[int, int]:
    """(current RSS, peak RSS) in KiB, from /proc/self/status (Linux) or getrusage."""
    try:
        cur = peak = None
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    cur = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1])
        if cur is not None and peak is not None:
            return cur, peak
    except OSError:
        pass
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = r // 1024 if sys.platform == "darwin" else r
    return r, r


def measure_one(case: Case, spec: BenchSpec, train: bool) -> dict:
    """Peak-RSS growth of one forward and one forward+backward step, in this (fresh) process.

    Returns:
        ``{"fwd_mib", "train_mib", "error"}``; the growth is reported as measured
        (peak after the step minus the resident size before it, never clamped), so
        a negative figure would show a broken measurement instead of hiding it.
    """
    from relpos.bench.steps import build_step

    out = {"fwd_mib": None, "train_mib": None, "error": None}
    try:
        small = dataclasses.replace(case, N=min(case.N, 32))
        for mode in (MODES if train else ("fwd",)):  # loads modules, kernels and caches
            build_step(dataclasses.replace(small, mode=mode), spec)[0]()
        step_fwd, _ = build_step(dataclasses.replace(case, mode="fwd"), spec)
        step_train = build_step(dataclasses.replace(case, mode="fwd+bwd"), spec)[0] if train else None
        rss0, _ = rss_kib()
        step_fwd()
        _, peak1 = rss_kib()
        out["fwd_mib"] = (peak1 - rss0) / 1024
        if step_train is not None:
            step_train()
            _, peak2 = rss_kib()
            out["train_mib"] = (peak2 - rss0) / 1024
    except Exception as e:  # reported, not raised: the parent records it
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    return out


def child_main(argv: list[str]) -> int:
    """One configuration: ``python -m relpos.bench --memory-child '<json>'``; prints one JSON line."""
    payload = json.loads(argv[0])
    spec = BenchSpec(**payload["spec"])
    apply_process_settings(spec)
    c = payload["case"]
    out = measure_one(Case(c["scheme"], c["impl"], int(c["N"]), "fwd"), spec, bool(payload.get("train", True)))
    print("RELPOS_MEM " + json.dumps(out), flush=True)
    return 0


def zygote_main(argv: list[str]) -> int:
    """``python -m relpos.bench --memory-zygote '<spec json>' [timeout]``: one fresh child per configuration.

    The zygote imports torch and relpos and runs nothing else, so every forked
    child starts as a fresh process would (no benchmark has run, no freed heap to
    reuse), without paying for the imports again. Configurations arrive as JSON
    lines on stdin; results leave as ``RELPOS_MEM {"id": ..., ...}`` lines.
    """
    import signal

    spec = BenchSpec(**json.loads(argv[0]))
    timeout = int(float(argv[1])) if len(argv) > 1 else 600
    apply_process_settings(spec)
    import relpos  # noqa: F401  (imports only; nothing runs before fork)
    import relpos.attention  # noqa: F401
    import relpos.bench.steps  # noqa: F401
    for mod in ("dense", "chunked", "auto", "reference"):
        __import__(f"relpos.attention.{mod}")
    items = [json.loads(line) for line in sys.stdin if line.strip()]
    running: dict[int, tuple[int, int]] = {}  # pid -> (read fd, item id)

    def reap() -> None:
        pid, _ = os.waitpid(-1, 0)
        fd, ident = running.pop(pid)
        data = b""
        while chunk := os.read(fd, 65536):
            data += chunk
        os.close(fd)
        try:
            res = json.loads(data.decode())
        except ValueError:
            res = {"fwd_mib": None, "train_mib": None, "error": f"child exited without a result (timeout {timeout} s?)"}
        res["id"] = ident
        print("RELPOS_MEM " + json.dumps(res), flush=True)

    for item in items:
        while len(running) >= max(1, spec.memory_jobs):
            reap()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            os.close(r)
            signal.alarm(timeout)
            c = item["case"]
            res = measure_one(Case(c["scheme"], c["impl"], int(c["N"]), "fwd"), spec, bool(item["train"]))
            os.write(w, json.dumps(res).encode())
            os.close(w)
            os._exit(0)
        os.close(w)
        running[pid] = (r, item["id"])
    while running:
        reap()
    return 0


def _child_env(spec: BenchSpec) -> dict:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, spec.threads)))
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _fmt_mib(x) -> str:
    return "-" if x is None else f"{x:.0f} MiB"


def _via_zygote(items: list[tuple[Case, bool]], spec: BenchSpec, timeout: float, record) -> None:
    cmd = [sys.executable, "-m", "relpos.bench", "--memory-zygote", json.dumps(dataclasses.asdict(spec)),
           str(int(timeout))]
    lines = "".join(json.dumps({"id": i, "case": dataclasses.asdict(c), "train": t}) + "\n"
                    for i, (c, t) in enumerate(items))
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=_child_env(spec))
    p.stdin.write(lines)
    p.stdin.close()
    done = set()
    for line in p.stdout:
        if line.startswith("RELPOS_MEM "):
            res = json.loads(line[len("RELPOS_MEM "):])
            i = res.pop("id")
            done.add(i)
            record(items[i][0], res)
    p.wait()
    err = p.stderr.read().strip()
    for i, (case, _) in enumerate(items):
        if i not in done:
            record(case, {"fwd_mib": None, "train_mib": None,
                          "error": (err.splitlines() or ["memory zygote failed"])[-1][:300]})


def _via_interpreters(items: list[tuple[Case, bool]], spec: BenchSpec, timeout: float, record) -> None:
    pending = list(items)
    running: list = []
    while pending or running:
        while pending and len(running) < max(1, spec.memory_jobs):
            case, train = pending.pop(0)
            payload = {"spec": dataclasses.asdict(spec), "case": dataclasses.asdict(case), "train": train}
            cmd = [sys.executable, "-m", "relpos.bench", "--memory-child", json.dumps(payload)]
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env(spec))
            running.append((case, p, time.monotonic()))
        time.sleep(0.05)
        still = []
        for case, p, t0 in running:
            if p.poll() is None and time.monotonic() - t0 < timeout:
                still.append((case, p, t0))
                continue
            if p.poll() is None:
                p.kill()
            stdout, stderr = p.communicate()
            res = {"fwd_mib": None, "train_mib": None, "error": None}
            for line in stdout.splitlines():
                if line.startswith("RELPOS_MEM "):
                    res = json.loads(line[len("RELPOS_MEM "):])
            if res["fwd_mib"] is None and res["error"] is None:
                res["error"] = (stderr.strip().splitlines() or ["child failed"])[-1][:300]
            record(case, res)
        running = still


def measure_memory(items: list[tuple[Case, bool]], spec: BenchSpec, *, log=None, timeout: float = 600,
                   fork: bool | None = None) -> dict:
    """Peak memory of each ``(case, train)``, each in a fresh process, ``spec.memory_jobs`` at a time.

    Args:
        items: ``(case, train)``; ``train`` adds a forward+backward step after the forward.
        spec: shapes and settings (sent to the child processes).
        log: progress callback.
        timeout: seconds per configuration.
        fork: use the forking zygote (default: where the platform has ``fork``, i.e. Linux);
            False starts one interpreter per configuration.

    Returns:
        ``{(scheme, impl, N): {"fwd_mib":..., "train_mib":..., "error":...}}``.
    """
    results: dict = {}

    def record(case: Case, res: dict) -> None:
        results[(case.scheme, case.impl, case.N)] = res
        if log:
            log(f"  memory {case.scheme}/{case.impl} N={case.N}: "
                f"{_fmt_mib(res['fwd_mib'])} fwd, {_fmt_mib(res['train_mib'])} fwd+bwd"
                + (f" ({res['error']})" if res["error"] else ""))

    if fork is None:
        fork = hasattr(os, "fork") and sys.platform.startswith("linux")
    (_via_zygote if fork else _via_interpreters)(items, spec, timeout, record)
    return results
