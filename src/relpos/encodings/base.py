"""The one interface every position scheme implements.

A scheme is an ``nn.Module`` (so its learned parameters train with the model)
that says *where* it acts, through ``acts_on``, a subset of:

* ``"embedding"`` -- added to the token embeddings before the first layer
  (absolute schemes): :meth:`Encoding.embed`.
* ``"qk"`` -- transforms q and k before the dot product (rotary schemes):
  :meth:`Encoding.rotate`.
* ``"bias"`` -- an additive score term that depends on positions only
  (T5, ALiBi, KERPLE, FIRE, Sandwich): :meth:`Encoding.bias`.
* ``"score"`` -- an additive score term that depends on q and/or k as well
  (Shaw's key table, Transformer-XL, DeBERTa, CoPE): :meth:`Encoding.score`.
* ``"value"`` -- a term added to the attention output (Shaw's value table):
  :meth:`Encoding.value`.

Attention logits are always formed as::

    logits[b, h, t, j] = scale * <q'_t, k'_j> + bias[h, t, j] + score[b, h, t, j]

where ``q', k'`` are the rotated vectors, ``scale = attention_scale(D)``
(``1/sqrt(D)`` unless a scheme says otherwise), ``bias`` is in *logit units*
(added after scaling, as ALiBi and T5 do) and ``score`` is returned by the scheme
already in logit units (Shaw and Transformer-XL put their term inside the
``1/sqrt(D)`` scaling, so they multiply by ``scale`` themselves).

Positions: ``qpos`` is ``(B or 1, Nq)`` and ``kpos`` is ``(B or 1, Nk)``, int64
absolute positions. Relative offsets use ``d = j - i`` (key minus query) unless a
scheme documents otherwise.

Every scheme also carries a *reference* of each method it uses, written from the
paper's formula in float64 with plain loops or einsum. ``impl="reference"`` runs
only those; the tests hold every fast path to them.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from typing import ClassVar, Literal

import torch
from torch import Tensor, nn

from relpos.validation import MAX_POSITIONS, MAX_TABLE, check_bool, check_int

Site = Literal["embedding", "qk", "bias", "score", "value"]
SITES: tuple[str, ...] = ("embedding", "qk", "bias", "score", "value")

__all__ = ["Encoding", "Dims", "Site", "SITES", "ClippedTables", "PiecewiseBias", "RelativeKeys", "ScoreState"]



@dataclasses.dataclass(frozen=True)
class ClippedTables:
    """Capability of a clipped-offset scheme (Shaw et al. 2018), see :meth:`Encoding.clipped_tables`.

    The scheme's terms must be exactly, with ``r = clip(j - i, -k, k) + k``::

        score[b, h, i, j] = scale * q_i . key[h, r]
        value[b, h, i]    = sum_j p_ij value[h, r]       (only if ``value`` is not None)

    Attributes:
        k: clipping distance (>= 0).
        key: ``(2k + 1, D)`` (shared by the heads) or ``(H, 2k + 1, D)``.
        value: ``(2k + 1, Dv)`` or ``(H, 2k + 1, Dv)``, or None.
    """

    k: int
    key: Tensor
    value: Tensor | None = None


@dataclasses.dataclass(frozen=True)
class RelativeKeys:
    """Capability of a relative-key scheme (Transformer-XL), see :meth:`Encoding.relative_keys`.

    The scheme's score must be exactly, with ``d = j - i``::

        score[b, h, i, j] = scale * (u[h] . k_j + (q_i + v[h]) . keys(d)[h])

    Attributes:
        u: ``(H, D)`` content bias, or None for zero.
        v: ``(H, D)`` position bias, or None for zero.
        keys: maps int64 offsets ``d`` of shape ``(L,)`` to float32 ``(H, L, D)``
            relative keys (with autograd to the scheme's parameters).
    """

    u: Tensor | None
    v: Tensor | None
    keys: Callable[[Tensor], Tensor]


@dataclasses.dataclass(frozen=True)
class PiecewiseBias:
    """Capability of a bias piecewise linear in a normalised distance (FIRE), see :meth:`Encoding.piecewise_bias`.

    With query position ``i`` and key position ``j``, the scheme's bias must be exactly::

        x = num(|i - j|) / den(i),   m = #{k : z[k] < x},   bias[h, i, j] = alpha[h, m] * x + beta[h, m]

    Attributes:
        num: maps int64 distances ``(L,)`` (``>= 0``) to float32 ``(L,)``, nondecreasing, with autograd.
        den: maps int64 query positions ``(N,)`` to float32 ``(N,)``, positive, with autograd.
        segments: returns the slopes and intercepts ``alpha, beta (H, K + 1)`` (with autograd) and the
            sorted breakpoints ``z (K,)``.
    """

    num: Callable[[Tensor], Tensor]
    den: Callable[[Tensor], Tensor]
    segments: Callable[[], tuple[Tensor, Tensor, Tensor]]


@dataclasses.dataclass(frozen=True)
class ScoreState:
    """What every block of one attention call shares for a ``"score"`` term (see
    :meth:`Encoding.score_state`).

    Attributes:
        tensors: computed once per call, with autograd to q, k and the scheme's parameters.
        axes: per tensor, ``"q"`` if its dim -2 runs over the call's query rows, ``"k"``
            over its keys, ``"k-last"`` if its last dim runs over the keys, None if none;
            blocked engines slice those dims to the block.
        meta: plain values (offsets, sizes).
    """

    tensors: tuple[Tensor, ...]
    axes: tuple[str | None, ...]
    meta: dict

    def block(self, tensors, a: int, b: int, C: int, c0: int = 0) -> "ScoreState":
        """``tensors`` (this state's, or leaves made from them) sliced to query rows ``[a, b)`` and keys
        ``[c0, C)``."""
        sl = {"q": slice(a, b), "k": slice(c0, C), None: slice(None)}
        return ScoreState(tuple(t[..., c0:C] if ax == "k-last" else t[..., sl[ax], :] if ax else t
                                for t, ax in zip(tensors, self.axes)), self.axes, self.meta)


@dataclasses.dataclass(frozen=True)
class Dims:
    """Model dimensions a scheme may need to size itself.

    Attributes:
        n_heads: attention heads H.
        head_dim: per-head dimension D.
        d_model: model width C (defaults to ``n_heads * head_dim``).
        max_len: longest sequence a learned absolute table must cover.
        causal: whether attention is causal (some schemes are causal-only or
            change form, e.g. ALiBi's symmetric bidirectional variant).
    """

    n_heads: int = 8
    head_dim: int = 64
    d_model: int | None = None
    max_len: int = 512
    causal: bool = True

    def __post_init__(self) -> None:
        check_int("n_heads", self.n_heads, 1, MAX_TABLE)
        check_int("head_dim", self.head_dim, 1, MAX_TABLE)
        check_int("max_len", self.max_len, 1, MAX_POSITIONS)
        check_bool("causal", self.causal)
        if self.d_model is None:
            object.__setattr__(self, "d_model", self.n_heads * self.head_dim)
        check_int("d_model", self.d_model, 1, MAX_TABLE)


class Encoding(nn.Module):
    """Base class of all position schemes. See the module docstring.

    Class attributes each scheme sets:
        name: registry name, e.g. ``"t5"``.
        acts_on: the sites it uses.
        relative: True if scores depend on positions only through ``j - i``
            (False for absolute schemes, and for FIRE, whose normaliser uses ``i``).
        toeplitz: True if :meth:`relative_bias` gives the whole ``"bias"`` term
            (a function of ``j - i`` only), which lets fast paths evaluate it on
            the ``Nq + Nk - 1`` distinct offsets instead of ``Nq x Nk`` pairs.
        causal_only: True if the scheme is defined for causal attention only.
        integer_positions: True if the scheme is driven by integer positions
            (so randomized positions, Ruoss et al. 2023, apply to it).
        paper: link to the paper.
        reads_logits: True if the ``"score"`` term is a function of the scaled content
            logits ``z = scale q k^T`` and the call's :meth:`score_state` (CoPE's gates):
            a blocked engine then hands :meth:`score_into` a block holding exactly ``z``
            and lets :meth:`score_with_backward` add the term's gradient to ``z`` into
            ``ds``, so ``q k^T`` is formed once per block and ``dq``, ``dk`` take one
            matmul each.
        pairwise_score: True if the ``"score"`` of a pair reads only that pair's query, key and
            positions (Shaw, Transformer-XL, DeBERTa), so a blocked engine may evaluate it on any
            range of keys; False where it reads other keys too (FoX's cumulative gates, CoPE's
            counts), which blocked engines then evaluate on key prefixes ``[0, C)`` only.
    """

    name: ClassVar[str] = ""
    acts_on: ClassVar[frozenset[str]] = frozenset()
    relative: ClassVar[bool] = True
    toeplitz: ClassVar[bool] = False
    causal_only: ClassVar[bool] = False
    integer_positions: ClassVar[bool] = True
    paper: ClassVar[str] = ""
    reads_logits: ClassVar[bool] = False
    pairwise_score: ClassVar[bool] = False
    #: True if a model should build one instance for all layers by default (T5 shares
    #: its bias table across layers); ``ModelConfig.share_encoding`` overrides it.
    share_across_layers: ClassVar[bool] = False
    #: Names of the context-extension scalings the scheme's ``set_scaling(name, factor=...,
    #: original_max_len=...)`` accepts (the RoPE family: ``"linear"``, ``"ntk"``, ...);
    #: empty for schemes without any (they have no ``set_scaling``).
    scalings: ClassVar[tuple[str, ...]] = ()

    def __init__(self, n_heads: int = 1) -> None:
        super().__init__()
        check_int("n_heads", n_heads, 1, MAX_TABLE)
        self.n_heads = n_heads

    # ----------------------------------------------------------------- building

    @classmethod
    def build(cls, dims: Dims, **options) -> "Encoding":
        """Construct from model dimensions plus scheme options.

        Dimension fields (``n_heads``, ``head_dim``, ``d_model``, ``max_len``,
        ``causal``) are passed to ``__init__`` when it accepts them; every other
        keyword must be an ``__init__`` option of the scheme.
        """
        sig = inspect.signature(cls.__init__)
        params = {n for n in sig.parameters if n != "self"}
        kwargs = {f.name: getattr(dims, f.name) for f in dataclasses.fields(dims) if f.name in params}
        unknown = sorted(set(options) - params)
        if unknown:
            accepted = sorted(params - {f.name for f in dataclasses.fields(dims)})
            raise TypeError(
                f"unknown option(s) {unknown} for scheme {cls.name!r}; accepted options: {accepted}"
            )
        kwargs.update(options)
        return cls(**kwargs)

    def num_params(self) -> int:
        """Number of learned parameters (elements of trainable tensors)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def describe(self) -> dict:
        """A JSON-able summary: name, sites, parameter count, paper."""
        return {
            "name": self.name,
            "acts_on": [s for s in SITES if s in self.acts_on],
            "params": self.num_params(),
            "relative": self.relative,
            "causal_only": self.causal_only,
            "paper": self.paper,
        }

    def attention_scale(self, head_dim: int) -> float:
        """Multiplier of ``<q, k>``; ``1/sqrt(D)`` unless a scheme overrides it."""
        return 1.0 / math.sqrt(head_dim)

    def check_dims(self, head_dim: int, value_dim: int) -> None:
        """Raise ``ValueError`` if the scheme cannot serve q/k of width ``head_dim`` and v of ``value_dim``."""

    # ---------------------------------------------------------- capabilities
    # Structure a fast path may exploit. Each returns None unless the scheme has it.

    def saturation_distance(self) -> int | None:
        """Distance ``M`` beyond which the Toeplitz bias is one constant per side, or None.

        ``relative_bias(d)`` must be the same function of the parameters for every
        ``d <= -M`` (and every ``d >= M``); T5's buckets saturate at ``max_distance``.
        """
        return None

    def clipped_tables(self) -> ClippedTables | None:
        """The scheme's clipped key/value tables if its terms have that form (:class:`ClippedTables`)."""
        return None

    def relative_keys(self) -> RelativeKeys | None:
        """The scheme's relative keys if its score has that form (:class:`RelativeKeys`)."""
        return None

    def piecewise_bias(self) -> PiecewiseBias | None:
        """The scheme's bias as a piecewise-linear function of a normalised distance, if it has that form
        (:class:`PiecewiseBias`, FIRE); None by default."""
        return None

    def key_bias(self, k: Tensor, kpos: Tensor) -> Tensor | None:
        """A per-key term ``b (B, H, Nk)`` if the score is ``r_i + b_j`` on every causally visible pair.

        ``r_i`` is any per-query term: softmax ignores it, so attention equals plain
        attention with the logit bias ``b_j`` (FoX: ``c_i - c_j``). Valid for causal
        attention over contiguous positions (query ``i`` is key ``i``). None (the
        default) if the score has no such form.
        """
        return None

    @classmethod
    def implements(cls, capability: str) -> bool:
        """Whether the class overrides the capability method ``capability`` (e.g. ``"key_bias"``)."""
        return getattr(cls, capability) is not getattr(Encoding, capability)

    def check_causal(self, causal: bool) -> None:
        """Raise if the scheme cannot serve this attention direction."""
        if self.causal_only and not causal:
            raise ValueError(f"scheme {self.name!r} is defined for causal attention only; pass causal=True")

    # ------------------------------------------------------------ fast paths

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        """Add absolute position information to token embeddings.

        Args:
            x: ``(B, N, C)`` embeddings.
            pos: ``(B or 1, N)`` int64 positions.
        Returns:
            ``(B, N, C)``.
        """
        return x

    def rotate(self, x: Tensor, pos: Tensor, *, is_query: bool, seq_len: int) -> Tensor:
        """Transform q (``is_query=True``) or k before the dot product.

        Args:
            x: ``(B, H, N, D)``.
            pos: ``(B or 1, N)`` int64 positions.
            is_query: whether ``x`` holds queries (xPos scales q and k oppositely).
            seq_len: current total length (``max(kpos) + 1``), for dynamic scalings.
        """
        return x

    def toeplitz_below(self) -> float | None:
        """Query positions below which :meth:`relative_bias` gives the whole ``"bias"`` term.

        ``inf`` for Toeplitz schemes (every position), None for schemes whose bias is
        never a function of ``j - i`` alone. A scheme Toeplitz only for queries
        ``i < bound`` returns the bound (FIRE: its threshold ``L``), and fast paths
        use the offsets for calls whose queries all sit below it.
        """
        return math.inf if self.toeplitz else None

    def relative_bias(self, delta: Tensor) -> Tensor:
        """Toeplitz schemes: the bias as a function of ``delta = j - i``.

        Args:
            delta: int64 tensor of offsets, any shape ``S``.
        Returns:
            float32 ``(H, *S)``.
        """
        raise NotImplementedError(f"scheme {self.name!r} has no relative_bias")

    def bias(self, qpos: Tensor, kpos: Tensor) -> Tensor:
        """Additive logit term that depends on positions only.

        Args:
            qpos: ``(B or 1, Nq)`` int64.
            kpos: ``(B or 1, Nk)`` int64.
        Returns:
            float32 ``(B or 1, H, Nq, Nk)``.
        """
        if not self.toeplitz:
            raise NotImplementedError(f"scheme {self.name!r} must implement bias()")
        delta = kpos[:, None, :] - qpos[:, :, None]  # (B|1, Nq, Nk)
        return self.relative_bias(delta).transpose(0, 1)  # (B|1, H, Nq, Nk)

    def score(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor:
        """Additive logit term that depends on content, in logit units.

        Args:
            q: ``(B, H, Nq, D)`` (already rotated, if the scheme rotates).
            k: ``(B, H, Nk, D)``.
            qpos, kpos: positions as in :meth:`bias`.
            scale: the attention scale, for schemes whose term sits inside it.
        Returns:
            ``(B, H, Nq, Nk)``.
        """
        raise NotImplementedError(f"scheme {self.name!r} must implement score()")

    def bias_past(self, qpos: Tensor, kpos: Tensor) -> Tensor | None:
        """Capability: :meth:`bias` for a causal call on default positions (``kpos = arange(Nk)``, ``qpos =
        q_offset + arange(Nq)``), with -inf at every pair whose key is after its query (the causal mask folded
        in), where the scheme forms it for less than the bias plus a separate ``(Nq, Nk)`` mask (FIRE past its
        threshold, not Toeplitz: its kernel writes the -inf as it walks). None (the default): engines call
        :meth:`bias` and mask.
        """
        return None

    def score_past(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor | None:
        """Capability: :meth:`score` for a causal call on default positions (``kpos = arange(Nk)``,
        ``qpos = q_offset + arange(Nq)``), with -inf at every pair whose key is after its query (the
        causal mask folded in), where the scheme can form only the pairs a causal query sees (Shaw's
        table on the offsets ``j - i <= 0``). None (the default): engines call :meth:`score` and mask.
        """
        return None

    def score_state(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float,
                    past_only: bool = False) -> ScoreState | None:
        """Capability: the part of :meth:`score` shared by every block of one attention call.

        Schemes whose score multiplies q or k with a position table once for all
        offsets (DeBERTa's ``q Kr^T`` and ``k Qr^T``) return those products here,
        built once for the whole call (arguments as in :meth:`score`); blocked engines
        then call :meth:`score_with` per block on the state sliced to it
        (:meth:`ScoreState.block`), and the state's gradient flows back once per call.
        ``None`` (the default): no shared state, engines call :meth:`score` per block.

        ``past_only=True``: the engine masks every pair whose key position is after its
        query position (causal attention on contiguous positions), so the state may
        cover only ``kpos <= qpos``; :meth:`score_with` must still return finite values
        for the other pairs (they are masked afterwards, and their gradient is 0).
        """
        return None

    def score_with(self, state: ScoreState, qpos: Tensor, kpos: Tensor) -> Tensor:
        """:meth:`score` of one block from the call's :meth:`score_state` sliced to that block
        (``qpos (B|1, R)``, ``kpos (B|1, C)``: the block's positions). Returns ``(B, H, R, C)``."""
        raise NotImplementedError(f"scheme {self.name!r} has no score_state")

    def score_into(self, state: ScoreState, qpos: Tensor, kpos: Tensor, out: Tensor) -> object:
        """``out += score_with(state, qpos, kpos)`` in place (``out (B, H, R, C)``, no autograd through it);
        schemes with a kernel that adds in place override it to skip the temporary. With
        :attr:`reads_logits`, ``out`` holds the block's scaled content logits on entry. Returns a
        context for :meth:`score_with_backward` (None by default)."""
        out += self.score_with(state, qpos, kpos).to(out.dtype)
        return None

    def score_with_backward(self, grads: ScoreState, qpos: Tensor, kpos: Tensor, ds: Tensor,
                            ctx: object = None) -> bool:
        """Optional: add the gradient of :meth:`score_with` for upstream gradient ``ds (B, H, R, C)``
        into ``grads`` (the state's gradient tensors sliced to the block, written in place) and
        return True; the default returns False and engines differentiate :meth:`score_with` instead.
        ``ctx``: what :meth:`score_into` returned for this block. With :attr:`reads_logits`, also add
        the term's gradient to the content logits into ``ds`` in place (engines call it before they
        use ``ds`` for ``dq`` and ``dk``)."""
        return False

    def value(self, p: Tensor, qpos: Tensor, kpos: Tensor) -> Tensor:
        """Term added to the attention output, from the attention weights.

        Args:
            p: ``(B, H, Nq, Nk)`` attention probabilities.
        Returns:
            ``(B, H, Nq, Dv)``.
        """
        raise NotImplementedError(f"scheme {self.name!r} must implement value()")

    # ------------------------------------------------------------- references
    # Written from the paper, float64, loops or plain einsum. Defaults are the
    # identity/zero for sites a scheme does not use.

    def reference_embed(self, x: Tensor, pos: Tensor) -> Tensor:
        if "embedding" in self.acts_on:
            raise NotImplementedError(f"scheme {self.name!r} must implement reference_embed()")
        return x.double()

    def reference_rotate(self, x: Tensor, pos: Tensor, *, is_query: bool, seq_len: int) -> Tensor:
        if "qk" in self.acts_on:
            raise NotImplementedError(f"scheme {self.name!r} must implement reference_rotate()")
        return x.double()

    def reference_bias(self, qpos: Tensor, kpos: Tensor) -> Tensor | None:
        if "bias" in self.acts_on:
            raise NotImplementedError(f"scheme {self.name!r} must implement reference_bias()")
        return None

    def reference_score(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor | None:
        if "score" in self.acts_on:
            raise NotImplementedError(f"scheme {self.name!r} must implement reference_score()")
        return None

    def reference_value(self, p: Tensor, qpos: Tensor, kpos: Tensor) -> Tensor | None:
        if "value" in self.acts_on:
            raise NotImplementedError(f"scheme {self.name!r} must implement reference_value()")
        return None
