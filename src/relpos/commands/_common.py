"""Argument checks shared by the command modules (one clear message per bad flag).

Example:
    >>> check_device("cpu")
    'cpu'
    >>> check_device("nosuch")
    Traceback (most recent call last):
    ...
    ValueError: --device must be cpu, cuda or cuda:N, got 'nosuch'
"""

from __future__ import annotations

import argparse
import re

__all__ = ["check_device"]

_DEVICE_RE = re.compile(r"^(cpu|cuda(:\d{1,4})?)$")


def check_device(value: str | None, flag: str = "--device") -> str | None:
    """Return ``value`` if it names a device this machine has (None: the default).

    Raises:
        ValueError: an unknown device name, ``cuda`` without a CUDA GPU, or a
            GPU index this machine does not have.
    """
    if value is None:
        return None
    if not isinstance(value, str) or not _DEVICE_RE.match(value):
        raise ValueError(f"{flag} must be cpu, cuda or cuda:N, got {value!r}")
    if value.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"{flag} {value}: this machine has no usable CUDA GPU (torch.cuda.is_available() is "
                             f"False); use {flag} cpu")
        n = torch.cuda.device_count()
        if ":" in value and int(value.split(":")[1]) >= n:
            raise ValueError(f"{flag} {value}: this machine has {n} CUDA device(s) (cuda:0..cuda:{n - 1})")
    return value


def comma_list(kind):
    """An argparse ``type``: comma-separated values of ``kind`` (empty entries skipped), one line naming a bad one."""
    def parse(s: str):
        out = []
        for x in (x.strip() for x in s.split(",")):
            if not x:
                continue
            try:
                out.append(kind(x))
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__}s, got {x!r}") from None
        return out

    return parse
