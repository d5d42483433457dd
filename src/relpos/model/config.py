"""Model configuration: :class:`ModelConfig`, the named :data:`PRESETS`, and :func:`position_limit`."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from relpos.encodings import Dims, Encoding, get_scheme, make_encoding, normalise_name
from relpos.validation import MAX_POSITIONS, check_bool, check_choice, check_float, check_int

__all__ = ["ModelConfig", "PRESETS", "position_limit", "DEFAULT_ATTN_IMPL", "EMBED_SCALES", "INITS"]

#: Named model sizes; any field can be overridden (``ModelConfig.preset("small", scheme="t5")``).
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"d_model": 32, "n_layers": 2, "n_heads": 2, "max_len": 256},
    "small": {"d_model": 128, "n_layers": 4, "n_heads": 4, "max_len": 1024},
    "medium": {"d_model": 256, "n_layers": 6, "n_heads": 8, "max_len": 2048},
    "base": {"d_model": 512, "n_layers": 8, "n_heads": 8, "max_len": 2048},
}


#: The attention implementation of a model and of a bare :class:`MultiHeadAttention`.
DEFAULT_ATTN_IMPL = "auto"

#: Token-embedding scalings (``ModelConfig.embed_scale``): "none" uses the embedding
#: as it is (init std 0.02); "sqrt_d" multiplies it by sqrt(d_model), as in the
#: reference code of the randomized-positions paper, so that an absolute position
#: table of amplitude ~1 (sinusoidal) does not swamp the tokens.
EMBED_SCALES = ("none", "sqrt_d")

#: Weight initialisations (``ModelConfig.init``): "gpt2" draws every non-position weight
#: from N(0, 0.02^2), the residual projections from N(0, 0.02^2 / (2 L)) (GPT-2, nanoGPT);
#: "fan_in" keeps the token embedding at N(0, 0.02^2) and draws each linear weight
#: from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch's ``nn.Linear`` default, as in
#: Zoology's MQAR models: about 3.6 times larger than "gpt2" at width 64).
INITS = ("gpt2", "fan_in")

#: Upper limits of the model sizes (beyond them a model would not fit any machine).
MAX_D_MODEL = 1 << 16
MAX_LAYERS = 1024
MAX_VOCAB = 1 << 24


@dataclass
class ModelConfig:
    """Everything needed to build a model; flat and JSON-able.

    Attributes:
        vocab_size: token vocabulary V (256 for bytes).
        d_model: width C.
        n_layers: Transformer blocks L.
        n_heads: heads H; ``d_model`` must be divisible by it (head dim D = C / H).
        max_len: longest sequence the scheme is built for (size of learned absolute
            tables; the original length of RoPE scalings).
        causal: causal attention (an LM) or bidirectional.
        dropout: dropout on embeddings and residual branches.
        scheme: position scheme name (``relpos.encodings.scheme_names()``).
        scheme_options: the scheme's own options (e.g. ``{"num_buckets": 16}`` for t5).
        share_encoding: one scheme module for all layers (True), one per layer
            (False), or the scheme's default (None: shared for t5 only).
        random_positions: randomized positions (Ruoss et al. 2023,
            https://arxiv.org/abs/2305.16843): at train time the positions of a
            length-N row are a sorted random sample of N distinct integers from
            ``[0, random_positions)``; at eval time ``0..N-1``. None = off. Only
            schemes driven by integer positions use them.
        attn_impl: attention implementation (``relpos.attention.available_impls()``);
            ``"auto"`` (default) picks the fastest exact one for the device, shape and mode.
        d_ff: MLP hidden width (None = 4 * d_model; 0 = attention-only blocks with
            no MLP sublayer, as Zoology's MQAR models).
        init: weight initialisation of the non-position weights (:data:`INITS`):
            ``"gpt2"`` (default) or ``"fan_in"``.
        embed_scale: scaling of the token embeddings before the input position
            scheme is added: ``"none"`` (default; the embeddings as initialised,
            std 0.02) or ``"sqrt_d"`` (times ``sqrt(d_model)``, so tokens and a
            sinusoidal or learned absolute table have comparable size). The
            tied output layer uses the unscaled embedding matrix.

    Paired initialisation: every weight that is not part of the position scheme
    (token embedding, attention projections, MLP) is drawn from its own
    generator, seeded by one draw from torch's global generator at construction.
    So models of different schemes built after the same ``torch.manual_seed``
    start from identical non-position weights, whatever the schemes' own
    parameters consume.
    """

    vocab_size: int = 256
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    max_len: int = 1024
    causal: bool = True
    dropout: float = 0.0
    scheme: str = "rope"
    scheme_options: dict = field(default_factory=dict)
    share_encoding: bool | None = None
    random_positions: int | None = None
    attn_impl: str = DEFAULT_ATTN_IMPL
    d_ff: int | None = None
    embed_scale: str = "none"
    init: str = "gpt2"

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ checks

    def validate(self) -> None:
        """Raise TypeError (wrong type) or ValueError (wrong value) naming the first problem found."""
        check_int("vocab_size", self.vocab_size, 2, MAX_VOCAB)
        check_int("d_model", self.d_model, 1, MAX_D_MODEL)
        check_int("n_layers", self.n_layers, 1, MAX_LAYERS)
        check_int("n_heads", self.n_heads, 1, MAX_D_MODEL)
        check_int("max_len", self.max_len, 1, MAX_POSITIONS)
        if self.d_model % self.n_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must divide d_model ({self.d_model}): head dim would be "
                f"{self.d_model / self.n_heads:g}"
            )
        check_bool("causal", self.causal)
        check_float("dropout", self.dropout, 0.0, 1.0, hi_open=True)
        self.scheme = normalise_name(self.scheme, "scheme")
        get_scheme(self.scheme)  # unknown scheme -> ValueError listing the known ones
        if not isinstance(self.scheme_options, dict) or not all(isinstance(k, str) for k in self.scheme_options):
            raise TypeError(f"scheme_options must be a dict with str keys, got {self.scheme_options!r}")
        if self.share_encoding is not None:
            check_bool("share_encoding", self.share_encoding)
        if self.random_positions is not None:
            check_int("random_positions", self.random_positions, 1, MAX_POSITIONS)
        if self.d_ff is not None:
            check_int("d_ff", self.d_ff, 0, 16 * MAX_D_MODEL)
        check_choice("embed_scale", self.embed_scale, EMBED_SCALES)
        check_choice("init", self.init, INITS)
        from relpos.attention import IMPLS

        check_choice("attn_impl", self.attn_impl, sorted(IMPLS))

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def dims(self, causal: bool | None = None) -> Dims:
        """The :class:`~relpos.encodings.Dims` the scheme is built with."""
        return Dims(
            n_heads=self.n_heads,
            head_dim=self.head_dim,
            d_model=self.d_model,
            max_len=self.max_len,
            causal=self.causal if causal is None else causal,
        )

    def make_encoding(self, causal: bool | None = None) -> Encoding:
        """Build one scheme module for this configuration."""
        d = self.dims(causal)
        return make_encoding(
            self.scheme, n_heads=d.n_heads, head_dim=d.head_dim, d_model=d.d_model, max_len=d.max_len,
            causal=d.causal, **self.scheme_options,
        )

    def resolved_share_encoding(self) -> bool:
        """``share_encoding`` with None replaced by the scheme's default."""
        if self.share_encoding is not None:
            return self.share_encoding
        cls, _ = get_scheme(self.scheme)
        return bool(getattr(cls, "share_across_layers", False))

    # ----------------------------------------------------------- constructors

    @classmethod
    def preset(cls, name: str, **overrides) -> "ModelConfig":
        """A named preset (:data:`PRESETS`) with fields overridden.

        Raises:
            ValueError: unknown preset; TypeError: unknown field.
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise TypeError(f"unknown ModelConfig field(s) {unknown}; fields: {sorted(fields)}")
        kw = dict(PRESETS[name])
        kw.update(overrides)
        return cls(**kw)

    def to_dict(self) -> dict:
        """JSON-able dict (round-trips through :meth:`from_dict`)."""
        d = dataclasses.asdict(self)
        d["scheme_options"] = copy.deepcopy(self.scheme_options)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        """Inverse of :meth:`to_dict`; unknown keys raise ValueError naming them."""
        if not isinstance(d, dict):
            raise TypeError(f"model config must be a dict, got {type(d).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise ValueError(f"unknown model config field(s) {unknown}; fields: {sorted(fields)}")
        return cls(**copy.deepcopy(d))

    def replace(self, **changes) -> "ModelConfig":
        """A validated copy with some fields changed."""
        return dataclasses.replace(self, **changes)


def position_limit(enc: Encoding | None) -> int | None:
    """Number of positions a scheme's *learned absolute table* covers, else None.

    Only schemes that add learned vectors to the input embeddings have such a
    limit; they expose it as ``max_len`` (or as the first dim of an
    ``nn.Embedding``).
    """
    if enc is None or "embedding" not in enc.acts_on or enc.num_params() == 0:
        return None
    n = getattr(enc, "max_len", None)
    if isinstance(n, int) and not isinstance(n, bool):
        return n
    for m in enc.modules():
        if isinstance(m, nn.Embedding):
            return m.num_embeddings
    return None
