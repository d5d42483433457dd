"""The fitted language models of a finished ``relpos compare`` folder (read only).

:func:`read_source` opens the folder's ``config.json`` and ``results.sqlite`` without writing anything and lists
its language-modelling jobs with a saved model (``OUT/models/lm/<scheme>/seed<k>``), their pretraining steps and
whether they fitted. A folder without them is refused in one line naming the fix.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

__all__ = ["SourceModel", "Source", "read_source"]


@dataclasses.dataclass(frozen=True)
class SourceModel:
    """One language model of the folder: its scheme, seed, saved-model folder, pretraining steps, fit."""

    scheme: str
    seed: int
    path: Path
    steps: int
    fitted: bool
    ms_per_step: float | None
    cpu_seconds: float | None = None  # the job's CPU seconds (every try and its evaluation), as the store records


@dataclasses.dataclass
class Source:
    """A compare folder: its configuration (:class:`~relpos.compare.config.ExperimentConfig`), fingerprint
    and language models."""

    folder: Path
    cfg: object
    fingerprint: str
    models: list[SourceModel]

    @property
    def train_len(self) -> int:
        return int(self.cfg.lm["train_len"])

    def model(self, scheme: str, seed: int) -> SourceModel | None:
        return next((m for m in self.models if m.scheme == scheme and m.seed == seed), None)

    def pretrain_steps(self, schemes=None) -> int:
        """The pretraining steps the K grid is a fraction of: the mean over the models of ``schemes`` (the
        schemes the studied recipes start from; every model when None or when none of them is here), so every
        recipe shares one grid."""
        ms = [m for m in self.models if schemes is not None and m.scheme in schemes] or self.models
        return max(1, round(sum(m.steps for m in ms) / len(ms)))


def read_source(folder, *, allow_unfitted: bool = False) -> Source:
    """Read a finished compare folder (nothing in it is changed).

    Raises:
        FileNotFoundError: no compare results there.
        ValueError: no language model with a saved model (or none fitted, unless ``allow_unfitted``).
    """
    from relpos.compare.config import read_saved_config
    from relpos.compare.store import Store
    from relpos.outdir import refuse_special_files

    src = Path(folder)
    if not src.is_dir():
        raise FileNotFoundError(f"--from {src}: no such folder (name a finished relpos compare --out folder)")
    refuse_special_files(src, ("results.sqlite", "config.json"), flag="--from")
    db, cj = src / "results.sqlite", src / "config.json"
    if not db.is_file() or not cj.is_file():
        raise FileNotFoundError(f"--from {src} holds no relpos compare results (results.sqlite and config.json)")
    cfg, fp = read_saved_config(cj)
    with Store(db, create=False) as st:
        jobs = st.jobs(fp)
    models, unfitted = [], 0
    for j in jobs:
        if j["task"] != "lm" or j["randomized"]:
            continue
        train = j["info"].get("train") or {}
        rel = train.get("checkpoint")
        if not isinstance(rel, str) or not (src / rel / "config.json").is_file():
            continue
        fitted = bool((train.get("fit") or {}).get("fitted"))
        if not fitted and not allow_unfitted:
            unfitted += 1
            continue
        models.append(SourceModel(j["scheme"], int(j["seed"]), src / rel, int(train.get("steps") or 0), fitted,
                                  train.get("ms_per_step"), (j["info"] or {}).get("cpu_seconds")))
    if not models:
        why = (f"its {unfitted} saved language models did not fit (pass --allow-unfitted to use them anyway)"
               if unfitted else "it has no saved language models (run relpos compare with the lm task and without "
                                "--no-keep-models)")
        raise ValueError(f"--from {src}: no fitted language models to extend: {why}")
    models.sort(key=lambda m: (m.scheme, m.seed))
    return Source(src, cfg, fp, models)
