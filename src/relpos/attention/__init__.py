"""One attention entry point for every scheme, with an explicit implementation.

``relpos.attention(q, k, v, encoding, causal=..., impl=...)`` validates its
inputs once, works out query/key positions, then hands a :class:`Request` to
the chosen implementation module. Implementations:

* ``"reference"`` -- float64, written from the papers; the test oracle.
* ``"dense"`` -- materialised score terms + ``scaled_dot_product_attention``.
* further fast paths (``"chunked"``, ``"flex"``, ``"auto"``) live in sibling modules.

An implementation that cannot serve a request raises :class:`UnsupportedError`;
nothing falls back silently.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib

import torch
from torch import Tensor

from relpos.attention.masks import check_attn_mask, check_dropout_p, check_key_mask, resolve_key_mask
from relpos.encodings.base import Encoding
from relpos.validation import MAX_POSITIONS, check_bool, check_float, check_int, check_tensor

__all__ = ["attention", "logits", "request", "Request", "UnsupportedError", "NonFiniteError", "IMPLS", "available_impls",
           "check_in_attention"]


class UnsupportedError(ValueError):
    """An implementation cannot serve this scheme/shape/mode combination."""


class _Required:
    """Default of a keyword that has no default (so the error can say what to pass)."""

    def __repr__(self) -> str:
        return "<required>"


#: ``causal`` has no default: leaving it out of a decoder silently gave bidirectional attention.
REQUIRED = _Required()


def _require_causal(fn: str, causal) -> bool:
    if causal is REQUIRED:
        raise TypeError(
            f"{fn}() missing the required keyword argument 'causal': pass causal=True (a decoder: query t "
            f"sees keys up to t) or causal=False (an encoder: every key)"
        )
    return check_bool("causal", causal)


def check_in_attention(encoding: Encoding) -> None:
    """Raise ``ValueError`` if ``encoding`` acts only on the token embeddings (nothing inside attention).

    Decided by the scheme's sites (``acts_on``), not its name: sinusoidal and learned
    absolute embeddings would otherwise give exactly the output of no encoding.
    """
    sites = encoding.acts_on
    if "embedding" in sites and not (sites - {"embedding"}):
        raise ValueError(
            f"scheme {encoding.name!r} acts only on the token embeddings, not inside attention: add it to the "
            f"embeddings before the first layer (x = encoding.embed(tok_emb(idx), torch.arange(N)[None]), "
            f"x of shape (B, N, C)) and call relpos.attention with encoding=None"
        )


#: impl name -> module that defines ``run(req) -> Tensor`` and ``supports(req) -> str | None``.
IMPLS: dict[str, str] = {
    "reference": "relpos.attention.reference",
    "dense": "relpos.attention.dense",
    "chunked": "relpos.attention.chunked",
    "flex": "relpos.attention.flex",
    "auto": "relpos.attention.auto",
}


def available_impls() -> list[str]:
    """Implementation names (every entry of :data:`IMPLS`)."""
    return list(IMPLS)


@dataclasses.dataclass
class Request:
    """A validated attention call, as implementations receive it.

    Shapes: ``q (B, H, Nq, D)``, ``k (B, Hkv, Nk, D)``, ``v (B, Hkv, Nk, Dv)``
    (``Hkv`` divides ``H``: grouped-query attention, query head ``h`` reads key/value
    head ``h // (H // Hkv)``, as ``repeat_interleave`` would lay them out),
    ``qpos (B or 1, Nq)``, ``kpos (B or 1, Nk)`` int64, ``key_padding_mask
    (B, Nk)`` bool (the caller's ``key_mask``: True = a real key) or None,
    ``attn_mask (B or 1, H or 1, Nq, Nk)`` bool (True = attend) or None, and
    ``dropout_p`` (0 = no dropout) on the attention weights.

    ``contiguous`` is True when positions are the default ``arange`` (queries at
    ``q_offset + t``, keys at ``j``), which is what lets Toeplitz fast paths work
    on the ``Nq + Nk - 1`` distinct offsets.
    """

    q: Tensor
    k: Tensor
    v: Tensor
    encoding: Encoding
    causal: bool
    key_padding_mask: Tensor | None
    q_offset: int
    qpos: Tensor
    kpos: Tensor
    contiguous: bool
    scale: float
    attn_mask: Tensor | None = None
    dropout_p: float = 0.0

    @property
    def toeplitz(self) -> bool:
        """Whether the scheme has a ``"bias"`` term that is a function of ``j - i`` for this call's
        query positions (:meth:`Encoding.toeplitz_below`), so it can be evaluated on offsets."""
        enc = self.encoding
        bound = enc.toeplitz_below() if "bias" in enc.acts_on else None
        if bound is None:
            return False
        if bound == float("inf"):
            return True
        top = self.q_offset + self.q.shape[2] - 1 if self.contiguous else int(self.qpos.max())
        return top < bound

    @property
    def groups(self) -> int:
        """Query heads per key/value head, ``H // Hkv`` (1 without grouped-query attention)."""
        return self.q.shape[1] // self.k.shape[1]

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        B, H, Nq, D = self.q.shape
        return B, H, Nq, self.k.shape[2], D

    def mask(self) -> Tensor | None:
        """Boolean ``(B or 1, H or 1, Nq, Nk)`` mask, True where attention is allowed (``H`` only with
        a per-head ``attn_mask``)."""
        B, H, Nq, Nk, _ = self.shape
        m = None
        if self.causal:
            t = torch.arange(Nq, device=self.q.device)[:, None] + self.q_offset
            j = torch.arange(Nk, device=self.q.device)[None, :]
            m = (j <= t)[None, None]
        if self.key_padding_mask is not None:
            kp = self.key_padding_mask[:, None, None, :]
            m = kp if m is None else (m & kp)
        if self.attn_mask is not None:
            m = self.attn_mask if m is None else (m & self.attn_mask)
        return m


class NonFiniteError(ValueError):
    """q or k holds NaN or inf (a ``ValueError``; the trainer reports it as divergence)."""


def check_finite(req: "Request") -> None:
    """Raise ``ValueError`` if ``q`` or ``k`` holds NaN or inf (``reference``, ``dense`` and ``chunked`` call it).

    Without it a NaN query row came back as zeros from the fused SDPA kernel: a
    silent wrong answer. One sum over q and k (and a min/max pass only when that sum is
    not finite; cost measured in ``docs/use.md``); ``flex`` does not check (a data-dependent branch would break
    its compiled graph).
    """
    # Fast path: one sum per tensor (2-4x cheaper than a min/max pass at the compare presets' shapes, where
    # the check was a few per cent of a training step). Any NaN or inf makes a sum non-finite, so a finite
    # total proves every entry finite; a non-finite total (which a sum's overflow can also give) decides
    # nothing and the exact min/max check below runs.
    if bool(torch.isfinite(req.q.detach().sum() + req.k.detach().sum())):  # one read back; no grad-mode switch
        return
    fin = {}
    for name, t in (("q", req.q), ("k", req.k)):
        lo, hi = torch.aminmax(t.detach())
        fin[name] = torch.isfinite(lo) & torch.isfinite(hi)
    if bool(fin["q"] & fin["k"]):  # one host synchronisation per call (it costs on a GPU), not one per tensor
        return
    name = "q" if not bool(fin["q"]) else "k"
    raise NonFiniteError(f"{name} holds NaN or inf; relpos.attention refuses non-finite queries and keys "
                         f"(a NaN row would otherwise come back as zeros or NaN depending on the implementation)")


@functools.lru_cache(maxsize=64)
def _nope(n_heads: int) -> Encoding:
    """The position-free scheme for ``encoding=None``: one instance per head count (it holds no parameters and
    no state; building an ``nn.Module`` per call cost about 30 us, a tenth of a small model's attention call)."""
    from relpos.encodings.nope import NoPE

    return NoPE(n_heads)


def _make_positions(positions, B: int, Nq: int, Nk: int, q_offset: int, device) -> tuple[Tensor, Tensor, bool]:
    if positions is None:
        kpos = torch.arange(Nk, device=device)[None]
        qpos = torch.arange(q_offset, q_offset + Nq, device=device)[None]
        return qpos, kpos, True
    check_tensor("positions", positions, floating=False)
    if positions.dim() == 1:
        positions = positions[None]
    if positions.dim() != 2 or positions.shape[-1] != Nk or positions.shape[0] not in (1, B):
        raise ValueError(
            f"positions must have shape (Nk,) or (B, Nk) = ({B}, {Nk}) giving the key positions, "
            f"got {tuple(positions.shape)}"
        )
    if q_offset + Nq > Nk:
        raise ValueError(
            f"with explicit positions, q_offset + Nq must be <= Nk (queries are the last keys); "
            f"got q_offset={q_offset}, Nq={Nq}, Nk={Nk}"
        )
    if positions.device != device:
        raise ValueError(f"positions must be on q's device ({device}), got {positions.device}")
    # negative positions are allowed (a shift of every position; relative schemes ignore it), huge ones are not
    if positions.numel() and (int(positions.min()) < -MAX_POSITIONS or int(positions.max()) > MAX_POSITIONS):
        raise ValueError(f"positions must be in [-{MAX_POSITIONS}, {MAX_POSITIONS}] (as |q_offset|), got "
                         f"[{int(positions.min())}, {int(positions.max())}]")
    kpos = positions.long()
    qpos = kpos[:, q_offset : q_offset + Nq]
    return qpos, kpos, False


def _check_qkv(name: str, t) -> Tensor:
    check_tensor(name, t)
    if t.dim() != 4:
        raise ValueError(f"{name} must have 4 dims (B, H, N, D), got shape {tuple(t.shape)}")
    if not t.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point tensor (float16/bfloat16/float32/float64), got {t.dtype}")
    return t


def request(
    q: Tensor,
    k: Tensor,
    v: Tensor | None = None,
    encoding: Encoding | None = None,
    *,
    causal: bool = REQUIRED,  # type: ignore[assignment]
    key_mask: Tensor | None = None,
    q_offset: int = 0,
    positions: Tensor | None = None,
    scale: float | None = None,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    key_padding_mask: Tensor | None = None,
) -> Request:
    """Validate an attention call and build the :class:`Request` implementations receive.

    Arguments as :func:`attention` (``v`` may be None when only logits are needed;
    ``k`` then stands in for it). Every check of :func:`attention` happens here, so
    ``relpos.attention.chunked.engine_for(request(...))`` tells which engine a call
    would use.

    Raises:
        TypeError / ValueError: bad shapes, dtypes or ranges (the message names the parameter).
    """

    causal = _require_causal("request", causal)
    mask_name = "key_mask" if key_padding_mask is None else "key_padding_mask"  # for messages
    key_mask = resolve_key_mask("request", key_mask, key_padding_mask)
    _check_qkv("q", q)
    _check_qkv("k", k)
    if v is None:
        v = k
    _check_qkv("v", v)
    B, H, Nq, D = q.shape
    if D < 1:
        raise ValueError(f"q must have a head dimension D >= 1, got shape {tuple(q.shape)}")
    if k.shape[0] != B or k.shape[3] != D or k.shape[1] < 1 or H % k.shape[1]:
        raise ValueError(
            f"k must have shape (B, H_kv, Nk, D) = ({B}, H_kv, Nk, {D}) with H_kv dividing q's H={H} "
            f"(H_kv = H, or fewer heads for grouped-query attention), got {tuple(k.shape)}"
        )
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v must have shape (B, H, Nk, Dv) = {tuple(k.shape[:3])} + (Dv,), got {tuple(v.shape)}")
    if v.shape[3] < 1:
        raise ValueError(f"v must have a value dimension Dv >= 1, got shape {tuple(v.shape)}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if Nq < 1 or k.shape[2] < 1:
        raise ValueError(f"q and k need at least one position, got Nq={Nq}, Nk={k.shape[2]}")
    if B < 1:
        raise ValueError(f"q, k and v need at least one batch row (B >= 1), got B={B}")
    check_int("q_offset", q_offset, 0, MAX_POSITIONS)
    Nk = k.shape[2]
    if causal and positions is None and q_offset + Nq > Nk:
        raise ValueError(
            f"causal attention needs q_offset + Nq <= Nk (queries are the last keys); "
            f"got q_offset={q_offset}, Nq={Nq}, Nk={Nk}"
        )
    if encoding is None:
        encoding = _nope(H)
    if not isinstance(encoding, Encoding):
        raise TypeError(f"encoding must be a relpos Encoding (see relpos.make_encoding), got {type(encoding).__name__}")
    check_in_attention(encoding)
    if encoding.n_heads != H and encoding.n_heads != 1 and (encoding.acts_on - {"embedding"}):
        raise ValueError(f"encoding was built for n_heads={encoding.n_heads} but q has H={H} heads")
    encoding.check_causal(causal)
    encoding.check_dims(D, v.shape[3])
    key_mask = check_key_mask(key_mask, B, Nk, q.device, mask_name)
    attn_mask = check_attn_mask(attn_mask, B, H, Nq, Nk, q.device)
    dropout_p = check_dropout_p(dropout_p)
    scale = encoding.attention_scale(D) if scale is None else check_float("scale", scale)
    qpos, kpos, contiguous = _make_positions(positions, B, Nq, Nk, q_offset, q.device)
    return Request(q, k, v, encoding, causal, key_mask, q_offset, qpos, kpos, contiguous, float(scale),
                   attn_mask, dropout_p)


def logits(
    q: Tensor,
    k: Tensor,
    encoding: Encoding | None = None,
    *,
    causal: bool = REQUIRED,  # type: ignore[assignment]
    key_mask: Tensor | None = None,
    q_offset: int = 0,
    positions: Tensor | None = None,
    scale: float | None = None,
    attn_mask: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
) -> Tensor:
    """Pre-softmax attention logits, as every implementation forms them.

    ``logits[b, h, t, j] = scale * <q'_t, k'_j> + bias + score`` (see
    :mod:`relpos.encodings.base`), with masked pairs (causal, ``key_mask``,
    ``attn_mask``) set to ``-inf``. A scheme's value term (Shaw's value table) is not part of the
    logits. Arguments as :func:`attention`.

    Returns:
        ``(B, H, Nq, Nk)`` float32 (float64 for float64 inputs). ``softmax(-1)``
        of it gives the attention weights (rows with no allowed key are all -inf).

    Example:
        >>> import relpos, torch
        >>> q = k = torch.randn(1, 2, 4, 8)
        >>> enc = relpos.make_encoding("alibi", n_heads=2, head_dim=8)
        >>> relpos.attention.logits(q, k, enc, causal=True)[0, 0, 0, 1].item()
        -inf
    """
    from relpos.attention.dense import additive_terms, grouped_scores, rotated_qk

    causal = _require_causal("logits", causal)
    resolve_key_mask("logits", key_mask, key_padding_mask)  # warns once; request() names the one given
    req = request(q, k, None, encoding, causal=causal, key_mask=key_mask, q_offset=q_offset,
                  positions=positions, scale=scale, attn_mask=attn_mask, key_padding_mask=key_padding_mask)
    cd = torch.float64 if q.dtype == torch.float64 else torch.float32
    qr, kr = rotated_qk(req)  # (B, H, Nq, D), (B, Hkv, Nk, D)
    out = req.scale * grouped_scores(qr.to(cd), kr.to(cd))  # (B, H, Nq, Nk)
    add = additive_terms(req, qr, kr)  # (B|1, H, Nq, Nk) or None
    if add is not None:
        out = out + add.to(cd)
    mask = req.mask()  # (B|1, H|1, Nq, Nk) or None
    if mask is not None:
        out = out.masked_fill(~mask, float("-inf"))
    return out


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    encoding: Encoding | None = None,
    *,
    causal: bool = REQUIRED,  # type: ignore[assignment]
    key_mask: Tensor | None = None,
    q_offset: int = 0,
    positions: Tensor | None = None,
    impl: str = "dense",
    scale: float | None = None,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    key_padding_mask: Tensor | None = None,
) -> Tensor:
    """Attention with a relative (or absolute, or no) position scheme.

    Query ``t`` sits at position ``q_offset + t`` and key ``j`` at ``j`` unless
    ``positions`` says otherwise; in causal attention query ``t`` sees keys
    ``j <= q_offset + t`` (by index). For cached decoding pass the whole cache as
    ``k, v`` and the number of cached tokens as ``q_offset``.

    Args:
        q: ``(B, H, Nq, D)`` queries (not yet rotated; rotary schemes rotate here).
        k: ``(B, Hkv, Nk, D)`` keys (not yet rotated); ``Hkv`` may be smaller than
            ``H`` when it divides it (grouped-query / multi-query attention: query
            head ``h`` reads key head ``h // (H // Hkv)``); ``dense``, ``flex`` and
            ``chunked`` (for schemes with no term that reads per-head keys) do not
            copy the keys and values per query head.
        v: ``(B, Hkv, Nk, Dv)`` values.
        encoding: a scheme (:func:`relpos.make_encoding`), or None for no positions.
            A scheme that acts only on the token embeddings (sinusoidal, learned)
            is refused: add it to the embeddings instead (:meth:`Encoding.embed`).
        causal: required, no default: True masks keys after each query (a decoder),
            False lets every query see every key (an encoder).
        key_mask: ``(B, Nk)`` bool, **True marks a real key to attend to** (as
            ``scaled_dot_product_attention``'s boolean ``attn_mask``), False a
            padding key. The opposite of ``torch.nn.MultiheadAttention``'s
            ``key_padding_mask`` (True = ignore): pass ``~key_padding_mask``.
        q_offset: position of the first query (>= 0).
        positions: optional ``(Nk,)`` or ``(B, Nk)`` integer key positions in
            ``[0, 2**24]`` (e.g. randomized positions), on q's device; queries use
            ``positions[..., q_offset:q_offset+Nq]``.
        impl: implementation name, see :data:`IMPLS`.
        scale: multiplier of ``q.k``; default ``encoding.attention_scale(D)``.
        attn_mask: optional bool ``(B or 1, H or 1, Nq, Nk)``, True = query ``t``
            may attend to key ``j`` (SDPA's boolean convention); combined with
            ``causal`` and ``key_mask`` (all must allow a pair). Packed documents:
            a block-diagonal mask.
        dropout_p: dropout on the attention weights, in ``[0, 1)``, applied
            whenever it is > 0 (as SDPA: pass ``p if self.training else 0.0``);
            a fully masked row stays zeros. ``reference``, ``chunked`` and
            ``flex`` refuse ``dropout_p > 0`` (:class:`UnsupportedError`).
        key_padding_mask: deprecated alias of ``key_mask`` (same meaning; warns
            once per process).

    Returns:
        ``(B, H, Nq, Dv)`` in ``q``'s dtype. A query row with no allowed key
        returns zeros (never NaN).

    Non-finite inputs: ``reference``, ``dense`` and ``chunked`` raise ``ValueError``
    if ``q`` or ``k`` holds NaN or inf (one min/max pass over them; the fused SDPA
    kernel would otherwise return zeros for a NaN row). ``flex`` does not check (a
    data-dependent branch would break its compiled graph): there NaN propagates to
    the rows that see it. ``v`` is not checked: NaN in ``v`` reaches every row that
    sees it (and, in the fused kernel, possibly others).

    Raises:
        TypeError / ValueError: bad shapes, dtypes or ranges (the message names
            the parameter), ``causal`` left out (TypeError), an embedding-only
            scheme (ValueError); :class:`UnsupportedError` if ``impl`` cannot
            serve the request.

    Example:
        >>> import relpos, torch
        >>> q = k = v = torch.randn(1, 2, 5, 8)
        >>> enc = relpos.make_encoding("alibi", n_heads=2, head_dim=8)
        >>> relpos.attention(q, k, v, enc, causal=True).shape
        torch.Size([1, 2, 5, 8])
    """
    causal = _require_causal("attention", causal)
    resolve_key_mask("attention", key_mask, key_padding_mask)  # warns once; request() names the one given
    if not isinstance(impl, str) or impl not in IMPLS:
        raise ValueError(f"impl must be one of {available_impls()}, got {impl!r}")
    req = request(q, k, v, encoding, causal=causal, key_mask=key_mask, q_offset=q_offset,
                  positions=positions, scale=scale, attn_mask=attn_mask, dropout_p=dropout_p,
                  key_padding_mask=key_padding_mask)
    mod = importlib.import_module(IMPLS[impl])
    reason = mod.supports(req)
    if reason:
        raise UnsupportedError(f"impl {impl!r} cannot serve scheme {req.encoding.name!r}: {reason}")
    return mod.run(req)


# ``relpos.attention`` is this function (re-exported by the package), so the helpers
# are reachable as ``relpos.attention.logits`` / ``relpos.attention.request`` too.
attention.logits = logits  # type: ignore[attr-defined]
attention.request = request  # type: ignore[attr-defined]
