"""Fine-tuning at ``factor x L`` and the evaluation of the ``extend`` benchmark.

One fine-tuning run per (recipe, seed, rate): the model saved by ``relpos compare`` is loaded, the recipe put on
it (:func:`relpos.extend.recipes.apply_recipe`), and it is trained on windows of ``factor x L`` tokens of the
task's training split at a constant rate after a linear warm-up (Chen et al. 2023 fine-tune that way), so one run
passes every K of the grid: at each K the model is measured (:func:`measure`) and training goes on. Every recipe of
a seed reads the same batches (the seed fixes the data order).

:func:`measure` reads the **validation** split at the fine-tuning length (the loss the rate is chosen by) and the
**test** split at every evaluation length (the reported numbers): each window's mean loss and each window's mean
loss over its last quarter (the far positions of :func:`relpos.tasks.lm.far_loss`), per window, so the report can
bootstrap them paired.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

__all__ = ["measure", "load_source_model", "finetune_run", "eval_task", "finetune_task"]


def eval_task(cfg, train_len: int, eval_factors) -> object:
    """The compare folder's language-modelling task evaluated at ``eval_factors x train_len`` (test split)."""
    c = cfg.replace(lm={**{k: v for k, v in cfg.lm.items() if k not in ("eval_lengths", "eval_factors")},
                        "eval_factors": list(eval_factors)})
    return c.make_task("lm")


def finetune_task(cfg, train_len: int, factor: int) -> object:
    """The same corpus with ``train_len = factor x L``: its training windows and its validation windows at the
    fine-tuning length."""
    lm = {k: v for k, v in cfg.lm.items() if k not in ("eval_lengths", "eval_factors", "target_len", "blocks")}
    c = cfg.replace(lm={**lm, "train_len": train_len * factor, "eval_factors": [1]})
    return c.make_task("lm")


def _far_windows(ms, n: int) -> list[float]:
    """Each window's mean loss over its last quarter, from the position buckets' per-window losses."""
    from relpos.tasks.lm import FAR_FRACTION

    lo = round((1 - FAR_FRACTION) * n)
    num, den = None, 0
    for m in ms:
        if m.protocol != "position" or m.eval_len != n or m.bucket_end <= lo:
            continue
        w = m.bucket_end - max(m.bucket_start, lo)
        v = torch.tensor(m.per_example, dtype=torch.float64) * w
        num = v if num is None else num + v
        den += w
    return [round(float(x), 6) for x in num / den]


@torch.no_grad()
def measure(model, task, ft_task) -> dict:
    """``{"val_loss": validation loss (nats) at the fine-tuning length, "lengths": {str(n): {"loss", "far_loss",
    "windows": [...], "far": [...]}}}``: test window losses at every evaluation length of ``task``."""
    from relpos.compare.fitting import lm_validation_loss

    model.eval()
    x, y = ft_task.validation_batch()
    out = {"val_loss": lm_validation_loss(model, x, y), "lengths": {}}
    for n in task.eval_lengths:
        ms = task.evaluate_windows(model, n)
        win = next(m for m in ms if m.protocol == "window")
        far = _far_windows(ms, n)
        out["lengths"][str(n)] = {"loss": float(win.loss), "far_loss": sum(far) / len(far),
                                  "windows": list(win.per_example), "far": far}
    return out


def load_source_model(path, longest: int):
    """``(model, model_config)`` of a saved compare model, its config allowing ``longest`` positions.

    Raises:
        ValueError: a learned absolute table shorter than ``longest`` (it cannot be evaluated there).
    """
    from relpos.training import checkpoint
    from relpos.model import TransformerLM

    model, mcfg = checkpoint.load(path)
    if mcfg.max_len < longest + 1:
        big = mcfg.replace(max_len=longest + 1)
        try:
            wide = TransformerLM(big)
            wide.load_state_dict(model.state_dict())
        except RuntimeError:
            raise ValueError(f"{path}: the model's scheme {mcfg.scheme} holds {mcfg.max_len} positions, fewer than "
                             f"the longest evaluation length {longest}") from None
        model, mcfg = wide.eval(), big
    return model, mcfg


def finetune_run(model, mcfg, r, *, train_len: int, factor: int, lr: float, ks: list[int], warmup: int,
                 batch_size: int, weight_decay: float, seed: int, source, on_k: Callable[[int, object, float], None],
                 threads: int = 1) -> float:
    """Fine-tune a copy of ``model`` (recipe ``r`` put on it) and call ``on_k(k, model, seconds)`` at each ``k`` of
    ``ks`` (``k = 0``: before any step). Returns the training seconds.

    ``source``: a batch source of windows of ``factor x train_len`` tokens (``batch(step, micro)``).
    """
    from relpos.extend.recipes import apply_recipe
    from relpos.training.loop import Trainer, TrainConfig

    torch.set_num_threads(threads)
    steps = max(ks)
    tcfg = TrainConfig(steps=max(steps, 1), batch_size=batch_size, seq_len=train_len * factor, lr=lr,
                       warmup=min(warmup, max(steps, 1)), weight_decay=weight_decay, seed=seed, progress=False,
                       schedule="constant")
    tr = Trainer(mcfg, tcfg, source)
    tr.model.load_state_dict(model.state_dict())
    apply_recipe(tr.model, r, train_len, factor)
    secs = 0.0
    for k in sorted(set(ks)):
        t0 = time.perf_counter()
        while tr.step_count < k:
            tr.step()
        secs += time.perf_counter() - t0
        on_k(k, tr.model, secs)
    return secs
