"""Peers: the public implementations a user would otherwise pick, each in every documented configuration.

Each peer is a whole attention layer of the shape of :mod:`relpos.bench.layers`
(norm, projections, residual), compared with the same relpos layer
(``relpos.attention(impl="auto")``, case impl ``"layer:<scheme>"``). A peer *family*
(say x-transformers' ALiBi) has one entry per configuration (``flash``, ``eager``);
the report shows every configuration and compares relpos with the family's fastest.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable

from torch import nn

from relpos.bench.spec import MODES, BenchSpec, Case, runs_with_mask

__all__ = ["Peer", "PEERS", "peer_cases", "build_peer", "peer_available"]


@dataclasses.dataclass(frozen=True)
class Peer:
    """One peer configuration.

    Attributes:
        family: the peer as a user knows it (``"x-transformers alibi"``).
        config: its configuration (``"flash"``, ``"eager"``, ``"sdpa"``, ...).
        scheme: the relpos scheme it computes (the relpos layer it is compared with).
        description: one line for the report.
        build: ``(dim, heads, dim_head, causal) -> nn.Module``.
        requires: the module that must be importable for the peer to run.
        modes: the modes it can run (FlexAttention has no CPU backward).
        max_n: the longest N it runs; a longer request runs it at ``max_n`` (the loop peer).
        warmups: untimed runs before timing (2 for compiled code: the first compiles).
        memory: measure its peak memory in a fresh process (False for compiled code, whose
            compiler workers do not belong in a forked child and whose compile would dominate).
        masks: the masks it runs (``"causal"``, ``"bidirectional"``); CoPE's positions count the past.
    """

    family: str
    config: str
    scheme: str
    description: str
    build: Callable[[int, int, int, bool], nn.Module]
    requires: str | None = None
    modes: tuple[str, ...] = MODES
    max_n: int | None = None
    warmups: int = 1
    memory: bool = True
    masks: tuple[str, ...] = ("causal", "bidirectional")


def _xt(kw: dict, flash: bool):
    def build(dim: int, heads: int, dim_head: int, causal: bool) -> nn.Module:
        import x_transformers

        cls = x_transformers.Decoder if causal else x_transformers.Encoder
        return cls(dim=dim, depth=1, heads=heads, attn_dim_head=dim_head, custom_layers=("a",), attn_flash=flash,
                   **kw)

    return build


def _hf(impl: str):
    def build(dim: int, heads: int, dim_head: int, causal: bool) -> nn.Module:
        from relpos.bench.layers import HFT5

        return HFT5(dim, heads, dim_head, causal, impl)

    return build


def _rotary(xpos: bool):
    def build(dim: int, heads: int, dim_head: int, causal: bool) -> nn.Module:
        from relpos.bench.layers import RotaryPeerLayer

        return RotaryPeerLayer(dim, heads, dim_head, causal, xpos)

    return build


def _hf_deberta(share_att_key: bool):
    def build(dim: int, heads: int, dim_head: int, causal: bool) -> nn.Module:
        from relpos.bench.layers import HFDebertaV2

        return HFDebertaV2(dim, heads, dim_head, causal, share_att_key)

    return build


def _cope_paper(dim: int, heads: int, dim_head: int, causal: bool) -> nn.Module:
    from relpos.bench.layers import CoPEPaper

    return CoPEPaper(dim, heads, dim_head, causal)


def _flex_alibi(dim: int, heads: int, dim_head: int, causal: bool) -> nn.Module:
    from relpos.bench.layers import FlexAlibiLayer

    return FlexAlibiLayer(dim, heads, dim_head, causal)


def _shaw(loop: bool):
    def build(dim: int, heads: int, dim_head: int, causal: bool) -> nn.Module:
        from relpos.bench.layers import ShawLoop, ShawNND

        return (ShawLoop if loop else ShawNND)(dim, heads, dim_head, 16, causal)

    return build


_XT = "x-transformers Decoder (causal) / Encoder (bidirectional) layer"
#: name -> peer configuration. transformers' T5 also has attn_implementation='flex_attention'; on CPU
#: (torch 2.13.0, transformers 5.24) its compiled kernel crashed the process (segmentation fault at N = 16),
#: so it is not listed.
PEERS: dict[str, Peer] = {
    "hf-t5-sdpa": Peer("HF T5", "sdpa", "t5", "transformers T5LayerSelfAttention, attn_implementation='sdpa'",
                       _hf("sdpa"), "transformers"),
    "hf-t5-eager": Peer("HF T5", "eager", "t5", "transformers T5LayerSelfAttention, attn_implementation='eager'",
                        _hf("eager"), "transformers"),
    "xt-t5": Peer("x-transformers T5", "eager", "t5",
                  f"{_XT}, rel_pos_bias=True",
                  _xt({"rel_pos_bias": True}, False), "x_transformers"),
    "xt-t5-flash": Peer("x-transformers T5", "flash", "t5", f"{_XT}, rel_pos_bias=True, attn_flash=True",
                        _xt({"rel_pos_bias": True}, True), "x_transformers"),
    "xt-alibi-flash": Peer("x-transformers alibi", "flash", "alibi", f"{_XT}, alibi_pos_bias=True, attn_flash=True",
                           _xt({"alibi_pos_bias": True}, True), "x_transformers"),
    "xt-alibi-eager": Peer("x-transformers alibi", "eager", "alibi", f"{_XT}, alibi_pos_bias=True",
                           _xt({"alibi_pos_bias": True}, False), "x_transformers"),
    "xt-dpb": Peer("x-transformers dpb", "eager", "dpb", f"{_XT}, dynamic_pos_bias=True",
                   _xt({"dynamic_pos_bias": True}, False), "x_transformers"),
    "xt-dpb-flash": Peer("x-transformers dpb", "flash", "dpb", f"{_XT}, dynamic_pos_bias=True, attn_flash=True",
                         _xt({"dynamic_pos_bias": True}, True), "x_transformers"),
    "hf-deberta": Peer("HF DeBERTa-v2", "separate position projections", "deberta",
                       "transformers DisentangledSelfAttention (c2p+p2c, 256 buckets, share_att_key=False) with "
                       "DebertaV2Encoder's LayerNorm'd position table", _hf_deberta(False), "transformers"),
    "hf-deberta-shared": Peer("HF DeBERTa-v2", "share_att_key", "deberta",
                              "transformers DisentangledSelfAttention (c2p+p2c, 256 buckets, share_att_key=True, "
                              "DeBERTa-v3's setting)", _hf_deberta(True), "transformers"),
    "cope-paper": Peer("CoPE paper code", "N x N gather", "cope",
                       "CoPE as the paper's reference code writes it: sigmoid gates, flipped cumsum, q.e table, two "
                       "N x N gathers (Golovneva et al. 2024)", _cope_paper, masks=("causal",)),
    "xt-rope-flash": Peer("x-transformers rope", "flash", "rope", f"{_XT}, rotary_pos_emb=True, attn_flash=True",
                          _xt({"rotary_pos_emb": True}, True), "x_transformers"),
    "xt-rope-eager": Peer("x-transformers rope", "eager", "rope", f"{_XT}, rotary_pos_emb=True",
                          _xt({"rotary_pos_emb": True}, False), "x_transformers"),
    "ret-rope": Peer("rotary-embedding-torch", "sdpa", "rope",
                     "rotary-embedding-torch RotaryEmbedding on q and k, then fused causal SDPA",
                     _rotary(False), "rotary_embedding_torch"),
    "ret-xpos": Peer("rotary-embedding-torch xpos", "sdpa", "xpos",
                     "rotary-embedding-torch RotaryEmbedding(use_xpos=True), then fused causal SDPA",
                     _rotary(True), "rotary_embedding_torch"),
    "flex-alibi": Peer("FlexAttention alibi", "compiled", "alibi",
                       "torch.compile(flex_attention) with an ALiBi score_mod and a causal block_mask, as its "
                       "documentation writes it (inference on CPU)", _flex_alibi, modes=("fwd",), warmups=2,
                       memory=False),
    "shaw-nnd": Peer("Shaw N x N x d", "tensor", "shaw-kv",
                     "Shaw key+value attention with the N x N x d relation tensors (tensor2tensor form)",
                     _shaw(False)),
    "shaw-loop": Peer("Shaw i, j loop", "loop", "shaw-kv",
                      "Shaw key+value attention as a plain Python loop over i and j (educational floor, N <= 128)",
                      _shaw(True), max_n=128),
}


def peer_available(name: str) -> bool:
    """True if the peer's package is installed."""
    req = PEERS[name].requires
    return req is None or importlib.util.find_spec(req) is not None


def peer_cases(lengths: list[int], modes: list[str] | tuple[str, ...] = MODES,
               names: list[str] | None = None, *, causal: bool = True) -> list[Case]:
    """Every peer (and the relpos layer of its scheme) at each N in ``lengths``, each mode it runs,
    for the mask ``causal`` (peers that do not run that mask, or whose scheme is causal-only in relpos,
    are left out).

    A peer with ``max_n`` below a requested N runs at ``max_n`` instead (with its relpos layer).

    Args:
        lengths: sequence lengths.
        modes: modes to run (each peer runs those of them it supports).
        names: peers to run (default: all of :data:`PEERS`).
        causal: the mask of the run.

    Raises:
        ValueError: an unknown peer name.
    """
    for n in names or ():
        if n not in PEERS:
            raise ValueError(f"unknown peer {n!r}; known: {', '.join(PEERS)}")
    out: list[Case] = []
    for N in lengths:
        for name, peer in PEERS.items():
            if names is not None and name not in names:
                continue
            if ("causal" if causal else "bidirectional") not in peer.masks or not runs_with_mask(peer.scheme, causal):
                continue
            n = N if peer.max_n is None else min(N, peer.max_n)
            for m in modes:
                if m not in peer.modes:
                    continue
                for c in (Case(peer.scheme, f"peer:{name}", n, m), Case(peer.scheme, f"layer:{peer.scheme}", n, m)):
                    if c not in out:
                        out.append(c)
    return out


def build_peer(name: str, spec: BenchSpec) -> nn.Module:
    """The peer's layer at the spec's shape.

    Raises:
        ValueError: an unknown peer name.
        relpos.attention.UnsupportedError: the peer's package is not installed, or the peer
            refuses the configuration.
    """
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
    mask = "causal" if spec.causal else "bidirectional"
    if mask not in PEERS[name].masks:
        from relpos.attention import UnsupportedError

        raise UnsupportedError(f"peer {name!r} runs only {', '.join(PEERS[name].masks)} attention")
    if not peer_available(name):
        from relpos.attention import UnsupportedError

        raise UnsupportedError(f"peer {name!r} needs the package {PEERS[name].requires!r}")
    try:
        return PEERS[name].build(spec.heads * spec.head_dim, spec.heads, spec.head_dim, spec.causal)
    except AssertionError as e:  # x-transformers refuses a combination with an assertion
        from relpos.attention import UnsupportedError

        raise UnsupportedError(f"peer {name!r} refuses this configuration: {e}") from e
