"""A job's training, checkpointed while it runs, so that an interrupted sweep resumes inside the job.

A job of the full preset trains for up to an hour on one CPU core. Without this, a sweep stopped mid-job (Ctrl-C,
a closed laptop, a machine handed back) kept only the jobs it had finished: the rest trained again from step 0.
Now every learning-rate try of a job writes a training checkpoint (:meth:`relpos.training.loop.Trainer.save`:
weights, AdamW state, step, losses, the :class:`~relpos.compare.fitting.FitMonitor`'s checks and kept best
parameters) every :data:`RESUME_EVERY` steps and when it ends, under::

    OUT/inflight/<fingerprint>/<task>/<scheme>[+rand]/seed<k>/try<i>/

The next run of the same command restores each try from there and goes on. Batches are a function of the step
and every micro-batch's random state is reseeded from ``(seed, step, micro)`` (:mod:`relpos.training.loop`), so
the resumed job trains, stops and reports exactly as the uninterrupted one: only its timings differ (they add
the segments' recorded times; work after the last checkpoint is done twice and counted once). A finished job's
folder is emptied (only relpos's own checkpoint files go) once its result is made.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["RESUME_EVERY", "job_folder", "try_overrides", "remove_job_folder", "prune_empty"]

#: Steps between a try's checkpoints: at the full preset's slowest steps (about 0.5 s) a few minutes of work at
#: risk; at its fastest (about 20 ms) one checkpoint of about 2 MB per 10 s, well under 1 % of the time.
RESUME_EVERY = 500


def job_folder(resume_dir: str, fingerprint: str, job) -> Path:
    """Where ``job``'s tries keep their checkpoints: ``<resume_dir>/<fingerprint>/<task>/<scheme>[+rand]/seed<k>``."""
    return Path(resume_dir, fingerprint, job.task, job.scheme + ("+rand" if job.randomized else ""),
                f"seed{job.seed}")


def try_overrides(cfg, job, i: int) -> dict:
    """The training-config fields that checkpoint try ``i`` of ``job`` and resume it (``{}`` when ``cfg`` has no
    ``resume_dir``: nothing is written)."""
    if not cfg.resume_dir:
        return {}
    return {"ckpt_dir": str(job_folder(cfg.resume_dir, cfg.fingerprint(), job) / f"try{i}"),
            "ckpt_every": RESUME_EVERY, "resume": True}


def remove_job_folder(cfg, job) -> None:
    """Remove ``job``'s checkpoints (only files relpos's checkpoints own), then its folder if that leaves it empty;
    anything else found there stays where it is."""
    if not cfg.resume_dir:
        return
    from relpos.training.checkpoint import remove

    folder = job_folder(cfg.resume_dir, cfg.fingerprint(), job)
    if not folder.is_dir() or folder.is_symlink():
        return
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("try") and entry.is_dir() and not entry.is_symlink():
            remove(entry)
    try:
        os.rmdir(folder)  # only the job's own folder: the ones above may be in use by another worker's job
    except OSError:
        pass


def prune_empty(root: str | os.PathLike) -> None:
    """Remove the empty folders at and below ``root``, deepest first (what finished jobs leave); a folder that
    holds anything, and every link, stays. For when no job of the folder is training."""
    top = Path(root)
    if not top.is_dir() or top.is_symlink():
        return
    for base, dirnames, _ in os.walk(top, topdown=False, followlinks=False):
        for name in dirnames:
            p = Path(base) / name
            if not p.is_symlink():
                try:
                    os.rmdir(p)
                except OSError:
                    pass
    try:
        os.rmdir(top)
    except OSError:
        pass
