"""``impl="auto"``: the fastest correct implementation for the device, shape and mode.

The rules (from ``relpos bench`` measurements, see ``benchmarks/README.md``):

* CUDA: ``"flex"`` (a compiled, fused kernel) for every scheme it can express,
  except schemes with no term inside attention, which go to ``"dense"`` (plain
  fused SDPA); ``"chunked"`` for value-side terms (Shaw's value table) on long
  sequences, ``"dense"`` on short ones.
* CPU: FlexAttention is not fused there (and has no backward), so ``"flex"`` is
  never picked. Schemes with no term inside attention (NoPE, RoPE, xPos, absolute
  embeddings) use ``"dense"`` (the fused SDPA kernel; ``"chunked"`` would make
  the same call). Everything else uses ``"chunked"``, which measured faster
  than ``"dense"`` from ``N = 256`` up, in training and inference, and keeps
  memory ``O(N)``; problems under :data:`SMALL_PAIRS` query-key pairs per head
  (e.g. ``N < 256``) use ``"dense"``, where its lower per-call overhead wins.

The pick is logged at DEBUG level (logger ``relpos.attention``), returned by
:func:`choose` and kept in :data:`last_choice` (read by ``relpos bench``).
"""

from __future__ import annotations

import importlib
import logging

from torch import Tensor

from relpos.attention import Request, UnsupportedError

__all__ = ["supports", "run", "choose", "last_choice", "SMALL_PAIRS", "MID_PAIRS", "CUDA_DENSE_VALUE_PAIRS"]

log = logging.getLogger("relpos.attention")

#: Below this many (query, key) pairs per head, CPU requests use ``"dense"`` (measured
#: crossover: at N = 128 with a batch of 16, dense is up to 1.5x faster; at N = 256 they
#: are even, and from N = 512 up chunked wins in time and memory).
SMALL_PAIRS = 256 * 256
#: Below their ``DENSE_BELOW_PAIRS`` pairs, CPU requests also use ``"dense"``: each
#: chunked engine states its own crossover. With a model-sized batch (B=4, H=4, D=32,
#: training) the "regions", "relkey" and "blocks" engines measured 1.2-3x slower than
#: dense at N = 256 and 512 for KERPLE, Transformer-XL and FIRE, and 1.6-3x faster from
#: N = 1024 (their crossover is this value); the clipped-table engine wins from N = 256.
MID_PAIRS = 768 * 768
#: On CUDA, value-side schemes use ``"dense"`` up to this many pairs, else ``"chunked"``.
CUDA_DENSE_VALUE_PAIRS = 2048 * 2048

#: The implementation the last call picked (for benchmarks and debugging).
last_choice: str | None = None


def supports(req: Request) -> str | None:
    return None


def _module(name: str):
    from relpos.attention import IMPLS

    return importlib.import_module(IMPLS[name])


def choose(req: Request, *, device_type: str | None = None) -> str:
    """Name of the implementation :func:`run` uses for this request.

    Args:
        req: the request.
        device_type: decide as if the tensors were on this device type
            (default: ``req.q.device.type``).
    """
    enc = req.encoding
    B, H, Nq, Nk, D = req.shape
    inside = enc.acts_on - {"embedding", "qk"}
    pairs = Nq * Nk
    if (device_type or req.q.device.type) == "cuda":
        if not inside:
            return "dense"
        if "value" in inside:
            return "dense" if pairs <= CUDA_DENSE_VALUE_PAIRS else "chunked"
        if _module("flex").expressible(req) is None:
            return "flex"
        return "chunked"
    if not inside or pairs < SMALL_PAIRS:
        return "dense"
    if pairs < _module("chunked").engine(req).DENSE_BELOW_PAIRS:
        return "dense"
    return "chunked"


def run(req: Request) -> Tensor:
    global last_choice
    name = choose(req)
    mod = _module(name)
    reason = mod.supports(req)
    if reason:  # pragma: no cover - choose() only picks implementations that serve the request
        raise UnsupportedError(f"auto picked {name!r}, which cannot serve this request: {reason}")
    last_choice = name
    B, H, Nq, Nk, _ = req.shape
    log.debug("auto: scheme=%s device=%s Nq=%d Nk=%d grad=%s -> %s", req.encoding.name, req.q.device.type,
              Nq, Nk, req.q.requires_grad, name)
    return mod.run(req)
