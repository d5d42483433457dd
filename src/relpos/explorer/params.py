"""Parsing the page's string parameters, and rounding numbers for JSON.

Every parser takes the request's ``params`` dict, the parameter name and a
default, and raises :class:`~relpos.explorer.errors.ApiError` naming the
parameter when the value is missing, unreadable or out of range.
"""

from __future__ import annotations

import math

import torch

from relpos.explorer.errors import ApiError

__all__ = ["get_int", "get_float", "get_bool", "get_choice", "get_text", "sig", "tolist"]

_MAX_NUMBER_CHARS = 40  # a number written with more characters than this is refused unread


def sig(x: float, digits: int = 7) -> float | None:
    """Round to ``digits`` significant digits (float32 carries about 7); None for non-finite."""
    if not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}") + 0.0  # + 0.0 turns -0.0 into 0.0


def tolist(t: torch.Tensor, digits: int = 7) -> list:
    """A float tensor as nested lists of rounded Python floats."""
    flat = [sig(v, digits) for v in t.detach().double().reshape(-1).tolist()]
    if t.dim() == 0:
        return flat[0]
    out: list = flat
    for size in reversed(t.shape[1:]):
        out = [out[i : i + size] for i in range(0, len(out), size)]
    return out


def get_int(params: dict, name: str, default: int | None, lo: int, hi: int, *, cap: bool = False,
            unit: str | None = None) -> int:
    """An integer parameter in ``[lo, hi]`` (``cap=True``: above ``hi`` is a ``too_large`` error)."""
    raw = params.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ApiError(f"{name} is required", field=name)
        return default
    s = str(raw).strip()
    if len(s) > _MAX_NUMBER_CHARS:
        raise ApiError(f"{name} must be a whole number between {lo} and {hi}; got {len(s)} characters",
                       field=name, limit=hi)
    try:
        v = int(s)
    except ValueError:
        raise ApiError(f"{name} must be a whole number, got {s[:40]!r}", field=name) from None
    if v > hi and cap:
        raise ApiError(f"{name} = {v} is too large: the explorer accepts at most {hi}{' ' + unit if unit else ''}",
                       code="too_large",
                       field=name, limit=hi, unit=unit, value=v)
    if not lo <= v <= hi:
        raise ApiError(f"{name} must be between {lo} and {hi}, got {v}", field=name, limit=hi)
    return v


def get_float(params: dict, name: str, default: float | None) -> float | None:
    """A finite float parameter."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    s = str(raw).strip()
    if len(s) > _MAX_NUMBER_CHARS:
        raise ApiError(f"{name} must be a number of at most {_MAX_NUMBER_CHARS} characters", field=name)
    try:
        v = float(s)
    except ValueError:
        raise ApiError(f"{name} must be a number, got {s[:40]!r}", field=name) from None
    if not math.isfinite(v):
        raise ApiError(f"{name} must be a finite number, got {s!r}", field=name)
    return v


def get_bool(params: dict, name: str, default: bool) -> bool:
    """``true/false`` (also 1/0, yes/no, on/off)."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    s = str(raw).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise ApiError(f"{name} must be true or false, got {str(raw)[:40]!r}", field=name)


def get_choice(params: dict, name: str, default: str, choices) -> str:
    """One of ``choices``."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    if raw not in choices:
        raise ApiError(f"{name} must be one of {', '.join(map(str, choices))}; got {str(raw)[:40]!r}", field=name)
    return raw


def get_text(params: dict, name: str, default: str, max_chars: int) -> str:
    """A text of at most ``max_chars`` characters."""
    raw = params.get(name)
    text = default if raw is None else str(raw)
    if len(text) > max_chars:
        raise ApiError(f"the text is {len(text)} characters long; the explorer accepts at most {max_chars}",
                       code="too_large", field=name, limit=max_chars, unit="chars", value=len(text))
    return text
