"""impl="chunked": every engine against the reference with many small blocks, its
engine choice, O(N) saved memory, the T5 band shortcut, and its error paths.

(test_against_reference.py already runs chunked on single blocks.)
"""

from __future__ import annotations

import importlib

import pytest
import torch

import relpos
from relpos.attention import Request, request
from tests.helpers import attention_schemes, build

chunked = importlib.import_module("relpos.attention.chunked")
kernels = importlib.import_module("relpos.attention.chunked.kernels")
SCHEMES = attention_schemes()


def _inputs(B, H, Nq, Nk, D, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, n, D, generator=g, dtype=dtype).requires_grad_() for n in (Nq, Nk, Nk))


def _run(impl, enc, q, k, v, **kw):
    out = relpos.attention(q, k, v, enc, impl=impl, **kw)
    params = [p for p in enc.parameters() if p.requires_grad]
    w = torch.linspace(-1, 1, out.numel()).view_as(out)
    grads = torch.autograd.grad((out * w).sum(), [q, k, v, *params], allow_unused=True)
    return out.detach(), grads


def _check(enc, q, k, v, atol=3e-4, **kw):
    out, grads = _run("chunked", enc, q, k, v, **kw)
    ref, rgrads = _run("reference", enc, q, k, v, **kw)
    torch.testing.assert_close(out, ref, atol=atol, rtol=1e-3)
    for i, (g, rg) in enumerate(zip(grads, rgrads)):
        if rg is None:
            assert g is None or g.abs().max() == 0, f"grad {i} should be absent"
            continue
        assert g is not None, f"grad {i} missing"
        torch.testing.assert_close(g, rg, atol=atol, rtol=1e-3, msg=f"grad {i} mismatch")


@pytest.fixture
def small_blocks(monkeypatch):
    """Three query rows per block and per staircase square, and the blocks engine's backward in tiles of 4 keys:
    every engine runs many blocks."""
    monkeypatch.setattr(chunked, "FORCE_ROWS", 3)
    monkeypatch.setattr(importlib.import_module("relpos.attention.chunked.blocks"), "KEY_TILE", 4)


def _req(enc, q, k, v, *, causal=True, q_offset=0, positions=None, key_padding_mask=None) -> Request:
    return request(q, k, v, enc, causal=causal, q_offset=q_offset, positions=positions,
                   key_padding_mask=key_padding_mask)


# ------------------------------------------------------------------------- correctness


@pytest.mark.parametrize("name", SCHEMES)
@pytest.mark.parametrize("causal", [True, False])
def test_many_blocks_match_reference(small_blocks, name, causal):
    enc = build(name, n_heads=3, causal=causal)
    if enc.causal_only and not causal:
        pytest.skip("causal-only scheme")
    q, k, v = _inputs(2, 3, 13, 13, 8)
    _check(enc, q, k, v, causal=causal)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", ["deberta", "fire", "cope", "shaw", "transformer-xl", "fox"])
def test_blocks_forward_fused_and_explicit(small_blocks, monkeypatch, name, causal, fused):
    """The blocks engine's forward through the fused kernel (the scheme's additive terms as its mask) and
    through its explicit softmax both match the reference; a score that reads the content logits (CoPE)
    never takes the fused kernel."""
    blocks = importlib.import_module("relpos.attention.chunked.blocks")
    monkeypatch.setattr(blocks._BlockCfg, "use_fused", fused)
    enc = build(name, n_heads=3, causal=causal)
    if enc.causal_only and not causal:
        pytest.skip("causal-only scheme")
    q, k, v = _inputs(2, 3, 13, 13, 8, seed=3)
    seen = []
    cfg_init = blocks._BlockCfg.__init__

    def spy(self, *a, **kw):
        cfg_init(self, *a, **kw)
        seen.append(self.fused_forward)
    monkeypatch.setattr(blocks._BlockCfg, "__init__", spy)
    # positions with gaps keep every scheme on the blocks engine
    _check(enc, q, k, v, causal=causal, positions=torch.arange(13) * 2)
    assert seen and all(f == (fused and name != "cope" and kernels.flash_ops() is not None) for f in seen)


@pytest.mark.parametrize("name", SCHEMES)
def test_many_blocks_cached_decoding(small_blocks, name):
    enc = build(name, n_heads=3, causal=True)
    q, k, v = _inputs(2, 3, 5, 17, 8, seed=1)
    _check(enc, q, k, v, causal=True, q_offset=9)


@pytest.mark.parametrize("causal", [True, False])
def test_relkey_reused_ds_buffer_with_a_shorter_last_block(monkeypatch, causal):
    """relkey's backward reuses one dS buffer across blocks; a last block of fewer rows (2 of 4) reads it
    at other columns, so the buffer must be re-zeroed there (a stale entry corrupts dq and W_R's gradient)."""
    monkeypatch.setattr(chunked, "FORCE_ROWS", 4)
    enc = build("transformer-xl", n_heads=2, causal=causal)
    q, k, v = _inputs(2, 2, 14, 14, 8, seed=7)
    assert chunked.engine_for(_req(enc, q, k, v, causal=causal)) == "relkey"
    _check(enc, q, k, v, causal=causal)
    if causal:
        q2, k2, v2 = _inputs(1, 2, 10, 19, 8, seed=8)
        _check(enc, q2, k2, v2, causal=True, q_offset=9)


@pytest.mark.parametrize("causal, q_offset, n_keys", [(True, 0, 9), (True, 4, 13), (False, 0, 9)])
def test_relkey_projects_only_the_offsets_a_call_can_see(monkeypatch, causal, q_offset, n_keys):
    """Causal calls evaluate the relative keys (Transformer-XL: W_R R) on the past offsets d <= 0 only."""
    enc = build("transformer-xl", n_heads=2, causal=causal)
    seen = []
    rk = enc.relative_keys()

    def spy(d):
        seen.append(d.clone())
        return rk.keys(d)

    monkeypatch.setattr(enc, "relative_keys", lambda: type(rk)(rk.u, rk.v, spy))
    q, k, v = _inputs(1, 2, 9, n_keys, 8, seed=9)
    relpos.attention(q, k, v, enc, causal=causal, q_offset=q_offset, impl="chunked").sum().backward()
    (d,) = seen
    lo = -(q_offset + 8)
    assert d.tolist() == list(range(lo, 1 if causal else n_keys - q_offset))
    assert q.grad is not None and torch.isfinite(q.grad).all()


@pytest.mark.parametrize("name", ["t5", "shaw-kv", "transformer-xl", "fire", "alibi"])
def test_many_blocks_padding_and_positions(small_blocks, name):
    enc = build(name, n_heads=2, causal=True)
    q, k, v = _inputs(2, 2, 7, 7, 8, seed=2)
    kpm = torch.ones(2, 7, dtype=torch.bool)
    kpm[1, :3] = False
    _check(enc, q, k, v, causal=True, key_padding_mask=kpm)
    pos = torch.tensor([[0, 2, 3, 7, 9, 10, 15], [1, 2, 3, 4, 8, 9, 20]])
    _check(enc, q, k, v, causal=True, positions=pos)


@pytest.mark.parametrize("opts", [{"k": 0}, {"k": 1}, {"k": 2, "per_head": True}, {"k": 40}])
@pytest.mark.parametrize("name", ["shaw", "shaw-kv"])
@pytest.mark.parametrize("causal", [True, False])
def test_shaw_engine_clip_distances(small_blocks, name, opts, causal):
    """Far region = plain attention on k + aK[-k] (and v + aV[-k]); band explicit; any k."""
    enc = build(name, n_heads=3, causal=causal, **opts)
    q, k, v = _inputs(2, 3, 11, 11, 8, seed=3)
    assert chunked.engine_for(_req(enc, q, k, v, causal=causal)) == "clipped"
    _check(enc, q, k, v, causal=causal)


def test_t5_band_shortcut(small_blocks):
    """Causal T5 with max_distance < N: the saturated bucket's gradient comes from the band."""
    enc = build("t5", n_heads=2, causal=True, num_buckets=8, max_distance=5)
    assert chunked.saturation_distance(enc) == 5
    q, k, v = _inputs(1, 2, 21, 21, 8, seed=4)
    _check(enc, q, k, v, causal=True)
    q, k, v = _inputs(1, 2, 6, 21, 8, seed=5)
    _check(enc, q, k, v, causal=True, q_offset=15)


def test_saturation_hook():
    class Enc:
        name = "custom"

        def saturation_distance(self):
            return 7

    assert chunked.saturation_distance(Enc()) == 7
    assert chunked.saturation_distance(build("alibi")) is None
    assert build("t5", max_distance=99).saturation_distance() == 99  # the scheme declares it itself


def test_t5_band_shortcut_with_a_short_last_block(small_blocks):
    """The band pass reuses its skewed buffer: a narrower last block must not add stale sums."""
    enc = build("t5", n_heads=2, causal=True, num_buckets=8, max_distance=5)
    q, k, v = _inputs(1, 2, 20, 20, 8, seed=7)  # 20 rows in blocks of 3: the last block has 2
    _check(enc, q, k, v, causal=True)


@pytest.mark.parametrize("name", ["t5", "shaw", "rope", "fire"])
def test_half_precision_inputs(name):
    enc = build(name, n_heads=2, causal=True)
    q, k, v = (t.detach().to(torch.bfloat16) for t in _inputs(1, 2, 9, 9, 8, seed=6))
    out = relpos.attention(q, k, v, enc, causal=True, impl="chunked")
    assert out.dtype == torch.bfloat16
    ref = relpos.attention(q, k, v, enc, causal=True, impl="reference")
    torch.testing.assert_close(out.float(), ref.float(), atol=3e-2, rtol=3e-2)


def test_double_backward_is_refused():
    enc = build("kerple-log", n_heads=2, causal=True)
    q, k, v = _inputs(1, 2, 6, 6, 8)
    out = relpos.attention(q, k, v, enc, causal=True, impl="chunked")
    # refused by name while the second derivative is asked for (once_differentiable returned a gradient
    # without a graph here, so a gradient penalty on it silently lost its second-order part)
    with pytest.raises(RuntimeError, match="second derivatives"):
        torch.autograd.grad(out.sum(), q, create_graph=True)


def test_subnormal_safe_exp():
    x = torch.tensor([float("-inf"), -1e4, -95.0, 0.0, 3.0])
    y = kernels.exp_(x.clone())
    assert torch.isfinite(y).all()
    assert y[0] < 1e-37 and y[2] < 1e-37
    torch.testing.assert_close(y[3:], torch.exp(x[3:]))


# --------------------------------------------------------------------- engine choice


@pytest.mark.parametrize("name,engine", [
    ("nope", "sdpa"), ("rope", "sdpa"), ("alibi", "regions"), ("t5", "regions"), ("kerple-log", "regions"),
    ("sandwich", "regions"), ("dpb", "regions"), ("shaw", "clipped"), ("shaw-kv", "clipped"),
    ("transformer-xl", "relkey"), ("fox", "keybias"), ("fire", "regions"), ("deberta", "blocks"), ("cope", "blocks"),
])
def test_engine_choice(name, engine):
    enc = build(name, n_heads=2, causal=True)
    q, k, v = _inputs(1, 2, 8, 8, 8)
    assert chunked.engine_for(_req(enc, q, k, v)) == engine
    relpos.attention(q, k, v, enc, causal=True, impl="chunked")
    assert chunked.last_engine == engine


# past the threshold: the fused kernel's engine where the compiled kernels are built, else "blocks"
_PAST_L = "piecewise" if importlib.import_module("relpos.kernels").load() is not None else "blocks"


@pytest.mark.parametrize("init_L, engine", [(100.0, "regions"), (6.0, _PAST_L), (12.5, "regions")])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("impl", ["chunked", "dense"])
def test_fire_is_toeplitz_only_below_its_threshold(small_blocks, init_L, engine, causal, impl):
    """FIRE's bias is a function of j - i for queries i < L (Encoding.toeplitz_below): calls whose
    queries all sit below L take the Toeplitz paths, others the per-pair one (the FIRE kernel's
    "piecewise" engine, tests/kernels/test_fire.py); both equal the reference."""
    from relpos.encodings.fire import FIRE
    from tests.helpers import randomize_parameters

    enc = FIRE(n_heads=2, init_L=init_L)
    randomize_parameters(enc, std=0.5, seed=3)
    q, k, v = _inputs(2, 2, 13, 13, 8, seed=5)
    assert _req(enc, q, k, v, causal=causal).toeplitz == (engine == "regions")
    assert chunked.engine_for(_req(enc, q, k, v, causal=causal)) == engine
    out, grads = _run(impl, enc, q, k, v, causal=causal)
    ref, rgrads = _run("reference", enc, q, k, v, causal=causal)
    torch.testing.assert_close(out, ref, atol=3e-4, rtol=1e-3)
    for g, rg in zip(grads, rgrads):
        torch.testing.assert_close(g, rg, atol=3e-4, rtol=1e-3)
    if causal:  # cached decoding: the last queries alone, past or below the threshold
        q2, k2, v2 = _inputs(1, 2, 4, 13, 8, seed=6)
        o2, g2 = _run(impl, enc, q2, k2, v2, causal=True, q_offset=9)
        r2, rg2 = _run("reference", enc, q2, k2, v2, causal=True, q_offset=9)
        torch.testing.assert_close(o2, r2, atol=3e-4, rtol=1e-3)
        for g, rg in zip(g2, rg2):
            torch.testing.assert_close(g, rg, atol=3e-4, rtol=1e-3)


def test_engine_choice_needs_contiguous_unpadded_float():
    enc = build("t5", n_heads=2, causal=True)
    q, k, v = _inputs(1, 2, 8, 8, 8)
    kpm = torch.ones(1, 8, dtype=torch.bool)
    assert chunked.engine_for(_req(enc, q, k, v, key_padding_mask=kpm)) == "blocks"
    assert chunked.engine_for(_req(enc, q, k, v, positions=torch.arange(8) * 2)) == "blocks"
    qb, kb, vb = (t.detach().bfloat16() for t in (q, k, v))
    assert chunked.engine_for(_req(enc, qb, kb, vb)) == "blocks"
    nope = build("nope", n_heads=2)
    assert chunked.engine_for(_req(nope, q[:, :, :3], k, v, q_offset=5)) == "regions"  # causal with offset


def test_staircase_covers_causal_pairs_once():
    for Nq, Nk, qo, S in [(13, 13, 0, 3), (5, 17, 9, 2), (64, 64, 0, 8), (7, 30, 23, 4)]:
        cover = torch.zeros(Nq, Nk, dtype=torch.int64)
        for a0, a1, c0, c1, diag in kernels.staircase(Nq, Nk, qo, True, S):
            block = torch.ones(a1 - a0, c1 - c0, dtype=torch.int64)
            if diag:  # the causal mask inside the square
                block = block.tril()
            cover[a0:a1, c0:c1] += block
        want = (torch.arange(Nk)[None, :] <= torch.arange(Nq)[:, None] + qo).long()
        assert torch.equal(cover, want), (Nq, Nk, qo, S)


# ------------------------------------------------------------------------------ memory


def _saved_elements(fn) -> int:
    """Elements of all tensors saved for backward while ``fn()`` runs (distinct storages)."""
    seen, total = set(), 0

    def pack(t):
        nonlocal total
        key = (t.untyped_storage().data_ptr(), t.dtype)
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes() // t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


@pytest.mark.parametrize("name", ["alibi", "kerple-log", "t5", "shaw-kv", "transformer-xl", "fire", "deberta"])
def test_saved_memory_is_linear_in_n(name):
    """What the backward keeps is a few (N, D) tensors, not an (N, N) one."""
    B, H, N, D = 1, 2, 1024, 16
    small_span = {"position_buckets": 32, "max_relative_positions": 64} if name == "deberta" else {}
    enc = build(name, n_heads=H, head_dim=D, causal=True, max_len=N, **small_span)
    q, k, v = _inputs(B, H, N, N, D)

    def step(impl):
        return lambda: relpos.attention(q, k, v, enc, causal=True, impl=impl)

    linear, quadratic = B * H * N * D, B * H * N * N  # quadratic = 64 x linear here
    # a per-call score state (DeBERTa: q and k against the reachable table rows) is O(N rows), rows <= 2S
    state = enc.score_state(q, k, torch.arange(N)[None], torch.arange(N)[None], 1.0)
    kept = sum(t.numel() for t in state.tensors) if state is not None else 0
    assert kept <= 2 * B * H * N * 2 * getattr(enc, "span", 0) and kept <= B * H * N * N / 8
    assert _saved_elements(step("dense")) >= quadratic / 2  # the check can fail
    assert _saved_elements(step("chunked")) < 12 * linear + kept


@pytest.mark.parametrize("bias_init", [0.0, -3.0])
def test_keybias_engine_with_strong_forgetting(bias_init):
    """FoX's c_i - c_j as a per-key channel: exact against the reference, also when c grows large."""
    enc = build("fox", n_heads=2, causal=True, bias_init=bias_init)
    q, k, v = _inputs(1, 2, 64, 64, 8, seed=8)
    assert chunked.engine_for(_req(enc, q, k, v)) == "keybias"
    _check(enc, q, k, v, causal=True)
