"""Reuse finished runs of another ``relpos compare`` folder where training them again would repeat them.

A training run is deterministic given everything that decides it: the model, the task and its options,
the training recipe, the fit gate, the evaluation and the seed. A folder's fingerprint covers all of that
for every task at once, so two folders whose configurations differ in one task (or only in the
learning-rate grid) have different fingerprints, although many of their runs are the same. ``relpos
compare --reuse FOLDER`` copies such runs instead of training them again:

* a job is taken only when its task's settings in both configurations are equal in everything the
  fingerprint covers, apart from the learning-rate grid (:func:`task_settings`), and
* it tried there exactly the learning rates, in the order, it would try here (every job tries every
  rate of its task's grid and keeps the best by validation, :func:`same_tries`).

Everything else is trained as usual. A reused job keeps its measurements, its fit record and its CPU
time, and records where it came from (``reused_from`` in its ``info``: folder, fingerprint, time); its
saved model is copied too when the source kept one. The source folder is only read.

**Validated as before** (``validated_before``: tasks named by the caller, ``relpos compare
--reuse-validated-before``). A change of how runs are validated -- the validation set's size, or keeping the
best check's model (``fit.keep_best``) -- changes every task's settings, so no finished run would be reused.
For the tasks named, a job is also taken when its settings differ only in those (:data:`VALIDATION_ONLY`):
it is then the run as trained and gated there, not what this configuration would train, and says so in its
fit record (``validated_before``: the source fingerprint and every differing setting); the results page
names such runs.

Example:
    >>> full = {"lr_grid": [2e-3, 1e-3, 3e-3]}
    >>> same_tries([{"lr": r} for r in (2e-3, 1e-3, 3e-3)], 2e-3, full["lr_grid"], task="copy")
    True
    >>> same_tries([{"lr": 2e-3, "fitted": True}], 2e-3, full["lr_grid"], task="copy")  # would try all three
    False
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

__all__ = ["task_settings", "same_tries", "reusable", "reuse_runs", "VALIDATION_ONLY"]

#: Settings of :func:`task_settings` that decide only how a run is validated (section, key): the size of the
#: validation set and whether the best check's model is kept.
VALIDATION_ONLY = (("fit", "keep_best"), ("task", "n_val"))

#: Protocol sections that are the same for every task (compared whole).
_SHARED = ("protocol_version", "model", "rope_variants", "random_positions_factor", "scheme_options",
           "embed_scale", "scheme_ranges", "passkey")


def task_settings(protocol: dict, task: str) -> dict:
    """What decides a job of ``task`` under a fingerprinted ``protocol``, without the learning-rate grid."""
    fit = {k: v for k, v in (protocol.get("fit") or {}).items() if k != "lr_grid"}
    train = {k: v for k, v in ((protocol.get("train") or {}).get(task) or {}).items() if k != "lr_grid"}
    return {**{k: protocol.get(k) for k in _SHARED}, "fit": fit, "train": train,
            "task": (protocol.get("tasks") or {}).get(task),
            "task_model": (protocol.get("task_model") or {}).get(task)}


def _validation_aside(settings: dict) -> dict:
    """:func:`task_settings` without :data:`VALIDATION_ONLY`."""
    out = copy.deepcopy(settings)
    for sect, key in VALIDATION_ONLY:
        if isinstance(out.get(sect), dict):
            out[sect].pop(key, None)
    return out


def same_tries(tried: list[dict], task_lr: float, grid: list[float], *, task: str) -> bool:
    """Whether a job that tried ``tried`` (its fit record's ``lr_tries``) tried exactly the rates it would try
    here, in the same order, with this configuration's ``task_lr`` and ``grid`` (every task, language
    modelling included, tries every rate of its grid)."""
    from relpos.compare.fitting import lr_tries

    there = [t.get("lr") for t in tried]
    return bool(there) and there == lr_tries(grid, task_lr)


def _result(job: dict, runs: list[dict]) -> dict:
    """A worker result (as :meth:`Store.write_job` takes it) rebuilt from a stored job and its runs."""
    res = copy.deepcopy(job["info"])
    res["runs"] = [{**copy.deepcopy(r["info"]), "measurements": copy.deepcopy(r["measurements"])} for r in runs]
    return res


def reusable(cfg, keys: list[str], folder: str | os.PathLike, *, skip: set[str] = frozenset(),
             validated_before=()) -> list[dict]:
    """The jobs among ``keys`` (but not in ``skip``) that ``folder`` holds and that ``cfg`` would train the same,
    as worker results ready for :meth:`~relpos.compare.store.Store.write_job`; for the tasks in
    ``validated_before``, also those whose settings differ only in :data:`VALIDATION_ONLY` (recorded in their
    fit record). Reads ``folder`` only.

    Raises:
        FileNotFoundError: ``folder`` holds no results database.
        relpos.compare.store.NotAStoreError / CorruptStoreError: it holds a foreign or damaged one.
    """
    from relpos.compare.store import Store

    folder = Path(folder)
    fp, here = cfg.fingerprint(), cfg.protocol()
    with Store(folder / "results.sqlite", create=False) as src:
        src_fp, proto = src.get_meta("fingerprint"), json.loads(src.get_meta("protocol") or "{}")
        if src_fp is None or src_fp == fp:
            return []  # empty, or this very configuration (nothing that a resume would not do)
        jobs = {j["job"]: j for j in src.jobs(src_fp)}
        runs: dict[str, list[dict]] = {}
        for r in src.runs(src_fp):
            runs.setdefault(r["job"], []).append(r)
    from relpos.compare.config import config_diff

    tasks = {k.split("/", 1)[0] for k in keys}
    same = {t: task_settings(proto, t) == task_settings(here, t) for t in tasks}
    loose = {t: t in set(validated_before) and not same[t]
             and _validation_aside(task_settings(proto, t)) == _validation_aside(task_settings(here, t)) for t in tasks}
    out = []
    for key in keys:
        task = key.split("/", 1)[0]
        job = jobs.get(key)
        if job is None or key in skip or key not in runs or not (same[task] or loose[task]):
            continue
        fit = ((job["info"].get("train") or {}).get("fit") or {})
        if not same_tries(fit.get("lr_tries") or [], cfg.train_settings(task)["lr"], cfg.lr_grid(task), task=task):
            continue
        res = _result(job, runs[key])
        res["reused_from"] = {"folder": str(folder), "fingerprint": src_fp, "finished_at": job["finished_at"]}
        if loose[task] and isinstance((res.get("train") or {}).get("fit"), dict):
            res["train"]["fit"]["validated_before"] = {
                "fingerprint": src_fp, "differs": config_diff(task_settings(proto, task), task_settings(here, task))}
        out.append(res)
    return out


def reuse_runs(store, cfg, keys: list[str], folder: str | os.PathLike, *, models_dir: str | None = None,
               validated_before=()) -> list[dict]:
    """Copy into ``store`` the jobs among ``keys`` that ``folder`` holds and that would be trained the same.

    Args:
        store: the output folder's :class:`~relpos.compare.store.Store`, bound to ``cfg``.
        cfg: this sweep's :class:`~relpos.compare.config.ExperimentConfig`.
        keys: the planned job keys (``task/scheme[+rand]/seed<k>``); those already done or leased are left.
        folder: another ``relpos compare`` output folder (read only).
        models_dir: where this sweep keeps its models (None: copy none).
        validated_before: tasks whose runs are copied also when they differ only in how they were validated
            (see the module docstring).

    Returns:
        One ``{"job", "cpu_seconds"}`` per reused job.

    Raises:
        As :func:`reusable`.
    """
    fp = cfg.fingerprint()
    out = []
    for res in reusable(cfg, keys, folder, skip=store.done_jobs(fp) | set(store.leases(fp)),
                        validated_before=validated_before):
        model = (res.get("train") or {}).get("checkpoint")  # relative to the folder: models/<task>/...
        if isinstance(model, str):
            kept = models_dir is not None and _copy_model(Path(folder), model, Path(models_dir).parent, res)
            if not kept:  # never point at a model this folder does not hold
                res["train"]["checkpoint"] = None
        if store.write_job(fp, res):
            out.append({"job": res["job"], "cpu_seconds": float(res.get("cpu_seconds") or 0.0)})
    return out


def _copy_model(src_folder: Path, rel: str, dest_folder: Path, res: dict) -> bool:
    """Copy a saved model folder unless something is already at the destination (never overwrite); whether the
    destination now holds the model. The source must be the job's own model (its config and recorded content
    hash, :func:`relpos.compare.saved_models.check_saved_model`); only its regular files are copied, and
    nothing is written through a link."""
    from relpos.compare.saved_models import SavedModelError, check_saved_model
    from relpos.outdir import check_under

    src = src_folder / rel
    if not src.is_dir():
        return False
    try:
        check_saved_model(src_folder, {"job": res["job"], "scheme": res["scheme"], "info": {"train": res["train"]}})
    except SavedModelError:
        return False  # not the job's own model: the run is reused without it
    dest = check_under(dest_folder, dest_folder / rel, folder=True)
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        check_under(dest_folder, dest, folder=True)
        tmp = dest.parent / f".{dest.name}.reuse-{os.getpid()}"
        tmp.mkdir()
        try:
            for entry in os.scandir(src):  # a saved model is a flat folder of regular files
                if entry.is_file(follow_symlinks=False):
                    shutil.copyfile(entry.path, tmp / entry.name, follow_symlinks=False)
            os.rename(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return True
    return dest.is_dir()
