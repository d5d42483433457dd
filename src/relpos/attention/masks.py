"""Validation of the mask and dropout arguments of :func:`relpos.attention` and the layers.

Conventions (all boolean masks in relpos): **True = attend**, as the boolean
``attn_mask`` of :func:`torch.nn.functional.scaled_dot_product_attention`.

* ``key_mask`` ``(B, Nk)``: True for a real key, False for a padding key. This is the
  *opposite* of :class:`torch.nn.MultiheadAttention`'s ``key_padding_mask`` (True =
  ignore); pass ``~key_padding_mask`` when converting from torch.
* ``attn_mask`` ``(B or 1, H or 1, Nq, Nk)``: True where query ``t`` may attend to
  key ``j``; combined (logical and) with ``causal`` and ``key_mask``.
* ``dropout_p``: probability of zeroing an attention weight (the kept ones are
  scaled by ``1 / (1 - p)``), as SDPA's ``dropout_p``.

The old name ``key_padding_mask`` (relpos's, True = a real key) is a deprecated
alias of ``key_mask``; it warns once per process.
"""

from __future__ import annotations

import math
import os
import sys
import warnings

import torch
from torch import Tensor

__all__ = ["resolve_key_mask", "check_key_mask", "check_attn_mask", "check_dropout_p"]

#: Deprecated names already warned about in this process.
_WARNED: set[str] = set()
_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # .../relpos/


def _user_stacklevel() -> int:
    """``stacklevel`` of the first frame outside relpos and ``torch.nn.modules`` (the user's call)."""
    try:
        level, f = 3, sys._getframe(3)  # stacklevel 1 is resolve_key_mask, 2 its caller, 3 the caller's caller
    except ValueError:  # pragma: no cover - a shallower stack
        return 2
    while f is not None and (f.f_code.co_filename.startswith(_PKG)
                             or f"torch{os.sep}nn{os.sep}modules" in f.f_code.co_filename):
        f, level = f.f_back, level + 1
    return level


def resolve_key_mask(fn: str, key_mask, old, old_name: str = "key_padding_mask"):
    """``key_mask``, or the deprecated ``old`` alias (same meaning: True = a real key), warning once.

    Raises:
        TypeError: both given.
    """
    if old is None:
        return key_mask
    if key_mask is not None:
        raise TypeError(f"{fn}() got both key_mask and its deprecated alias {old_name}; pass key_mask only "
                        f"(True = attend to that key)")
    if old_name not in _WARNED:
        _WARNED.add(old_name)
        warnings.warn(
            f"{fn}(): {old_name} is deprecated, use key_mask (same meaning in relpos: True = a real key to "
            f"attend to; note torch.nn.MultiheadAttention's key_padding_mask is the opposite, True = ignore)",
            FutureWarning, stacklevel=_user_stacklevel(),
        )
    return old


def check_key_mask(key_mask, B: int, Nk: int, device, name: str = "key_mask") -> Tensor | None:
    """A ``(B, Nk)`` bool tensor on ``device`` (True = a real key), or None; else a one-line error
    naming ``name`` (the argument the caller passed)."""
    if key_mask is None:
        return None
    if not isinstance(key_mask, Tensor) or key_mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor of shape (B, Nk), True = a real key to attend to")
    if tuple(key_mask.shape) != (B, Nk):
        raise ValueError(f"{name} must have shape (B, Nk) = ({B}, {Nk}), got {tuple(key_mask.shape)}")
    if key_mask.device != device:
        raise ValueError(f"{name} must be on q's device ({device}), got {key_mask.device}")
    return key_mask


def check_attn_mask(attn_mask, B: int, H: int, Nq: int, Nk: int, device) -> Tensor | None:
    """A bool ``(B or 1, H or 1, Nq, Nk)`` tensor on ``device`` (True = attend), or None; else a one-line error.

    Fewer leading dims broadcast as in SDPA: ``(Nq, Nk)`` and ``(H or 1, Nq, Nk)`` are
    accepted and returned as 4-d views.
    """
    if attn_mask is None:
        return None
    if not isinstance(attn_mask, Tensor) or attn_mask.dtype != torch.bool:
        got = attn_mask.dtype if isinstance(attn_mask, Tensor) else type(attn_mask).__name__
        raise TypeError(f"attn_mask must be a bool tensor of shape (B or 1, H or 1, Nq, Nk), True = attend "
                        f"(as SDPA's boolean attn_mask), got {got}")
    m = attn_mask
    if 2 <= m.dim() <= 4:
        m = m.reshape((1,) * (4 - m.dim()) + tuple(m.shape))
    if m.dim() != 4 or m.shape[0] not in (1, B) or m.shape[1] not in (1, H) or tuple(m.shape[2:]) != (Nq, Nk):
        raise ValueError(f"attn_mask must have shape (B or 1, H or 1, Nq, Nk) with B={B}, H={H}, Nq={Nq}, "
                         f"Nk={Nk}, got {tuple(attn_mask.shape)}")
    if m.device != device:
        raise ValueError(f"attn_mask must be on q's device ({device}), got {m.device}")
    return m


def check_dropout_p(dropout_p) -> float:
    """A float in ``[0, 1)``; else a one-line error."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) \
            or not math.isfinite(float(dropout_p)) or not 0.0 <= float(dropout_p) < 1.0:
        raise ValueError(f"dropout_p must be a number in [0, 1), got {dropout_p!r}")
    return float(dropout_p)
