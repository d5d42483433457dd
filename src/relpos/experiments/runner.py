"""Running the jobs of a sweep: one job = train one model, evaluate it (and its variants).

:func:`run_job` is the unit of work. It is a plain top-level function of
JSON-able arguments returning a JSON-able dict, so any executor can run it:

* :class:`SerialRunner` -- in this process (tests, debugging).
* :class:`LocalRunner` -- the built-in default: a pool of worker processes, one
  thread each by default (``spawn`` start method, so nothing is inherited but
  the arguments). Workers send results back; only the parent writes the
  database. A worker whose parent disappears (even by SIGKILL) exits on its
  own within a second.
* :class:`RayRunner` -- ``--runner ray``: each job is a Ray task, so a sweep
  spreads over a Ray cluster (``pip install 'relpos[ray]'``; every node needs
  relpos installed).
* :class:`TorchrunRunner` -- ``--runner torchrun``: jobs one after another, each
  trained by ``--nproc`` processes with data-parallel training
  (:mod:`relpos.train` under ``torchrun``), for a single large run.

All runners yield ``(job, result_or_None, error_or_None)`` as jobs finish, and
report which jobs are in flight through an ``on_start`` callback, which is what
the progress bar shows.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable, Iterator

__all__ = [
    "Job",
    "run_job",
    "SerialRunner",
    "LocalRunner",
    "RayRunner",
    "TorchrunRunner",
    "make_runner",
    "RUNNERS",
]


@dataclass(frozen=True, order=True)
class Job:
    """One training run: a scheme on a task with a seed (optionally randomized positions)."""

    task: str
    scheme: str
    seed: int
    randomized: bool = False

    @property
    def key(self) -> str:
        return f"{self.task}/{self.scheme}{'+rand' if self.randomized else ''}/seed{self.seed}"

    def to_dict(self) -> dict:
        return {"task": self.task, "scheme": self.scheme, "seed": self.seed, "randomized": self.randomized}

    @classmethod
    def from_dict(cls, d: dict) -> "Job":
        return cls(d["task"], d["scheme"], int(d["seed"]), bool(d.get("randomized", False)))


# ------------------------------------------------------------------ the work


def model_config_for(job: Job, cfg, task):
    """The :class:`relpos.model.ModelConfig` of a job.

    Learned absolute tables are sized for the longest evaluation sequence (rows
    past the training length stay untrained: that is the honest result).
    """
    from relpos.model import ModelConfig

    longest = task.max_seq_len()
    R = None
    if job.randomized:
        R = max(cfg.random_positions_factor * longest, task.train_seq_len())
    return ModelConfig(
        vocab_size=task.vocab_size,
        d_model=cfg.d_model,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        max_len=max(longest + 1, R or 0),  # +1: generate() counts the last sampled token
        scheme=job.scheme,
        scheme_options=dict(cfg.scheme_options.get(job.scheme, {})),
        random_positions=R,
    )


def train_config_for(job: Job, cfg, task, **extra):
    from relpos.train import TrainConfig

    s = cfg.train_settings(job.task)
    return TrainConfig(
        steps=s["steps"],
        batch_size=s["batch_size"],
        seq_len=task.train_seq_len(),
        lr=s["lr"],
        warmup=s["warmup"],
        weight_decay=s["weight_decay"],
        seed=job.seed,
        progress=False,
        **extra,
    )


def rope_variant_model_for(model, train_seq_len: int, scaling: str, fixed_factor: float | None):
    """``model_for(seq_len)`` giving copies of ``model`` with every RoPE module rescaled.

    ``factor = max(1, seq_len / train_seq_len)`` unless ``fixed_factor`` is given;
    ``original_max_len = train_seq_len``. The trained weights are shared (the
    copies differ only in the scaling, which has no parameters).
    """
    from relpos.encodings.rope import RoPE

    cache: dict[float, object] = {}

    def model_for(seq_len: int):
        factor = fixed_factor if fixed_factor is not None else max(1.0, seq_len / train_seq_len)
        if factor not in cache:
            m = copy.deepcopy(model)
            n = 0
            for mod in m.modules():
                if isinstance(mod, RoPE):
                    mod.set_scaling(scaling, factor=float(factor), original_max_len=int(train_seq_len))
                    n += 1
            if n == 0:
                raise ValueError("rope variants need a model with RoPE modules")
            cache.clear()  # keep one copy alive at a time
            cache[factor] = m.eval()
        return cache[factor]

    return model_for


def _downsample(xs: list[float], n: int = 100) -> list[float]:
    if len(xs) <= n:
        return [float(x) for x in xs]
    idx = [round(i * (len(xs) - 1) / (n - 1)) for i in range(n)]
    return [float(xs[i]) for i in idx]


def evaluate_job(job: Job, cfg, task, model) -> list[dict]:
    """Evaluate a trained model (and, for RoPE, its scalings): one entry per run."""
    from relpos.experiments.config import ROPE_VARIANTS

    def run(variant, measurements):
        return {
            "scheme": job.scheme,
            "variant": variant,
            "task": job.task,
            "seed": job.seed,
            "train_len": task.train_len,
            "measurements": [m.to_dict() for m in measurements],
        }

    model.eval()
    out = [run("randomized" if job.randomized else None, task.evaluate(lambda n: model))]
    if job.scheme == "rope" and not job.randomized:
        for v in cfg.rope_variants:
            scaling, fixed = ROPE_VARIANTS[v]
            mf = rope_variant_model_for(model, task.train_seq_len(), scaling, fixed)
            out.append(run(v, task.evaluate(mf)))
    return out


def run_job(job: dict, cfg_dict: dict, *, threads: int | None = None, progress: Callable | None = None,
            evaluate: bool = True) -> dict:
    """Train and evaluate one job. Top-level and JSON in/out, for any executor.

    Args:
        job: :meth:`Job.to_dict`.
        cfg_dict: :meth:`ExperimentConfig.to_dict`.
        threads: torch threads (default ``cfg.threads``).
        progress: optional ``progress(job_key, step, steps)`` called during training.
        evaluate: False to train only (the other ranks under torchrun).

    Returns:
        ``{"job", "scheme", "task", "seed", "randomized", "train": {...},
        "eval_seconds", "runs": [{"scheme", "variant", "task", "seed",
        "train_len", "measurements": [...]}]}``.
    """
    import torch

    from relpos.experiments.config import ExperimentConfig
    from relpos.train import train

    j = Job.from_dict(job)
    cfg = ExperimentConfig.from_dict(cfg_dict)
    torch.set_num_threads(threads or cfg.threads)
    task = cfg.make_task(j.task)
    mcfg = model_config_for(j, cfg, task)
    tcfg = train_config_for(j, cfg, task)
    source = task.train_source(tcfg.batch_size, j.seed)
    steps = tcfg.steps

    callback = None
    if progress is not None:
        def callback(info) -> None:  # relpos.train.StepInfo; returning None keeps training
            progress(j.key, int(info.step), steps)

    t0 = time.perf_counter()
    res = train(mcfg, tcfg, source, callback=callback)
    train_seconds = time.perf_counter() - t0
    model = res.model
    losses = [float(x) for x in res.losses]
    t1 = time.perf_counter()
    with torch.no_grad():
        runs = evaluate_job(j, cfg, task, model) if evaluate else []
    eval_seconds = time.perf_counter() - t1
    tail = losses[-max(1, len(losses) // 10):]
    return {
        "job": j.key,
        **j.to_dict(),
        "train": {
            "steps": int(res.steps),
            "seconds": float(getattr(res, "seconds", train_seconds)),
            "tokens_per_s": float(getattr(res, "tokens_per_s", 0.0)),
            "final_loss": float(sum(tail) / len(tail)) if tail else None,
            "loss_curve": _downsample(losses),
            "params": int(sum(p.numel() for p in model.parameters())),
            "model": mcfg.to_dict(),
        },
        "eval_seconds": eval_seconds,
        "runs": runs,
    }


# ------------------------------------------------------------------- runners

Event = tuple[Job, "dict | None", "str | None"]

# Every runner's ``run(jobs, cfg_dict, *, on_start, on_progress, claim)`` yields one
# Event per job it ran. ``claim(job) -> bool`` (optional) is asked just before a job
# starts; False skips the job (it is finished, or another process holds its lease
# in the results store -- see :meth:`relpos.experiments.store.Store.claim`).


class SerialRunner:
    """Runs jobs one by one in this process."""

    name = "serial"

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads

    def run(self, jobs: list[Job], cfg_dict: dict, *, on_start=None, on_progress=None,
            claim=None) -> Iterator[Event]:
        import torch

        old = torch.get_num_threads()
        try:
            for job in jobs:
                if claim is not None and not claim(job):
                    continue  # finished or being run by another process (a lease in the store)
                if on_start:
                    on_start(job)
                try:
                    res = run_job(job.to_dict(), cfg_dict, threads=self.threads, progress=on_progress)
                except Exception:  # noqa: BLE001 - a failing run must not stop the sweep
                    yield job, None, traceback.format_exc()
                else:
                    yield job, res, None
        finally:
            torch.set_num_threads(old)


# Worker-process state (LocalRunner).
_PROGRESS_Q = None


def _watch_parent(ppid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != ppid:
            os._exit(3)  # the sweep is gone: do not finish orphaned work


def _worker_init(threads: int, ppid: int, queue) -> None:
    global _PROGRESS_Q
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set
        pass
    _PROGRESS_Q = queue
    threading.Thread(target=_watch_parent, args=(ppid,), daemon=True).start()


def _worker_report(key: str, step: int, steps: int) -> None:
    if _PROGRESS_Q is not None:
        try:
            _PROGRESS_Q.put_nowait((key, step, steps))
        except Exception:  # noqa: BLE001 - progress is best effort
            pass


def _worker_run(job: dict, cfg_dict: dict) -> dict:
    key = Job.from_dict(job).key
    _worker_report(key, 0, -1)  # "started" marker
    return run_job(job, cfg_dict, progress=_worker_report)


class LocalRunner:
    """A pool of worker processes on this machine (the default).

    Args:
        workers: processes (default: CPU count).
        threads: torch threads per process.
    """

    name = "local"

    def __init__(self, workers: int | None = None, threads: int = 1) -> None:
        self.workers = workers or os.cpu_count() or 1
        self.threads = threads

    def run(self, jobs: list[Job], cfg_dict: dict, *, on_start=None, on_progress=None,
            claim=None) -> Iterator[Event]:
        import multiprocessing as mp

        if not jobs:
            return
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        stop = threading.Event()

        def pump():
            while not stop.is_set():
                try:
                    key, step, steps = queue.get(timeout=0.2)
                except Exception:  # noqa: BLE001 - queue.Empty or closed
                    continue
                if steps < 0:
                    if on_start:
                        on_start(by_key[key])
                elif on_progress:
                    on_progress(key, step, steps)

        by_key = {j.key: j for j in jobs}
        t = threading.Thread(target=pump, daemon=True)
        t.start()
        ex = ProcessPoolExecutor(
            max_workers=min(self.workers, len(jobs)),
            mp_context=ctx,
            initializer=_worker_init,
            initargs=(self.threads, os.getpid(), queue),
        )
        pending = list(jobs)
        inflight: dict = {}
        try:
            while pending or inflight:
                # keep exactly one job per worker in flight: a kill loses at most those
                while pending and len(inflight) < self.workers:
                    job = pending.pop(0)
                    if claim is not None and not claim(job):
                        continue  # finished or being run by another process
                    inflight[ex.submit(_worker_run, job.to_dict(), cfg_dict)] = job
                if not inflight:
                    break
                done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                for f in done:
                    job = inflight.pop(f)
                    try:
                        res = f.result()
                    except Exception as e:  # noqa: BLE001
                        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
                        yield job, None, tb
                    else:
                        yield job, res, None
        except BaseException:
            # Interrupted (Ctrl-C, or the consumer stopped): stop the workers now rather
            # than wait for the runs in flight, which are lost anyway.
            for p in list((getattr(ex, "_processes", None) or {}).values()):
                p.terminate()
            ex.shutdown(wait=False, cancel_futures=True)
            raise
        else:
            ex.shutdown(wait=True)
        finally:
            stop.set()
            t.join(timeout=1)
            queue.close()


class RayRunner:
    """Each job is a Ray task (``pip install 'relpos[ray]'``).

    Args:
        address: Ray cluster address (None: start or join a local instance;
            ``"auto"``: the cluster this machine belongs to).
        threads: CPUs (and torch threads) per job.
    """

    name = "ray"

    def __init__(self, address: str | None = None, threads: int = 1, max_in_flight: int | None = None) -> None:
        try:
            import ray  # noqa: F401
        except ImportError as e:
            raise ValueError(
                "--runner ray needs Ray, which is an optional extra: pip install 'relpos[ray]' "
                f"(import failed: {e})"
            ) from None
        self.address = address
        self.threads = threads
        self.max_in_flight = max_in_flight

    def run(self, jobs: list[Job], cfg_dict: dict, *, on_start=None, on_progress=None,
            claim=None) -> Iterator[Event]:
        import ray

        if not jobs:
            return
        started_here = False
        if not ray.is_initialized():
            kw = {"address": self.address} if self.address else {}
            if not self.address:
                kw.update(include_dashboard=False, num_cpus=os.cpu_count() or 1)
            ray.init(ignore_reinit_error=True, log_to_driver=False, **kw)
            started_here = True
        remote = ray.remote(num_cpus=self.threads, max_retries=0)(_ray_job)
        try:
            cap = self.max_in_flight or max(1, int(ray.cluster_resources().get("CPU", 1) // self.threads))
            pending = list(jobs)
            inflight: dict = {}
            while pending or inflight:
                while pending and len(inflight) < cap:
                    job = pending.pop(0)
                    if claim is not None and not claim(job):
                        continue  # finished or being run by another process
                    inflight[remote.remote(job.to_dict(), cfg_dict, self.threads)] = job
                    if on_start:
                        on_start(job)
                if not inflight:
                    break
                ready, _ = ray.wait(list(inflight), num_returns=1)
                for ref in ready:
                    job = inflight.pop(ref)
                    try:
                        res = ray.get(ref)
                    except Exception as e:  # noqa: BLE001
                        yield job, None, f"{type(e).__name__}: {e}"
                    else:
                        yield job, res, None
        finally:
            if started_here:
                ray.shutdown()


def _ray_job(job: dict, cfg_dict: dict, threads: int) -> dict:
    return run_job(job, cfg_dict, threads=threads)


class TorchrunRunner:
    """Jobs one after another, each trained by ``nproc`` data-parallel processes.

    Uses ``python -m torch.distributed.run --standalone`` on
    :mod:`relpos.experiments.worker`; rank 0 evaluates and writes the result.
    """

    name = "torchrun"

    def __init__(self, nproc: int = 2, threads: int = 1) -> None:
        if nproc < 1:
            raise ValueError(f"--nproc must be >= 1, got {nproc}")
        self.nproc = nproc
        self.threads = threads

    def run(self, jobs: list[Job], cfg_dict: dict, *, on_start=None, on_progress=None,
            claim=None) -> Iterator[Event]:
        for job in jobs:
            if claim is not None and not claim(job):
                continue  # finished or being run by another process
            if on_start:
                on_start(job)
            with tempfile.TemporaryDirectory(prefix="relpos-job-") as d:
                spec = os.path.join(d, "spec.json")
                out = os.path.join(d, "result.json")
                with open(spec, "w") as f:
                    json.dump({"job": job.to_dict(), "config": cfg_dict, "threads": self.threads}, f)
                env = dict(os.environ, OMP_NUM_THREADS=str(self.threads))
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                       f"--nproc_per_node={self.nproc}", "-m", "relpos.experiments.worker", spec, out]
                p = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if p.returncode != 0 or not os.path.exists(out):
                    yield job, None, f"torchrun exited with {p.returncode}:\n{p.stderr[-4000:]}"
                    continue
                with open(out) as f:
                    yield job, json.load(f), None


RUNNERS = ("local", "serial", "ray", "torchrun")


def make_runner(name: str, *, workers: int | None = None, threads: int = 1, ray_address: str | None = None,
                nproc: int = 2):
    """Build a runner by name (``local``, ``serial``, ``ray``, ``torchrun``)."""
    if name == "local":
        return LocalRunner(workers, threads)
    if name == "serial":
        return SerialRunner(threads)
    if name == "ray":
        return RayRunner(ray_address, threads)
    if name == "torchrun":
        return TorchrunRunner(nproc, threads)
    raise ValueError(f"unknown runner {name!r}; known runners: {', '.join(RUNNERS)}")

