"""Positions and packed documents for the bridge's attention function (see :mod:`relpos.hf`).

The model's ``position_ids`` (B, Nq) are the positions the bridge hands to the
scheme, as the model's own RoPE would use them. Without cached keys (a training
step, a prefill), a place where the positions do not go up by one starts a new
document (transformers' rule for padding-free packing, ``find_packed_sequence_indices``);
a row whose real tokens span several documents is *packed*: each document
attends only within itself (one :func:`relpos.attention` call per document, as
if it were alone in its row). With cached keys (decoding), the cached keys are
taken to continue up to the new tokens' positions (key ``j`` at
``position_ids[:, 0] - (Nk - Nq) + j``): a cache that was filled by a packed
prefill is refused by name, as are new tokens whose positions do not go up by one.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

__all__ = ["document_ids", "plan_positions", "PACKED_FLAG"]

#: attribute set on a transformers cache object filled by a packed prefill (its later steps are refused).
PACKED_FLAG = "_relpos_packed_documents"


def document_ids(position_ids: Tensor) -> Tensor:
    """``(B, N)`` document index of each token: a new document wherever the position does not go up by one."""
    first = position_ids[:, :1] - 1
    return (torch.diff(position_ids, prepend=first, dim=-1) != 1).cumsum(-1)


def _packed_rows(docs: Tensor, real: Tensor | None) -> Tensor:
    """``(B,)`` True where a row's real tokens lie in more than one document."""
    big = torch.iinfo(docs.dtype).max
    lo = docs.masked_fill(~real, big).amin(-1) if real is not None else docs[:, 0]
    hi = docs.masked_fill(~real, -1).amax(-1) if real is not None else docs[:, -1]
    return hi > lo


def plan_positions(module, position_ids: Tensor | None, kpm: Tensor | None, B: int, Nq: int, Nk: int):
    """Key positions ``(B, Nk)`` (or None: token indices) and the packed documents.

    Returns:
        ``(positions, docs)``: ``docs`` is None, or ``(B, Nk)`` document ids when some row is packed.

    Raises:
        ValueError: positions the bridge cannot serve (named): not ``(B or 1, Nq)``, a packed prefill continued
            from the cache, or new tokens with a cache whose positions do not go up by one.
    """
    if position_ids is None:
        return None, None
    if position_ids.dim() != 2 or position_ids.shape[1] != Nq or position_ids.shape[0] not in (1, B):
        raise ValueError(f"the relpos bridge takes position_ids of shape (batch, {Nq}), got "
                         f"{tuple(position_ids.shape)} (multi-axis positions are not served)")
    pid = position_ids.to(torch.long).expand(B, Nq)
    ref = getattr(module, "_relpos_cache_ref", None)
    cache = ref() if ref is not None else None
    if Nq == Nk:  # no cached keys: positions as given, restarts are document boundaries
        docs = document_ids(pid)
        if not bool(_packed_rows(docs, kpm).any()):
            return pid, None
        if cache is not None:
            try:
                setattr(cache, PACKED_FLAG, True)
            except AttributeError:  # pragma: no cover - a cache without attributes: refuse now instead
                raise ValueError("the relpos bridge serves packed documents (position_ids that restart) only "
                                 "without a cache: pass use_cache=False") from None
        return pid, docs
    if cache is not None and getattr(cache, PACKED_FLAG, False):
        raise ValueError("the relpos bridge cannot continue a cache filled with packed documents (position_ids that "
                         "restart): decode each document in its own row")
    if Nq > 1 and bool((torch.diff(pid, dim=-1) != 1).any()):
        raise ValueError("the relpos bridge needs the position_ids of new tokens after cached ones to go up by one")
    kpos = pid[:, :1] - (Nk - Nq) + torch.arange(Nk, device=pid.device)
    neg = kpos < 0
    if bool(neg.any()):
        if kpm is None or bool((neg & kpm).any()):
            raise ValueError("the relpos bridge reads cached keys as positions up to the new tokens' position_ids; "
                             "these give a real cached key a negative position")
        kpos = kpos.clamp_min(0)  # padding keys only (left padding in generate): masked anyway
    return kpos, None


def remember_cache(module, cache) -> None:
    """Keep a weak reference to the layer's cache for the current call (read by :func:`plan_positions`)."""
    try:
        module._relpos_cache_ref = weakref.ref(cache) if cache is not None else None
    except TypeError:  # pragma: no cover - a cache that cannot be weakly referenced
        module._relpos_cache_ref = None
