"""The named presets of ``relpos compare``.

* ``default`` -- what ``relpos compare`` runs with no arguments: eleven schemes
  on language modelling and string copying, one seed, a tiny model trained
  until it fits (early stopping on held-out data); about fifteen minutes on a
  2-core CPU.
* ``ci`` -- a **smoke test**: the same schemes, few steps, short lengths; under
  two minutes. Its numbers come from models that have not fitted and carry no
  conclusion.
* ``full`` -- every task, three seeds, a learning rate chosen per scheme from a
  small grid, randomized positions; the numbers in ``docs/results.md``.

Each factory returns a fresh :class:`~relpos.experiments.config.ExperimentConfig`;
:func:`preset` replaces some of its fields.
"""

from __future__ import annotations

from relpos.experiments.config import ALGORITHMIC, ExperimentConfig
from relpos.experiments.fitting import FitConfig

__all__ = ["PRESETS", "preset"]


#: Algorithmic problem lengths: L = 8 and 1x, 1.5x, 2x, 3x, 4x L.
_ALGO = {"train_len": 8, "eval_lengths": [8, 12, 16, 24, 32], "n_eval": 256, "n_val": 256}
#: The algorithmic recipe: batch 64, peak lr 2e-3, at most 4000 steps (early stopping ends most runs sooner).
_ALGO_TRAIN = {"steps": 4000, "batch_size": 64, "lr": 2e-3, "warmup": 100}
#: Reverse gets a longer budget (ALiBi, NoPE, Sandwich still rose at 4,000 steps); early stopping ends most sooner.
_REVERSE_TRAIN = {**_ALGO_TRAIN, "steps": 16000}


def _algo_train(tasks) -> dict:
    """The per-task recipes of the default and full presets."""
    out = {t: dict(_ALGO_TRAIN) for t in tasks}
    out["reverse"] = dict(_REVERSE_TRAIN)
    out["parity"] = {**_ALGO_TRAIN, "steps": 1000}
    return out


#: Task options shared by the default and full presets (parity trains at 12 bits, so that a held-out set exists).
_TASK_OPTIONS = {"copy": {"alphabet": 8}, "reverse": {"alphabet": 8}, "copy-hints": {"alphabet": 8},
                 "mqar": {"n_keys": 64, "n_values": 16}, "parity": {"train_len": 12}}


def _ci() -> ExperimentConfig:
    return ExperimentConfig(
        preset="ci",
        tasks=["lm", "copy"],
        d_model=32,
        n_layers=2,
        n_heads=2,
        steps=100,
        batch_size=8,
        lr=3e-3,
        warmup=10,
        task_train={"copy": {"steps": 200, "batch_size": 16, "lr": 3e-3}},
        lm={"train_len": 32, "eval_factors": [1, 2, 4], "eval_tokens": 2048, "train_bytes": 1_000_000, "n_val": 8},
        algorithmic={"train_len": 6, "eval_factors": [1, 2, 3], "n_eval": 32, "n_val": 64},
        task_options={"copy": {"alphabet": 8}},
        fit=FitConfig(val_every=50),
    )


def _default() -> ExperimentConfig:
    return ExperimentConfig(
        preset="default",
        tasks=["lm", "copy"],
        d_model=64,
        n_layers=2,
        n_heads=4,
        steps=4000,
        batch_size=16,
        lr=3e-3,
        warmup=50,
        # every algorithmic task gets the algorithmic recipe, so `--tasks reverse,mqar` (or more seeds) can
        # be added to a default folder: the fingerprint covers them already
        task_train=_algo_train(ALGORITHMIC),
        lm={"train_len": 64, "eval_factors": [1, 2, 4, 8, 16], "eval_tokens": 32768, "blocks": 64},
        algorithmic=dict(_ALGO),
        task_options=dict(_TASK_OPTIONS),
        fit=FitConfig(val_every=100, lm_patience=5),
    )


def _full() -> ExperimentConfig:
    algo = [t for t in ALGORITHMIC]
    return ExperimentConfig(
        preset="full",
        tasks=["lm"] + algo,
        seeds=[0, 1, 2],
        randomized=["rope"],
        d_model=64,
        n_layers=2,
        n_heads=4,
        steps=4000,
        batch_size=16,
        lr=3e-3,
        warmup=50,
        task_train=_algo_train(algo),
        lm={"train_len": 64, "eval_factors": [1, 2, 4, 8, 16], "eval_tokens": 32768, "blocks": 64},
        algorithmic=dict(_ALGO),
        task_options=dict(_TASK_OPTIONS),
        fit=FitConfig(val_every=100, lm_patience=5, lr_grid=[2e-3, 1e-3, 3e-3]),
    )


#: preset name -> factory (a fresh config each call).
PRESETS = {"default": _default, "ci": _ci, "full": _full}


def preset(name: str, **overrides) -> ExperimentConfig:
    """A preset with some fields replaced (not yet validated)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
    cfg = PRESETS[name]()
    for k, v in overrides.items():
        if not hasattr(cfg, k):
            raise ValueError(f"unknown configuration key {k!r}")
        setattr(cfg, k, v)
    return cfg


