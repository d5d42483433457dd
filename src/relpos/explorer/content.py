"""Content helpers: display tokens, the seeded token vectors and projections the
content views use, byte labels, and attention logits formed as relpos forms them."""

from __future__ import annotations

import hashlib
import math
import re

import torch

__all__ = ["tokenize", "CONTENT_DIM", "token_vector", "content_projections", "content_qk", "byte_label",
           "SHIFT_HEADS", "SHIFT_HEAD_DIM", "shift_content", "shift_qk", "shift_logits", "shift_logits_reference",
           "hash_seed"]

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]|(?:(?![{_CJK}])\w)+(?:['\u2019](?:(?![{_CJK}])\w)+)*|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Split text into display tokens: words, single punctuation marks, single CJK characters.

    Example:
        >>> tokenize("The cat's mat. 猫追老鼠")
        ['The', "cat's", 'mat', '.', '猫', '追', '老', '鼠']
    """
    return _TOKEN.findall(text)


#: Width of the random token vectors the content-dependent schemes are shown on.
CONTENT_DIM = 64


def hash_seed(text: str) -> int:
    """A 63-bit generator seed from a string (SHA-256; the same on every machine)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little") & (2**63 - 1)


def token_vector(token: str, seed: int, dim: int = CONTENT_DIM) -> torch.Tensor:
    """The fixed random vector ``(dim,)`` of one token: N(0, 1) entries drawn from a
    generator seeded with SHA-256 of ``"relpos-explorer/token/{seed}/{token}"``.

    The same token gets the same vector wherever it stands in the text, so only
    the content, never the position, decides it.
    """
    g = torch.Generator().manual_seed(hash_seed(f"relpos-explorer/token/{seed}/{token}"))
    return torch.randn(dim, generator=g)


def content_projections(seed: int, n_heads: int, head_dim: int,
                        dim: int = CONTENT_DIM) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded random projections ``W_Q, W_K`` of shape ``(dim, H*D)``, entries N(0, 1/dim).

    Drawn (``W_Q`` first) from a generator seeded with SHA-256 of
    ``"relpos-explorer/projections/{seed}"``, a stream apart from the one
    ``torch.manual_seed(seed)`` gives the scheme's own parameters.
    """
    g = torch.Generator().manual_seed(hash_seed(f"relpos-explorer/projections/{seed}"))
    wq = torch.randn(dim, n_heads * head_dim, generator=g) / math.sqrt(dim)
    wk = torch.randn(dim, n_heads * head_dim, generator=g) / math.sqrt(dim)
    return wq, wk


def content_qk(tokens: list[str], seed: int, n_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys ``(1, H, N, D)`` of a token list: ``q = x W_Q``, ``k = x W_K``
    with ``x (N, CONTENT_DIM)`` the token vectors (:func:`token_vector`)."""
    x = torch.stack([token_vector(t, seed) for t in tokens])  # (N, C0)
    wq, wk = content_projections(seed, n_heads, head_dim)
    n = len(tokens)
    q = (x @ wq).view(n, n_heads, head_dim).transpose(0, 1)[None]  # (1, H, N, D)
    k = (x @ wk).view(n, n_heads, head_dim).transpose(0, 1)[None]
    return q, k


def byte_label(b: int) -> str:
    """A short printable label for one byte of text."""
    if b == 32:
        return "\u2423"  # open box for a space
    if b == 10:
        return "\u23ce"  # return symbol for a newline
    if b == 9:
        return "\u21e5"  # tab
    if 33 <= b < 127:
        return chr(b)
    return f"x{b:02X}"


# ------------------------------------------------------------------ view 3 content

SHIFT_HEADS = 2
SHIFT_HEAD_DIM = 16


def shift_content(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fixed random content for view 3: token vectors ``x (1, N, C)`` and projections ``W_Q, W_K (C, C)``."""
    C = SHIFT_HEADS * SHIFT_HEAD_DIM
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(1, n, C, generator=g)
    wq = torch.randn(C, C, generator=g) / math.sqrt(C)
    wk = torch.randn(C, C, generator=g) / math.sqrt(C)
    return x, wq, wk


def shift_qk(enc, x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, pos: torch.Tensor):
    """Queries and keys ``(1, H, N, D)`` of content ``x`` at positions ``pos (1, N)`` (embedding site applied)."""
    H, D = SHIFT_HEADS, SHIFT_HEAD_DIM
    n = x.shape[1]
    if "embedding" in enc.acts_on:
        x = enc.embed(x, pos)
    q = (x @ wq).view(1, n, H, D).transpose(1, 2)  # (1, H, N, D)
    k = (x @ wk).view(1, n, H, D).transpose(1, 2)
    return q, k


def qk_logits(enc, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, scale: float) -> torch.Tensor:
    """Attention logits ``(B, H, N, N)`` of ``q, k (B, H, N, D)`` at positions ``pos (1, N)``,
    formed exactly as relpos's dense attention forms them: rotation, then
    ``scale * q'.k'`` plus the bias and score terms (no mask)."""
    from relpos.attention import Request
    from relpos.attention.dense import additive_terms, rotated_qk

    v = torch.zeros_like(k)
    req = Request(q, k, v, enc, False, None, 0, pos, pos, False, float(scale))
    q2, k2 = rotated_qk(req)
    logits = scale * (q2 @ k2.transpose(-1, -2))  # (B, H, N, N)
    add = additive_terms(req, q2, k2)
    return logits if add is None else logits + add


def shift_logits(enc, n: int, c: int, seed: int) -> torch.Tensor:
    """Attention logits ``(H, N, N)`` of fixed seeded content at positions ``c..c+N-1``.

    Content (token vectors ``x`` and projections ``W_Q, W_K``) is the same for
    every ``c``; only positions move.
    """
    x, wq, wk = shift_content(n, seed)
    pos = torch.arange(c, c + n)[None]  # (1, N)
    with torch.no_grad():
        q, k = shift_qk(enc, x, wq, wk, pos)
        logits = qk_logits(enc, q, k, pos, enc.attention_scale(SHIFT_HEAD_DIM))
    return logits[0].float()


def shift_logits_reference(enc, n: int, c: int, seed: int) -> torch.Tensor:
    """The float64 reference of :func:`shift_logits`: ``(H, N, N)`` logits formed only from the
    scheme's own references (``reference_embed``, ``reference_rotate``, ``reference_bias``,
    ``reference_score``), as :mod:`relpos.attention.reference` forms them.

    View 3's verdict comes from these: float32 rounding of the fast path can be as large as a real
    (small) change, float64 rounding is ~1e-12 of it.
    """
    H, D = SHIFT_HEADS, SHIFT_HEAD_DIM
    x, wq, wk = shift_content(n, seed)
    x, wq, wk = x.double(), wq.double(), wk.double()
    pos = torch.arange(c, c + n)[None]  # (1, N)
    scale = enc.attention_scale(D)
    with torch.no_grad():
        if "embedding" in enc.acts_on:
            x = enc.reference_embed(x, pos).double()
        q = (x @ wq).view(1, n, H, D).transpose(1, 2)  # (1, H, N, D)
        k = (x @ wk).view(1, n, H, D).transpose(1, 2)
        seq_len = c + n
        q = enc.reference_rotate(q, pos, is_query=True, seq_len=seq_len).double()
        k = enc.reference_rotate(k, pos, is_query=False, seq_len=seq_len).double()
        logits = scale * torch.einsum("bhtd,bhjd->bhtj", q, k)  # (1, H, N, N)
        b = enc.reference_bias(pos, pos)
        if b is not None:
            logits = logits + b.double()
        s = enc.reference_score(q, k, pos, pos, scale)
        if s is not None:
            logits = logits + s.double()
    return logits[0]
