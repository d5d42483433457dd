"""Training state in a checkpoint: the optimizer flattened to named tensors plus JSON, and its checks.

No pickle: AdamW's state dict becomes ``{"state.<param id>.<key>": tensor}`` (stored
as ``optimizer.safetensors``) plus the JSON-able rest (``param_groups`` and scalar
state), kept in ``config.json`` under ``extra.train.optimizer``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["optimizer_tensors", "restore_optimizer", "check_train_state"]


def optimizer_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, Tensor], dict]:
    """Flatten an optimizer state dict into named tensors plus JSON (no pickle)."""
    sd = opt.state_dict()
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, Any] = {}
    for pid, st in sd["state"].items():
        for k, v in st.items():
            if isinstance(v, Tensor):
                tensors[f"state.{pid}.{k}"] = v
            else:
                scalars[f"state.{pid}.{k}"] = v
    groups = []
    for g in sd["param_groups"]:
        groups.append({k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()})
    return tensors, {"param_groups": groups, "scalars": scalars}


def restore_optimizer(opt: torch.optim.Optimizer, tensors: dict[str, Tensor], meta: dict) -> None:
    """Inverse of :func:`optimizer_tensors`.

    Raises:
        ValueError: a state tensor names no parameter, has another shape than its
            parameter (AdamW's moments) or holds NaN/inf -- found here, not as a
            shape error at the first step or as a "diverged" loss later.
    """
    params = [p for g in opt.param_groups for p in g["params"]]
    state: dict[int, dict[str, Any]] = {}
    for name, v in tensors.items():
        _, pid, k = name.split(".", 2)
        i = int(pid)
        if not 0 <= i < len(params):
            raise ValueError(f"tensor {name!r} names parameter {i}; the model has {len(params)}")
        if v.dim() and tuple(v.shape) != tuple(params[i].shape):
            raise ValueError(f"tensor {name!r} has shape {tuple(v.shape)}, its parameter {tuple(params[i].shape)}")
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            raise ValueError(f"tensor {name!r} holds NaN or inf values")
        state.setdefault(i, {})[k] = v
    for name, v in meta.get("scalars", {}).items():
        _, pid, k = name.split(".", 2)
        state.setdefault(int(pid), {})[k] = v
    groups = [dict(g, betas=tuple(g["betas"])) if "betas" in g else dict(g) for g in meta["param_groups"]]
    opt.load_state_dict({"state": state, "param_groups": groups})


def check_train_state(train_meta: dict, where: str) -> tuple[int, list, dict]:
    """Validate ``extra.train`` of a training checkpoint; return ``(step, losses, optimizer meta)``.

    Args:
        train_meta: the ``extra.train`` dict.
        where: the file it came from, for messages.

    Raises:
        relpos.training.checkpoint.CheckpointError: a missing or malformed field, naming ``where``.
    """
    from relpos.training.checkpoint import CheckpointError

    step, losses, opt_meta = train_meta.get("step"), train_meta.get("losses"), train_meta.get("optimizer")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"{where}: training state is damaged: \"step\" must be an int >= 0")
    if not isinstance(losses, list) or len(losses) != step or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in losses):
        raise CheckpointError(
            f"{where}: training state is damaged: \"losses\" must list one number per step ({step})")
    if not isinstance(opt_meta, dict) or not isinstance(opt_meta.get("param_groups"), list):
        raise CheckpointError(
            f"{where}: training state is damaged: \"optimizer\" must hold the optimizer's param_groups")
    return step, losses, opt_meta
