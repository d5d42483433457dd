"""DeBERTa disentangled attention: reference, buckets, scaling, sharing, HF conformance."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import relpos
from relpos.encodings.deberta import DeBERTa
from tests.helpers import randomize_parameters

H, D = 2, 4
C = H * D


def _qkv(B=2, Nq=7, Nk=7, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, n, D, generator=g, dtype=dtype, requires_grad=True) for n in (Nq, Nk, Nk))


def _enc(**kw):
    opts = {"n_heads": H, "head_dim": D, "position_buckets": 8, "max_relative_positions": 16, **kw}
    enc = DeBERTa(**opts)
    randomize_parameters(enc)
    return enc


# ------------------------------------------------------------------ structure


def test_parameters_and_sharing():
    enc = relpos.make_encoding("deberta", n_heads=4, head_dim=8)
    assert enc.rel_embeddings.shape == (512, 32)  # 2 * position_buckets rows, d_model wide
    assert enc.acts_on == frozenset({"score"}) and not enc.causal_only
    lin = 32 * 32 + 32
    assert enc.num_params() == 512 * 32 + 2 * 32 + 2 * lin
    shared = relpos.make_encoding("deberta", n_heads=4, head_dim=8, share_projections=True)
    assert shared.pos_query_proj is shared.pos_key_proj
    assert shared.num_params() == 512 * 32 + 2 * 32 + lin
    hf_share = relpos.make_encoding("deberta", n_heads=4, head_dim=8, share_att_key=True, layer_norm=False)
    assert hf_share.pos_key_proj is None and hf_share.num_params() == 512 * 32
    flat = DeBERTa(n_heads=2, head_dim=4, position_buckets=0, max_relative_positions=5)
    assert flat.span == 5 and flat.rel_embeddings.shape == (10, 8)


def test_attention_scale_counts_terms():
    assert DeBERTa(n_heads=1, head_dim=16).attention_scale(16) == pytest.approx(1 / math.sqrt(48))
    assert DeBERTa(n_heads=1, head_dim=16, terms="c2p").attention_scale(16) == pytest.approx(1 / math.sqrt(32))
    assert DeBERTa(n_heads=1, head_dim=16, terms=["p2c"]).attention_scale(16) == pytest.approx(1 / math.sqrt(32))
    assert DeBERTa(n_heads=1, head_dim=16, terms="p2c|c2p").terms == ("c2p", "p2c")


# ------------------------------------------------------------------ formula


def test_score_is_scaled_c2p_plus_p2c_on_query_minus_key_rows():
    enc = _enc()
    q, k, _ = _qkv(B=1, Nq=3, Nk=12)
    qpos, kpos = torch.tensor([[2, 9, 11]]), torch.arange(12)[None]
    s = enc.score(q, k, qpos, kpos, scale=0.37)
    kr, qr = enc.position_vectors()
    for h in range(H):
        for t, i in enumerate(qpos[0].tolist()):
            for j in range(12):
                r = enc._ref_bucket(i - j)  # i - j: query minus key
                row = min(max(r + 8, 0), 15)
                want = 0.37 * (q[0, h, t] @ kr[h, row] + k[0, h, j] @ qr[h, row])
                assert s[0, h, t, j].item() == pytest.approx(want.item(), abs=1e-5)


@pytest.mark.parametrize(
    "opts",
    [
        {},
        {"terms": "c2p"},
        {"terms": "p2c"},
        {"share_projections": True},
        {"layer_norm": False},
        {"position_buckets": 0, "max_relative_positions": 6},
        {"position_buckets": 4, "max_relative_positions": 9, "d_model": 6},
    ],
)
def test_score_matches_reference_with_grads(opts):
    enc = _enc(**opts)
    q, k, _ = _qkv(B=2, Nq=5, Nk=30)
    qpos = torch.tensor([[25, 26, 27, 28, 29], [0, 3, 12, 20, 29]])
    kpos = torch.arange(30)[None]
    scale = enc.attention_scale(D)
    s = enc.score(q, k, qpos, kpos, scale)
    r = enc.reference_score(q, k, qpos, kpos, scale)
    torch.testing.assert_close(s.double(), r, atol=1e-5, rtol=1e-5)
    w = torch.randn(s.shape, generator=torch.Generator().manual_seed(1))
    params = [q, k] + list(enc.parameters())
    g1 = torch.autograd.grad((s * w).sum(), params, allow_unused=True)
    g2 = torch.autograd.grad((r * w.double()).sum(), params, allow_unused=True)
    assert all(g is not None for g in g1[2:])  # every parameter is used
    assert (g1[0] is None) == ("c2p" not in enc.terms)  # q only enters through c2p
    assert (g1[1] is None) == ("p2c" not in enc.terms)  # k only enters through p2c
    for a, b in zip(g1, g2):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a.double(), b.double(), atol=1e-4, rtol=1e-4)


def test_attention_matches_reference_with_log_buckets_and_padding():
    enc = _enc()
    q, k, v = _qkv(B=2, Nq=24, Nk=24, seed=3)
    kpm = torch.ones(2, 24, dtype=torch.bool)
    kpm[1, -5:] = False
    for causal in (False, True):
        out = relpos.attention(q, k, v, enc, causal=causal, key_padding_mask=kpm)
        ref = relpos.attention(q, k, v, enc, causal=causal, key_padding_mask=kpm, impl="reference")
        torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


# ------------------------------------------------------------------ properties


@given(st.integers(-40, 40), st.lists(st.integers(-60, 60), min_size=1, max_size=12), st.integers(0, 500))
def test_position_rows_depend_on_offsets_only_and_are_monotone(i, ks, shift):
    enc = DeBERTa(n_heads=1, head_dim=2, position_buckets=8, max_relative_positions=16)
    ks = sorted(ks)
    qpos, kpos = torch.tensor([[i]]), torch.tensor([ks])
    idx = enc.position_index(qpos, kpos)[0, 0]
    assert ((idx >= 0) & (idx < 16)).all()
    assert (idx[1:] <= idx[:-1]).all()  # farther right keys -> smaller i - j -> lower rows
    assert torch.equal(idx, enc.position_index(qpos + shift, kpos + shift)[0, 0])
    mirrored = enc.position_index(-qpos, -kpos)[0, 0]  # bucket(-r) = -bucket(r)
    assert torch.equal((idx - 8).clamp(-7, 7), -(mirrored - 8).clamp(-7, 7))


@given(st.integers(0, 300))
def test_score_is_translation_invariant(shift):
    enc = _enc()
    q, k, _ = _qkv(B=1, Nq=4, Nk=9)
    qpos, kpos = torch.tensor([[1, 4, 6, 8]]), torch.arange(9)[None]
    a = enc.score(q, k, qpos, kpos, 0.5)
    b = enc.score(q, k, qpos + shift, kpos + shift, 0.5)
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_low_precision_inputs_keep_float32_positions():
    """(Decoding and bfloat16 outputs: tests/encodings/test_content_dependent.py.)"""
    enc = _enc()
    q, k, _ = (t.detach().to(torch.bfloat16) for t in _qkv(seed=7))
    kr, qr = enc.position_vectors()
    assert kr.dtype == torch.float32 and qr.dtype == torch.float32
    pos = torch.arange(7)[None]
    assert enc.score(q, k, pos, pos, 0.3).dtype == torch.float32


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "opts, err, match",
    [
        ({"terms": "c2q"}, ValueError, "terms"),
        ({"terms": ""}, ValueError, "terms"),
        ({"terms": 3}, TypeError, "terms"),
        ({"position_buckets": 1}, ValueError, "position_buckets"),
        ({"position_buckets": -2}, ValueError, "position_buckets"),
        ({"position_buckets": 64, "max_relative_positions": 32}, ValueError, "max_position"),
        ({"max_relative_positions": 0, "position_buckets": 0}, ValueError, "max_relative_positions"),
        ({"share_projections": True, "share_att_key": True}, ValueError, "exclusive"),
        ({"layer_norm": 1}, TypeError, "layer_norm"),
        ({"layer_norm_eps": 0.0}, ValueError, "layer_norm_eps"),
        ({"init_std": -1.0}, ValueError, "init_std"),
    ],
)
def test_bad_options(opts, err, match):
    with pytest.raises(err, match=match):
        DeBERTa(n_heads=2, head_dim=4, **opts)


def test_unknown_option_and_unbound_sharing():
    with pytest.raises(TypeError, match="accepted options"):
        relpos.make_encoding("deberta", n_heads=2, head_dim=4, buckets=3)
    enc = DeBERTa(n_heads=2, head_dim=4, share_att_key=True)
    q, k, v = _qkv()
    with pytest.raises(RuntimeError, match="bind_content_projections"):
        relpos.attention(q, k, v, enc, causal=False)
    with pytest.raises(ValueError, match="n_heads\\*head_dim"):
        enc.bind_content_projections(torch.nn.Linear(8, 6), torch.nn.Linear(8, 8))
    with pytest.raises(ValueError, match="share_att_key=True"):
        DeBERTa(n_heads=2, head_dim=4).bind_content_projections(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))


# ------------------------------------------------------------------ Hugging Face conformance


def _hf_setup(seed, **cfg_over):
    tr = pytest.importorskip("transformers")
    from transformers.models.deberta_v2.modeling_deberta_v2 import DebertaV2Encoder

    cfg = dict(hidden_size=C, num_attention_heads=H, intermediate_size=16, num_hidden_layers=1,
               relative_attention=True, pos_att_type="p2c|c2p", position_buckets=8, max_relative_positions=16,
               norm_rel_ebd="layer_norm", share_att_key=False, hidden_dropout_prob=0.0,
               attention_probs_dropout_prob=0.0, layer_norm_eps=1e-7)
    cfg.update(cfg_over)
    torch.manual_seed(seed)
    encoder = DebertaV2Encoder(tr.DebertaV2Config(**cfg)).eval()
    randomize_parameters(encoder, std=0.5, seed=seed)
    return encoder, encoder.layer[0].attention.self


def _hf_vs_relpos(encoder, attn, enc, N=21, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, N, C, generator=g)
    mask = torch.ones(2, N, dtype=torch.long)
    mask[1, -4:] = 0  # right padding in the second row
    rel = encoder.get_rel_embedding()
    hf_ctx, hf_probs = attn(x, encoder.get_attention_mask(mask), output_attentions=True,
                            relative_pos=encoder.get_rel_pos(x), rel_embeddings=rel)

    def heads(t):
        return t.view(2, N, H, D).transpose(1, 2)  # (B, H, N, D)

    q, k, v = heads(attn.query_proj(x)), heads(attn.key_proj(x)), heads(attn.value_proj(x))
    out = relpos.attention(q, k, v, enc, causal=False, key_padding_mask=mask.bool())
    ctx = out.transpose(1, 2).reshape(2, N, C)
    real = mask.bool()
    torch.testing.assert_close(ctx[real], hf_ctx[real], atol=2e-5, rtol=1e-4)
    # gradients of the same loss reach the same position parameters
    w = torch.randn(ctx.shape, generator=g) * real[..., None]
    ga = torch.autograd.grad((ctx * w).sum(), [encoder.rel_embeddings.weight], retain_graph=True)[0]
    gb = torch.autograd.grad((hf_ctx * w).sum(), [encoder.rel_embeddings.weight])[0]
    torch.testing.assert_close(ga, gb, atol=1e-4, rtol=1e-3)
    return hf_probs


def _copy_into(enc, encoder, attn):
    # tie (not copy) so that gradients flow to the HF parameters and can be compared
    enc.rel_embeddings = encoder.rel_embeddings.weight
    if enc.norm is not None:
        enc.norm = encoder.LayerNorm
    if enc.pos_key_proj is not None and hasattr(attn, "pos_key_proj"):
        enc.pos_key_proj = attn.pos_key_proj
    if enc.pos_query_proj is not None and hasattr(attn, "pos_query_proj"):
        enc.pos_query_proj = attn.pos_query_proj


@pytest.mark.parametrize(
    "cfg, opts",
    [
        ({}, {}),
        ({"pos_att_type": "c2p"}, {"terms": "c2p"}),
        ({"pos_att_type": "p2c"}, {"terms": "p2c"}),
        ({"norm_rel_ebd": "none"}, {"layer_norm": False}),
        ({"position_buckets": -1, "max_relative_positions": 6}, {"position_buckets": 0, "max_relative_positions": 6}),
    ],
)
def test_matches_hugging_face_debertav2(cfg, opts):
    encoder, attn = _hf_setup(seed=11, **cfg)
    enc = DeBERTa(n_heads=H, head_dim=D, d_model=C, **{"position_buckets": 8, "max_relative_positions": 16, **opts})
    _copy_into(enc, encoder, attn)
    assert enc.attention_scale(D) == pytest.approx(1 / math.sqrt(D * (1 + len(enc.terms))))
    _hf_vs_relpos(encoder, attn, enc)


def test_matches_hugging_face_share_att_key():
    encoder, attn = _hf_setup(seed=12, share_att_key=True)
    enc = DeBERTa(n_heads=H, head_dim=D, d_model=C, position_buckets=8, max_relative_positions=16,
                  share_att_key=True)
    _copy_into(enc, encoder, attn)
    enc.bind_content_projections(attn.query_proj, attn.key_proj)
    assert all(p is not attn.query_proj.weight for p in enc.parameters())  # held by reference only
    _hf_vs_relpos(encoder, attn, enc, seed=1)


# ------------------------------------------- issue 34: rows reached, per-call state, its gradient


@given(q0=st.integers(-40, 40), nq=st.integers(1, 30), k0=st.integers(-40, 40), nk=st.integers(1, 30),
       buckets=st.sampled_from([0, 4, 8]))
def test_row_range_is_exactly_the_rows_position_index_reaches(q0, nq, k0, nk, buckets):
    enc = DeBERTa(n_heads=H, head_dim=D, position_buckets=buckets, max_relative_positions=16)
    qpos, kpos = torch.arange(q0, q0 + nq)[None], torch.arange(k0, k0 + nk)[None]
    idx = enc.position_index(qpos, kpos)
    assert enc.row_range(qpos, kpos) == (int(idx.min()), int(idx.max()))


def test_short_sequences_project_only_the_rows_they_reach():
    enc = _enc(position_buckets=64, max_relative_positions=128)  # 2S = 128 rows
    q, k, _ = _qkv(B=1, Nq=5, Nk=5)
    state = enc.score_state(q, k, torch.arange(5)[None], torch.arange(5)[None], 0.5)
    # offsets -4..4, not 128 rows: c2p (B, H, Nq, rows), p2c keys last (B, H, rows, Nk)
    assert [tuple(t.shape[-2:]) for t in state.tensors] == [(5, 9), (9, 5)] and state.axes == ("q", "k-last")


@pytest.mark.parametrize("kernel", [False, True], ids=["pytorch", "kernel"])
def test_score_with_backward_equals_autograd_of_score_with(monkeypatch, kernel):
    """Both paths (the compiled rows kernel where built, see tests/kernels) against autograd."""
    from relpos import kernels

    if kernel and kernels.load() is None:
        pytest.skip(f"relpos kernels: {kernels.status()}")
    monkeypatch.setattr(kernels, "ENABLED", kernel)
    enc = _enc()
    q, k, _ = _qkv(B=2, Nq=6, Nk=9, seed=3)
    qpos, kpos = torch.arange(3, 9)[None], torch.arange(9)[None]
    state = enc.score_state(q, k, qpos, kpos, 0.7)
    leaves = [t.detach().requires_grad_(True) for t in state.tensors]
    out = enc.score_with(type(state)(tuple(leaves), state.axes, state.meta), qpos, kpos)
    ds = torch.randn_like(out)
    want = torch.autograd.grad(out, leaves, ds)
    got = [torch.zeros_like(t) for t in leaves]
    assert enc.score_with_backward(type(state)(tuple(got), state.axes, state.meta), qpos, kpos, ds)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@given(st.integers(0, 3), st.integers(65, 90), st.integers(65, 90), st.integers(0, 2), st.integers(0, 10**6),
       st.sampled_from([0, 8, 64]), st.sampled_from([1.4, 3.0]))
def test_position_index_by_distinct_distance_equals_the_formula_per_pair(seed, nq, nk, batch, offset, buckets,
                                                                          spread):
    """Above 4,096 pairs the rows are looked up per distinct distance i - j; every pair gets the formula's row,
    for contiguous, gapped and per-example positions (the lookup is skipped where the distances spread wide)."""
    enc = _enc(position_buckets=buckets, max_relative_positions=16 if buckets != 64 else 128)
    g = torch.Generator().manual_seed(seed)
    B = max(batch, 1)
    if batch == 0:  # contiguous, shared across the batch
        qpos, kpos = torch.arange(offset, offset + nq)[None], torch.arange(nk)[None]
    else:  # sorted with gaps, one row per example
        qpos = torch.sort(torch.randint(0, int(spread * nq), (B, nq), generator=g), -1).values + offset
        kpos = torch.sort(torch.randint(0, int(spread * nk), (B, nk), generator=g), -1).values
    assert nq * nk > 4096
    got = enc.position_index(qpos, kpos)
    want = enc._rows_of(qpos[:, :, None] - kpos[:, None, :])
    assert got.shape == want.shape and torch.equal(got, want)


@pytest.mark.parametrize("kernel", [False, True], ids=["pytorch", "kernel"])
@pytest.mark.parametrize("q_offset", [0, 5])
def test_causal_chunked_state_covers_only_past_rows(monkeypatch, kernel, q_offset):
    """Causal calls on contiguous positions project and multiply only the rows of i - j >= 0 (the mask hides
    the rest); outputs and gradients stay those of the float64 reference."""
    from relpos import kernels
    from relpos.attention import chunked

    if kernel and kernels.load() is None:
        pytest.skip(f"relpos kernels: {kernels.status()}")
    monkeypatch.setattr(kernels, "ENABLED", kernel)
    monkeypatch.setattr(chunked, "FORCE_ROWS", 8)
    enc = _enc()  # 8 buckets, max distance 16: rows 0..15, distance 0 at row 8
    states = []
    real = DeBERTa.score_state
    monkeypatch.setattr(DeBERTa, "score_state", lambda self, *a, **kw: states.append(real(self, *a, **kw)) or states[-1])
    q, k, v = _qkv(B=2, Nq=20 - q_offset, Nk=20, seed=5, dtype=torch.float64)
    out = relpos.attention(q, k, v, enc, causal=True, q_offset=q_offset, impl="chunked")
    ref = relpos.attention(q, k, v, enc, causal=True, q_offset=q_offset, impl="reference")
    torch.testing.assert_close(out, ref)
    assert states and states[0].meta["lo"] == 8  # no row of a future key
    assert [t.shape[-1] if ax == "q" else t.shape[-2] for t, ax in zip(states[0].tensors, states[0].axes)] == [8, 8]
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, [q, k, v, *enc.parameters()], g)
    want = torch.autograd.grad(ref, [q, k, v, *enc.parameters()], g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
