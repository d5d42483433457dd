"""Randomized positional encodings: train on random, sorted, distinct positions.

Paper: Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
Generalization of Transformers", https://arxiv.org/abs/2305.16843

The idea: a model trained on sequences of length ``N`` only ever sees positions
``0 .. N - 1``, so at test length ``M > N`` it meets positions (and distances)
it has never seen. Instead, at training time, draw the ``N`` positions as a
sorted sample *without replacement* from ``[0, L)`` with ``L >= M`` the longest
length to be served; the order of tokens is kept, only the gaps change. At
evaluation the positions are the usual ``0 .. M - 1``.

This is not a scheme of its own but a way of feeding any scheme that is driven
by integer positions (``Encoding.integer_positions``): pass the sample as
``positions=`` to :func:`relpos.attention`, or as ``pos`` to
:meth:`Encoding.embed` for absolute schemes (a learned table then needs
``max_len >= L``). For relative schemes only the gaps between the sampled
positions matter.
"""

from __future__ import annotations

import torch
from torch import Tensor

from relpos.validation import check_int

__all__ = ["random_positions"]


def random_positions(
    batch_size: int,
    seq_len: int,
    max_position: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Sorted random positions without replacement (Ruoss et al. 2023).

    Each row is an independent uniformly random ``seq_len``-subset of
    ``{0, ..., max_position - 1}``, sorted increasingly.

    Args:
        batch_size: rows ``B`` (>= 1), one independent sample each.
        seq_len: positions per row ``N`` (>= 1, <= ``max_position``).
        max_position: exclusive upper bound ``L`` of the positions (>= 1); the
            longest sequence the model should later serve.
        generator: optional CPU ``torch.Generator`` for reproducibility (the
            sample is drawn on the CPU, then moved to ``device``).
        device: where the result lives.

    Returns:
        ``(B, N)`` int64, strictly increasing along each row, in ``[0, L)``.

    Raises:
        ValueError: ``seq_len > max_position`` or a non-positive size.
        TypeError: a size that is not an int.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> p = random_positions(2, 4, 10, generator=g)
        >>> p.shape, p.dtype, bool((p[:, 1:] > p[:, :-1]).all()), bool((p < 10).all())
        (torch.Size([2, 4]), torch.int64, True, True)
    """
    check_int("batch_size", batch_size, 1)
    check_int("seq_len", seq_len, 1)
    check_int("max_position", max_position, 1)
    if seq_len > max_position:
        raise ValueError(
            f"seq_len ({seq_len}) must be <= max_position ({max_position}): cannot draw {seq_len} distinct "
            f"positions from [0, {max_position})"
        )
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    # Random keys per candidate position; the N smallest give a uniform N-subset.
    keys = torch.rand(batch_size, max_position, generator=generator)  # (B, L)
    chosen = keys.topk(seq_len, dim=-1, largest=False, sorted=False).indices  # (B, N)
    return chosen.sort(dim=-1).values.to(device=device, dtype=torch.int64)
