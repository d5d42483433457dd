"""Layers to put any relative position scheme into your own model.

* :class:`RelativeSelfAttention` -- projections, the scheme, attention and output
  projection, with grouped-query attention (``n_kv_heads``), padding, explicit
  positions and an explicit cache; :meth:`RelativeSelfAttention.stack` builds
  layers that share one scheme module when the scheme does (T5).
* :class:`KVCache` -- keys (before rotation), values, positions and padding of one
  layer, with ``reset``, ``crop(n)`` and ``reorder(index)``.

A guide with a nanoGPT-sized model: ``docs/use.md``.
"""

from __future__ import annotations

from relpos.nn.attention import RelativeSelfAttention
from relpos.nn.cache import KVCache

__all__ = ["RelativeSelfAttention", "KVCache"]
