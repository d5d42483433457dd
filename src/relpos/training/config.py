"""The settings and results of :func:`relpos.training.loop.train`: :class:`TrainConfig` (a flat, JSON-able dataclass),
:class:`TrainResult`, :class:`StepInfo` and :class:`TrainingDivergedError`.

>>> TrainConfig(steps=10, lr=1e-3).to_dict()["lr"]
0.001
>>> TrainConfig(steps=-1)
Traceback (most recent call last):
...
ValueError: steps must be in [0, 1099511627776], got -1
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from relpos.model import TransformerLM
from relpos.training.schedule import SCHEDULES
from relpos.validation import MAX_POSITIONS, check_bool, check_choice, check_float, check_int

__all__ = ["TrainConfig", "TrainResult", "StepInfo", "TrainingDivergedError", "MAX_STEPS"]

#: The most optimizer steps a TrainConfig accepts.
MAX_STEPS = 1 << 40



class TrainingDivergedError(ValueError):
    """A training step's loss became NaN or infinite; training stopped before using it."""


@dataclass
class TrainConfig:
    """Optimisation settings (JSON-able).

    Attributes:
        steps: optimizer steps.
        batch_size: rows of one global micro-batch (used when ``data`` is bytes).
        seq_len: tokens per row (used when ``data`` is bytes).
        lr: peak learning rate.
        min_lr_ratio: final learning rate as a fraction of ``lr``.
        schedule: ``"cosine"`` or ``"constant"`` (until a callback returns a
            :class:`~relpos.training.schedule.Cooldown`); see :mod:`relpos.training.schedule`.
        warmup: linear warm-up steps (from ``lr / warmup`` to ``lr``).
        weight_decay: AdamW decay of weight matrices (not of biases, norms,
            position-scheme parameters); ``decay="all"`` also decays biases and norms.
        grad_clip: clip the global gradient norm to this (0 = off).
        accum_steps: micro-batches per optimizer step.
        seed: seeds model init, data and dropout.
        ckpt_dir: checkpoint directory (None = no checkpoints).
        ckpt_every: also checkpoint every this many steps (0 = only at the end).
        resume: continue from the checkpoint in ``ckpt_dir`` if there is one.
        progress: progress bar; None = only when stderr is a terminal.
        log_every: steps between progress-bar updates of loss and tokens/s.
        device: "cpu", "cuda" or None (CUDA when available).
        beta1, beta2: AdamW betas.
    """

    steps: int = 200
    batch_size: int = 16
    seq_len: int = 128
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    schedule: str = "cosine"
    warmup: int = 20
    weight_decay: float = 0.1
    decay: str = "matrices"
    grad_clip: float = 1.0
    accum_steps: int = 1
    seed: int = 0
    ckpt_dir: str | None = None
    ckpt_every: int = 0
    resume: bool = False
    progress: bool | None = None
    log_every: int = 10
    device: str | None = None
    beta1: float = 0.9
    beta2: float = 0.95
    compile: bool = False  # torch.compile the whole model for training (off by default: benchmarks/train_step.py)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise TypeError (wrong type) or ValueError (wrong value) naming the offending field."""
        for name, lo in (("steps", 0), ("batch_size", 1), ("seq_len", 1), ("warmup", 0), ("accum_steps", 1),
                         ("ckpt_every", 0), ("log_every", 1)):
            check_int(name, getattr(self, name), lo, MAX_STEPS if name in ("steps", "warmup", "ckpt_every")
                      else MAX_POSITIONS)
        check_int("seed", self.seed, 0, 2**63 - 1)
        for name, lo, hi in (("lr", 0.0, None), ("min_lr_ratio", 0.0, 1.0), ("weight_decay", 0.0, None),
                             ("grad_clip", 0.0, None), ("beta1", 0.0, 1.0), ("beta2", 0.0, 1.0)):
            check_float(name, getattr(self, name), lo, hi)
        if self.ckpt_dir is not None and not isinstance(self.ckpt_dir, (str, Path)):
            raise TypeError(f"ckpt_dir must be a path or None, got {self.ckpt_dir!r}")
        check_bool("resume", self.resume)
        if (self.resume or self.ckpt_every) and self.ckpt_dir is None:
            raise ValueError("resume and ckpt_every need ckpt_dir")
        if self.progress is not None:
            check_bool("progress", self.progress)
        check_bool("compile", self.compile)
        check_choice("schedule", self.schedule, SCHEDULES)
        check_choice("decay", self.decay, ("matrices", "all"))
        if self.device is not None and self.device not in ("cpu", "cuda") and not str(self.device).startswith("cuda:"):
            raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or None, got {self.device!r}")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        if d["ckpt_dir"] is not None:
            d["ckpt_dir"] = str(d["ckpt_dir"])
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        fields = {f.name for f in dataclasses.fields(cls)}
        if set(d) - fields:
            raise ValueError(f"unknown train config field(s) {sorted(set(d) - fields)}; fields: {sorted(fields)}")
        return cls(**d)


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        model: the trained model (unwrapped, eval mode).
        losses: mean training loss of every optimizer step so far (including the
            steps of a resumed checkpoint).
        tokens_per_s: training throughput of this call (global, counted tokens
            of input, all processes).
        steps: optimizer steps completed.
        seconds: wall time of this call's training loop.
        seconds_before, cpu_seconds_before: wall and process CPU time of the training segments before this
            call, as a resumed checkpoint recorded them (0 without a resume).
    """

    model: TransformerLM
    losses: list[float]
    tokens_per_s: float
    steps: int
    seconds: float
    seconds_before: float = 0.0
    cpu_seconds_before: float = 0.0


@dataclass
class StepInfo:
    """Passed to ``callback`` after every optimizer step."""

    step: int  # steps completed
    loss: float
    lr: float
    tokens_per_s: float
    seconds: float
    model: nn.Module
