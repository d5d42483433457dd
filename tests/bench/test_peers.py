"""The peer registry and the hand-written peer layers."""

from __future__ import annotations

import pytest
import torch

from relpos import bench
from relpos.attention import UnsupportedError
from relpos.bench.layers import ShawLoop, ShawNND


def test_every_peer_family_lists_each_configuration():
    fams: dict[str, set] = {}
    for p in bench.PEERS.values():
        fams.setdefault(p.family, set()).add(p.config)
    assert fams["x-transformers alibi"] == {"flash", "eager"}
    assert fams["x-transformers rope"] == {"flash", "eager"}
    assert fams["x-transformers T5"] == {"flash", "eager"}
    assert fams["HF T5"] == {"sdpa", "eager"}
    assert {p.scheme for p in bench.PEERS.values()} <= set(bench.attention_schemes())


def test_peer_cases_pair_each_peer_with_the_relpos_layer_of_its_scheme():
    cases = bench.peer_cases([2048])
    impls = {c.impl for c in cases}
    for name, p in bench.PEERS.items():
        assert f"peer:{name}" in impls and f"layer:{p.scheme}" in impls
    loop = [c for c in cases if c.impl == "peer:shaw-loop"]
    assert loop and all(c.N == bench.PEERS["shaw-loop"].max_n for c in loop)
    assert {c.mode for c in cases if c.impl == "peer:flex-alibi"} == {"fwd"}
    assert len(cases) == len(set(cases))
    with pytest.raises(ValueError, match="unknown peer"):
        bench.peer_cases([64], names=["nosuch"])
    assert {c.impl for c in bench.peer_cases([64], names=["xt-t5"])} == {"peer:xt-t5", "layer:t5"}


def test_refused_configuration_is_unsupported():
    with pytest.raises(UnsupportedError, match="refuses"):
        bench.build_step(bench.Case("t5", "peer:xt-t5-flash", 16, "fwd"), bench.BenchSpec())


def test_shaw_loop_equals_the_tensor_form():
    """The educational i, j loop computes exactly what the N x N x d form computes."""
    torch.manual_seed(0)
    for causal in (True, False):
        nnd = ShawNND(32, 2, 16, 3, causal).double()
        loop = ShawLoop(32, 2, 16, 3, causal).double()
        loop.load_state_dict(nnd.state_dict())
        with torch.no_grad():
            nnd.rel_k.normal_()
            nnd.rel_v.normal_()
        loop.load_state_dict(nnd.state_dict())
        x = torch.randn(2, 9, 32, dtype=torch.float64)
        torch.testing.assert_close(loop(x), nnd(x))
