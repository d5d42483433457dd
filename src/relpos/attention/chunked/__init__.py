"""Memory-efficient attention for every scheme (``impl="chunked"``).

Extra memory grows with ``N x block`` (or ``N x D``; ``N x rows`` for a scheme's
per-call score state, e.g. DeBERTa's ``q Kr^T`` over at most ``2S`` table rows), never
``N x N``, in the forward *and* the backward pass: every engine is a
:class:`torch.autograd.Function` that saves only ``q, k, v``, the output and one
log-sum-exp per row, and recomputes position terms block by block in backward.
Gradients reach every learned tensor of the scheme (tables, slopes, MLPs, and
tensors a scheme borrows from the model, such as DeBERTa's bound projections).

The implementation picks one engine per call: the first of :data:`ENGINES`
whose ``eligible(req)`` is true (:func:`engine_for`; logged at DEBUG level under
``relpos.attention`` and kept in :data:`last_engine`). Each serves the whole
request exactly -- they are strategies of this one implementation, not
fallbacks to another. Engines choose by the scheme's *capabilities*, never by
its name:

* :mod:`~relpos.attention.chunked.sdpa` -- no term inside attention;
* :mod:`~relpos.attention.chunked.regions` -- a Toeplitz bias (``toeplitz = True``),
  with the :meth:`~relpos.encodings.base.Encoding.saturation_distance` shortcut;
* :mod:`~relpos.attention.chunked.clipped` -- clipped tables
  (:meth:`~relpos.encodings.base.Encoding.clipped_tables`, Shaw);
* :mod:`~relpos.attention.chunked.relkey` -- relative keys
  (:meth:`~relpos.encodings.base.Encoding.relative_keys`, Transformer-XL);
* :mod:`~relpos.attention.chunked.keybias` -- a per-key score
  (:meth:`~relpos.encodings.base.Encoding.key_bias`, FoX);
* :mod:`~relpos.attention.chunked.piecewise` -- a bias piecewise linear in a normalised
  distance (:meth:`~relpos.encodings.base.Encoding.piecewise_bias`, FIRE past its
  threshold), with the compiled kernel;
* :mod:`~relpos.attention.chunked.blocks` -- everything else (always eligible), and
  every request with an ``attn_mask`` (it masks each block from it).

Dropout (``dropout_p > 0``) is refused by name: the engines recompute the
probabilities block by block in backward and would have to replay the same
dropout mask; use ``impl="dense"`` (or ``"auto"``, which then picks it).

An engine module defines ``NAME``, ``eligible(req) -> bool`` and
``run(req, q, k, tvals, lo) -> Tensor``; shared pieces are in
:mod:`~relpos.attention.chunked.kernels`. Whether ``impl="auto"`` prefers an engine
over ``"dense"`` is measured, not declared: :mod:`relpos.attention.auto` reads the
measured table (``python benchmarks/auto_table.py`` adds a new engine's rows).

Numerics: probabilities are formed with :func:`~relpos.attention.chunked.kernels.exp_`,
which clamps logits at -87 first: PyTorch's vectorised ``exp`` is ~100x slower on
inputs whose result is subnormal. Subnormals elsewhere (matmuls on tiny
probabilities, e.g. ALiBi far keys) are a CPU-wide cost that
``torch.set_flush_denormal(True)`` removes; ``relpos bench`` sets it (see
``benchmarks/README.md``).

Grouped-query attention (``k, v`` with fewer heads than ``q``): schemes with no
term inside attention (NoPE, the rotary family) run each set of query heads
against the shared key/value heads without copying them; schemes with per-head
terms get ``k, v`` expanded to one head per query head at the entry (a copy,
``O(B H N D)``: the engines index the heads of q and k together).

Block sizes: see :data:`BLOCK_BYTES` (tests lower :data:`FORCE_ROWS` to exercise many blocks).
"""

from __future__ import annotations

import dataclasses
import logging
from types import ModuleType

import torch
from torch import Tensor

from relpos.attention import Request
from relpos.attention.chunked import blocks, clipped, keybias, piecewise, regions, relkey, sdpa
from relpos.attention.chunked.kernels import toeplitz_terms
from relpos.attention.chunked.regions import saturation_distance
from relpos.offsets import offsets_range

__all__ = ["supports", "run", "engine_for", "engine", "ENGINES", "last_engine", "saturation_distance", "BLOCK_BYTES"]

log = logging.getLogger("relpos.attention")

#: Target size in bytes of one block of logits ``(B, H, rows, keys)`` in the
#: ``"blocks"`` engine and of the recomputation passes of ``"relkey"``.
BLOCK_BYTES = 8 * 2**20
#: Minimum / maximum query rows per block.
MIN_ROWS, MAX_ROWS = 16, 1024
#: Size of the masked diagonal squares of the causal staircase (``"regions"``).
DIAG_ROWS = 256
#: Working set of one block of the ``"regions"`` backward passes: heads per block and
#: target bytes of one ``(B, heads, rows, keys)`` tensor (small enough to stay in cache).
HEADS_PER_BLOCK = 2
HANKEL_BLOCK_BYTES = 2 * 2**20
#: Testing hook: force this many query rows per block (None = automatic).
FORCE_ROWS: int | None = None

#: The engines, in the order they are tried (the last one serves everything).
ENGINES: tuple[ModuleType, ...] = (sdpa, regions, clipped, relkey, keybias, piecewise, blocks)

#: Name of the engine the last call used (for tests, benchmarks and debugging).
last_engine: str | None = None


def supports(req: Request) -> str | None:
    """Every scheme, mode and device is served (``"blocks"`` covers all); dropout is not."""
    if req.dropout_p > 0:
        return (f"dropout_p={req.dropout_p} > 0 is not served by the chunked engines (their backward "
                f"recomputes the attention weights); use impl='dense'")
    return None


def engine(req: Request) -> ModuleType:
    """The engine module :func:`run` uses for this request (the first eligible one; ``"blocks"``
    for a request with an ``attn_mask``)."""
    if req.attn_mask is not None:
        return blocks
    for eng in ENGINES:
        if eng.eligible(req):
            return eng
    raise AssertionError("the 'blocks' engine is always eligible")  # pragma: no cover


def engine_for(req: Request) -> str:
    """Name of the engine :func:`run` uses: one of the ``NAME`` s of :data:`ENGINES`."""
    return engine(req).NAME


def run(req: Request) -> Tensor:
    from relpos.attention import check_finite

    check_finite(req)  # NaN/inf in q or k -> ValueError, never a NaN output
    return _run(req)


def _run(req: Request) -> Tensor:
    global last_engine
    from relpos.attention.dense import rotated_qk

    G = req.groups
    if G > 1:  # grouped-query attention (k, v with H / G heads)
        B, H, Nq, _ = req.q.shape
        if not (req.encoding.acts_on - {"embedding", "qk"}):
            # no per-head term: each set of query heads g, g + G, ... runs against the shared k, v (no copy)
            am = req.attn_mask
            outs = [_run(dataclasses.replace(  # (B, Hkv, Nq, Dv) each
                req, q=req.q[:, g::G], attn_mask=am if am is None or am.shape[1] == 1 else am[:, g::G]))
                for g in range(G)]
            return torch.stack(outs, 2).reshape(B, H, Nq, -1)
        # per-head position terms: the engines index the heads of q and k together, so k and v are
        # expanded (a copy, O(B H Nk D)); see the module docstring
        from relpos.attention.dense import expand_kv

        req = dataclasses.replace(req, k=expand_kv(req.k, G), v=expand_kv(req.v, G))

    q, k = rotated_qk(req)  # autograd handles the rotation (O(N D))
    eng = engine(req)
    B, H, Nq, Nk, D = req.shape
    log.debug("chunked: scheme=%s engine=%s B=%d H=%d Nq=%d Nk=%d causal=%s",
              req.encoding.name, eng.NAME, B, H, Nq, Nk, req.causal)
    last_engine = eng.NAME
    tvals, lo = None, -(req.q_offset + Nq - 1)  # offsets d = j - i run from lo to Nk - 1 - q_offset
    if eng is not sdpa and toeplitz_terms(req):
        offs = offsets_range(Nq, Nk, req.q_offset).to(q.device)
        tvals = req.encoding.relative_bias(offs)  # (H, Nq + Nk - 1), float32, autograd to the parameters
        if tvals.dim() != 2:
            raise RuntimeError(f"scheme {req.encoding.name!r}: relative_bias returned shape {tuple(tvals.shape)}")
    return eng.run(req, q, k, tvals, lo)
