"""First-order hand-written backwards: refuse ``create_graph=True`` by name.

relpos's fast paths (fused attention engines, the rows kernel, FIRE's piecewise form)
have hand-written backwards that are not themselves differentiable. PyTorch's
``once_differentiable`` returns a gradient *without* a graph when the incoming
gradient needs none (``torch.autograd.grad(out.sum(), q, create_graph=True)``), so a
gradient penalty built on it would silently miss its second-order part. This
decorator raises instead: a backward run with grad mode on (``create_graph=True``)
is refused with one line naming the function and what to use.
"""

from __future__ import annotations

import functools

import torch

__all__ = ["first_order"]


def first_order(backward):
    """Decorate ``torch.autograd.Function.backward``: refuse second derivatives by name.

    Example:
        >>> class Square(torch.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         ctx.save_for_backward(x)
        ...         return x * x
        ...     @staticmethod
        ...     @first_order
        ...     def backward(ctx, g):
        ...         (x,) = ctx.saved_tensors
        ...         return 2 * x * g
        >>> x = torch.tensor(3.0, requires_grad=True)
        >>> torch.autograd.grad(Square.apply(x), x)[0]
        tensor(6.)
    """

    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        if torch.is_grad_enabled():
            name = type(ctx).__name__.removesuffix("Backward").lstrip("_")
            raise RuntimeError(
                f"relpos: {name} has a first-order backward; second derivatives (create_graph=True) are "
                f"not supported on this path -- use impl=\"reference\" for them"
            )
        return backward(ctx, *grads)

    return wrapper
