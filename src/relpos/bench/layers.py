"""Attention layers of one shape for the peer comparison: relpos's own and the peers' written by hand.

Every layer maps ``x`` of shape ``(B, N, C)`` to ``(B, N, C)`` with the same work
around attention: a pre-norm, q/k/v and output projections, a residual and a final
norm, so that layer times compare the attention inside them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["RelposLayer", "RotaryPeerLayer", "FlexAlibiLayer", "ShawNND", "ShawLoop", "HFT5", "HFDebertaV2", "CoPEPaper"]


class _Layer(nn.Module):
    """The shared frame: norm, projections, residual, final norm; subclasses define :meth:`attend`."""

    def __init__(self, dim: int, heads: int, dim_head: int, causal: bool) -> None:
        super().__init__()
        inner = heads * dim_head
        self.heads, self.dim_head, self.causal = heads, dim_head, causal
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)
        self.to_qkv = nn.Linear(dim, 3 * inner, bias=False)
        self.to_out = nn.Linear(inner, dim, bias=False)
        self.final_norm = nn.LayerNorm(dim, elementwise_affine=False)

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:  # (B, H, N, D) -> (B, H, N, D)
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        B, N, _ = x.shape
        qkv = self.to_qkv(self.norm(x)).view(B, N, 3, self.heads, self.dim_head).permute(2, 0, 3, 1, 4)
        out = self.attend(qkv[0], qkv[1], qkv[2])  # (B, H, N, D)
        out = out.transpose(1, 2).reshape(B, N, self.heads * self.dim_head)
        return self.final_norm(x + self.to_out(out))


class RelposLayer(_Layer):
    """``relpos.attention`` with one encoding and implementation inside the shared frame."""

    def __init__(self, dim: int, heads: int, dim_head: int, encoding: nn.Module, impl: str, causal: bool) -> None:
        super().__init__(dim, heads, dim_head, causal)
        self.encoding, self.impl = encoding, impl

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        import relpos

        return relpos.attention(q, k, v, self.encoding, causal=self.causal, impl=self.impl)


class RotaryPeerLayer(_Layer):
    """rotary-embedding-torch's ``RotaryEmbedding`` (RoPE, or xPos with ``xpos=True``) and fused SDPA,
    used as that package's README shows."""

    def __init__(self, dim: int, heads: int, dim_head: int, causal: bool, xpos: bool) -> None:
        super().__init__(dim, heads, dim_head, causal)
        from rotary_embedding_torch import RotaryEmbedding

        self.xpos = xpos
        self.rotary = RotaryEmbedding(dim=dim_head, use_xpos=xpos)

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        if self.xpos:
            q, k = self.rotary.rotate_queries_and_keys(q, k)
        else:
            q, k = self.rotary.rotate_queries_or_keys(q), self.rotary.rotate_queries_or_keys(k)
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


class FlexAlibiLayer(_Layer):
    """ALiBi as a FlexAttention ``score_mod`` on the compiled ``flex_attention``, the way the
    FlexAttention documentation writes it (a causal ``block_mask``; inference only on CPU)."""

    def __init__(self, dim: int, heads: int, dim_head: int, causal: bool) -> None:
        super().__init__(dim, heads, dim_head, causal)
        from relpos.distance import alibi_slopes

        self.register_buffer("slopes", alibi_slopes(heads), persistent=False)
        self._masks: dict = {}

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        from torch.nn.attention.flex_attention import create_block_mask

        slopes = self.slopes

        def alibi(score, b, h, q_idx, kv_idx):
            return score + slopes[h] * (kv_idx - q_idx)

        def causal(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx

        N = q.shape[-2]
        mask = None
        if self.causal:
            key = (N, str(q.device))
            if key not in self._masks:
                self._masks[key] = create_block_mask(causal, None, None, N, N, device=str(q.device))
            mask = self._masks[key]
        return _compiled_flex()(q, k, v, score_mod=alibi, block_mask=mask)


_FLEX = None


def _compiled_flex():
    global _FLEX
    if _FLEX is None:
        from torch.nn.attention.flex_attention import flex_attention

        _FLEX = torch.compile(flex_attention)
    return _FLEX


def _shaw_index(N: int, k: int, device) -> Tensor:
    pos = torch.arange(N, device=device)
    return (pos[None, :] - pos[:, None]).clamp(-k, k) + k  # (N, N): clip(j - i) + k


class ShawNND(_Layer):
    """Shaw et al. key+value attention with the ``N x N x d`` relation tensors (the tensor2tensor form)."""

    def __init__(self, dim: int, heads: int, dim_head: int, k: int, causal: bool) -> None:
        super().__init__(dim, heads, dim_head, causal)
        self.k = k
        self.rel_k = nn.Parameter(torch.randn(2 * k + 1, dim_head) * 0.02)
        self.rel_v = nn.Parameter(torch.randn(2 * k + 1, dim_head) * 0.02)

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        N = q.shape[-2]
        idx = _shaw_index(N, self.k, q.device)
        ak, av = self.rel_k[idx], self.rel_v[idx]  # (N, N, D) each
        logits = (q @ k.transpose(-1, -2) + torch.einsum("bhid,ijd->bhij", q, ak)) / math.sqrt(self.dim_head)
        if self.causal:
            logits = logits.masked_fill(idx > self.k, float("-inf"))  # j > i
        p = logits.softmax(-1)  # (B, H, N, N)
        return p @ v + torch.einsum("bhij,ijd->bhid", p, av)


class ShawLoop(ShawNND):
    """Shaw key+value attention as a plain loop over query ``i`` and key ``j``: the formula read
    literally, the educational floor (small N only)."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        N, scale = q.shape[-2], 1.0 / math.sqrt(self.dim_head)
        rows = []
        for i in range(N):
            logits, rel = [], []
            for j in range(i + 1 if self.causal else N):
                r = min(max(j - i, -self.k), self.k) + self.k
                logits.append((q[:, :, i] * (k[:, :, j] + self.rel_k[r])).sum(-1) * scale)  # (B, H)
                rel.append(r)
            p = torch.stack(logits, -1).softmax(-1)  # (B, H, j)
            out = 0
            for j, r in enumerate(rel):
                out = out + p[..., j, None] * (v[:, :, j] + self.rel_v[r])  # (B, H, D)
            rows.append(out)
        return torch.stack(rows, 2)  # (B, H, N, D)


class HFT5(nn.Module):
    """transformers' ``T5LayerSelfAttention`` with its causal mask as ``T5Stack`` builds it.

    Args:
        attn_implementation: ``"sdpa"``, ``"eager"`` or ``"flex_attention"`` (transformers' switch).
    """

    def __init__(self, dim: int, heads: int, dim_head: int, causal: bool, attn_implementation: str) -> None:
        super().__init__()
        import logging

        logging.getLogger("transformers").setLevel(logging.ERROR)
        from transformers import T5Config
        from transformers.models.t5.modeling_t5 import T5LayerSelfAttention

        cfg = T5Config(d_model=dim, d_kv=dim_head, num_heads=heads, relative_attention_num_buckets=32,
                       relative_attention_max_distance=128, is_decoder=causal, dropout_rate=0.0)
        cfg._attn_implementation = attn_implementation
        self.layer = T5LayerSelfAttention(cfg, has_relative_attention_bias=True, layer_idx=0)
        self.causal = causal

    def forward(self, x: Tensor) -> Tensor:
        N = x.shape[1]
        mask = None
        if self.causal:
            mask = torch.full((N, N), torch.finfo(x.dtype).min, device=x.device, dtype=x.dtype).triu(1)[None, None]
        return self.layer(x, attention_mask=mask)[0]


class HFDebertaV2(nn.Module):
    """transformers' DeBERTa-v2 ``DisentangledSelfAttention`` (c2p and p2c, 256 log buckets up to 512),
    with the shared position table and its LayerNorm as ``DebertaV2Encoder`` feeds it, and the
    output projection, residual and norm of ``DebertaV2SelfOutput``.

    Args:
        share_att_key: DeBERTa-v3's setting (positions projected by the content projections);
            False gives separate position projections, as relpos's ``deberta`` default.
    """

    def __init__(self, dim: int, heads: int, dim_head: int, causal: bool, share_att_key: bool) -> None:
        super().__init__()
        import logging

        logging.getLogger("transformers").setLevel(logging.ERROR)
        from transformers import DebertaV2Config
        from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention

        cfg = DebertaV2Config(hidden_size=heads * dim_head, num_attention_heads=heads, relative_attention=True,
                              position_buckets=256, max_relative_positions=512, pos_att_type=["p2c", "c2p"],
                              share_att_key=share_att_key, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                              norm_rel_ebd="layer_norm")
        self.attn = DisentangledSelfAttention(cfg)
        self.rel_embeddings = nn.Embedding(2 * 256, heads * dim_head)
        self.rel_norm = nn.LayerNorm(heads * dim_head)
        self.out = nn.Linear(heads * dim_head, dim)
        self.norm = nn.LayerNorm(dim)
        self.causal = causal

    def forward(self, x: Tensor) -> Tensor:
        from transformers.models.deberta_v2.modeling_deberta_v2 import build_relative_position

        B, N, _ = x.shape
        mask = torch.ones(N, N, dtype=torch.bool, device=x.device)
        if self.causal:
            mask = mask.tril()
        rel_pos = build_relative_position(x, x, bucket_size=256, max_position=512)
        rel = self.rel_norm(self.rel_embeddings.weight)
        ctx = self.attn(x, mask[None, None].expand(B, 1, N, N), relative_pos=rel_pos, rel_embeddings=rel)[0]
        return self.norm(x + self.out(ctx))


class CoPEPaper(_Layer):
    """CoPE as the paper's reference code writes it (Golovneva et al. 2024, Figure/Listing 1): the
    ``N x N`` content logits, sigmoid gates, a flipped cumulative sum for the positions, a
    ``(B, H, N, npos_max)`` table of ``q . e[p]``, two ``N x N`` gathers and the interpolation.
    Causal only (the paper's positions count the past)."""

    def __init__(self, dim: int, heads: int, dim_head: int, causal: bool, npos_max: int = 64) -> None:
        super().__init__(dim, heads, dim_head, causal)
        self.npos_max = npos_max
        self.pos_emb = nn.Parameter(torch.randn(1, dim_head, npos_max) * 0.02)

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        N = q.shape[-2]
        mask = torch.ones(N, N, device=q.device).tril()
        logits = q @ k.transpose(-1, -2) / math.sqrt(self.dim_head) + mask.log()
        gates = torch.sigmoid(logits)
        pos = gates.flip(-1).cumsum(dim=-1).flip(-1).clamp(max=self.npos_max - 1)
        pos_ceil, pos_floor = pos.ceil().long(), pos.floor().long()
        logits_int = q @ self.pos_emb  # (B, H, N, npos_max)
        w = pos - pos_floor
        logits = logits + logits_int.gather(-1, pos_ceil) * w + logits_int.gather(-1, pos_floor) * (1 - w)
        return logits.softmax(-1) @ v
