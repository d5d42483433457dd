"""Typed sub-configurations of a ``relpos compare`` sweep: one object per concern.

:class:`~relpos.compare.config.ExperimentConfig` keeps its flat fields (``cfg.lr``, ``cfg.lm``, ...): the
command line, ``config.json`` of every results folder and the fingerprint are written from them and stay as
they were. On top of them, each concern is one typed object:

* ``cfg.data`` -- :class:`DataSettings`: each task's data, problem lengths and evaluation lengths;
* ``cfg.model`` -- :class:`ModelSettings`: width, depth, heads, per-task overrides, scheme options;
* ``cfg.training`` -- :class:`TrainingSettings`: the training recipe and its per-task overrides;
* ``cfg.tuning`` -- :class:`~relpos.compare.fitting.FitConfig`: validation, early stopping, the fit gate
  and the learning-rate grid;
* ``cfg.evaluation`` -- :class:`EvaluationSettings`: what is measured on a trained model and nothing else
  (the RoPE scalings, passkey retrieval).

Reading ``cfg.training.lr`` is reading ``cfg.lr``, and ``cfg.training.lr = 1e-3`` sets it (the objects are
views of the flat fields, never copies that could drift); ``cfg.training = TrainingSettings(...)`` replaces
the whole concern; :meth:`ExperimentConfig.from_parts` builds a configuration from the five objects (the
presets are written that way). Each field's default here is the flat field's default in
:class:`~relpos.compare.config.ExperimentConfig` (config imports this module, so the values are written
twice; tests/experiments/test_settings.py fails when one side changes alone).

Training versus evaluation: everything but :class:`EvaluationSettings` decides how a model is trained (the
evaluation lengths too: they size learned position tables and the randomized-position range), so a results
folder can take new evaluations on its saved models without training again
(:mod:`relpos.compare.additions`).

Example:
    >>> from relpos.compare.config import ExperimentConfig
    >>> cfg = ExperimentConfig.from_parts(training=TrainingSettings(steps=50, lr=1e-3))
    >>> cfg.steps, cfg.training.lr
    (50, 0.001)
    >>> cfg.training.lr = 2e-3
    >>> cfg.lr
    0.002
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

__all__ = ["DataSettings", "ModelSettings", "TrainingSettings", "EvaluationSettings", "ROPE_VARIANTS", "PARTS",
           "EVALUATION_KEYS", "ConcernsMixin", "bound", "part_fields", "split_protocol"]

#: RoPE scalings evaluated on the trained RoPE model: variant name -> (scaling, fixed factor or None).
#: ``None`` means ``factor = eval sequence length / training sequence length`` (at least 1).
#: Dynamic NTK rescales itself with the current length; it takes the fixed factor 2 that is
#: its common setting (``factor * s / L - (factor - 1)``), otherwise it would equal "ntk" here.
ROPE_VARIANTS: dict[str, tuple[str, float | None]] = {
    "pi": ("linear", None),
    "ntk": ("ntk", None),
    "dynamic": ("dynamic", 2.0),
    "yarn": ("yarn", None),
}


@dataclasses.dataclass
class DataSettings:
    """What the models read.

    Attributes:
        lm: options of :class:`relpos.tasks.LanguageModelling` (``train_len``, ``eval_factors`` or
            ``eval_lengths``, ``eval_tokens``, ``train_bytes``, ``corpus``, ...).
        algorithmic: options shared by the algorithmic tasks (``train_len``, ``eval_factors``, ``n_eval``, ...).
        task_options: extra per-task options (e.g. ``{"copy": {"alphabet": 8}}``).
    """

    lm: dict = dataclasses.field(default_factory=lambda: {"train_len": 64, "eval_factors": [1, 2, 4, 8, 16]})
    algorithmic: dict = dataclasses.field(default_factory=lambda: {"train_len": 16, "eval_factors": [1, 2, 3, 4]})
    task_options: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ModelSettings:
    """The model of every run (the same for every scheme of a task).

    Attributes:
        d_model, n_layers, n_heads: model size.
        task_model: per-task overrides (``d_model``, ``n_layers``, ``n_heads``, ``d_ff``, ``init``).
        scheme_options: per-scheme encoding options, e.g. ``{"shaw": {"k": 16}}``.
        embed_scale: ``"auto"``, ``"sqrt_d"`` or ``"none"`` (see :class:`relpos.model.ModelConfig`).
        scheme_ranges: ``"train_len"`` (learned ranges from the training length) or ``"paper"``.
    """

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    task_model: dict = dataclasses.field(default_factory=dict)
    scheme_options: dict = dataclasses.field(default_factory=dict)
    embed_scale: str = "auto"
    scheme_ranges: str = "train_len"


@dataclasses.dataclass
class TrainingSettings:
    """The training recipe, shared by every task unless ``task_train`` overrides it for one.

    Attributes:
        steps, batch_size, lr, warmup, weight_decay: the shared recipe (language modelling, usually).
        task_train: per-task overrides (see :class:`~relpos.compare.config.ExperimentConfig`).
        random_positions_factor: randomized runs draw training positions from ``[0, factor * longest
            evaluation sequence)``.
    """

    steps: int = 200
    batch_size: int = 16
    lr: float = 3e-3
    warmup: int = 20
    weight_decay: float = 0.1
    task_train: dict = dataclasses.field(default_factory=dict)
    random_positions_factor: int = 1


@dataclasses.dataclass
class EvaluationSettings:
    """What is measured on a trained model, and nothing that changes the model.

    Attributes:
        rope_variants: RoPE scalings evaluated on the trained RoPE model (keys of :data:`ROPE_VARIANTS`).
        passkey: options of :class:`relpos.tasks.passkey.Passkey` for passkey retrieval on the language
            models (``{}``: off), e.g. ``{"n": 10}``.
    """

    rope_variants: list = dataclasses.field(default_factory=lambda: list(ROPE_VARIANTS))
    passkey: dict = dataclasses.field(default_factory=dict)


#: The sub-configuration of each concern (``tuning`` is the configuration's own ``fit``).
PARTS: dict[str, type] = {"data": DataSettings, "model": ModelSettings, "training": TrainingSettings,
                          "evaluation": EvaluationSettings}


def part_fields(cls: type) -> tuple[str, ...]:
    """The flat configuration fields a sub-configuration covers (its own field names)."""
    return tuple(f.name for f in dataclasses.fields(cls))


_BOUND: dict[type, type] = {}


def bound(cls: type, owner: Any):
    """A view of ``owner``'s flat fields as a ``cls``: an instance of a subclass of ``cls`` whose every field
    reads and writes ``owner``'s attribute of the same name (``dataclasses.asdict`` and ``repr`` work)."""
    sub = _BOUND.get(cls)
    if sub is None:
        ns: dict[str, Any] = {"__slots__": ("_owner",)}
        for name in part_fields(cls):
            ns[name] = property(lambda self, n=name: getattr(self._owner, n),
                                lambda self, v, n=name: setattr(self._owner, n, v))

        def __init__(self, owner):
            object.__setattr__(self, "_owner", owner)

        ns["__init__"] = __init__
        ns["__eq__"] = lambda self, other: (isinstance(other, cls)
                                            and dataclasses.asdict(self) == dataclasses.asdict(other))
        ns["__hash__"] = None
        sub = _BOUND[cls] = type(cls.__name__, (cls,), ns)
        sub.__qualname__ = cls.__qualname__
        sub.__doc__ = cls.__doc__
    return sub(owner)


#: Keys of a fingerprinted protocol (:meth:`ExperimentConfig.protocol`) that decide only how trained models are
#: evaluated: the fields of :class:`EvaluationSettings`. Every other key decides the training.
EVALUATION_KEYS: tuple[str, ...] = part_fields(EvaluationSettings)


def split_protocol(protocol: dict) -> tuple[dict, dict]:
    """``(training part, evaluation part)`` of a fingerprinted protocol (a folder's stored one, or
    :meth:`ExperimentConfig.protocol`); two configurations with equal training parts train the same models."""
    train = {k: v for k, v in protocol.items() if k not in EVALUATION_KEYS}
    return train, {k: protocol[k] for k in EVALUATION_KEYS if k in protocol}


def _part(name: str) -> property:
    cls = PARTS[name]

    def get(self):
        return bound(cls, self)

    def set_(self, value):
        if not isinstance(value, cls):
            raise TypeError(f"{name} must be a {cls.__name__}, got {type(value).__name__}")
        for f in part_fields(cls):
            setattr(self, f, copy.deepcopy(getattr(value, f)))

    return property(get, set_, doc=f"The {name} settings: a :class:`{cls.__name__}` view of the flat fields.")


class ConcernsMixin:
    """The typed views of :class:`~relpos.compare.config.ExperimentConfig` (see the module docstring)."""

    data = _part("data")
    model = _part("model")
    training = _part("training")
    evaluation = _part("evaluation")

    @property
    def tuning(self):
        """Validation, early stopping, the fit gate and the learning-rate grid: the configuration's ``fit``
        (a :class:`~relpos.compare.fitting.FitConfig`)."""
        return self.fit

    @tuning.setter
    def tuning(self, value) -> None:
        from relpos.compare.fitting import FitConfig

        if not isinstance(value, FitConfig):
            raise TypeError(f"tuning must be a FitConfig, got {type(value).__name__}")
        self.fit = copy.deepcopy(value)

    @classmethod
    def from_parts(cls, *, data: DataSettings | None = None, model: ModelSettings | None = None,
                   training: TrainingSettings | None = None, tuning=None,
                   evaluation: EvaluationSettings | None = None, **rest):
        """A configuration from one object per concern (each missing one at its defaults); ``rest``: the plan
        (``preset``, ``schemes``, ``tasks``, ``seeds``, ``randomized``) and execution fields."""
        cfg = cls(**rest)
        for name, value in (("data", data), ("model", model), ("training", training), ("tuning", tuning),
                            ("evaluation", evaluation)):
            if value is not None:
                setattr(cfg, name, value)
        return cfg
