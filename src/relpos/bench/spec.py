"""The shared vocabulary of a benchmark run: the modes, the run's :class:`BenchSpec` and one :class:`Case`.

Kept apart from :mod:`~relpos.bench.cases` (the plans) and :mod:`~relpos.bench.peers`
(the peer registry) so that both import it and neither imports the other's caller.
"""

from __future__ import annotations

import dataclasses

import torch

__all__ = ["MODES", "AUTO_CHOICES", "AUTO_TOLERANCE", "BenchSpec", "Case", "runs_with_mask"]

MODES = ("fwd", "fwd+bwd")
#: The implementations ``auto`` chooses from (what its pick is judged against).
AUTO_CHOICES = ("dense", "chunked", "flex")
#: ``auto`` is on target where its time is within this factor of the fastest implementation's.
AUTO_TOLERANCE = 1.05

_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
           "float16": torch.float16}


@dataclasses.dataclass
class BenchSpec:
    """Shapes and process settings shared by every case of a run.

    Attributes:
        batch, heads, head_dim: the ``(B, H, N, D)`` shape of q, k and v.
        causal: causal attention (default) or bidirectional.
        dtype: ``float32``, ``float64``, ``bfloat16`` or ``float16``.
        repeats: timed rounds per case; the median is kept.
        threads: torch intra-op threads (0 keeps torch's default).
        flush_denormal: ``torch.set_flush_denormal(True)`` before any work.
        memory: measure peak memory in fresh processes.
        memory_jobs: memory processes at a time.
        device: ``cpu`` or ``cuda``.
        clock: ``cpu`` (process CPU time) or ``wall``.
        settle: run each case once untimed right before each of its timed runs, so a timed run
            follows a run of the same case whatever the order. It does not make ``dense``'s large
            buffers steady: whether glibc maps them fresh or reuses heap memory depends on the
            process's history (benchmarks/README.md, "Page faults").
    """

    batch: int = 1
    heads: int = 8
    head_dim: int = 64
    causal: bool = True
    dtype: str = "float32"
    repeats: int = 3
    threads: int = 1
    flush_denormal: bool = True
    memory: bool = True
    memory_jobs: int = 3
    device: str = "cpu"
    clock: str = "cpu"
    settle: bool = True

    def torch_dtype(self) -> torch.dtype:
        """The torch dtype of :attr:`dtype`.

        Raises:
            ValueError: an unknown dtype name.
        """
        try:
            return _DTYPES[self.dtype]
        except KeyError:
            raise ValueError(f"dtype must be float32, float64, bfloat16 or float16, got {self.dtype!r}") from None


@dataclasses.dataclass(frozen=True)
class Case:
    """One configuration.

    ``impl`` is ``"sdpa"`` for the baseline, an attention implementation name,
    ``"peer:<name>"`` (a peer of :data:`relpos.bench.peers.PEERS`) or
    ``"layer:<scheme>"`` (the relpos attention layer that the peers of ``scheme``
    are compared with).
    """

    scheme: str
    impl: str
    N: int
    mode: str

    @property
    def key(self) -> tuple:
        return (self.scheme, self.impl, self.N, self.mode)


#: A benchmark scheme ``"<name>@half"``: the scheme as a compare job configures it for a training length of
#: ``N / 2`` (its ``options_for_length``), called at ``N``: the 2x-extrapolation call (FIRE with its threshold at
#: ``N / 2``, half its rows past it: the ``"piecewise"`` engine's case at the lengths where FIRE's default
#: threshold keeps every row Toeplitz). Built by :func:`relpos.bench.steps.make_encoding`.
HALF = "@half"


def base_scheme(scheme: str) -> str:
    """The registry name of a benchmark scheme (``"fire@half"`` -> ``"fire"``)."""
    return scheme.removesuffix(HALF)


def runs_with_mask(scheme: str, causal: bool) -> bool:
    """False for a causal-only scheme (xPos, CoPE, FoX) in a bidirectional run."""
    if causal or scheme == "none":
        return True
    import relpos

    return not relpos.make_encoding(base_scheme(scheme), n_heads=2, head_dim=8).causal_only
