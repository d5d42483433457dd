"""``impl="auto"``: the fastest correct implementation for the device, shape and mode.

CPU: decided from measurements of this library, the table
``relpos/data/auto_table.json`` (measured at ``(1, 8, N, 64)``), written by
``python benchmarks/auto_table.py`` (its command, machine and load are recorded in the
file; the measurement is :mod:`relpos.bench.calibrate`), or the table measured at the
head width nearest the request's and, among those, the batch nearest its (``auto_table_d16.json``:
``(16, 4, N, 16)``, the compare presets' shape, where per-call overhead moves several picks;
``auto_table_d16_b4.json``: ``(4, 4, N, 16)``, their N = 256 cells). Each cell says which of ``"dense"`` and
``"chunked"`` was faster for one scheme (registry name) and chunked engine (the
capability class the request falls in), causal or bidirectional, forward or
forward+backward, at each measured length. A request is looked up by

* its scheme and engine (``"deberta/blocks/bidirectional/fwd+bwd"``), else the
  engine's majority row (``"*/blocks/..."``: a scheme or request -- padding,
  explicit positions -- with no row of its own);
* its mode: ``fwd+bwd`` when autograd is on and q, k, v or a scheme parameter
  requires a gradient, else ``fwd``;
* its length bucket: the measured ``N`` nearest (in log scale) to the equivalent
  length ``sqrt(B * H * Nq * Nk / (B0 * H0))`` at the table's batch ``B0`` and
  heads ``H0`` (so a batched model call of the same work reads the same cell;
  one decoding step is a tiny problem). Beyond the longest measured ``N`` the
  longest bucket applies.

Schemes with no term inside attention (NoPE, RoPE, xPos) use ``"dense"``: it is the
fused SDPA call that ``"chunked"`` would also make. With no table (or no row):
``"dense"`` below :data:`MID_PAIRS` pairs per head, ``"chunked"`` from it. Whatever
the table says, ``"dense"`` is never picked where one ``(B, H, Nq, Nk)`` float32
tensor would pass :data:`DENSE_MAX_BYTES` (the table's benchmark never times it
there). Where that tensor would take at least :data:`LARGE_DENSE_BYTES` and the table's cell has ``"dense"``
ahead by less than :data:`NEAR_TIE`, ``"chunked"`` is picked: its memory is linear in N, and dense's
large buffers cost page faults inside a long process (a training loop) that the table's short
measurement does not see (``benchmarks/README.md``, "Page faults": DeBERTa bidirectional at
``(1, 8, 2048, 64)``, forward+backward, 4 % ahead in the table, 1.20-1.26x slower than ``"chunked"`` in
the grid's long process). FlexAttention is never picked on CPU (not fused there, no backward).

CUDA (no table measured on a GPU yet): ``"flex"`` for every scheme it can express,
``"dense"`` for schemes with no term inside attention, ``"dense"``/``"chunked"``
for value-side terms below/above :data:`CUDA_DENSE_VALUE_PAIRS`.

Dropout (``dropout_p > 0``) is served only by ``"dense"``: it is picked for every such
request, and refused by name on CPU past :data:`DENSE_MAX_BYTES`. An ``attn_mask`` is
served by every implementation (``"chunked"`` takes its ``"blocks"`` engine for it).

The pick is logged at DEBUG level (logger ``relpos.attention``), returned by
:func:`choose` and kept in :data:`last_choice` (read by ``relpos bench``).
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import math
import pathlib

import torch
from torch import Tensor

from relpos.attention import Request, UnsupportedError

__all__ = ["supports", "run", "choose", "last_choice", "table", "table_for", "table_pick", "mode_of", "TABLE_PATH",
           "MID_PAIRS", "DENSE_MAX_BYTES", "LARGE_DENSE_BYTES", "NEAR_TIE", "CUDA_DENSE_VALUE_PAIRS"]

log = logging.getLogger("relpos.attention")

#: The measured table (see the module docstring).
TABLE_PATH = pathlib.Path(__file__).resolve().parent.parent / "data" / "auto_table.json"
#: Without a table row: dense below this many (query, key) pairs per head, chunked from it.
MID_PAIRS = 768 * 768
#: Never ``"dense"`` on CPU where one ``(B, H, Nq, Nk)`` float32 tensor would pass this many bytes
#: (dense forms several; the table's benchmark does not time dense there either).
DENSE_MAX_BYTES = 2**30
#: Where one ``(B, H, Nq, Nk)`` float32 tensor takes at least this many bytes, a near tie goes to ``"chunked"``...
LARGE_DENSE_BYTES = 64 * 2**20
#: ... a near tie: the table's cell has ``"dense"`` ahead by less than this fraction of its time.
NEAR_TIE = 0.10
#: On CUDA, value-side schemes use ``"dense"`` up to this many pairs, else ``"chunked"``.
CUDA_DENSE_VALUE_PAIRS = 2048 * 2048

#: The implementation the last call picked (for benchmarks and debugging).
last_choice: str | None = None


def supports(req: Request) -> str | None:
    if req.dropout_p > 0 and req.q.device.type != "cuda" and _dense_bytes(req) > DENSE_MAX_BYTES:
        return (f"dropout_p > 0 is served only by impl='dense', and one (B, H, Nq, Nk) float32 tensor here "
                f"would take {_dense_bytes(req)} bytes > DENSE_MAX_BYTES={DENSE_MAX_BYTES}; use dropout_p=0 "
                f"or shorter chunks")
    return None


def _dense_bytes(req: Request) -> int:
    B, H, Nq, Nk, _ = req.shape
    return B * H * Nq * Nk * 4


def _module(name: str):
    from relpos.attention import IMPLS

    return importlib.import_module(IMPLS[name])


#: Tables measured at other shapes: the compare presets' head width ``D = 16`` at their batch 16
#: (``auto_table_d16.json``) and at batch 4 (``auto_table_d16_b4.json``, the N = 256 scale cells).
EXTRA_TABLES = ("auto_table_d16.json", "auto_table_d16_b4.json")


def _log_gap(a: float, b: float) -> float:
    return abs(math.log(max(a, 1)) - math.log(max(b, 1)))


def table_for(head_dim: int, batch: int | None = None) -> dict | None:
    """The table measured at the head width nearest (in log scale) to ``head_dim``, and among those at the batch
    nearest to ``batch`` (None: the first such table); ties go to the main table, then to the earlier one.

    The batch matters where an engine's costs do not scale with ``B H Nq Nk`` alike: a bias formed once per head
    (dense, ``(1, H, Nq, Nk)``) against one evaluated per batch entry (a fused kernel's blocks). FIRE past its
    threshold at ``(4, 4, 256, 16)``, forward and backward, timed 5.5 ms dense against 7.0 ms chunked, where the
    batch-16 table's cell of the same work (``N = 128``) has chunked ahead (``benchmarks/README.md``)."""
    docs = [d for d in (table(), *(table(str(TABLE_PATH.parent / n)) for n in EXTRA_TABLES)) if d is not None]
    if not docs:
        return None
    def gaps(d: dict) -> tuple[float, float]:  # (head width, batch); min keeps the first of equal keys
        shape = d.get("shape", {})
        return (_log_gap(head_dim, shape.get("head_dim", 64)),
                0.0 if batch is None else _log_gap(batch, shape.get("batch", 1)))

    return min(docs, key=gaps)


@functools.lru_cache(maxsize=4)
def table(path: str | None = None) -> dict | None:
    """The measured table (``relpos/data/auto_table.json``), or None if it is missing or unreadable."""
    p = pathlib.Path(path) if path else TABLE_PATH
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError):
        log.warning("auto: no readable measurement table at %s; using the pair-count fallback", p)
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("cells"), dict) else None


def mode_of(req: Request) -> str:
    """``"fwd+bwd"`` when this call will be differentiated, else ``"fwd"``."""
    if not torch.is_grad_enabled():
        return "fwd"
    if req.q.requires_grad or req.k.requires_grad or req.v.requires_grad:
        return "fwd+bwd"
    return "fwd+bwd" if any(p.requires_grad for p in req.encoding.parameters()) else "fwd"


def table_pick(req: Request, doc: dict | None = None) -> tuple[str, str] | None:
    """``(impl, cell)`` from the table for a CPU request with a term inside attention, or None (no row)."""
    B, H, Nq, Nk, D = req.shape
    doc = table_for(D, B) if doc is None else doc
    if doc is None:
        return None
    shape = doc.get("shape", {})
    n_eq = math.sqrt(B * H * Nq * Nk / (shape.get("batch", 1) * shape.get("heads", 8)))
    engine = _module("chunked").engine_for(req)
    mask = "causal" if req.causal else "bidirectional"
    mode = mode_of(req)
    lengths = [str(n) for n in doc.get("lengths", [])] or sorted(
        {n for row in doc["cells"].values() for n in row}, key=int)
    n = min(lengths, key=lambda s: abs(math.log(max(n_eq, 1.0)) - math.log(int(s))))
    # the scheme's own cell at this length, else the engine's (an engine a scheme takes only at some
    # lengths -- FIRE past its threshold -- has no cell of that scheme at the others)
    for scheme in (req.encoding.name, "*"):
        key = f"{scheme}/{engine}/{mask}/{mode}"
        row = doc["cells"].get(key) or {}
        if n in row:
            return row[n], f"{key}@{n}"
    return None


def _near_tie(doc: dict | None, cell: str) -> bool:
    """Whether the table's timings of ``cell`` (``"key@N"``) put ``"dense"`` ahead by less than :data:`NEAR_TIE`."""
    key, _, n = cell.rpartition("@")
    for r in (doc or {}).get("records", []):
        if r.get("key") == key and str(r.get("N")) == n and r.get("dense_ms") and r.get("chunked_ms"):
            return r["chunked_ms"] < r["dense_ms"] * (1 + NEAR_TIE)
    return False  # no timings: the table's pick stands


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
    if req.dropout_p > 0:  # the only implementation with dropout (supports() refuses it where too large)
        return "dense"
    if (device_type or req.q.device.type) == "cuda":
        if not inside:
            return "dense"
        if "value" in inside:
            return "dense" if pairs <= CUDA_DENSE_VALUE_PAIRS else "chunked"
        if _module("flex").expressible(req) is None:
            return "flex"
        return "chunked"
    if not inside:
        return "dense"
    if B * H * pairs * 4 > DENSE_MAX_BYTES:
        return "chunked"
    hit = table_pick(req)
    if hit is not None:
        if hit[0] == "dense" and _dense_bytes(req) >= LARGE_DENSE_BYTES and _near_tie(table_for(D, B), hit[1]):
            return "chunked"
        return hit[0]
    return "dense" if pairs < MID_PAIRS else "chunked"


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
