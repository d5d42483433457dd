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
    assert fams["x-transformers dpb"] == {"flash", "eager"}
    assert fams["HF DeBERTa-v2"] == {"separate position projections", "share_att_key"}
    assert "CoPE paper code" in fams
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


def test_cope_paper_peer_computes_relpos_cope():
    """The peer written from the paper's code is CoPE as relpos's float64 reference computes it."""
    import relpos
    from relpos.bench.layers import CoPEPaper

    torch.manual_seed(0)
    H, D, N = 2, 8, 13
    enc = relpos.make_encoding("cope", n_heads=H, head_dim=D, npos_max=6).double()
    with torch.no_grad():
        enc.pos_emb.normal_()
    layer = CoPEPaper(H * D, H, D, True, npos_max=6).double()
    with torch.no_grad():
        layer.pos_emb.copy_(enc.pos_emb[0].T[None])
    q, k, v = (torch.randn(1, H, N, D, dtype=torch.float64) * 2 for _ in range(3))
    torch.testing.assert_close(layer.attend(q, k, v), relpos.attention(q, k, v, enc, causal=True, impl="reference"))


@pytest.mark.parametrize("causal", [True, False])
def test_hf_deberta_peer_runs_both_masks(causal):
    pytest.importorskip("transformers")
    from relpos.bench.layers import HFDebertaV2

    layer = HFDebertaV2(32, 2, 16, causal, share_att_key=False)
    x = torch.randn(1, 9, 32, requires_grad=True)
    y = layer(x)
    y.sum().backward()
    assert y.shape == x.shape and torch.isfinite(x.grad).all()
    if causal:  # the last position does not reach back into the first
        x2 = x.detach().clone()
        x2[:, -1] += 1
        torch.testing.assert_close(layer(x2)[:, :-1], y[:, :-1])


def test_peer_masks():
    assert {c.impl for c in bench.peer_cases([64], names=["cope-paper"], causal=False)} == set()
    with pytest.raises(UnsupportedError, match="causal"):
        bench.build_step(bench.Case("cope", "peer:cope-paper", 16, "fwd"), bench.BenchSpec(causal=False))
