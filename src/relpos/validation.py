"""Argument checks shared by every layer of relpos.

One rule everywhere: a value of the wrong *type* raises ``TypeError``; a value of the
right type outside its accepted range raises ``ValueError``. Every message names the
parameter and the accepted range, so a user can fix the call without reading code.

This module sits below everything else (it imports only the standard library and
torch) so that the maths, the schemes, the model and the CLI can all use it.

Example:
    >>> check_int("k", 4, lo=0)
    4
    >>> check_int("k", -1, lo=0)
    Traceback (most recent call last):
    ...
    ValueError: k must be >= 0, got -1
    >>> check_float("scale", float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: scale must be a finite number, got nan
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "MAX_POSITIONS",
    "MAX_TABLE",
    "check_bool",
    "check_choice",
    "check_float",
    "check_int",
    "check_int_tensor",
    "check_tensor",
]

#: The largest sequence length / position count relpos accepts anywhere (2**24).
#: Positions beyond this would make an N x N matrix that no machine holds, and a
#: table row count beyond it reaches the allocator with an unhelpful error.
MAX_POSITIONS = 1 << 24

#: The largest number of rows in a learned position table (clip distance k, buckets,
#: max_len of absolute tables). 2**20 rows x 64 dims is already 256 MiB of float32.
MAX_TABLE = 1 << 20


def check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """Return ``value`` if it is an int (not a bool) within ``[lo, hi]``.

    Raises:
        TypeError: ``value`` is not an int.
        ValueError: ``value`` is outside ``[lo, hi]``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if lo is not None and value < lo:
        if hi is not None:
            raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        if lo is not None:
            raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
        raise ValueError(f"{name} must be <= {hi}, got {value}")
    return value


def check_float(
    name: str,
    value: Any,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
) -> float:
    """Return ``float(value)`` if it is a finite real number within the stated range.

    ``lo_open``/``hi_open`` make a bound exclusive (``> lo`` rather than ``>= lo``).

    Raises:
        TypeError: ``value`` is not an int or float (bools are refused).
        ValueError: ``value`` is NaN, infinite, or outside the range.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    try:
        v = float(value)
    except OverflowError:
        raise ValueError(f"{name} must be a finite number, got an int too large for a float") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo}, got {value}")
    if hi is not None and (v >= hi if hi_open else v > hi):
        raise ValueError(f"{name} must be {'<' if hi_open else '<='} {hi}, got {value}")
    return v


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool (``"yes"``, 1 and None are refused)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {type(value).__name__}")
    return value


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """Return ``value`` if it is one of ``choices``.

    Raises:
        TypeError: ``value`` is not of the type of the choices (e.g. not a str).
        ValueError: ``value`` is not one of them.
    """
    choices = tuple(choices)
    if choices and not isinstance(value, type(choices[0])):
        raise TypeError(f"{name} must be a {type(choices[0]).__name__}, got {type(value).__name__}")
    if value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {listed}; got {value!r}")
    return value


def check_tensor(name: str, value: Any, ndim: int | None = None, *, floating: bool | None = None) -> Tensor:
    """Return ``value`` if it is a tensor with ``ndim`` dimensions and the right kind of dtype.

    Args:
        name: the parameter name used in messages.
        value: the object to check.
        ndim: the required number of dimensions, or None for any.
        floating: True to require a floating dtype, False to require an integer dtype,
            None for any.
    """
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if ndim is not None and value.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(value.shape)}")
    if floating is True and not value.dtype.is_floating_point:
        raise TypeError(f"{name} must have a floating dtype, got {value.dtype}")
    if floating is False and (
        value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool
    ):
        raise TypeError(f"{name} must have an integer dtype, got {value.dtype}")
    return value


def check_int_tensor(name: str, value: Any) -> Tensor:
    """Return ``value`` if it is a tensor of an integer dtype (any shape)."""
    return check_tensor(name, value, floating=False)
