"""Fit first: in-training validation, early stopping, the fit gate, learning-rate selection.

A length-extrapolation number means something only for a model that has learned
its training distribution. Every run of ``relpos compare`` is therefore trained
with a :class:`FitMonitor`, which validates on held-out in-distribution data
every ``val_every`` steps and stops training once the model is fitted:

* **Algorithmic tasks** -- exact match on ``n_val`` held-out examples, half of
  length ``L`` and half of lengths ``min_len..L`` (teacher-forced, which equals
  greedy exact match); the score is the weaker of the two halves. The run stops
  once the score has been ``>= target + stop_margin`` at ``confirm`` consecutive
  checks (3: the first hit plus two more checks) at ``target + stop_margin``
  (0.97): a little extra training for stability, so the gate is passed with room. ``steps`` is an upper bound, not a fixed count.
  A task trained at a constant rate may set ``cooldown_at`` (see
  :class:`FitMonitor`): once the score reaches it (the solution has formed), the
  rate decays linearly over ``cooldown`` times the steps so far and training
  stops at the end of that cooldown, or sooner by the rule above.
* **Language modelling** -- the loss on fixed validation windows of the
  training length. It has *flattened* when the best loss of the last
  ``patience`` checks is less than ``lm_tol`` (1 %) lower than the best loss
  before them. With ``lm_schedule="cosine"`` the run trains on a cosine
  schedule and stops once flattened. With ``lm_schedule="plateau"`` (the
  presets) it trains at a constant learning rate until the loss has flattened,
  then cools down (linear decay to ``min_lr_ratio``) over ``lm_cooldown`` times
  the steps trained so far, and stops. Flatness is judged at a constant rate
  because under a cosine it is confounded with the schedule: a 12,000-step
  cosine run of RoPE looked flat at step 3,000 (loss 1.452) while a 4,000-step
  one was still improving at its end (1.327).

The **fit gate** then decides whether a run may enter rankings and verdicts: an
algorithmic run is *fitted* when its validation exact match at ``L`` is
``>= target``; a language-modelling run is fitted when its validation loss
flattened within the step budget (with ``"plateau"``, before the last
cooldown that fits in the budget had to start). With ``keep_best`` the run keeps
the checkpoint of its best validation check (not the last: a copy run that
reached 1.000 and drifted to 0.938 keeps the 1.000 model), and the gate and the
choice of rate read that check; without it, the final model and the final check.
Either way the monitor records the step at which a run first passed the gate
(``first_pass_step``: learning speed).

**Equal tuning.** With ``lr_grid`` set (``fit.lr_grid``, or a task's own grid in ``task_train``), every
job of a task -- language modelling included, every scheme alike -- trains once at *every* rate of the
grid (:func:`lr_tries`), and keeps the try with the best validation score at ``L`` after all of them
(:func:`choose_try`): fitted tries first, then the higher score. Nothing stops at the first rate that
passes, so every scheme gets the same number of tries. The fit gate and the choice read the same score,
the validation set's: exact match at ``L`` on validation examples (algorithmic tasks; disjoint from the
test examples every table reports), or the validation loss at the training length and whether it
flattened (language modelling). Every try is recorded (``lr_tries``, with ``chosen``).

The fit gate therefore never reads the test set: an algorithmic run is *fitted* when its final
validation exact match at ``L`` is ``>= target``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from relpos.compare.views import VIEW_LM_TOLERANCE, fitted_views, metric_at, view_fitted  # noqa: F401 (re-exported)

__all__ = ["FitConfig", "FitMonitor", "lm_validation_loss", "lr_choices", "lr_tries", "choose_try", "metric_at",
           "view_fitted",
           "fitted_views", "DEFAULT_COOLDOWN", "VIEW_LM_TOLERANCE"]

#: Length of a ``cooldown_at`` cooldown (fraction of the steps before it) when a task does not set ``cooldown``.
DEFAULT_COOLDOWN = 0.5


@dataclasses.dataclass
class FitConfig:
    """How runs are validated, stopped and gated (part of the configuration fingerprint).

    Attributes:
        target: in-distribution exact match that counts as fitted (algorithmic tasks).
        stop_margin: an algorithmic run stops once validation reaches ``target + stop_margin``
            (capped at 1): training a little past the gate, so that the test at ``L`` is passed
            with room rather than on the edge.
        val_every: steps between validations.
        confirm: consecutive checks at ``>= target`` before an algorithmic run stops.
        lm_patience: checks over which the LM validation loss must improve.
        lm_tol: relative improvement below which the LM loss counts as flat.
        lm_schedule: ``"cosine"`` (stop once flat) or ``"plateau"`` (constant rate until flat,
            then a cooldown of ``lm_cooldown`` times the steps so far).
        lm_cooldown: length of the ``"plateau"`` cooldown as a fraction of the steps before it.
        lr_grid: learning rates tried in order, the task's own ``lr`` first when the grid holds it
            (empty: only the task's ``lr``). A task whose recipe names its own grid
            (``task_train[task]["lr_grid"]``, e.g. MQAR's) uses that one instead.
        early_stop: False trains every run for its full step budget.
        keep_best: keep the model of the best validation check (exact match at L, or the lowest LM
            validation loss; the later of equal checks) instead of the last one; the gate reads that
            check. Left out of the fingerprint when False, so folders from before it keep theirs.
    """

    target: float = 0.95
    stop_margin: float = 0.02
    val_every: int = 100
    confirm: int = 3
    lm_patience: int = 3
    lm_tol: float = 0.01
    lm_schedule: str = "cosine"
    lm_cooldown: float = 0.25
    lr_grid: list[float] = dataclasses.field(default_factory=list)
    early_stop: bool = True
    keep_best: bool = False

    def __post_init__(self) -> None:
        from relpos.validation import check_bool, check_choice, check_float, check_int

        check_float("fit.target", self.target, 0.0, 1.0)
        check_float("fit.stop_margin", self.stop_margin, 0.0, 1.0)
        check_int("fit.val_every", self.val_every, 1)
        check_int("fit.confirm", self.confirm, 1)
        check_int("fit.lm_patience", self.lm_patience, 1)
        check_float("fit.lm_tol", self.lm_tol, 0.0, 1.0)
        check_choice("fit.lm_schedule", self.lm_schedule, ("cosine", "plateau"))
        check_float("fit.lm_cooldown", self.lm_cooldown, 0.0, 1.0, lo_open=True)
        check_bool("fit.early_stop", self.early_stop)
        check_bool("fit.keep_best", self.keep_best)
        if isinstance(self.lr_grid, (str, bytes)) or not hasattr(self.lr_grid, "__iter__"):
            raise TypeError(f"fit.lr_grid must be a list of numbers, got {self.lr_grid!r}")
        self.lr_grid = [check_float("fit.lr_grid entries", v, 0.0, lo_open=True) for v in self.lr_grid]

    def criterion(self, kind: str) -> str:
        """The stopping rule in words (for the report)."""
        if kind == "lm":
            flat = (f"validation loss at the training length checked every {self.val_every} steps; flattened when "
                    f"the last {self.lm_patience} checks improve it by less than {self.lm_tol:.0%}")
            if self.lm_schedule == "plateau":
                return (flat + f", at a constant learning rate; then a linear cooldown over {self.lm_cooldown:.0%} "
                        "of the steps so far")
            return flat + "; stop then"
        return (f"validation exact match at lengths <= L checked every {self.val_every} steps; "
                f"stop after {self.confirm} consecutive checks >= {self.stop_at:g}")

    @property
    def stop_at(self) -> float:
        """Validation exact match at which an algorithmic run stops."""
        return min(1.0, self.target + self.stop_margin)


def lr_tries(grid: list[float], task_lr: float) -> list[float]:
    """The learning rates a job tries, in order: the grid, with the task's own rate moved to the front
    when the grid holds it (a task whose recipe names a rate tries that first); ``[task_lr]`` without a grid.

    Example:
        >>> lr_tries([2e-3, 1e-3, 3e-3], 3e-3)
        [0.003, 0.002, 0.001]
        >>> lr_tries([2e-3, 1e-3], 5e-3), lr_tries([], 5e-3)
        ([0.002, 0.001], [0.005])
    """
    grid = list(grid)
    if not grid:
        return [task_lr]
    return [task_lr, *(g for g in grid if g != task_lr)] if task_lr in grid else grid


def choose_try(tries: list[dict]) -> int:
    """Index of the try a job keeps, after all of them ran: a fitted try before one that is not, then the
    higher validation ``score`` (higher is better), then the higher ``token`` score (validation per-token
    accuracy at L, algorithmic tasks), then the earlier try. Reads validation only.

    Example:
        >>> choose_try([{"fitted": True, "score": 0.96}, {"fitted": True, "score": 1.0},
        ...             {"fitted": False, "score": 0.9}])
        1
        >>> choose_try([{"fitted": False, "score": -1.3}, {"fitted": True, "score": -1.4}])  # LM: -loss
        1
        >>> choose_try([{"fitted": True, "score": 1.0, "token": 1.0}, {"fitted": True, "score": 1.0, "token": 1.0}])
        0
    """
    if not tries:
        raise ValueError("choose_try needs at least one try")

    def key(i):
        t = tries[i]
        sc = t.get("score")
        sc = sc if isinstance(sc, (int, float)) and math.isfinite(sc) else -math.inf
        tok = t.get("token")
        tok = tok if isinstance(tok, (int, float)) and math.isfinite(tok) else -math.inf
        return (bool(t.get("fitted")), sc, tok, -i)

    return max(range(len(tries)), key=key)


def lr_choices(runs: list[dict]) -> list[str]:
    """One line per task whose jobs tried more than one learning rate: the rate each scheme kept.

    Example:
        >>> fit = lambda lr, n: {"train": {"fit": {"lr": lr, "lr_tries": [{"lr": 1e-3}] * n}}}
        >>> runs = [{"task": "mqar", "label": "nope", "variant": None, **fit(3e-3, 2)},
        ...         {"task": "mqar", "label": "nope", "variant": None, **fit(1e-3, 1)},
        ...         {"task": "mqar", "label": "rope", "variant": None, **fit(1e-3, 1)}]
        >>> lr_choices(runs)
        ['mqar: nope 0.001 x1, 0.003 x1; rope 0.001 x1']
    """
    kept: dict = {}
    multi = set()
    for r in runs:
        fit = (r.get("train") or {}).get("fit") or {}
        if r.get("variant") not in (None, "randomized") or fit.get("lr") is None:
            continue  # evaluation variants share their trained model's choice
        per = kept.setdefault(r["task"], {}).setdefault(r.get("label", r.get("scheme")), {})
        per[fit["lr"]] = per.get(fit["lr"], 0) + 1
        if len(fit.get("lr_tries") or []) > 1:
            multi.add(r["task"])
    return [f"{t}: " + "; ".join(f"{lab} " + ", ".join(f"{lr:g} x{n}" for lr, n in sorted(c.items()))
                                 for lab, c in kept[t].items()) for t in kept if t in multi]


def lm_validation_loss(model, x, y, *, max_tokens: int | None = None) -> float:
    """Mean next-token loss (nats) of ``model`` on ``x, y`` (``(W, N)`` int64; ``-100`` targets do not count).

    Rows go through in chunks of at most ``max_tokens`` tokens (default
    :data:`relpos.tasks.base.VALIDATION_TOKENS`) and the losses are summed in float64: the same value
    as one pass up to float32 rounding, in about two thirds of the time at the full preset's 512 windows.
    """
    import torch
    import torch.nn.functional as F

    from relpos.tasks.base import VALIDATION_TOKENS

    rows = max(1, (max_tokens or VALIDATION_TOKENS) // max(x.shape[1], 1))
    total, count = torch.zeros((), dtype=torch.float64), 0
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            dev = next(model.parameters()).device
            for s in range(0, x.shape[0], rows):
                logits = model(x[s : s + rows].to(dev)).float()  # (b, N, V)
                yb = y[s : s + rows].to(dev).reshape(-1)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb, reduction="sum")
                total += loss.double().cpu()
                count += int((yb != -100).sum())
    finally:
        model.train(was)
    if not count:
        raise ValueError("lm_validation_loss: y has no target to score (every entry is -100)")
    return float(total / count)


class SampledPositions:
    """``model`` run at one fixed, sorted draw of ``width`` positions from ``[0, R)``: how a
    randomized-position model sees its inputs in training. Inputs shorter than ``width`` use a
    prefix of the draw (greedy decoding).

    Everything else (``parameters``, ``train``, ``eval``, ``training``) is the model's own, except
    cached decoding (``generate``, ``step``): it would run at ``0..N-1``.
    """

    def __init__(self, model, R: int, width: int, seed: int = 0) -> None:
        import torch

        self.model = model
        g = torch.Generator().manual_seed(int(seed) & 0x7FFFFFFF)
        self.pos = torch.randperm(int(R), generator=g)[: min(width, int(R))].sort().values  # (width,)

    #: Cached decoding would run at 0..N-1, not at the draw: hidden, so greedy decoding falls back to
    #: full forward passes through :meth:`__call__`.
    _HIDDEN = frozenset({"generate", "step", "init_cache", "forward_with_memory"})

    def __getattr__(self, name):
        if name in SampledPositions._HIDDEN:
            raise AttributeError(f"{name!r} is not available at sampled positions (it would decode at 0..N-1)")
        return getattr(self.model, name)

    def __call__(self, idx):
        return self.model(idx, positions=self.pos[: idx.shape[1]].to(idx.device))


def _as_trained(model, width: int):
    """The model as training feeds it: at sampled positions when it was trained with randomized ones."""
    R = getattr(getattr(model, "cfg", None), "random_positions", None)
    return SampledPositions(model, R, width, seed=width) if R else model


class FitMonitor:
    """A training callback that validates, keeps the history, and says when to stop.

    A model trained with randomized positions is validated at one fixed sampled draw of
    positions, as it was trained (Ruoss et al. 2023 sample at evaluation too); validating it at
    ``0..N-1`` would gate it on positions it never saw together.

    Args:
        task: the task being trained (``task.kind`` is ``"lm"`` or ``"algorithmic"``).
        fit: the :class:`FitConfig`.
        steps: the step budget (a validation also runs at the last step).
        progress: optional ``progress(step)`` called after every step.
        cooldown_at: algorithmic tasks on a constant rate: the validation exact match at which a
            linear cooldown starts (None: never; the task's ``task_train["cooldown_at"]``).
        cooldown: that cooldown's length as a fraction of the steps before it.
    """

    def __init__(self, task, fit: FitConfig, steps: int, progress=None, *, cooldown_at: float | None = None,
                 cooldown: float = DEFAULT_COOLDOWN) -> None:
        self.task, self.fit, self.steps, self.progress = task, fit, steps, progress
        self.cooldown_at, self.cooldown = cooldown_at, cooldown
        self.kind = task.kind
        self.x, self.y = task.validation_batch()
        self.history: list[dict[str, Any]] = []
        self.stopped_early = False
        self.flat = False
        self._streak = 0
        self.cooldown_from: int | None = None  # the step the cooldown began ("plateau" or cooldown_at)
        self.end: int | None = None  # the step the cooldown ends
        self.first_pass: int | None = None  # the first check at which the gate passed
        self.best_at: int | None = None  # with keep_best: the index in history of the kept check
        self._best_state: dict | None = None  # and the model's parameters then (on the CPU)

    #: The decision state a checkpoint keeps (:meth:`state_dict`): with it, a resumed training run decides as
    #: the uninterrupted one would have.
    _STATE = ("history", "stopped_early", "flat", "_streak", "cooldown_from", "end", "first_pass", "best_at")

    def state_dict(self) -> tuple[dict, dict]:
        """``(JSON dict, {name: tensor})``: the checks so far, the decisions taken, and the kept best parameters
        (:meth:`relpos.training.loop.Trainer.save` writes both into a training checkpoint)."""
        meta = {k: getattr(self, k) for k in self._STATE}
        meta["best_keys"] = None if self._best_state is None else list(self._best_state)
        return meta, dict(self._best_state or {})

    def load_state_dict(self, meta: dict, tensors: dict) -> None:
        """The inverse of :meth:`state_dict` (a resumed run's monitor; raises ``ValueError`` on a damaged state)."""
        missing = [k for k in (*self._STATE, "best_keys") if k not in meta]
        if missing or not isinstance(meta["history"], list):
            raise ValueError(f"the fit monitor's saved state is damaged: missing {missing or ['history (a list)']}")
        keys = meta["best_keys"]
        if keys is not None and set(keys) != set(tensors):
            raise ValueError("the fit monitor's saved best parameters do not match their names "
                             f"({len(tensors)} tensors, {len(keys)} names)")
        for k in self._STATE:
            setattr(self, k, meta[k])
        self._best_state = None if keys is None else {k: tensors[k] for k in keys}

    def score(self, model) -> dict[str, float]:
        model = _as_trained(model, self.x.shape[1])
        if self.kind == "lm":
            return {"val_loss": lm_validation_loss(model, self.x, self.y)}
        from relpos.tasks.algorithmic import validation_score

        k = self.task.n_val_at_l
        at_l, tok = validation_score(model, self.x[:k], self.y[:k])
        rest = validation_score(model, self.x[k:], self.y[k:])[0] if k < self.x.shape[0] else at_l
        # the weaker of "at L" and "at lengths <= L": both must pass
        return {"val_exact": min(at_l, rest), "val_exact_at_L": at_l, "val_token_accuracy_at_L": tok}

    def __call__(self, info):
        """Validate when due; True stops training, a :class:`~relpos.training.schedule.Cooldown` starts the cooldown."""
        if self.progress is not None:
            self.progress(int(info.step))
        step = int(info.step)
        if step % self.fit.val_every and step not in (self.steps, self.end):
            return False
        rec = {"step": step, "train_loss": float(info.loss), **self.score(info.model)}
        self.history.append(rec)
        if self.fit.keep_best:
            self._keep_if_best(info.model)
        out = self._decide(step)
        if self.first_pass is None and (self.flat if self.kind == "lm" else self._gate(rec) >= self.fit.target):
            self.first_pass = step
        return out

    def _decide(self, step: int):
        if self.kind == "lm" and self.fit.lm_schedule == "plateau":
            return self._plateau(step)
        stop = self._fitted_now()
        if stop and self.fit.early_stop and step < self.steps:
            self.stopped_early = True
            return True
        return self._cool_when_learned(step) if self.cooldown_at is not None else False

    def _gate(self, rec: dict) -> float:
        """The score the gate and the choice of rate read from one check (higher is better): validation exact
        match at L, or minus the LM validation loss."""
        v = -rec["val_loss"] if self.kind == "lm" else rec.get("val_exact_at_L", rec["val_exact"])
        return v if math.isfinite(v) else -math.inf

    def _keep_if_best(self, model) -> None:
        """Remember the model of the latest check when it is at least as good as the best so far."""
        i = len(self.history) - 1
        if self.best_at is not None and self._gate(self.history[i]) < self._gate(self.history[self.best_at]):
            return
        self.best_at = i
        sd = getattr(model, "state_dict", None)
        self._best_state = ({k: v.detach().to("cpu", copy=True) for k, v in sd().items()} if callable(sd) else None)

    def restore_best(self, model) -> bool:
        """With ``keep_best``: load the kept check's parameters into ``model`` (True when something was
        loaded; False without keep_best, without a check, or when the kept check is the last one)."""
        if not self.fit.keep_best or self._best_state is None or self.best_at == len(self.history) - 1:
            return False
        model.load_state_dict(self._best_state)
        return True

    def _kept(self) -> dict:
        """The check the model kept comes from: the best (keep_best) or the last."""
        return self.history[self.best_at if self.fit.keep_best and self.best_at is not None else -1]

    def _cool_when_learned(self, step: int):
        """Start the cooldown once the exact match reaches ``cooldown_at``; training stops at its end."""
        if self.cooldown_from is None:
            if step < self.steps and self.history[-1]["val_exact"] >= self.cooldown_at:
                return self._start_cooldown(step, self.cooldown)
            return False
        return self._cooling(step)

    def _plateau(self, step: int):
        """Constant rate until flat (or until the last cooldown that fits must start), then the cooldown."""
        if self.cooldown_from is not None:
            return self._cooling(step)
        self.flat = self.flat or self._flat_now()
        last_start = int(self.steps / (1.0 + self.fit.lm_cooldown))  # a cooldown from here just fits
        if step < self.steps and ((self.flat and self.fit.early_stop) or step >= last_start):
            return self._start_cooldown(step, self.fit.lm_cooldown)
        return False

    def _start_cooldown(self, step: int, fraction: float):
        """A cooldown over ``fraction`` of the steps so far (within the budget), recorded in the history."""
        from relpos.training.schedule import Cooldown

        length = max(1, min(self.steps - step, round(fraction * step)))
        self.cooldown_from, self.end = step, step + length
        self.history[-1]["cooldown_steps"] = length
        return Cooldown(length)

    def _cooling(self, step: int) -> bool:
        """During a cooldown: training stops at its end (early, if that is before the budget)."""
        self.stopped_early = self.stopped_early or (step == self.end and step < self.steps)
        return False

    def _flat_now(self) -> bool:
        p = self.fit.lm_patience
        losses = [h["val_loss"] for h in self.history]
        if len(losses) <= p or not all(math.isfinite(v) for v in losses[-p:]):
            return False
        return min(losses[-p:]) > min(losses[:-p]) * (1.0 - self.fit.lm_tol)

    def _fitted_now(self) -> bool:
        if self.kind == "lm":
            self.flat = self._flat_now()
            return self.flat
        last = self.history[-1]["val_exact"]
        self._streak = self._streak + 1 if last >= self.fit.stop_at else 0
        return self._streak >= self.fit.confirm

    def best_score(self) -> float:
        """Higher is better: the kept check's validation exact match at L, or minus its LM validation loss
        (the kept check: the best with ``keep_best``, else the last, as the model kept is)."""
        if not self.history:
            return -math.inf
        return self._gate(self._kept())

    def token_score(self) -> float | None:
        """The kept check's validation per-token accuracy at L (algorithmic tasks; None for language modelling)."""
        if self.kind == "lm" or not self.history:
            return None
        return self._kept().get("val_token_accuracy_at_L")

    def fitted_by_validation(self) -> bool:
        """The fit gate, on validation only: the LM loss flattened, or the kept check's validation exact match
        at L reached the target."""
        if self.kind == "lm":
            return self.flat
        return bool(self.history) and self.best_score() >= self.fit.target

    def summary(self) -> dict[str, Any]:
        return {
            "criterion": self.fit.criterion(self.kind),
            "stopped_early": self.stopped_early,
            **({"cooldown_from": self.cooldown_from} if self.cooldown_from is not None else {}),
            "steps_run": self.history[-1]["step"] if self.history else 0,
            "first_pass_step": self.first_pass,
            **({"kept_step": self._kept()["step"]} if self.fit.keep_best and self.history else {}),
            "budget": self.steps,
            "history": self.history,
        }
