"""Put any relpos scheme into a Hugging Face Llama-family model: :func:`use_scheme`.

``relpos.hf.use_scheme(model, "alibi")`` turns a Llama-family causal LM (Llama,
Mistral without a sliding window, Qwen2, and any model whose attention layers call
transformers' attention-function registry with rotary embeddings from a
``rotary_emb`` module) into the same model with the chosen scheme:

* the model's rotary embedding is turned off (its ``rotary_emb`` returns
  ``cos = 1, sin = 0``, so ``apply_rotary_pos_emb`` is the identity and the cache
  holds keys *before* rotation, which is what relpos needs);
* each attention layer gets a scheme module (``self_attn.relpos_encoding``, a
  parameter of the model: it trains and is saved with it; T5 shares one table
  across layers) and the model's attention implementation becomes ``"relpos"``,
  registered in transformers' ``AttentionInterface`` (the attention function) and
  ``AttentionMaskInterface`` (the mask: the 2-D padding mask, as for
  FlashAttention);
* the attention function calls :func:`relpos.attention` with the model's
  grouped-query layout (k, v are not repeated), ``causal=True``, the padding mask
  (left or right) as ``key_mask`` (True = a real token) and ``q_offset = Nk - Nq`` (the
  queries are the last keys of the model's own cache), so ``generate`` with the
  model's cache is exact.

Positions are the model's ``position_ids`` (what its own RoPE would use; token
indices when the model passes none). A row whose ``position_ids`` restart
(``0..4, 0..6``: padding-free packing) holds several documents, each attending
only within itself, as in transformers' own attention; a cache filled that way
is not continued (refused by name). See :mod:`relpos.hf.packing`.

The model's rotary width (partial rotary, e.g. StableLM) and its pairing
(rotate-half or interleaved, e.g. GLM, Cohere, Helium) are read from the model
(:mod:`relpos.hf.probe`), so ``use_scheme(model, "rope")`` reproduces it; a model
whose rotation relpos' RoPE does not reproduce is refused by name.

Saving: ``model.save_pretrained(folder)`` after ``use_scheme`` writes the scheme
and its options into ``config.json`` (``relpos_bridge``) and its parameters into
the weights; :func:`load_bridged` loads it back to identical logits.

Refused by name: schemes that act only on the token embeddings (``sinusoidal``,
``learned``), DeBERTa with ``share_att_key=True`` (it needs the layer's content
projections bound), models with sliding-window attention, static (pre-allocated) caches, models without a
``rotary_emb`` to turn off, and RoPE types relpos
does not implement. The model's ``attention_dropout`` applies in ``train()`` mode, as in its own
attention. transformers (>= 4.56) is imported lazily, on the first
:func:`use_scheme`. Guide: ``docs/use.md``.
"""

from __future__ import annotations

from relpos.hf.bridge import ATTN_NAME, bridge_schemes, rope_options, use_scheme
from relpos.hf.saving import load_bridged

__all__ = ["use_scheme", "load_bridged", "rope_options", "bridge_schemes", "ATTN_NAME"]
