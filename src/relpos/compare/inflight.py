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

A machine that keeps nothing between working sessions loses ``OUT/inflight`` with the rest of ``OUT``:
:func:`copy_checkpoints` copies the checkpoints, verified, into a folder that travels with the repository and
back (``benchmarks/store_snapshot.py`` does it beside each store snapshot).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

__all__ = ["RESUME_EVERY", "job_folder", "try_overrides", "remove_job_folder", "prune_empty", "copy_checkpoints"]

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


_TRY = re.compile(r"try\d+")
_OLD = re.compile(r"\.(try\d+)\.old-.+")  # a save interrupted between its two renames (checkpoint.save)


def _tries(root: Path) -> dict[Path, Path]:
    """``try`` folder below ``root`` (relative) -> the folder holding its latest complete checkpoint; links are
    neither followed nor listed."""
    out: dict[Path, Path] = {}
    if not root.is_dir() or root.is_symlink():
        return out
    for base, dirnames, _ in os.walk(root, followlinks=False):
        for name in sorted(dirnames):
            p = Path(base) / name
            m = _TRY.fullmatch(name) or _OLD.fullmatch(name)
            if m is None or p.is_symlink():
                continue
            rel = (Path(base) / (name if _TRY.fullmatch(name) else m.group(1))).relative_to(root)
            if _TRY.fullmatch(name) or rel not in out:
                out[rel] = p
        dirnames[:] = [d for d in dirnames if not (_TRY.fullmatch(d) or _OLD.fullmatch(d))]
    return out


def _step(folder: Path) -> int | None:
    """The training step of the verified checkpoint in ``folder``; None when there is none or it does not verify."""
    from relpos.training import checkpoint

    try:
        meta, _ = checkpoint.read(folder)
    except (ValueError, OSError):
        return None
    step = (meta.get("extra") or {}).get("train", {}).get("step")
    return step if isinstance(step, int) else -1


def _copy_one(src: Path, dest_root: Path, rel: Path) -> int | None:
    """Copy the checkpoint in ``src`` to ``dest_root/rel`` (a fresh folder, verified, swapped in by renaming);
    the step copied, or None when ``src`` changed under the copy (a save swapped it) or does not verify."""
    from relpos.outdir import check_under, create_exclusive
    from relpos.training import checkpoint

    dest = dest_root / rel
    check_under(dest_root, dest, folder=True, flag="destination")
    dest.parent.mkdir(parents=True, exist_ok=True)
    check_under(dest_root, dest.parent, folder=True, flag="destination")  # nothing planted while creating it
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        try:
            entries = [e for e in os.scandir(src) if e.is_file(follow_symlinks=False)
                       and (e.name == "config.json" or e.name.endswith(".safetensors"))]
            for e in entries:
                with open(e.path, "rb") as f:
                    data = f.read()
                fd = create_exclusive(tmp / e.name)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
        except FileNotFoundError:
            return None  # a save swapped the folder away meanwhile
        step = _step(tmp)  # the copy verifies (every file's size and SHA-256) or is dropped
        if step is None or not checkpoint.is_checkpoint_dir(tmp):
            return None
        old = None
        if dest.exists() or dest.is_symlink():
            check_under(dest_root, dest, folder=True, flag="destination")
            if not checkpoint.is_checkpoint_dir(dest):
                raise ValueError(f"{dest} holds files that are not a relpos checkpoint; nothing was replaced")
            old = dest.parent / f".{dest.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            os.rename(dest, old)
        os.rename(tmp, dest)
        if old is not None:
            checkpoint.remove(old)
        return step
    finally:
        if tmp.is_dir() and not tmp.is_symlink():
            checkpoint.remove(tmp)


def copy_checkpoints(src_root: str | os.PathLike, dest_root: str | os.PathLike, *,
                     drop_missing: bool = False) -> dict[str, int]:
    """Copy every try's training checkpoint under ``src_root`` (an ``OUT/inflight`` folder or a copy of one) to the
    same place under ``dest_root``, so that a sweep run there resumes from it.

    Each copy is written into a fresh folder, read back through :func:`relpos.training.checkpoint.read` (sizes and
    SHA-256 of every file) and only then swapped in; a checkpoint that a running job replaces during the copy is
    tried again. A checkpoint is never replaced by one of an earlier step, nothing is written through a link, and
    a folder under ``dest_root`` that is not a relpos checkpoint is never replaced.

    Args:
        drop_missing: also remove from ``dest_root`` the checkpoints that ``src_root`` no longer has (their jobs
            finished; only relpos's checkpoint files go, then the folders left empty). For live -> copy only.

    Returns:
        ``{"copied": n, "kept": n, "dropped": n}``: checkpoints copied, left as they were (the destination's is at
        the same or a later step), removed.
    """
    from relpos.training import checkpoint

    src, dest = Path(src_root), Path(dest_root)
    counts = {"copied": 0, "kept": 0, "dropped": 0}
    have = _tries(dest)
    found = _tries(src)
    for rel, folder in sorted(found.items()):
        theirs = _step(have[rel]) if rel in have else None
        for _ in range(3):
            mine = _step(folder)
            if mine is not None and theirs is not None and theirs >= mine:
                counts["kept"] += 1
                break
            if mine is not None and _copy_one(folder, dest, rel) is not None:
                counts["copied"] += 1
                break
            now = _tries(src)  # swapped by a save meanwhile (read the new one), or its job just finished
            if rel not in now:
                found.pop(rel)
                break
            folder = now[rel]
        else:
            raise ValueError(f"{src / rel}: the checkpoint did not verify in 3 tries; nothing was copied for it")
    if drop_missing:
        for rel in sorted(set(have) - set(found)):
            checkpoint.remove(dest / rel)
            counts["dropped"] += 1
        prune_empty(dest)
    return counts
