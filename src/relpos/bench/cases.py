"""What a benchmark run measures: the plans (one case per configuration) and the targets."""

from __future__ import annotations

from relpos.bench.peers import peer_cases
from relpos.bench.spec import MODES, BenchSpec, Case, runs_with_mask

__all__ = ["MODES", "TARGETS", "BenchSpec", "Case", "attention_schemes", "default_impls", "default_cases",
           "grid_cases", "GRID_LENGTHS", "SAMPLE_LENGTHS", "SAMPLE_SCHEMES", "SWEEP_LENGTHS", "SWEEP_SCHEMES",
           "LONG_LENGTHS", "LONG_SCHEMES", "DENSE_MAX_N", "MAIN_N"]

#: The length of the main table: every scheme and implementation, and the peers.
MAIN_N = 2048

#: Targets (CPU, N = 2048, fwd+bwd, ratio to position-free SDPA): the first wave's,
#: and the slow schemes' for Transformer-XL, FIRE, FoX, DeBERTa and CoPE. Data, keyed by registry name.
TARGETS: dict[str, float] = {
    "nope": 1.2, "rope": 1.2, "alibi": 1.2, "sandwich": 1.2,
    "t5": 1.5, "kerple-log": 1.5, "kerple-power": 1.5, "fire": 1.5, "transformer-xl": 1.5, "shaw": 1.5,
    "shaw-kv": 2.0, "fox": 1.5, "deberta": 3.0, "cope": 3.0,
}


def attention_schemes() -> list[str]:
    """Registered schemes that act inside attention, plus ``"nope"``.

    Schemes that only rotate q and k (``acts_on == {"qk"}``) cost the same for every
    preset of one class (RoPE's scaled variants run RoPE's kernels), so only the
    first registered name of such a class is kept.
    """
    import relpos
    from relpos.encodings import get_scheme, scheme_names

    out, rotary_classes = [], set()
    for n in scheme_names():
        enc = relpos.make_encoding(n, n_heads=2, head_dim=8)
        if not enc.acts_on or enc.acts_on - {"embedding"}:
            cls = get_scheme(n)[0]
            if enc.acts_on == {"qk"}:
                if cls in rotary_classes:
                    continue
                rotary_classes.add(cls)
            out.append(n)
    return out


def default_impls(device: str = "cpu") -> list[str]:
    """Implementations timed by default: FlexAttention only on CUDA (on CPU it is neither fused nor differentiable)."""
    from relpos.attention import available_impls

    impls = [i for i in ("dense", "chunked", "flex", "auto") if i in available_impls()]
    if device == "cpu":
        impls = [i for i in impls if i != "flex"]
    return impls


#: Lengths of the full grid: every scheme x every implementation x both modes (and both masks).
GRID_LENGTHS = (256, 1024, 2048)
#: The long length, sampled: :data:`SAMPLE_SCHEMES` with ``chunked`` and ``auto`` (``dense`` would
#: form ``(B, H, N, N)`` tensors of 2 GiB each, and ``auto``'s table never measures or picks it there).
SAMPLE_LENGTHS = (8192,)
SAMPLE_SCHEMES = ("alibi", "t5", "fire", "deberta")
#: Very long, causal training only: :data:`LONG_SCHEMES` with ``chunked``.
LONG_LENGTHS = (16384,)
LONG_SCHEMES = ("alibi", "t5")
# kept for callers of the earlier plan
SWEEP_LENGTHS = GRID_LENGTHS + SAMPLE_LENGTHS
SWEEP_SCHEMES = SAMPLE_SCHEMES
DENSE_MAX_N = max(GRID_LENGTHS)


def default_cases(device: str = "cpu", *, peers: bool = False, causal: bool = True) -> list[Case]:
    """The default plan for one mask (``relpos bench`` runs it causal, then bidirectional).

    * ``N`` in :data:`GRID_LENGTHS`: every attention scheme x every implementation,
      forward and forward+backward (``auto`` against the fastest of them in every cell);
    * ``N`` in :data:`SAMPLE_LENGTHS`: :data:`SAMPLE_SCHEMES` with ``chunked`` and ``auto``,
      both modes;
    * causal only: ``N`` in :data:`LONG_LENGTHS`, :data:`LONG_SCHEMES` with ``chunked``,
      forward+backward;
    * ``peers``: every peer and its matching relpos layer at ``N = 2048`` (see
      :func:`relpos.bench.peers.peer_cases`).
    """
    cases: list[Case] = []
    impls = default_impls(device)
    schemes = [s for s in attention_schemes() if runs_with_mask(s, causal)]
    for N in GRID_LENGTHS:
        for s in schemes:
            for i in impls:
                for m in MODES:
                    cases.append(Case(s, i, N, m))
    for N in SAMPLE_LENGTHS:
        for s in (s for s in SAMPLE_SCHEMES if s in schemes):
            for i in ("chunked", "auto"):
                for m in MODES:
                    cases.append(Case(s, i, N, m))
    if causal:
        for N in LONG_LENGTHS:
            for s in LONG_SCHEMES:
                cases.append(Case(s, "chunked", N, "fwd+bwd"))
    if peers:
        cases += peer_cases([MAIN_N], causal=causal)
    return cases


def grid_cases(schemes: list[str], impls: list[str], lengths: list[int], modes: list[str], *,
               causal: bool = True) -> list[Case]:
    """Every combination (``impls`` may include ``"peers"`` for the peer set of the mask ``causal``);
    causal-only schemes are left out of a bidirectional grid."""
    schemes = [s for s in schemes if runs_with_mask(s, causal)]
    cases = [Case(s, i, N, m) for N in lengths for s in schemes for i in impls if i != "peers" for m in modes]
    if "peers" in impls:
        cases += peer_cases(lengths, modes, causal=causal)
    return cases
