"""NoPE: no position information at all.

Paper: Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length
Generalization in Transformers", https://arxiv.org/abs/2305.19466

In causal attention the mask alone leaks order (a token can count how many
tokens it sees), which is why NoPE decoders learn positions implicitly. In
bidirectional attention NoPE is permutation-equivariant.
"""

from __future__ import annotations

from relpos.encodings.base import Encoding


class NoPE(Encoding):
    """No position encoding. Acts nowhere; zero parameters.

    Example:
        >>> NoPE(n_heads=4).num_params()
        0
    """

    name = "nope"
    acts_on = frozenset()
    relative = True  # trivially: scores do not depend on positions at all
    integer_positions = False
    paper = "https://arxiv.org/abs/2305.19466"

    def __init__(self, n_heads: int = 1) -> None:
        super().__init__(n_heads)
