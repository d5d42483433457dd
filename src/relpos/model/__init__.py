"""Transformer models that take any position scheme by name.

* :class:`ModelConfig` -- one flat, JSON-able dataclass; the scheme is a name
  (``scheme="t5"``) plus that scheme's own options (``scheme_options``). Named
  presets: :data:`PRESETS` (``tiny``, ``small``, ``medium``, ``base``).
* :class:`MultiHeadAttention` -- :class:`relpos.nn.RelativeSelfAttention` (the
  package's one attention layer, which the blocks are built from) under its older
  name; everything position-related happens in :func:`relpos.attention`.
* :class:`TransformerLM` -- decoder-only, pre-LayerNorm, tied input/output
  embeddings; full forward, cached incremental decoding (:meth:`TransformerLM.step`,
  :meth:`TransformerLM.generate`) and Transformer-XL segment recurrence
  (:meth:`TransformerLM.forward_with_memory`).
* :class:`TransformerEncoder` -- the same stack, bidirectional.

Where a scheme's parameters live
--------------------------------
The model owns the scheme modules in ``model.pos`` (an ``nn.ModuleList``):

* schemes that only act on the input embeddings (sinusoidal, learned absolute) and
  NoPE: one module, used once at the input;
* otherwise one module per layer (``len(model.pos) == n_layers``), or one module
  shared by every layer when ``share_encoding=True``. ``share_encoding=None``
  takes the scheme's default: shared for any scheme class that sets
  ``share_across_layers = True`` (T5, which computes its bias in the first layer
  and reuses it in all layers); per layer otherwise (so Transformer-XL's ``u`` and
  ``v`` are per layer by default and shared with ``share_encoding=True``).

The package: :mod:`~relpos.model.config` (ModelConfig, presets),
:mod:`~relpos.model.layers` (MultiHeadAttention, Block),
:mod:`~relpos.model.decoding` (KVCache, Memory, cached decoding, segment memory),
:mod:`~relpos.model.stack` (TransformerLM, TransformerEncoder).

Keys in the KV cache and in segment memory are stored *before* any rotation:
every call hands the whole key set to :func:`relpos.attention` with
``q_offset`` = number of earlier tokens, and the scheme rotates or biases there.
"""

from __future__ import annotations

from relpos.model.config import DEFAULT_ATTN_IMPL, EMBED_SCALES, PRESETS, ModelConfig, position_limit
from relpos.model.decoding import KVCache, Memory
from relpos.model.layers import Block, MultiHeadAttention
from relpos.model.stack import TransformerEncoder, TransformerLM

__all__ = [
    "ModelConfig",
    "PRESETS",
    "MultiHeadAttention",
    "Block",
    "TransformerLM",
    "TransformerEncoder",
    "KVCache",
    "Memory",
    "position_limit",
    "DEFAULT_ATTN_IMPL",
    "EMBED_SCALES",
]
