"""The trained models a ``relpos compare`` folder keeps (``OUT/models/<task>/<scheme>[+rand]/seed<k>``): where
they go (:func:`model_path`), saving them (:func:`save_model`), and checking them before they are used again.

A saved model is reused without training: evaluation-only additions (:mod:`relpos.compare.additions`)
evaluate it, ``--reuse`` (:mod:`relpos.compare.reuse`) copies it. A model placed in another job's slot (an
ALiBi model in ``models/lm/rope/seed0``, or a rope model of another folder) would then be reported as that job's,
silently. So each job records its model's content hash in the store (``train.checkpoint_sha256``: the
checkpoint's ``config_sha256``, which covers the SHA-256 of every tensor file and the model's configuration),
and before a saved model is used :func:`check_saved_model` checks:

* the folder holds it as real folders and regular files (no link leads outside);
* its ``config.json`` names the job (``extra.job``) and the job's scheme (``model_config.scheme``);
* its ``config_sha256`` equals the hash the store recorded for the job (a folder made before relpos recorded
  the hash is checked by the first two only: :func:`check_saved_model` says so in its return value).

:func:`relpos.training.checkpoint.load` then checks every tensor file against the config's hashes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["SavedModelError", "model_digest", "check_saved_model", "model_path", "save_model"]


class SavedModelError(ValueError):
    """A saved model is not the one its job trained (swapped, edited or from another folder)."""


def _manifest(path: Path) -> dict:
    from relpos.outdir import read_regular_text

    try:
        meta = json.loads(read_regular_text(path / "config.json", limit=16 << 20))
    except FileNotFoundError:
        raise SavedModelError(f"{path}: no config.json (not a saved relpos model)") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise SavedModelError(f"{path}/config.json cannot be read as a relpos model's config ({e})") from None
    if not isinstance(meta, dict):
        raise SavedModelError(f"{path}/config.json is not a relpos model's config")
    return meta


def model_digest(path: str | os.PathLike) -> str | None:
    """The content hash of a saved model (its ``config_sha256``), or None where it has none."""
    got = _manifest(Path(path)).get("config_sha256")
    return got if isinstance(got, str) else None


def check_saved_model(folder: str | os.PathLike, job: dict) -> str:
    """Check that ``job``'s saved model in the compare folder ``folder`` is the model the job trained.

    Args:
        folder: the compare output folder.
        job: the stored job (:meth:`~relpos.compare.store.Store.jobs`): ``job``, ``scheme`` and ``info``
            (``info.train.checkpoint``: the model's path relative to ``folder``; ``info.train.checkpoint_sha256``:
            its hash, where recorded).

    Returns:
        ``"hash"`` when the recorded content hash matched, ``"config"`` when the folder predates the hash and
        only the model's config was checked.

    Raises:
        SavedModelError: missing, a link on the way, another job's or scheme's model, or another content.
    """
    from relpos.outdir import OutputDirError, check_under, refuse_links_below

    train = (job.get("info") or {}).get("train") or {}
    rel = train.get("checkpoint")
    if not isinstance(rel, str) or not rel:
        raise SavedModelError(f"{job['job']}: the store records no saved model")
    try:
        path = check_under(folder, Path(folder) / rel, folder=True)
        refuse_links_below(path, root=folder)
    except OutputDirError as e:
        raise SavedModelError(f"saved model of {job['job']}: {e}") from None
    meta = _manifest(path)
    extra = meta.get("extra") if isinstance(meta.get("extra"), dict) else {}
    scheme = (meta.get("model_config") or {}).get("scheme") if isinstance(meta.get("model_config"), dict) else None
    if extra.get("job") != job["job"] or scheme != job["scheme"]:
        raise SavedModelError(
            f"{path} holds the model of job {extra.get('job')!r} (scheme {scheme!r}), not of {job['job']} "
            f"(scheme {job['scheme']!r}): it was moved or replaced. Nothing was changed; put the job's own model "
            f"back, or pass --force to move the old results aside and train again")
    want = train.get("checkpoint_sha256")
    if want is None:
        return "config"
    got = meta.get("config_sha256")
    if got != want:
        raise SavedModelError(
            f"{path} is not the model {job['job']} trained (content hash {str(got)[:12]}..., the store records "
            f"{str(want)[:12]}...): it was replaced, perhaps by a model of another folder. Nothing was changed; put "
            f"the job's own model back, or pass --force to move the old results aside and train again")
    return "hash"


def model_path(models_dir: str, job) -> str:
    """Where a job's (:class:`relpos.compare.job.Job`) trained model is kept: ``<models_dir>/<task>/<scheme>[+rand]/seed<k>``."""
    import os

    return os.path.join(models_dir, job.task, job.scheme + ("+rand" if job.randomized else ""), f"seed{job.seed}")


def save_model(job, cfg, model, fit: dict | None) -> str:
    """Save a trained model (safetensors checkpoint, with its fit) and return its path relative to ``models_dir``'s
    parent (the compare output folder)."""
    import os

    from relpos.training.checkpoint import save
    from relpos.outdir import check_under

    path = model_path(cfg.models_dir, job)
    folder = os.path.dirname(os.path.abspath(cfg.models_dir))
    check_under(folder, path, folder=True)  # no link on the way: the model is written inside the output folder
    extra = {"job": job.key, "fitted": bool(fit and fit.get("fitted")), "fit_score": fit and fit.get("score")}
    save(path, model, extra=extra)
    return os.path.relpath(path, folder)
