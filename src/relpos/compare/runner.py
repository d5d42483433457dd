"""Running the jobs of a sweep on an executor.

:func:`relpos.compare.job.run_job` is the unit of work (train one model
until it fits, evaluate it and its variants). It is a plain top-level function
of JSON-able arguments returning a JSON-able dict, so any executor can run it:

* :class:`SerialRunner` -- in this process (tests, debugging).
* :class:`LocalRunner` -- the built-in default: a pool of worker processes, one
  thread each by default (``spawn`` start method, so nothing is inherited but
  the arguments). Workers send results back; only the parent writes the
  database. A worker whose parent disappears (even by SIGKILL) exits on its
  own within a second.
* :class:`RayRunner` -- ``--runner ray``: each job is a Ray task, so a sweep
  spreads over a Ray cluster (``pip install 'relpos[ray]'``; every node needs
  relpos installed). ``kill`` (SIGTERM) or a closed terminal (SIGHUP) stops the
  driver as Ctrl-C does: finished runs are saved and the Ray instance it started
  is shut down (Ray's own SIGTERM handler aborted the driver without either).
* :class:`TorchrunRunner` -- ``--runner torchrun``: jobs one after another, each
  trained by ``--nproc`` processes with data-parallel training
  (:mod:`relpos.training.loop` under ``torchrun``), for a single large run.

All runners yield ``(job, result_or_None, error_or_None)`` as jobs finish, and
report which jobs are in flight through an ``on_start`` callback, which is what
the progress bar shows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Iterator

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


from relpos.compare.job import (  # noqa: F401 - the unit of work, re-exported
    Job,
    evaluate_job,
    model_config_for,
    rope_variant_model_for,
    run_job,
    train_config_for,
)


# ------------------------------------------------------------------- runners

Event = tuple[Job, "dict | None", "str | None"]

# Every runner's ``run(jobs, cfg_dict, *, on_start, on_progress, claim)`` yields one
# Event per job it ran. ``claim(job) -> bool`` (optional) is asked just before a job
# starts; False skips the job (it is finished, or another process holds its lease
# in the results store -- see :meth:`relpos.compare.store.Store.claim`).


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
        handlers = _signal_handlers()
        if not ray.is_initialized():
            kw = {"address": self.address} if self.address else {}
            if not self.address:
                kw.update(include_dashboard=False, num_cpus=os.cpu_count() or 1)
            try:
                ray.init(ignore_reinit_error=True, log_to_driver=False, **kw)
            except BaseException:
                _restore_signal_handlers(handlers)
                raise
            started_here = True
            _interrupt_on_term(handlers)  # after ray.init, which installs handlers that abort the process
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
                try:
                    ray.shutdown()
                finally:
                    _restore_signal_handlers(handlers)


#: Signals that end a Ray driver as Ctrl-C does (the sweep saves what finished, Ray is shut down).
_TERM_SIGNALS = ("SIGTERM", "SIGHUP")


def _signal_handlers() -> dict | None:
    """The handlers of :data:`_TERM_SIGNALS` now (None off the main thread, where none can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return {sig: signal.getsignal(sig) for name in _TERM_SIGNALS if (sig := getattr(signal, name, None))}


def _interrupt_on_term(before: dict | None) -> None:
    """Make :data:`_TERM_SIGNALS` raise ``KeyboardInterrupt`` in the main thread, so that a driver stopped by
    ``kill`` runs its cleanup (``ray.shutdown()``, the sweep's last write) instead of dying with Ray's processes
    left to notice on their own; Ray's own handler aborts the process without either. A signal ignored before
    (``nohup``) stays ignored."""
    if before is None:
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")

    for sig, old in before.items():
        if old is not signal.SIG_IGN:
            signal.signal(sig, interrupt)


def _restore_signal_handlers(before: dict | None) -> None:
    """Put back the handlers :func:`_signal_handlers` saw (those of a handler set outside Python stay as Ray left
    them: ``signal`` cannot restore them)."""
    for sig, old in (before or {}).items():
        if old is not None:
            signal.signal(sig, old)


def _ray_job(job: dict, cfg_dict: dict, threads: int) -> dict:
    return run_job(job, cfg_dict, threads=threads)


class TorchrunRunner:
    """Jobs one after another, each trained by ``nproc`` data-parallel processes.

    Uses ``python -m torch.distributed.run --standalone`` on
    :mod:`relpos.compare.worker`; rank 0 evaluates and writes the result.
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
                       f"--nproc_per_node={self.nproc}", "-m", "relpos.compare.worker", spec, out]
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

